#!/usr/bin/env bash
# Every check that needs a real GPU, in one command, with what it found written down:
#   1. the GPU test suite (runtime_tests --gtest_filter='Gpu*': every example graph in each mode
#      on the device, against the fp64 reference);
#   2. bench/gpu_gemm: kiln's matmul kernels against cuBLAS per mode and size, checked against the
#      exact product; bench/gpu_attention: kiln's fused attention against cuBLAS GEMMs around a
#      softmax, per mode, head dim and sequence length, both checked against fp64;
#   3. `kiln run --json` on every example graph in every precision mode (the transformer layers:
#      scripts/check_numpy.py --gpu, on realistic inputs against NumPy fp64).
#
# Usage:
#   scripts/gpu_check.sh [--bin DIR] [--out DIR]
#       --bin DIR  the binaries (kiln, runtime_tests, gpu_gemm, gpu_attention, and DIR/lib for
#                  their libraries);
#                  default: build/, built first if they are missing
#       --out DIR  where results go (default: $OUT when set, else gpu-check/): summary.md,
#                  gpu_tests.xml and .log, gpu_gemm.json and .log, gpu_attention.json and .log,
#                  run/GRAPH_MODE.json
#   scripts/gpu_check.sh --pack DIR
#       copies the four binaries and the shared libraries they need beyond glibc and CUDA into
#       DIR, for a GPU machine that cannot install packages; run there with --bin DIR.
#
# Exit: 0 when everything passed, 1 when a check failed, 3 when there is no usable GPU (nothing
# was checked; summary.md says why), 2 on bad usage.
set -uo pipefail
cd "$(dirname "$0")/.."

bin=""
out="${OUT:-gpu-check}"
pack=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) bin="${2:?--bin needs a folder}"; shift 2 ;;
    --out) out="${2:?--out needs a folder}"; shift 2 ;;
    --pack) pack="${2:?--pack needs a folder}"; shift 2 ;;
    *) echo "gpu_check: unknown argument '$1' (expected --bin DIR, --out DIR or --pack DIR)" >&2
       exit 2 ;;
  esac
done

binaries=(build/tools/kiln build/tests/runtime/runtime_tests build/bench/gpu_gemm
  build/bench/gpu_attention)

if [[ -n "$pack" ]]; then
  for b in "${binaries[@]}"; do
    [[ -x "$b" ]] || { echo "gpu_check: $b is missing; run scripts/build.sh first" >&2; exit 1; }
  done
  mkdir -p "$pack/lib"
  cp "${binaries[@]}" "$pack/"
  # Libraries from Debian packages the GPU machine may lack; glibc, libstdc++ and CUDA's own
  # (the driver, cudart, cuBLAS, NVRTC) are expected there.
  ldd "${binaries[@]}" | awk '/=> \// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+)\.so|/usr/local/cuda|libcuda\.so' |
    while read -r lib; do cp -L "$lib" "$pack/lib/"; done
  # The commit the binaries were built at: the GPU machine's checkout may say otherwise.
  git rev-parse --short HEAD > "$pack/COMMIT" 2>/dev/null || echo unknown > "$pack/COMMIT"
  if ! git diff --quiet HEAD 2>/dev/null; then echo "(with uncommitted changes)" >> "$pack/COMMIT"; fi
  echo "gpu_check: packed into $pack ($(du -sh "$pack" | cut -f1)); run: scripts/gpu_check.sh --bin $pack"
  exit 0
fi

if [[ -z "$bin" ]]; then
  missing=0
  for b in "${binaries[@]}"; do [[ -x "$b" ]] || missing=1; done
  if [[ $missing == 1 ]]; then
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null &&
      cmake --build build -j "$(nproc)" --target kiln runtime_tests gpu_gemm gpu_attention \
        >/dev/null ||
      { echo "gpu_check: building kiln, runtime_tests, gpu_gemm and gpu_attention failed" >&2
        exit 1; }
  fi
  kiln=build/tools/kiln tests=build/tests/runtime/runtime_tests gemm=build/bench/gpu_gemm
  attention=build/bench/gpu_attention
else
  kiln="$bin/kiln" tests="$bin/runtime_tests" gemm="$bin/gpu_gemm" attention="$bin/gpu_attention"
  export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

# A Python with NumPy: Debian's /usr/bin/python3, else the first python3 on PATH that has it.
py=""
for candidate in /usr/bin/python3 python3; do
  if "$candidate" -c 'import numpy' 2>/dev/null; then py=$candidate; break; fi
done

mkdir -p "$out/run"
summary="$out/summary.md"
export KILN_CACHE_DIR="$out/cache"  # a fresh cache: every kernel compiled here, for this device

{
  echo "# GPU check, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  if [[ -n "$bin" && -f "$bin/COMMIT" ]]; then
    echo "- commit: $(tr '\n' ' ' < "$bin/COMMIT")(binaries packed there)"
  else
    echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  fi
  if command -v nvidia-smi >/dev/null; then
    echo "- device: $(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1 | head -1)"
  else
    echo "- device: nvidia-smi not found"
  fi
  echo "- CPU: $(nproc) cores"
} >"$summary"

