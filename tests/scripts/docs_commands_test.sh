#!/usr/bin/env bash
# Runs every shell command that README.md and docs/*.md show, so that none can rot: each fenced
# `sh`/`bash` block runs against the built kiln, a page's blocks in order in one scratch folder
# and HOME, with a private redis-server on a free loopback port standing in for port 6390.
# `# ... (exit N)` after a command checks its status, `# => TEXT` that its stdout holds TEXT.
# `kg` blocks must parse, `cpp` blocks are built against an installed kiln and run, `cmake`
# blocks must match examples/embed's. `sh-gpu` and `sh-long` blocks are listed as skipped; any
# other fence tag fails. The rules are in docs/README.md, "Commands in these pages are tested".
# Usage: docs_commands_test.sh KILN BUILD_DIR [PAGE.md...] (default: README.md docs/*.md)
set -euo pipefail
kiln=$(realpath "$1")
build=$(realpath "$2")
shift 2
root="$(cd "$(dirname "$0")/../.." && pwd)"
python=/usr/bin/python3  # the system's, with NumPy, as the docs' python3 commands expect
pages=("$@")
if [[ ${#pages[@]} -eq 0 ]]; then
  pages=("$root/README.md" "$root"/docs/*.md)
fi
for tool in redis-server redis-cli cmake "$python"; do
  command -v "$tool" >/dev/null || { echo "docs: $tool is missing" >&2; exit 1; }
done

tmp="$(mktemp -d)"
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
stop_redis() { redis-cli -h 127.0.0.1 -p "$port" shutdown nosave >/dev/null 2>&1 || true; }
cleanup() {
  stop_redis
  rm -rf "$tmp"
}
trap cleanup EXIT

# Splits each page into blocks and writes, per page, one script per runnable block (with the
# checks the comments ask for), the kg/cpp/cmake blocks to check, and a manifest.
"$python" - "$tmp" "$port" "$root" "${pages[@]}" <<'PY'
import os, re, sys

out, port, root, pages = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
run_tags = {"sh", "bash"}
skip_tags = {"sh-gpu": "needs a GPU",
             "sh-long": "builds everything, runs the test suite (this test too), runs for minutes or downloads GBs"}
other_tags = {"kg", "cpp", "cmake", "text", "python"}
marker = re.compile(r"^(?P<comment>.*?)\s*\(exit (?P<code>\d+)\)\s*$")
manifest = open(os.path.join(out, "manifest"), "w")
problems = []
seen_cpp = {}

def comment_start(line):
    """Index of the '#' that starts a trailing comment outside quotes, or -1."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and i > 0 and line[i - 1] in " \t":
            return i
    return -1

def sq(text):
    return "'" + text.replace("'", "'\\''") + "'"

def script_for(where, body):
    """The block as a bash script: each top-level command echoed, checks where asked."""
    lines = body.split("\n")
    # The checked command's output goes to the page's scratch folder (the block starts in its
    # work/), which the test removes: a file under /tmp would outlive the run.
    out_lines = ["set -eo pipefail", '__out=$(mktemp "$PWD/../check-out.XXXXXX")']
    depth, heredoc, continued, commands = 0, None, False, 0
    for n, line in enumerate(lines):
        at = f"{where[0]}:{where[1] + n + 1}"
        stripped = line.strip()
        if heredoc is not None:
            out_lines.append(line)
            if stripped == heredoc:
                heredoc = None
            continue
        top = depth == 0 and not continued
        if top and stripped and not stripped.startswith("#"):
            commands += 1
            out_lines.append(f"printf '+ %s\\n' {sq(stripped)} >&2")
        c = comment_start(line)
        code = line[:c] if c >= 0 else line
        h = re.search(r"<<-?\s*'?\"?(\w+)'?\"?", code)
        if h:
            heredoc = h.group(1)
        words = re.findall(r"(?:^|;|\s)(for|while|until|if|do|done|fi)(?=\s|;|$)", code)
        depth += sum(1 for w in words if w in ("for", "while", "until", "if"))
        depth -= sum(1 for w in words if w in ("done", "fi"))
        continued = code.rstrip().endswith("\\")
        comment = line[c + 1:].strip() if c >= 0 else ""
        m = marker.match(comment)
        expect_code = int(m.group("code")) if m else 0
        rest = m.group("comment").strip() if m else comment
        expect_text = rest[2:].strip() if rest.startswith("=>") else None
        if not m and expect_text is None:
            out_lines.append(line)
            continue
        if not top or continued or depth:
            problems.append(f"{at}: a check comment needs a one-line command")
            continue
        command = line[:c].rstrip()
        out_lines += [
            "set +e",
            f"{{ {command}\n}} >\"$__out\"",
            "__s=$?",
            "set -e",
            "cat \"$__out\"",
            f"if [ \"$__s\" -ne {expect_code} ]; then echo \"docs: {at}: expected exit {expect_code}, got $__s\" >&2; exit 1; fi",
        ]
        if expect_text is not None:
            out_lines.append(
                f"grep -qF -- {sq(expect_text)} \"$__out\" || {{ echo \"docs: {at}: the output lacks \"{sq(expect_text)} >&2; exit 1; }}")
    if heredoc is not None or depth or continued:
        problems.append(f"{where[0]}:{where[1]}: block ends inside a command")
    return "\n".join(out_lines) + "\n", commands

for page_index, page in enumerate(pages):
    rel = os.path.relpath(page, root)
    page_dir = os.path.join(out, f"page{page_index}")
    os.makedirs(page_dir)
    with open(os.path.join(page_dir, "name"), "w") as f:
        f.write(rel)
    lines = open(page).read().split("\n")
    i, block = 0, 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(.*)$", lines[i])
        if not m:
            i += 1
            continue
        tag, start = m.group(2).strip(), i + 1
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        if j == len(lines):
            problems.append(f"{rel}:{start}: unclosed fence")
            break
        body = "\n".join(l[len(m.group(1)):] for l in lines[i + 1:j])
        i = j + 1
        block += 1
        name = os.path.join(page_dir, f"{block:03d}")
        if tag in run_tags:
            script, commands = script_for((rel, start), body.replace("6390", port))
            with open(name + ".sh", "w") as f:
                f.write(script)
            manifest.write(f"run\t{rel}:{start}\t{name}.sh\t{commands}\n")
        elif tag in skip_tags:
            count = sum(1 for l in body.split("\n") if l.strip() and not l.strip().startswith("#"))
            manifest.write(f"skip\t{rel}:{start}\t-\t{tag}, {count} command(s): {skip_tags[tag]}\n")
        elif tag == "cpp" and body in seen_cpp:
            manifest.write(f"cpp-again\t{rel}:{start}\t-\tthe same program as {seen_cpp[body]}\n")
        elif tag in other_tags:
            if tag == "cpp":
                seen_cpp[body] = f"{rel}:{start}"
            with open(f"{name}.{tag}", "w") as f:
                f.write(body + "\n")
            manifest.write(f"{tag}\t{rel}:{start}\t{name}.{tag}\t-\n")
        else:
            problems.append(f"{rel}:{start}: fence tag '{tag}' is none of sh, bash, "
                            "sh-gpu, sh-long, kg, cpp, cmake, text, python")
if problems:
    sys.exit("docs: " + "\ndocs: ".join(problems))
PY

# A page's blocks run from one scratch folder that links the sources the commands read and the
# build, with a HOME of its own and no kiln settings inherited from the caller.
in_page() {
  local page_dir=$1
  shift
  (cd "$page_dir/work" &&
    env -u KILN_CACHE_DIR -u XDG_CACHE_HOME -u KILN_REMOTE_CACHE -u KILN_REMOTE_KEY \
      -u KILN_REMOTE_TTL -u KILN_CACHE_MAX_SIZE -u KILN_COMPILE_THREADS -u KILN_CPU_THREADS \
      HOME="$page_dir/home" PATH="$(dirname "$kiln"):/usr/bin:$PATH" "$@")
}
for page_dir in "$tmp"/page*/; do
  mkdir -p "$page_dir/work" "$page_dir/home"
  for link in examples scripts bench; do ln -s "$root/$link" "$page_dir/work/$link"; done
  ln -s "$build" "$page_dir/work/build"
done

# The shell blocks, page by page and in order; a block that fails stops its page.
blocks=0 commands=0 failures=()
declare -A page_failed=()
while IFS=$'\t' read -r kind where path info; do
  [[ $kind == run ]] || continue
  page_dir=$(dirname "$path")
  if [[ -n ${page_failed[$page_dir]:-} ]]; then
    echo "== $where: not run (an earlier block of this page failed)"
    continue
  fi
  echo "== $where: $info command(s)"
  blocks=$((blocks + 1)) commands=$((commands + info)) start=$SECONDS
  if ! in_page "$page_dir" timeout 300 bash "$path" 2>&1; then
    failures+=("$where")
    page_failed[$page_dir]=1
  fi
  echo "== $where: $((SECONDS - start)) s"
done <"$tmp/manifest"
stop_redis

# Graph text must parse.
graphs=0
while IFS=$'\t' read -r kind where path info; do
  [[ $kind == kg ]] || continue
  graphs=$((graphs + 1))
  "$kiln" fmt "$path" >/dev/null || failures+=("$where (kg)")
done <"$tmp/manifest"

# Python blocks must compile (their run needs the package and torch: tests/python runs the API).
pythons=0
while IFS=$'\t' read -r kind where path info; do
  [[ $kind == python ]] || continue
  pythons=$((pythons + 1))
  "$python" -c 'import sys; compile(open(sys.argv[1]).read(), sys.argv[1], "exec")' "$path" ||
    failures+=("$where (python)")
done <"$tmp/manifest"

# CMake blocks must be examples/embed's (what the docs say a project writes); C++ blocks are
# built as such a project against an installed kiln and run from a page's folder.
cmakes=0 programs=()
while IFS=$'\t' read -r kind where path info; do
  case $kind in
    cmake)
      cmakes=$((cmakes + 1))
      while IFS= read -r line; do
        [[ -z $line ]] && continue
        grep -qxF -- "$line" "$root/examples/embed/CMakeLists.txt" ||
          { echo "docs: $where: '$line' is not in examples/embed/CMakeLists.txt"; failures+=("$where (cmake)"); }
      done <"$path"
      ;;
    cpp) programs+=("$where"$'\t'"$path") ;;
  esac
done <"$tmp/manifest"
if [[ ${#programs[@]} -gt 0 ]]; then
  project="$tmp/cpp"
  mkdir -p "$project"
  cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
  {
    echo 'cmake_minimum_required(VERSION 3.25)'
    echo 'project(docs_examples LANGUAGES CXX)'
    echo 'set(CMAKE_CXX_STANDARD 20)'
    echo 'find_package(kiln 0.1 REQUIRED)'
    for i in "${!programs[@]}"; do
      echo "add_executable(example$i example$i.cpp)"
      echo "target_link_libraries(example$i PRIVATE kiln::kiln)"
    done
  } >"$project/CMakeLists.txt"
  for i in "${!programs[@]}"; do cp "${programs[$i]#*$'\t'}" "$project/example$i.cpp"; done
  if cmake -S "$project" -B "$project/build" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" \
      -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$project/build" -j 2 >/dev/null; then
    first_page=$(ls -d "$tmp"/page*/ | head -n 1)
    for i in "${!programs[@]}"; do
      where=${programs[$i]%%$'\t'*}
      echo "== $where: C++ example"
      in_page "${first_page%/}" "$project/build/example$i" || failures+=("$where (cpp)")
    done
  else
    echo "docs: the C++ examples do not build"
    cmake --build "$project/build" -j 2 2>&1 | tail -n 40
    failures+=("C++ examples")
  fi
fi

echo
echo "docs: ran $commands commands in $blocks blocks; $graphs graphs parsed; ${#programs[@]} C++" \
  "examples built and run; $cmakes CMake blocks matched; $pythons Python blocks compiled"
echo "docs: not run:"
while IFS=$'\t' read -r kind where path info; do
  [[ $kind == skip ]] && echo "  $where: $info"
done <"$tmp/manifest"
if [[ ${#failures[@]} -gt 0 ]]; then
  printf 'docs: FAILED: %s\n' "${failures[@]}"
  exit 1
fi
echo "docs: every shown command ran as stated"
