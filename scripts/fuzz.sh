#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and fuzzes the graph parser for N seconds (default 60;
# 1 to 999999) and the .npy reader for N/2 (at least 1: libFuzzer reads a time of 0 as no limit).
# Any crash, leak or sanitizer report fails the run; the crashing input is kept in build-fuzz/.
# Usage: scripts/fuzz.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
if ! [[ $seconds =~ ^[1-9][0-9]{0,5}$ ]]; then
  echo "fuzz: expected a number of seconds from 1 to 999999, got '$seconds'" >&2
  exit 2
fi
npy_seconds=$((seconds / 2 > 0 ? seconds / 2 : 1))
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKILN_BUILD_FUZZ=ON -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz --target fuzz_parser fuzz_npy >/dev/null
mkdir -p build-fuzz/corpus
cp examples/graphs/*.kg tests/emulation/graphs/*.kg build-fuzz/corpus/
mkdir -p build-fuzz/npy-corpus
cd build-fuzz
# Both fuzzers at once (each is one process); their logs are build-fuzz/parser.log and npy.log.
./tests/fuzz/fuzz_parser -max_total_time="$seconds" -max_len=4096 -timeout=10 \
  -print_final_stats=1 corpus >parser.log 2>&1 &
parser=$!
./tests/fuzz/fuzz_npy -max_total_time="$npy_seconds" -max_len=4096 -timeout=10 \
  -print_final_stats=1 npy-corpus >npy.log 2>&1 &
npy=$!
parser_rc=0
npy_rc=0
wait "$parser" || parser_rc=$?
wait "$npy" || npy_rc=$?
tail -n 15 parser.log
if [ "$parser_rc" -ne 0 ]; then
  echo "fuzz: the parser fuzzer failed (exit $parser_rc; log: build-fuzz/parser.log)"
else
  echo "fuzz: parser ran ${seconds}s without a crash"
fi
tail -n 5 npy.log
if [ "$npy_rc" -ne 0 ]; then
  echo "fuzz: the .npy fuzzer failed (exit $npy_rc; log: build-fuzz/npy.log)"
else
  echo "fuzz: npy reader ran ${npy_seconds}s without a crash"
fi
[ "$parser_rc" -eq 0 ] && [ "$npy_rc" -eq 0 ]
