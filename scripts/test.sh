#!/usr/bin/env bash
# Installs what is missing, builds kiln and runs the whole test suite through ctest, then the
# Python package's tests (KILN_PYTHON=0 skips them), the threaded parts' tests under sanitizers
# (KILN_SANITIZE=0 skips them) and the fuzzers. Each step's time is said as it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
step_start=$SECONDS
took() {
  echo "test.sh: $1 took $((SECONDS - step_start)) s"
  step_start=$SECONDS
}
scripts/build.sh
took "the build"
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900
took "ctest"
if [ "${KILN_PYTHON:-1}" != 0 ]; then
  python="$(scripts/python_env.sh)"
  # A worker process per core (pytest-xdist), each taking whole files in their order: 174 s where
  # one process takes 366 on 2 cores (the tests run on one core each).
  HF_HUB_OFFLINE=1 "$python" -m pytest -q -p no:cacheprovider -n "$(nproc)" --dist loadfile \
    tests/python
  took "the Python package's tests"
fi
if [ "${KILN_SANITIZE:-1}" != 0 ]; then
  scripts/sanitize.sh
  took "the sanitizers"
fi
if command -v clang++ >/dev/null; then
  scripts/fuzz.sh "${KILN_FUZZ_SECONDS:-30}"
  took "the fuzzers"
fi
echo "test.sh: passed in $SECONDS s"
