#!/usr/bin/env bash
# kiln against Triton's cache, torch.compile (Inductor, CPU), JAX's persistent cache and
# ccache + nvcc, measured side by side: bench/peers/run.sh [--quick] [--out DIR]
#
# Makes a private virtual environment ($KILN_PEERS_VENV, default ~/.cache/kiln/peers-venv) with
# Debian's python3, installs triton, torch (CPU wheels when download.pytorch.org answers, else
# PyPI's) and jax there, and Debian's ccache; a peer that cannot be installed is reported as
# skipped. Builds kiln if needed, then runs bench/peers/measure.py, which writes DIR/peers.json and
# DIR/peers.md (default DIR: build/peers) and prints the table. Large downloads (several GB with
# torch): not part of the test suite.
set -euo pipefail
cd "$(dirname "$0")/../.."

quick=()
out=build/peers
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=(--quick); shift ;;
    --out) out="${2:?--out needs a folder}"; shift 2 ;;
    *) echo "peers: unknown argument '$1' (expected --quick or --out DIR)" >&2; exit 2 ;;
  esac
done

[[ -x build/tools/kiln && -x build/bench/kiln-bench ]] || scripts/build.sh

if ! command -v ccache >/dev/null; then
  if [[ $(id -u) == 0 ]]; then apt-get install -y -q ccache >/dev/null || true
  else sudo apt-get install -y -q ccache >/dev/null || true; fi
fi

venv="${KILN_PEERS_VENV:-$HOME/.cache/kiln/peers-venv}"
[[ -x "$venv/bin/python" ]] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip >/dev/null 2>&1 || true
skips=()
install() {  # install NAME [pip arguments...]: a failure makes NAME a skipped peer
  local name="$1"; shift
  if "$venv/bin/python" -c "import $name" 2>/dev/null; then return; fi
  echo "peers: installing $name" >&2
  if ! "$venv/bin/pip" install --quiet "$@" >"$out/pip-$name.log" 2>&1; then
    skips+=(--skip "$name=pip could not install it (see $out/pip-$name.log)")
  fi
}
mkdir -p "$out"
install triton triton
install jax jax
if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  "$venv/bin/pip" install --quiet --retries 1 --timeout 15 \
    --index-url https://download.pytorch.org/whl/cpu torch \
    >"$out/pip-torch-cpu.log" 2>&1 || true
fi
install torch torch

exec "$venv/bin/python" bench/peers/measure.py --kiln build/tools/kiln \
  --kiln-bench build/bench/kiln-bench --python "$venv/bin/python" --out "$out" \
  "${quick[@]}" "${skips[@]}"
