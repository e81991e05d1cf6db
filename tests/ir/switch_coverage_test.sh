#!/usr/bin/env bash
# A kind added to ir/ops.def that a switch forgets must fail the build, not fall through: each
# source below (the three renderers of the per-element formulas) is compiled as the build
# compiles it, once as is (it must compile) and once with KILN_TEST_EXTRA_OP, which appends a
# unary kind `test_extra` to the table (it must fail, naming that kind, through -Werror=switch).
# What trips is the formula switch in ir/scalar.h that all three include: switches over
# categories (printer, hash, row kernels) rightly take a kind of an existing category as it is.
# Usage: switch_coverage_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1 source=$2
commands="$build/compile_commands.json"
[[ -f $commands ]] || { echo "no $commands" >&2; exit 1; }
failed=0
for file in compiler/emit_expr.cpp compiler/cpu/builder.cpp reference/elementwise.cpp; do
  command=$(python3 - "$commands" "$source/$file" <<'PY'
import json, shlex, sys
def compiles(entry, file):
    # In a unity build (CMAKE_UNITY_BUILD) a source is #included by its batch's file.
    if entry["file"] == file: return True
    if "/Unity/unity_" not in entry["file"]: return False
    try: return '#include "%s"' % file in open(entry["file"]).read()
    except OSError: return False
for entry in json.load(open(sys.argv[1])):
    if compiles(entry, sys.argv[2]):
        args = [sys.argv[2] if a == entry["file"] else a for a in shlex.split(entry["command"])]
        # drop the output and dependency files: only the diagnostics matter
        out, skip = [], False
        for a in args:
            if skip: skip = False; continue
            if a in ("-o", "-MF", "-MT"): skip = True; continue
            if a in ("-MD", "-MMD"): continue
            out.append(a)
        print(entry["directory"]); print(shlex.join(out + ["-fsyntax-only"])); break
PY
)
  [[ -n $command ]] || { echo "FAIL: $file is not in $commands"; failed=1; continue; }
  dir=$(sed -n 1p <<<"$command") cmd=$(sed -n 2p <<<"$command")
  if ! (cd "$dir" && eval "$cmd") >/tmp/switch_coverage.$$ 2>&1; then
    echo "FAIL: $file does not compile as is:"; head -20 /tmp/switch_coverage.$$; failed=1
    continue
  fi
  if (cd "$dir" && eval "$cmd -DKILN_TEST_EXTRA_OP") >/tmp/switch_coverage.$$ 2>&1; then
    echo "FAIL: $file compiles with an op kind it does not handle"; failed=1
  elif ! grep -q "test_extra.*not handled in switch" /tmp/switch_coverage.$$; then
    echo "FAIL: $file fails with the extra kind, but not for an unhandled switch case:"
    head -20 /tmp/switch_coverage.$$; failed=1
  else
    echo "ok: $file: $(grep -m1 'test_extra' /tmp/switch_coverage.$$ | sed 's/.*error: //')"
  fi
done
rm -f /tmp/switch_coverage.$$
exit $failed
