#!/usr/bin/env bash
# Configures and builds kiln in build/ (Release by default; BUILD_TYPE=Debug for a debug build).
# A unity build (CMake's CMAKE_UNITY_BUILD: each target's sources compiled eight to a translation
# unit, so the headers are parsed once per batch): 630 s of CPU on 2 cores where one translation
# unit a source takes 1140. KILN_UNITY_BUILD=OFF builds one unit a source (an edit then recompiles
# one file, not its batch). Either way a name in a source's anonymous namespace must differ from
# those of every other source of its target.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" \
  -DCMAKE_UNITY_BUILD="${KILN_UNITY_BUILD:-ON}" >/dev/null
cmake --build build -j "$(nproc)"
