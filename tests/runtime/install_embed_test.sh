#!/usr/bin/env bash
# Installs kiln into a scratch prefix, builds examples/embed against it with find_package(kiln),
# and runs it twice on one cache: a miss, then a hit, then the run step.
set -euo pipefail
build_dir=$1 embed_src=$2 work=$3 readme=$4
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$embed_src" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
test -x "$work/prefix/bin/kiln" || { echo "kiln CLI not installed"; exit 1; }
first=$("$work/build/embed" --arch sm_80 --cache-dir "$work/cache")
echo "$first"
second=$("$work/build/embed" --arch sm_80 --cache-dir "$work/cache")
echo "$second"
grep -q '^miss ' <<<"$first" || { echo "first run should miss"; exit 1; }
grep -q '^hit ' <<<"$second" || { echo "second run should hit"; exit 1; }
grep -Eq '^run: (ok|skipped: no CUDA (driver found|device))' <<<"$second" \
  || { echo "run step says neither ok nor a clear no-GPU message"; exit 1; }
# A bad arch is a usage error.
set +e
"$work/build/embed" --arch sm_12 --cache-dir "$work/cache" 2>"$work/err"
code=$?
set -e
[ "$code" -eq 2 ] || { echo "bad arch should exit 2, got $code"; exit 1; }
grep -q "sm_12" "$work/err" || { echo "bad arch message should name it"; cat "$work/err"; exit 1; }
# The README's embedding example compiles against the installed headers.
sed -n '/^```cpp$/,/^```$/p' "$readme" | sed '1d;$d' >"$work/readme_example.cpp"
grep -q 'kiln::Runtime::create' "$work/readme_example.cpp" || { echo "README has no embedding example"; exit 1; }
g++ -std=c++20 -fsyntax-only -I"$work/prefix/include" -I"$work/prefix/include/kiln" "$work/readme_example.cpp"
echo "install + embed + README example: ok"
