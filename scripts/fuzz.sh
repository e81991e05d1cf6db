#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and fuzzes the graph parser for N seconds (default 60)
# and the .npy reader for N/2.
# Any crash, leak or sanitizer report fails the run; the crashing input is kept in build-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKILN_BUILD_FUZZ=ON -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz --target fuzz_parser fuzz_npy >/dev/null
mkdir -p build-fuzz/corpus
cp examples/graphs/*.kg tests/emulation/graphs/*.kg build-fuzz/corpus/
mkdir -p build-fuzz/npy-corpus
cd build-fuzz
./tests/fuzz/fuzz_parser -max_total_time="$seconds" -max_len=4096 -timeout=10 \
  -print_final_stats=1 corpus 2>&1 | tail -n 15
echo "fuzz: parser ran ${seconds}s without a crash"
./tests/fuzz/fuzz_npy -max_total_time="$((seconds / 2))" -max_len=4096 -timeout=10 \
  -print_final_stats=1 npy-corpus 2>&1 | tail -n 5
echo "fuzz: npy reader ran $((seconds / 2))s without a crash"
