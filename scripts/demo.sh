#!/usr/bin/env bash
# Installs, builds and runs kiln's main job: cold vs warm compiles of examples/graphs through the
# cache (the quick benchmark), then what TF32 does to a wide-dynamic-range matrix (kiln-qtlq).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
arch="${KILN_DEMO_ARCH:-sm_90}"
precision="${KILN_DEMO_PRECISION:-high}"
echo "== kiln-bench --graphs examples/graphs --arch $arch --precision $precision --quick"
build/bench/kiln-bench --graphs examples/graphs --arch "$arch" --precision "$precision" --quick \
  2>/dev/null
echo
echo "== kiln-qtlq: diag(Q^T L Q) by kiln's kernels (emulated on the CPU) in three modes"
build/examples/qtlq/kiln-qtlq
