#!/usr/bin/env bash
# Builds the tests of kiln's threaded parts (cache and remote tier, CPU worker pool, compiles
# through the cache, NVRTC compile pool) under ThreadSanitizer (build-tsan/) and under
# AddressSanitizer + UBSan (build-asan/), Debug (-O0) with asserts on, and runs them. The builds
# are unity builds (CMake's CMAKE_UNITY_BUILD: a target's sources compiled a batch to one
# translation unit) with line tables only for debug information (-g1; a report's stack still names
# each frame's file and line): under TSan on 2 cores, 87 s where one translation unit a source with
# -g took 195 s. So names in a source's anonymous namespace must differ from those of every other
# source of its target.
# Any sanitizer report fails the run, whether a test binary or a process it starts (the cache's
# worker processes) made it: TSan and ASan write each process's reports to a file checked here,
# and UBSan (GCC 12's ignores log_path) ends the process with exit code 1. So do test runs taking
# more than $KILN_SANITIZE_TIMEOUT seconds all together (default 480; with the binaries side by
# side they take about 110 s on 2 cores, 65 s under TSan and 47 s under ASan), the builds not
# counted.
# Usage: scripts/sanitize.sh [thread] [address]   (both when none is named)
#
# The CPU target's tests load its LLVM plugin: kiln's code in it is instrumented, libLLVM and the
# kernels it compiles are not (their own loads and stores go unchecked). Of them only the target's
# and its cache's cases run here (kernels on the worker pool, objects through the cache); the
# comparisons of every example graph with the fp64 reference and the emulator run their kernels
# on the same pool and take minutes more under TSan. So, under TSan, do the target's two longest
# cases (every integer and bool graph, and odd sizes and layouts, each in every mode): half the
# binary's time there, for more of the same kernels on the same pool, not more of kiln's threads.
# ASan and UBSan check them (kiln's code lowering them is instrumented).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
run_budget="${KILN_SANITIZE_TIMEOUT:-480}"  # seconds for every test run of this script
run_spent=0

# Test binaries (relative to the build folder) and the gtest filter each runs.
targets=(cache_tests kiln_cache_worker remote_tests runtime_tests compile_pool_tests cpu_tests)
cpu_long="CpuTarget.IntegerAndBoolGraphsMatchTheReferenceInEveryMode"
cpu_long+=":CpuTarget.OddSizesLayoutsAndBatchesInEveryMode"
# The longest first (about 60, 30, 30, 5 and 0 s under TSan on 2 cores).
tests=(
  "tests/cpu/cpu_tests CpuTarget.*:CpuCache.*:CpuRuntime.*:CpuRunTimed.*"
  "tests/cache/cache_tests *"
  "tests/runtime/runtime_tests *-Gpu*"  # the GPU suite needs a device (and libcuda)
  "tests/cache/remote/remote_tests *"
  "compile_pool_tests *"
)

# with_excluded FILTER PATTERN: FILTER with the gtest cases PATTERN names left out.
with_excluded() {
  if [ -z "$2" ]; then echo "$1"; return; fi
  case "$1" in
    *-*) echo "$1:$2" ;;
    *) echo "$1-$2" ;;
  esac
}

