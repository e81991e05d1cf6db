#!/usr/bin/env bash
# kiln's CPU target against PyTorch eager and torch.compile on the example layers and models,
# side by side on the same cores: bench/cpu_layers/run.sh [--runs N] [--threads 1,2]
# [--modes highest,high,tf32x3,medium] [--no-compile] [--out DIR]
#
# Uses the virtual environment bench/peers/run.sh makes ($KILN_PEERS_VENV, default
# ~/.cache/kiln/peers-venv: Debian's python3 with torch and numpy), making it if needed (torch's
# wheels are several GB). Builds kiln if needed, then runs bench/cpu_layers/measure.py, which
# writes DIR/cpu_layers.json and DIR/cpu_layers.md (default DIR: build/cpu_layers) and prints the
# table. Not part of the test suite. Run it on an idle machine: the figures are ratios measured
# in one run, and anything else running moves them.
set -euo pipefail
cd "$(dirname "$0")/../.."

[[ -x build/tools/kiln ]] || scripts/build.sh

venv="${KILN_PEERS_VENV:-$HOME/.cache/kiln/peers-venv}"
[[ -x "$venv/bin/python" ]] || /usr/bin/python3 -m venv "$venv"
if ! "$venv/bin/python" -c "import torch, numpy" 2>/dev/null; then
  echo "cpu_layers: installing torch and numpy into $venv" >&2
  "$venv/bin/pip" install --quiet --upgrade pip >/dev/null 2>&1 || true
  "$venv/bin/pip" install --quiet --retries 1 --timeout 15 \
    --index-url https://download.pytorch.org/whl/cpu torch >/dev/null 2>&1 ||
    "$venv/bin/pip" install --quiet torch
  "$venv/bin/pip" install --quiet numpy
fi

exec "$venv/bin/python" bench/cpu_layers/measure.py --kiln build/tools/kiln \
  --python "$venv/bin/python" "$@"
