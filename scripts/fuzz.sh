#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and fuzzes for about N seconds (default 60; 1 to 999999),
# two targets at a time:
#   - the graph parser (N/4), then the compiler's passes on the graphs that parse (N/2), then the
#     CPU target's code generation (LLVM IR and its verifier, N/4);
#   - the .npy reader and the .npz reader (N/4 each), then the records a cache, a bundle or a peer
#     hands over: artifacts, entry records, bundles, cubins, and entries checked as the cache
#     checks one from another machine (N/2).
# Each target runs at least 1 s (libFuzzer reads a time of 0 as no limit). Any crash, leak or
# sanitizer report fails the run; the crashing input is kept in build-fuzz/, each target's log is
# build-fuzz/NAME.log.
# Usage: scripts/fuzz.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
if ! [[ $seconds =~ ^[1-9][0-9]{0,5}$ ]]; then
  echo "fuzz: expected a number of seconds from 1 to 999999, got '$seconds'" >&2
  exit 2
fi
half=$((seconds / 2 > 0 ? seconds / 2 : 1))
quarter=$((seconds / 4 > 0 ? seconds / 4 : 1))
# A build type of its own: -O1 (fast to build, and the fuzzers' coverage is the same), line tables
# for the reports, and assert() on (no NDEBUG: an assertion a fuzzed input breaks is a crash).
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Fuzz \
  -DCMAKE_C_FLAGS="-O1 -gline-tables-only" -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only" \
  -DKILN_BUILD_FUZZ=ON -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCH=OFF >/dev/null
# Ninja prints a compile error on stdout: the build's output is shown when it fails.
if ! cmake --build build-fuzz --target fuzz_parser fuzz_lower fuzz_cpu fuzz_npy fuzz_npz fuzz_records \
  >build-fuzz/build.log 2>&1; then
  tail -n 60 build-fuzz/build.log
  echo "fuzz: building the fuzzers failed (log: build-fuzz/build.log)"
  exit 1
fi
cd build-fuzz
mkdir -p parser-corpus lower-corpus cpu-corpus npy-corpus npz-corpus records-corpus
for corpus in parser-corpus lower-corpus cpu-corpus; do
  cp ../examples/graphs/*.kg ../tests/emulation/graphs/*.kg "$corpus/"
done
# The example graphs are nearly all f32: one small graph per elementwise op, reduction, scan and
# cast, in each dtype, of fixed and of symbolic size, so that the typed paths of the passes and
# the code generation are reached from the start. A graph that does not parse (a logical op on
# floats) is one input among others.
ops() { sed -nE "s/^KILN_OP\(([a-z_0-9]+), *[0-9]+, *[0-9]+, *($1),.*/\1/p" ../ir/ops.def; }
for dtype in f32 f16 bf16 i32 i64 bool; do
  for shape in '3, 5' 'S, 5'; do
    lines=()
    for op in $(ops 'unary|reduce|scan'); do lines+=("y = $op(x)"); done
    for op in $(ops binary); do lines+=("y = $op(x, w)"); done
    for to in f32 f16 bf16 i32 i64 bool; do lines+=("y = cast(x, to=$to)"); done
    lines+=("y = where(gt(x, w), x, w)")
    dims=""
    [ "$shape" = '3, 5' ] || dims='  dim S: 1..64\n'
    for line in "${lines[@]}"; do
      name="seed-${dtype}-${shape//[ ,]/}-${line//[^a-z0-9_]/_}.kg"
      printf "graph g {\\n$dims  input x: %s[%s]\\n  input w: %s[5]\\n  %s\\n  output y\\n}\\n" \
        "$dtype" "$shape" "$dtype" "$line" >"lower-corpus/$name"
      cp "lower-corpus/$name" "cpu-corpus/$name"
    done
  done
