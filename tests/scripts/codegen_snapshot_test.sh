#!/usr/bin/env bash
# scripts/codegen_snapshot.sh: two snapshots of one build are the same (kiln's generated code,
# keys and CPU outputs are deterministic), and --compare reports an edited output, exit 1.
# Usage: codegen_snapshot_test.sh KILN
set -uo pipefail
kiln=$1
here=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$here/scripts/codegen_snapshot.sh" "$kiln" "$work/a" >/dev/null || fail "first snapshot"
"$here/scripts/codegen_snapshot.sh" "$kiln" "$work/b" >/dev/null || fail "second snapshot"
count=$(find "$work/a" -type f | wc -l)
(( count > 500 )) || fail "only $count files in the snapshot"
grep -q "^exit 0$" "$work/a/graphs_mlp.sm_90.high.cu" || fail "mlp did not emit on sm_90"
grep -q "__global__" "$work/a/graphs_mlp.sm_90.high.cu" || fail "no kernel in mlp's emit"
[[ -s $work/a/cpu_run_mlp.high/y.npy ]] || fail "no CPU output saved for mlp"
out=$("$here/scripts/codegen_snapshot.sh" --compare "$work/a" "$work/b") ||
  fail "two snapshots of one build differ: $out"

# An edited kernel text is a difference.
sed -i 's/__global__/__global__ /' "$work/b/graphs_mlp.sm_90.high.cu"
out=$("$here/scripts/codegen_snapshot.sh" --compare "$work/a" "$work/b")
[[ $? == 1 ]] || fail "--compare did not fail on an edited kernel"
grep -q "__global__ " <<<"$out" || fail "--compare did not show the edit: $out"
echo "ok: $count files, the same twice; an edit is reported"
