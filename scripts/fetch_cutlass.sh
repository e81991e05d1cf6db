#!/usr/bin/env bash
# Fetches CUTLASS's headers (CuTe among them) from PyPI's nvidia-cutlass wheel, pinned, into
# ${KILN_DEPS_DIR:-~/.cache/kiln-deps}/cutlass-VERSION/include, for the test that checks the
# emulator's mma fragment layouts against CuTe's. Prints the include folder; exits 1 (saying why)
# when the wheel cannot be had, and the test then reports itself skipped.
set -euo pipefail
version=4.2.0.0
deps="${KILN_DEPS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln-deps}"
dest="$deps/cutlass-$version"
if [[ -f "$dest/include/cute/atom/mma_traits_sm80.hpp" ]]; then
  echo "$dest/include"
  exit 0
fi
pip=()
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null && "$py" -m pip --version >/dev/null 2>&1; then
    pip=("$py" -m pip)
    break
  fi
done
if ((${#pip[@]} == 0)); then
  echo "fetch_cutlass: no pip to download nvidia-cutlass==$version with" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "${pip[@]}" download --quiet --no-deps --dest "$tmp" "nvidia-cutlass==$version" >&2; then
  echo "fetch_cutlass: pip could not download nvidia-cutlass==$version" >&2
  exit 1
fi
mkdir -p "$tmp/unpacked"
/usr/bin/python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
  "$tmp"/nvidia_cutlass-*.whl "$tmp/unpacked"
mkdir -p "$dest"
rm -rf "$dest/include"
mv "$tmp/unpacked/cutlass_library/source/include" "$dest/include"
echo "$dest/include"