done
# The graph text's words, for the graph fuzzers: every op of ir/ops.def, attributes, dtypes,
# keywords and punctuation.
{
  sed -nE 's/^KILN_OP\(([a-z_0-9]+),.*/\1/p' ../ir/ops.def | while read -r op; do
    printf '"%s("\n' "$op"
  done
  for word in approximate axis causal dims end eps keepdim mask out_dtype precision scale shape \
    shift start to transpose_a transpose_b; do
    printf '"%s="\n' "$word"
  done
  for dtype in f32 f16 bf16 i32 i64 bool; do printf '"%s["\n' "$dtype"; done
  for word in 'graph g {' 'dim S: 1..' 'input ' 'output ' 'true' 'false' '..' ']' ')' '}' \
    ', ' ' = '; do
    printf '"%s"\n' "$word"
  done
} >graph.dict
# Archives numpy writes, stored and deflated, where numpy is installed (python3-numpy, as
# scripts/install_deps.sh installs it).
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  /usr/bin/python3 - npz-corpus <<'EOF'
import sys
import numpy as np
d = sys.argv[1]
np.savez(f"{d}/seed-stored.npz", a=np.arange(6, dtype=np.float32).reshape(2, 3),
         ids=np.array([1, -2], dtype=np.int64))
np.savez_compressed(f"{d}/seed-deflated.npz", x=np.ones((3, 1), dtype=np.float16))
EOF
else
  echo "fuzz: no numpy for /usr/bin/python3: the .npz fuzzer starts from an empty corpus"
fi

# fuzz NAME SECONDS CORPUS [MAX_LEN]: runs build-fuzz/tests/fuzz/fuzz_NAME on inputs of at most
# MAX_LEN bytes (default 4096); says how it ended; fails with it.
fuzz() {
  local name=$1 time=$2 corpus=$3 max_len=${4:-4096} rc=0 dict=()
  case $name in parser | lower | cpu) dict=(-dict=graph.dict) ;; esac
  # fuzz_records writes well-formed seeds of each record kind into its corpus first.
  KILN_FUZZ_SEEDS="$corpus" "./tests/fuzz/fuzz_$name" -max_total_time="$time" -max_len="$max_len" \
    -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 "${dict[@]}" "$corpus" >"$name.log" 2>&1 ||
    rc=$?
  if [ "$rc" -ne 0 ]; then
    tail -n 30 "$name.log"
    echo "fuzz: fuzz_$name failed (exit $rc; log: build-fuzz/$name.log)"
    return 1
  fi
  grep -E '^stat::(number_of_executed_units|new_units_added)' "$name.log" | tr '\n' ' '
  echo
  echo "fuzz: $name ran ${time}s without a crash"
}

# lane NAME:SECONDS:CORPUS[:MAX_LEN] ...: the fuzzers one after another; after a failure the rest
# are named as not run.
lane() {
  local spec name time corpus max_len failed=""
  for spec in "$@"; do
    IFS=: read -r name time corpus max_len <<<"$spec"
    if [ -n "$failed" ]; then
      echo "fuzz: $name not run: $failed failed before it"
    elif ! fuzz "$name" "$time" "$corpus" "$max_len"; then
      failed=$name
    fi
  done
  [ -z "$failed" ]
}

# Two lanes at once, each saying what it did into a file of its own, shown after both end.
lane "parser:$quarter:parser-corpus" "lower:$half:lower-corpus" "cpu:$quarter:cpu-corpus" \
  >lane1.out 2>&1 &
first=$!
# Records up to 128 KiB: an sm_90a entry's wgmma cubin alone is about 70 KiB.
lane "npy:$quarter:npy-corpus" "npz:$quarter:npz-corpus" "records:$half:records-corpus:131072" \
  >lane2.out 2>&1 &
second=$!
first_rc=0
second_rc=0
wait "$first" || first_rc=$?
wait "$second" || second_rc=$?
cat lane1.out lane2.out
[ "$first_rc" -eq 0 ] && [ "$second_rc" -eq 0 ]
