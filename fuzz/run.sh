#!/usr/bin/env bash
# Build the libFuzzer targets with clang into build-fuzz and run each one for
# SECONDS (default 60), all targets at once (one core each), with a corpus
# kept under build-fuzz/corpus/<target> between runs. Prints one line per
# target: executions, crashes (crash-/leak-/timeout-/oom- artifacts under
# build-fuzz/artifacts/<target>), corpus size. Exit status 1 when any target
# found something.
#
# Usage: bash fuzz/run.sh [SECONDS]
# Needs clang and its runtime for -fsanitize=fuzzer (Debian: clang and
# libclang-rt-14-dev); .ci/run installs them when missing.
set -euo pipefail
secs=${1:-60}
cd "$(dirname "$0")/.."
root=$PWD
build=build-fuzz
targets=(fuzz_sizes fuzz_api fuzz_inputs)

cmake -S . -B "$build" -DCMAKE_C_COMPILER="${CC_FUZZ:-clang}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMDR_BUILD_FUZZERS=ON -DMDR_ENABLE_CUDA=OFF -DMDR_BUILD_TESTS=OFF -DMDR_BUILD_BENCH=OFF \
  -DMDR_BUILD_EXAMPLES=OFF -DMDR_SANITIZE= >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >/dev/null

pids=()
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t" "$build/artifacts/$t"
  rm -f "$build/artifacts/$t"/*
  "$build/fuzz/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -max_len=4096 -print_final_stats=1 -artifact_prefix="$build/artifacts/$t/" \
    "$build/corpus/$t" >"$build/$t.log" 2>&1 &
  pids+=($!)
done
rc=0
for i in "${!targets[@]}"; do
  t=${targets[$i]}
  wait "${pids[$i]}" || true
  execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$build/$t.log")
  found=$(find "$build/artifacts/$t" -type f | wc -l)
  corpus=$(find "$build/corpus/$t" -type f | wc -l)
  echo "fuzz: $t: ${execs:-?} executions in $secs s, $found crashes, corpus $corpus inputs"
  if [ "$found" -gt 0 ] || [ -z "$execs" ]; then
    rc=1
    grep -E "runtime error|ERROR|SUMMARY|Test unit written" "$build/$t.log" | head -5 | sed 's/^/  /'
  fi
done
exit $rc
