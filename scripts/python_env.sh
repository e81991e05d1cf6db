#!/usr/bin/env bash
# Makes (once) the virtual environment the Python package is tested in, $KILN_VENV or
# ~/.cache/kiln-deps/venv, with torch, transformers, nanobind, scikit-build-core, pytest and
# pytest-xdist from PyPI, and installs the package `kiln` into it from the CMake build in build/
# (the one scripts/build.sh made: only the extension compiles). Prints the environment's python.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${KILN_VENV:-$HOME/.cache/kiln-deps/venv}"
python="$venv/bin/python"
if [ ! -x "$python" ]; then
  echo "kiln: making the Python test environment in $venv (torch is a large download)" >&2
  /usr/bin/python3 -m venv "$venv"
fi
packages=(torch transformers nanobind scikit-build-core pytest pytest-xdist numpy)
if ! "$python" -c "import torch, transformers, nanobind, scikit_build_core, pytest, xdist, numpy" 2>/dev/null; then
  "$python" -m pip install --quiet --upgrade pip >&2
  # uv (from PyPI) fetches and unpacks the wheels in parallel: about 30 s where pip takes about
  # 95 on an empty cache. It is given pip's index and find-links settings from the environment
  # (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS); pip installs the wheels where uv cannot.
  uv_env=()
  [ -n "${PIP_INDEX_URL:-}" ] && uv_env+=("UV_INDEX_URL=$PIP_INDEX_URL")
  [ -n "${PIP_EXTRA_INDEX_URL:-}" ] && uv_env+=("UV_EXTRA_INDEX_URL=$PIP_EXTRA_INDEX_URL")
  [ -n "${PIP_FIND_LINKS:-}" ] && uv_env+=("UV_FIND_LINKS=$PIP_FIND_LINKS")
  if ! { "$python" -m pip install --quiet uv >&2 &&
         env "${uv_env[@]}" "$python" -m uv pip install --quiet --python "$python" \
           "${packages[@]}" >&2; }; then
    "$python" -m pip install --quiet "${packages[@]}" >&2
  fi
fi
# The package from build/: scikit-build-core reconfigures that tree (same generator and ninja,
# build type and install prefix, tests and benchmarks kept, so nothing else recompiles), builds
# the extension and installs it with the Python sources.
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' build/CMakeCache.txt 2>/dev/null || true)
"$python" -m pip install --quiet --no-build-isolation --no-deps \
  -C build-dir=build -C cmake.build-type="${BUILD_TYPE:-Release}" \
  -C cmake.define.CMAKE_MAKE_PROGRAM="$(command -v ninja)" \
  -C cmake.define.KILN_BUILD_TESTS=ON -C cmake.define.KILN_BUILD_BENCH=ON \
  -C cmake.define.CMAKE_INSTALL_PREFIX="${prefix:-/usr/local}" . >&2
echo "$python"
