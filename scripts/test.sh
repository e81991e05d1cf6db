#!/usr/bin/env bash
# Installs what is missing, builds kiln and runs the whole test suite through ctest, then the
# Python package's tests (KILN_PYTHON=0 skips them), the threaded parts' tests under sanitizers
# (KILN_SANITIZE=0 skips them) and the fuzzers.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900
if [ "${KILN_PYTHON:-1}" != 0 ]; then
  python="$(scripts/python_env.sh)"
  HF_HUB_OFFLINE=1 "$python" -m pytest -q -p no:cacheprovider tests/python
fi
if [ "${KILN_SANITIZE:-1}" != 0 ]; then
  scripts/sanitize.sh
fi
if command -v clang++ >/dev/null; then
  scripts/fuzz.sh "${KILN_FUZZ_SECONDS:-30}"
fi
