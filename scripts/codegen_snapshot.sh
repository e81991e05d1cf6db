#!/usr/bin/env bash
# What a build generates, written to files, so that a refactor can be shown to change nothing:
# for every example and emulation graph, its hash and canonical form, `kiln emit` on sm_75, sm_80,
# sm_90 and sm_120 in every precision mode (an error is recorded as the output), the CPU target's
# LLVM IR in every mode, the CPU target's outputs (`kiln run --save`) in four modes, and the key
# fields of a compile at sm_90 (compile times left out). A symbolic graph is taken at 37 for
# every dim.
#
# Usage:
#   scripts/codegen_snapshot.sh KILN OUT    snapshot with the kiln binary KILN into folder OUT
#   scripts/codegen_snapshot.sh --compare OLD NEW
#                                           the differences between two snapshots, the
#                                           codegen_version field (a digest of the sources) and
#                                           the key it enters left out; exit 1 when any remain
# Compare a build before a change with the build after it: snapshot with a copy of the old
# build's tree (its kiln finds its own CPU plugin), then with the new one.
set -uo pipefail
cd "$(dirname "$0")/.."

if [[ ${1:-} == --compare ]]; then
  [[ $# == 3 ]] || { echo "usage: $0 --compare OLD NEW" >&2; exit 2; }
  # Lines naming the key or the codegen version, and the lines diff prints around them.
  differences=$(diff -r "$2" "$3" | grep -v '^[<>] \.\(key\|codegen_version\) ' |
                grep -v '^---$' | grep -v '^[0-9,]*[acd][0-9,]*$' | grep -v '^diff -r ')
  if [[ -n $differences ]]; then
    echo "$differences"
    exit 1
  fi
  echo "codegen_snapshot: $2 and $3 are the same (keys and codegen versions aside)"
  exit 0
fi

[[ $# == 2 ]] || { echo "usage: $0 KILN OUT | --compare OLD NEW" >&2; exit 2; }
kiln=$1 out=$2
[[ -x $kiln ]] || { echo "codegen_snapshot: $kiln is not an executable" >&2; exit 2; }
mkdir -p "$out" || exit 2
KILN_CACHE_DIR=$(mktemp -d) || exit 1
export KILN_CACHE_DIR
trap 'rm -rf "$KILN_CACHE_DIR"' EXIT
modes=(highest high tf32x3 medium auto)

dims_of() {  # "B=37,S=37" for a symbolic graph, "" for a static one
  "$kiln" fmt "$1" 2>/dev/null | sed -n 's/^ *dim \([A-Za-z_0-9]*\): .*$/\1=37/p' | paste -sd, -
}

for graph in examples/graphs/*.kg tests/emulation/graphs/*.kg; do
  name="$(basename "$(dirname "$graph")")_$(basename "$graph" .kg)"
  dims=() d=$(dims_of "$graph")
  [[ -n $d ]] && dims=(--dims "$d")
  { "$kiln" hash "$graph"; echo "exit $?"; } >"$out/$name.hash" 2>&1
  { "$kiln" fmt "$graph"; echo "exit $?"; } >"$out/$name.fmt" 2>&1
  for arch in sm_75 sm_80 sm_90 sm_120; do
    for mode in "${modes[@]}"; do
      { "$kiln" emit "$graph" "${dims[@]}" --arch "$arch" --precision "$mode"; echo "exit $?"; } \
        >"$out/$name.$arch.$mode.cu" 2>&1
    done
  done
  for mode in "${modes[@]}"; do
    { "$kiln" emit "$graph" "${dims[@]}" --target cpu --llvm --precision "$mode"; echo "exit $?"; } \
      >"$out/$name.cpu.$mode.ll" 2>&1
  done
done

for graph in examples/graphs/*.kg; do
  name=$(basename "$graph" .kg)
  dims=() d=$(dims_of "$graph")
  [[ -n $d ]] && dims=(--dims "$d")
  "$kiln" compile "$graph" "${dims[@]}" --arch sm_90 --precision high --json 2>&1 |
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        report = json.loads(line)
    except ValueError:
        print(line.rstrip())
        continue
    def walk(value, path):
        if isinstance(value, dict):
            for k, v in sorted(value.items()):
                if not k.endswith(("_ms", "_us")):
                    walk(v, path + "." + k)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, path + "[%d]" % i)
        else:
            print(path, value)
    walk(report, "")' >"$out/compile_sm90_$name"
  for mode in highest high tf32x3 medium; do
    "$kiln" run "$graph" "${dims[@]}" --target cpu --precision "$mode" \
      --save "$out/cpu_run_$name.$mode" >/dev/null 2>&1
    echo "exit $?" >"$out/cpu_run_$name.$mode.exit"
  done
done
echo "codegen_snapshot: $(find "$out" -type f | wc -l) files in $out"
