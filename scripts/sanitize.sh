#!/usr/bin/env bash
# Sanitizer checks of the host code (no GPU needed; the CUDA backend is left
# out of these builds):
#   1. asan+ubsan: every host suite built with -DMDR_SANITIZE=address,undefined
#      (LeakSanitizer included), run by ctest -L host; any sanitizer report in
#      any test's output fails the check, since a report from a Criterion
#      worker (a leak, say) does not fail the test by itself.
#   2. valgrind: memcheck --leak-check=full over a quick subset of the arena,
#      graph_cache and workflow suites of a plain build, following Criterion's
#      worker processes (--trace-children=yes, one log per process); any
#      memory error or definitely-lost block in any process fails the check.
#      (Criterion's own IPC buffers show up as "possibly lost" when a test
#      skips itself; only definite leaks count.)
#   3. tsan: -DMDR_SANITIZE=thread build of test_workflow_threads (the thread
#      tests of the workflow suite as a plain program: Criterion does not
#      start under ThreadSanitizer) and ar_twin_threads (the all-reduce
#      protocol's host twin: ranks as threads), any race fails.
# Prints one summary line per check; exits 1 if any failed.
# Usage: bash scripts/sanitize.sh        (build dirs build-asan, build-plain, build-tsan)
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
common=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DMDR_ENABLE_CUDA=OFF -DMDR_BUILD_BENCH=OFF
        -DMDR_BUILD_EXAMPLES=OFF)
summary=()
failed=0
record() { # status, line
  summary+=("sanitize: $2")
  [ "$1" = PASS ] || failed=1
}
build() { # dir, sanitize, targets... (none: all)
  local dir=$1 san=$2; shift 2
  local targets=()
  [ $# -gt 0 ] && targets=(--target "$@")
  cmake -S . -B "$dir" "${common[@]}" -DMDR_SANITIZE="$san" >"$dir/configure.log" 2>&1 &&
    cmake --build "$dir" -j "$jobs" "${targets[@]}" >"$dir/build.log" 2>&1
}
mkdir -p build-asan build-plain build-tsan

# 1. ASan + UBSan (+ LSan) over every host suite
t0=$SECONDS
if build build-asan address,undefined; then
  # (grep -c reads all of nm's output: no SIGPIPE under pipefail)
  if [ "$(nm build-asan/tests/test_arena | grep -c __asan_init)" -eq 0 ] ||
     [ "$(nm -D build-asan/libmdr.so | grep -c __ubsan_handle)" -eq 0 ]; then
    record FAIL "asan+ubsan: the build is not instrumented (MDR_SANITIZE ignored?)"
  else
    (cd build-asan &&
      ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
      UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      ctest -L host -LE package --output-on-failure --no-tests=error -j "$jobs" >ctest.log 2>&1)
    rc=$?
    reports=$(grep -cE "ERROR: (Address|Leak)Sanitizer|runtime error:" build-asan/Testing/Temporary/LastTest.log)
    suites=$(grep -cE "Test +#[0-9]+: " build-asan/ctest.log)
    if [ $rc -eq 0 ] && [ "$reports" -eq 0 ]; then
      record PASS "asan+ubsan+lsan: PASS, $suites host suites, 0 reports ($((SECONDS - t0)) s)"
    else
      record FAIL "asan+ubsan+lsan: FAIL (ctest rc $rc, $reports sanitizer reports; build-asan/ctest.log, build-asan/Testing/Temporary/LastTest.log)"
      grep -E "ERROR: (Address|Leak)Sanitizer|runtime error:|Failed|\*\*\*" build-asan/Testing/Temporary/LastTest.log build-asan/ctest.log | head -20
    fi
  fi
else
  record FAIL "asan+ubsan+lsan: build failed (build-asan/build.log)"
fi

# 2. valgrind memcheck over quick subsets (children followed)
t0=$SECONDS
if ! command -v valgrind >/dev/null; then
  record FAIL "valgrind: not installed"
elif build build-plain "" test_arena test_graph_cache test_workflow; then
  logs=build-plain/valgrind
  rm -rf "$logs" && mkdir -p "$logs"
  vg=(valgrind --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite
      --trace-children=yes --track-origins=yes)
  ok=1
  # every arena test but the big preset sweep, every graph_cache test but the
  # random-count replays, the two thread tests of the workflow suite
  bins=(test_arena test_graph_cache test_workflow)
  filters=('arena/[abgnoz]*' 'graph_cache/[!r]*' 'workflow/[st]*')
  for i in "${!bins[@]}"; do
    "${vg[@]}" --log-file="$logs/${bins[$i]}.%p.log" "build-plain/tests/${bins[$i]}" --jobs 1 \
      --filter "${filters[$i]}" >"$logs/${bins[$i]}.out" 2>&1 || ok=0
  done
  nlogs=$(find "$logs" -name '*.log' | wc -l)
  bad=$(grep -L "ERROR SUMMARY: 0 errors" "$logs"/*.log | wc -l)
  tests=$(grep -hoE "Tested: [0-9]+" "$logs"/*.out | awk '{s += $2} END {print s + 0}')
  if [ $ok -eq 1 ] && [ "$bad" -eq 0 ] && [ "$nlogs" -gt 3 ]; then
    record PASS "valgrind: PASS, $tests tests in $nlogs processes, 0 errors, 0 definite leaks ($((SECONDS - t0)) s)"
  else
    record FAIL "valgrind: FAIL ($bad of $nlogs process logs with errors; $logs)"
    grep -L "ERROR SUMMARY: 0 errors" "$logs"/*.log | head -3
  fi
else
  record FAIL "valgrind: build failed (build-plain/build.log)"
fi

# 3. ThreadSanitizer over the thread tests of the workflow suite
t0=$SECONDS
if build build-tsan thread test_workflow_threads ar_twin_threads; then
  if TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build-tsan/tests/test_workflow_threads \
      >build-tsan/threads.log 2>&1 &&
     TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build-tsan/tests/ar_twin_threads \
      >>build-tsan/threads.log 2>&1; then
    record PASS "tsan: PASS, $(grep -c ': ok$' build-tsan/threads.log) thread tests, 0 races ($((SECONDS - t0)) s)"
  else
    record FAIL "tsan: FAIL (build-tsan/threads.log)"
    grep -E "WARNING: ThreadSanitizer|#[0-3] |workflow" build-tsan/threads.log | head -20
  fi
else
  record FAIL "tsan: build failed (build-tsan/build.log)"
fi

printf '%s\n' "${summary[@]}"
exit $failed
