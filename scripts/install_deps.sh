#!/usr/bin/env bash
# Installs the Debian packages kiln builds and tests with, only those that are missing, and fetches
# CUTLASS's headers from PyPI for one test (scripts/fetch_cutlass.sh).
set -euo pipefail

packages=(cmake ninja-build g++ pkg-config libsqlite3-dev libxxhash-dev libzstd-dev libcli11-dev
  nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev sqlite3
  libhiredis-dev redis-server libssl-dev strace python3-numpy llvm-16-dev libopenblas-dev
  libzip-dev python3-venv python3-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "kiln: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
fi
if [ ! -e /usr/local/cuda/include/nvrtc.h ] && [ -z "${CUDA_HOME:-}" ]; then
  echo "kiln: note: no CUDA toolkit in /usr/local/cuda; NVRTC tests will report themselves skipped"
fi
# CUTLASS's headers (CuTe) from PyPI, for the check of the emulator's mma layouts against CuTe's;
# without them that one test reports itself skipped.
if ! "$(dirname "$0")/fetch_cutlass.sh" >/dev/null; then
  echo "kiln: note: no CUTLASS headers; the CuTe layout check will report itself skipped"
fi
