#!/usr/bin/env bash
# Configures and builds kiln in build/ (Release by default; BUILD_TYPE=Debug for a debug build).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" >/dev/null
cmake --build build -j "$(nproc)"
