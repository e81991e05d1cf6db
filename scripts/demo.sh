#!/usr/bin/env bash
# Installs, builds and runs kiln's main job: cold vs warm compiles of examples/graphs through the
# cache (the quick benchmark), then what TF32 does to a wide-dynamic-range matrix (kiln-qtlq), and
# ends with what the figures say.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== installing what the build needs, then building kiln (scripts/build.sh)"
echo "   (the first build takes several minutes; later ones only rebuild what changed)"
scripts/build.sh
arch="${KILN_DEMO_ARCH:-sm_90}"
precision="${KILN_DEMO_PRECISION:-high}"
bench_json="$(mktemp)"
qtlq_out="$(mktemp)"
trap 'rm -f "$bench_json" "$qtlq_out"' EXIT

echo
echo "== kiln-bench --graphs examples/graphs --arch $arch --precision $precision --quick"
build/bench/kiln-bench --graphs examples/graphs --arch "$arch" --precision "$precision" --quick \
  --json >"$bench_json"

echo
echo "== kiln-qtlq: diag(Q^T L Q) by kiln's kernels (emulated on the CPU) in three modes"
build/examples/qtlq/kiln-qtlq | tee "$qtlq_out"

echo
/usr/bin/python3 scripts/demo_summary.py "$bench_json" "$qtlq_out"
