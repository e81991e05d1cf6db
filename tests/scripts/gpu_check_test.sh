#!/usr/bin/env bash
# scripts/gpu_check.sh without a GPU: exit 3, and a summary that says nothing was checked and why;
# bad usage exits 2 (gpu_gemm's too: a bad --layouts or --batch), and gpu_gemm with a good one
# skips. Arguments: the kiln, runtime_tests, gpu_gemm and gpu_attention binaries.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin/lib"
ln -s "$1" "$tmp/bin/kiln"
ln -s "$2" "$tmp/bin/runtime_tests"
ln -s "$3" "$tmp/bin/gpu_gemm"
ln -s "$4" "$tmp/bin/gpu_attention"

KILN_CUDA_DRIVER_PATH=/nonexistent/libcuda.so.1 \
  bash "$root/scripts/gpu_check.sh" --bin "$tmp/bin" --out "$tmp/out" >"$tmp/stdout" 2>&1
rc=$?
[[ $rc == 3 ]] || { echo "expected exit 3 without a GPU, got $rc"; cat "$tmp/stdout"; exit 1; }
grep -q "No usable GPU, nothing checked: no CUDA driver found" "$tmp/out/summary.md" ||
  { echo "summary does not say why nothing was checked:"; cat "$tmp/out/summary.md"; exit 1; }
grep -q "^# GPU check" "$tmp/out/summary.md" || { echo "no summary heading"; exit 1; }

bash "$root/scripts/gpu_check.sh" --frobnicate >"$tmp/stdout" 2>&1
rc=$?
[[ $rc == 2 ]] || { echo "expected exit 2 on bad usage, got $rc"; exit 1; }
grep -q "unknown argument '--frobnicate'" "$tmp/stdout" || { cat "$tmp/stdout"; exit 1; }
for bad in "--layouts nx" "--batch 0" "--batch 2x" "--batch 2000x2000" "--batch -3"; do
  # shellcheck disable=SC2086
  KILN_CUDA_DRIVER_PATH=/nonexistent/libcuda.so.1 "$3" $bad --sizes 64 >"$tmp/stdout" 2>&1
  rc=$?
  [[ $rc == 2 ]] || { echo "gpu_gemm $bad: expected exit 2, got $rc"; cat "$tmp/stdout"; exit 1; }
  grep -q "gpu_gemm: --" "$tmp/stdout" || { echo "gpu_gemm $bad: no message"; cat "$tmp/stdout"; exit 1; }
done
KILN_CUDA_DRIVER_PATH=/nonexistent/libcuda.so.1 "$3" --batch 2x16 --shapes 1024x1024x128 \
  --layouts nn,tn >"$tmp/stdout" 2>&1
rc=$?
[[ $rc == 0 ]] || { echo "gpu_gemm --batch 2x16 without a GPU: expected exit 0, got $rc"; exit 1; }
grep -q "gpu_gemm: skipped: no CUDA driver found" "$tmp/stdout" || { cat "$tmp/stdout"; exit 1; }
echo "ok"