# sanitize KIND BUILD_DIR FLAGS: configures and builds BUILD_DIR with -fsanitize=FLAGS and runs
# the tests; returns non-zero on a build failure, a failed or stopped test, or any report.
sanitize() {
  local kind=$1 dir=$2 flags=$3 start=$SECONDS
  # GCC: its sanitizer runtimes are shared libraries, so the CPU target's plugin (linked with
  # --no-undefined) links; clang would leave the runtime's symbols undefined there.
  if ! CC=gcc CXX=g++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_C_FLAGS_DEBUG="-O0 -g1" -DCMAKE_CXX_FLAGS_DEBUG="-O0 -g1" -DCMAKE_UNITY_BUILD=ON \
    -DKILN_SANITIZE="$flags" >/dev/null; then
    echo "sanitize: $kind: configuring $dir failed"
    return 1
  fi
  if ! cmake --build "$dir" -j "$(nproc)" --target "${targets[@]}" \
    >"$dir/sanitize-build.log" 2>&1; then
    tail -n 40 "$dir/sanitize-build.log"
    echo "sanitize: $kind: build failed (log: $dir/sanitize-build.log)"
    return 1
  fi
  echo "sanitize: $kind: built in $((SECONDS - start)) s"

  # Every process writes its reports to $reports/report.<pid> rather than to a stderr that a
  # test may have redirected into a scratch file.
  local reports="$root/$dir/sanitizer-reports"
  rm -rf "$reports"
  mkdir -p "$reports"
  local common="halt_on_error=1 log_path=$reports/report"
  local env=() exclude=""
  case "$kind" in
    thread)
      exclude="$cpu_long"
      env=(TSAN_OPTIONS="$common second_deadlock_stack=1 suppressions=$root/scripts/tsan.supp")
      ;;
    address)
      # CacheHitWrites runs a worker under strace, and LeakSanitizer cannot stop the threads of
      # a traced process (it ends it with a fatal error). ASan keeps freed memory aside (its
      # quarantine) to catch uses after free, so resident memory grows over the 3000 loads of
      # LoadingAndDroppingProgramsReusesTheirMemory. Both run under TSan only.
      exclude="CacheHitWrites.*:CpuTarget.LoadingAndDroppingProgramsReusesTheirMemory"
      local order="check_initialization_order=1 strict_init_order=1"
      # use_tls=0: GCC 12's LeakSanitizer misreads glibc 2.36's dynamic TLS vector once enough
      # modules with thread-locals are loaded (the LLVM plugin, the emulator's kernels): its
      # tracer dies on an entry it takes for a block ("DTLS 7 at 0x1199-0x300000229b", "Tracer
      # caught signal 11") and the run ends with a fatal error instead of a leak check. Without
      # thread-local storage as a root, memory reachable only from it would be reported as a
      # leak: a false report, never a hidden one (glibc's per-thread key blocks are such,
      # suppressed in scripts/lsan.supp).
      env=(ASAN_OPTIONS="$common detect_leaks=1 detect_stack_use_after_return=1 $order"
           LSAN_OPTIONS="use_tls=0 suppressions=$root/scripts/lsan.supp print_suppressions=0"
           UBSAN_OPTIONS="$common print_stacktrace=1")
      ;;
  esac

  # The binaries run side by side, one per core, the longest first; each one's output is shown
  # when all are done.
  local failed=0 entry bin filter rc run_start left log i took
  local lanes
  lanes=$(nproc)
  run_start=$SECONDS
  i=0
  for entry in "${tests[@]}"; do
    bin=${entry%% *}
    filter=${entry#* }
    log="$root/$dir/sanitize-run-$i.log"
    i=$((i + 1))
    rm -f "$log" "$log.rc"
    while [ "$(jobs -rp | wc -l)" -ge "$lanes" ]; do wait -n || true; done
    left=$((run_budget - run_spent - (SECONDS - run_start)))
    if [ "$left" -le 0 ]; then
      echo "not run: the test runs' ${run_budget} s are spent" >"$log"
      echo 124 >"$log.rc"
      continue
    fi
    (
      rc=0
      cd "$dir" && env "${env[@]}" timeout -k 10 "$left" "./$bin" --gtest_brief=1 \
        --gtest_filter="$(with_excluded "$filter" "$exclude")" >"$log" 2>&1 || rc=$?
      echo "$rc $((SECONDS - run_start))" >"$log.rc"
    ) &
  done
  wait
  run_spent=$((run_spent + SECONDS - run_start))
  i=0
  for entry in "${tests[@]}"; do
    bin=${entry%% *}
    log="$root/$dir/sanitize-run-$i.log"
    i=$((i + 1))
    cat "$log" 2>/dev/null || true
    read -r rc took <"$log.rc" || rc=1
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      echo "sanitize: $kind: $bin stopped or not run: the test runs' ${run_budget} s are spent"
      failed=1
    elif [ "$rc" -ne 0 ]; then
      echo "sanitize: $kind: $bin failed (exit $rc)"
      failed=1
    else
      echo "sanitize: $kind: $bin passed (done ${took} s after the runs began)"
    fi
  done

  # The first three reports in full; the others are often the same error in more processes.
  local report shown=0
  for report in "$reports"/report.*; do
    [ -e "$report" ] || continue
    failed=1
    shown=$((shown + 1))
    [ "$shown" -le 3 ] || continue
    echo "sanitize: $kind: report in $report:"
    head -n 150 "$report"
  done
  if [ "$shown" -gt 3 ]; then
    echo "sanitize: $kind: $((shown - 3)) more reports in $reports"
  fi
  echo "sanitize: $kind: $([ "$failed" -eq 0 ] && echo clean || echo FAILED)" \
    "after $((SECONDS - start)) s"
  return "$failed"
}

kinds=("$@")
[ "${#kinds[@]}" -gt 0 ] || kinds=(thread address)
status=0
for kind in "${kinds[@]}"; do
  case "$kind" in
    thread) sanitize thread build-tsan thread || status=1 ;;
    address) sanitize address build-asan address,undefined || status=1 ;;
    *)
      echo "sanitize.sh: '$kind': expected thread or address" >&2
      exit 2
      ;;
  esac
done
exit "$status"
