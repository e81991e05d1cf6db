#!/usr/bin/env bash
# Installs, builds and runs kiln's main job on examples/graphs: what kiln knows about each graph.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
kiln=build/tools/kiln
for graph in examples/graphs/*.kg; do
  echo "== $graph  hash $("$kiln" hash "$graph")"
  "$kiln" fmt "$graph"
done