# Whether kiln sees a GPU at all: gpu_gemm says "skipped: <why>" when it does not.
probe=$("$gemm" --sizes 16 --iterations 1 2>&1)
if grep -q "skipped:" <<<"$probe"; then
  { echo; echo "No usable GPU, nothing checked: ${probe#*skipped: }"; } >>"$summary"
  cat "$summary"
  exit 3
fi

failed=0
status() {
  if [[ $1 == 0 ]]; then echo passed
  elif [[ $1 == 124 ]]; then echo "FAILED (over its time limit: a hang?)"; failed=1
  else echo "FAILED (exit $1)"; failed=1; fi
}
# Each command runs under a time limit, so a kernel that never finishes (a barrier protocol that
# deadlocks on hardware) fails its step instead of taking the lease: exit 124.
limited() { local secs=$1; shift; timeout --kill-after=10 "$secs" "$@"; }

limited 420 "$tests" --gtest_filter='Gpu*' --gtest_output="xml:$out/gpu_tests.xml" >"$out/gpu_tests.log" 2>&1
rc=$?
{
  echo
  echo "## GPU test suite: $(status $rc)"
  echo
  grep -E '^\[ *(OK|FAILED|SKIPPED) *\]' "$out/gpu_tests.log" | sed 's/^/    /'
} >>"$summary"

limited 420 "$gemm" --json "$out/gpu_gemm.json" >"$out/gpu_gemm.log" 2>&1
rc=$?
{
  echo
  echo "## gpu_gemm: $(status $rc)"
  echo
  sed 's/^/    /' "$out/gpu_gemm.log"
} >>"$summary"

limited 420 "$attention" --json "$out/gpu_attention.json" >"$out/gpu_attention.log" 2>&1
rc=$?
{
  echo
  echo "## gpu_attention: $(status $rc)"
  echo
  sed 's/^/    /' "$out/gpu_attention.log"
} >>"$summary"

{
  echo
  echo "## kiln run, every example in every mode"
  echo
  echo "| graph | mode | exit | worst rel_l2 / tolerance |"
  echo "| --- | --- | ---: | --- |"
} >>"$summary"
# A symbolic graph runs at two sizes of every dim: 37 (or its range's top) and its upper bound.
dims_at() {  # dims_at GRAPH low|high -> "B=37,S=37" ("" for a static graph)
  "$kiln" fmt "$1" | sed -n 's/^ *dim \([A-Za-z_0-9]*\): \([0-9]*\)\.\.\([0-9]*\)$/\1 \2 \3/p' |
    while read -r dim lo hi; do
      v=$hi
      if [[ $2 == low ]]; then v=$(( 37 < hi ? (37 > lo ? 37 : lo) : hi )); fi
      printf '%s=%s,' "$dim" "$v"
    done | sed 's/,$//'
}
for graph in examples/graphs/*.kg; do
  base=$(basename "$graph" .kg)
  # The transformer layers and models run below on realistic .npy/.npz inputs: with every
  # weight uniform in [-1, 1] their attention saturates and the reduced modes miss their
  # tolerance by design.
  [[ $base == *_layer || $base == *_model ]] && continue
  sizes=(none)
  [[ -n $(dims_at "$graph" low) ]] && sizes=(low high)
  for size in "${sizes[@]}"; do
  dims=()
  name=$base
  if [[ $size != none ]]; then
    dims=(--dims "$(dims_at "$graph" "$size")")
    name="${base}_${dims[1]//[=,]/_}"
  fi
  for mode in highest high tf32x3 medium auto; do
    report="$out/run/${name}_${mode}.json"
    limited 60 "$kiln" run "$graph" "${dims[@]}" --precision "$mode" --json >"$report" \
      2>"$out/run/${name}_${mode}.err"
    rc=$?
    # Exit 2 is a mode the device's arch refuses (bf16 on sm_75): reported, not a failure.
    [[ $rc == 1 || $rc == 124 ]] && failed=1
    worst=$(${py:-python3} - "$report" <<'EOF' 2>/dev/null || echo "-"
import json, sys
r = json.load(open(sys.argv[1]))
print(", ".join(f"{o['name']} {o['rel_l2']:.2e} / {o['tolerance']:.0e}" for o in r["outputs"]))
EOF
)
    echo "| $name | $mode | $rc | ${worst:-$(head -c 200 "$out/run/${name}_${mode}.err")} |" >>"$summary"
  done
  done
done

# The example transformer layers against NumPy fp64, on the GPU, from realistic .npy inputs.
{
  echo
  echo "## The transformer layers against NumPy (scripts/check_numpy.py --gpu)"
  echo
  echo '```'
} >>"$summary"
if [[ -n $py ]]; then
  "$py" scripts/check_numpy.py --kiln "$kiln" --gpu --workdir "$out/numpy" \
    >>"$summary" 2>&1 || failed=1
else
  echo "skipped: no Python with NumPy (Debian: python3-numpy)" >>"$summary"
fi
echo '```' >>"$summary"

{ echo; echo "Overall: $([[ $failed == 0 ]] && echo passed || echo FAILED)"; } >>"$summary"
cat "$summary"
exit "$failed"
