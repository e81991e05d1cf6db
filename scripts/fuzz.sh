#!/usr/bin/env bash
# Builds the parser's libFuzzer target with clang and fuzzes it for N seconds (default 60).
# Any crash, leak or sanitizer report fails the run; the crashing input is kept in build-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKILN_BUILD_FUZZ=ON -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz --target fuzz_parser >/dev/null
mkdir -p build-fuzz/corpus
cp examples/graphs/*.kg build-fuzz/corpus/
cd build-fuzz
./tests/fuzz/fuzz_parser -max_total_time="$seconds" -max_len=4096 -timeout=10 \
  -print_final_stats=1 corpus 2>&1 | tail -n 15
echo "fuzz: parser ran ${seconds}s without a crash"
