#!/usr/bin/env bash
# bench/peers/table.py on a recorded sample of bench/peers/measure.py's JSON: the table the README
# includes, rows formatted in their units, a skipped peer said as such; a malformed report exits 2
# naming what is wrong.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
table="$root/bench/peers/table.py"
sample="$root/tests/scripts/peers_sample.json"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $1"; echo "--- output:"; cat "$tmp/out"; exit 1; }

/usr/bin/python3 "$table" "$sample" >"$tmp/out" 2>&1 || fail "exit $? on the sample"
grep -q '^| system | graph | cold | warm, new process | minus process start | warm, in process |$' \
  "$tmp/out" || fail "no table header"
grep -q '^| kiln 0.1.0 | mlp | 342 ms | 7.9 ms | 2.7 ms | 21 µs |$' "$tmp/out" || fail "kiln's row"
grep -q '^| Triton 3.9.0 (same kernels, sm_90) | mlp | 2.04 s | 644 ms | 631 ms | 2.5 ms |$' \
  "$tmp/out" || fail "Triton's row (seconds, milliseconds, in-process milliseconds)"
grep -q '^| ccache 4.7.5 + nvcc, kiln.s source | attention | 1.74 s | 8.2 ms | 5.9 ms | — |$' \
  "$tmp/out" || fail "ccache's row (no in-process figure)"
grep -q '^| torch | — | skipped: pip could not install it' "$tmp/out" || fail "the skipped peer"
grep -q '^Measured 2026-11-23 on AMD EPYC, 2 cores, no GPU' "$tmp/out" || fail "date and machine"
grep -q '^- kiln: mlp, 7.9 ms in all' "$tmp/out" || fail "where the warm time goes"

echo '{"machine": "m", "date": "d", "rows": [{"system": "kiln"}]}' >"$tmp/bad.json"
/usr/bin/python3 "$table" "$tmp/bad.json" >"$tmp/out" 2>&1
rc=$?
[[ $rc == 2 ]] || fail "a row without its fields: exit $rc, expected 2"
grep -q "rows\[0\] lacks 'graph'" "$tmp/out" || fail "the error does not name the missing field"
echo "not json" >"$tmp/bad.json"
/usr/bin/python3 "$table" "$tmp/bad.json" >"$tmp/out" 2>&1
[[ $? == 2 ]] || fail "not JSON: expected exit 2"
echo ok
