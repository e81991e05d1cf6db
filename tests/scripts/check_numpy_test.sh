#!/usr/bin/env bash
# scripts/check_numpy.py: the example layers and whole models computed by kiln's emulated kernels
# and by kiln's fp64 reference agree with NumPy in fp64 in every mode (a model at two sizes, its
# later sequences padded); and the check fails when the graph
# computes something else (the attention scale changed in a copy of the LLaMA layer).
# Usage: check_numpy_test.sh KILN LAYER ARCH  (LAYER "negative" runs the failing case; ARCH "cpu"
# runs the kernels natively on the CPU target instead of emulating them)
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
kiln=$1 layer=$2 arch=$3
# Debian's NumPy lives in /usr/bin/python3; the python3 first on PATH may lack it.
python=""
for candidate in /usr/bin/python3 python3; do
  if "$candidate" -c 'import numpy' 2>/dev/null; then python=$candidate; break; fi
done
if [[ -z $python ]]; then
  echo "FAIL: no python3 with NumPy; scripts/install_deps.sh installs python3-numpy"
  exit 1
fi
where=(--arch "$arch")
[[ $arch == cpu ]] && where=(--cpu)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KILN_CACHE_DIR="$tmp/cache" KILN_REMOTE_CACHE=""  # the CPU target compiles through one

if [[ $layer != negative ]]; then
  "$python" "$root/scripts/check_numpy.py" --kiln "$kiln" --layer "$layer" "${where[@]}" \
    --workdir "$tmp" >"$tmp/out" 2>&1
  rc=$?
  cat "$tmp/out"
  [[ $rc == 0 ]] || { echo "FAIL: check_numpy.py exit $rc"; exit 1; }
  # Four modes; a model at two (B, S) sizes each.
  expected=4
  [[ $layer == *_model ]] && expected=8
  [[ $(grep -c " ok$" "$tmp/out") == "$expected" ]] ||
    { echo "FAIL: not $expected runs checked"; exit 1; }
  exit 0
fi

mkdir "$tmp/graphs"
sed 's/kh, transpose_b=true), 0.125)/kh, transpose_b=true), 0.25)/' \
  "$root/examples/graphs/llama_layer.kg" >"$tmp/graphs/llama_layer.kg"
cmp -s "$root/examples/graphs/llama_layer.kg" "$tmp/graphs/llama_layer.kg" &&
  { echo "FAIL: the mutation did not apply"; exit 1; }
"$python" "$root/scripts/check_numpy.py" --kiln "$kiln" --layer llama_layer --arch "$arch" \
  --precision highest --graphs "$tmp/graphs" --workdir "$tmp" >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
[[ $rc == 1 ]] || { echo "FAIL: a graph that differs from NumPy's layer gave exit $rc, expected 1"; exit 1; }
grep -q "FAILED$" "$tmp/out" || { echo "FAIL: no FAILED row"; exit 1; }
