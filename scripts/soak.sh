#!/usr/bin/env bash
# GPU soak: build tests/soak.c (target mdr_soak) for sm_90 and run
#   1. the soak: STEPS (default 100000) random steps over six graph caches
#      (EXACT/LADDER x fused/memset, DYNAMIC x both implementations) on a
#      qwen3-next-80b arena at M = 512, every 100th step poison-checked byte by
#      byte; a progress line every 10,000 steps;
#   2. short runs under compute-sanitizer: memcheck (with device leak check),
#      initcheck and synccheck.
# Without a GPU, mdr_soak falls back to the host backend (fewer steps) and
# the compute-sanitizer runs are skipped. Logs under OUT; one summary line per
# run at the end; exit 1 if any run failed.
#
# Usage: bash scripts/soak.sh [OUT]      (default OUT: soak-out)
#   env STEPS (soak steps), SAN_STEPS (memcheck steps, default 2000; initcheck
#   and synccheck run half), CHECK_EVERY (default 100), BUILD (default build-soak)
set -uo pipefail
out=${1:-soak-out}
cd "$(dirname "$0")/.."
# Criterion (needed to configure tests/) from .device-deps when not
# installed, and NVLink multicast off for every child, as
# scripts/device-check.sh does.
# shellcheck source=scripts/device-env.sh
. scripts/device-env.sh
mkdir -p "$out"
build=${BUILD:-build-soak}
steps=${STEPS:-100000}
san_steps=${SAN_STEPS:-2000}
every=${CHECK_EVERY:-100}
summary=()
failed=0
run() { # name, command...: run, log, record pass/fail with the soak's last line
  local name=$1; shift
  local t0=$SECONDS
  echo "== $name: $*"
  "$@" 2>&1 | tee "$out/$name.log" | grep --line-buffered -E "^soak: [0-9]+/|wrong|ERROR|error"
  local rc=${PIPESTATUS[0]}
  local last
  last=$(grep -E "^soak: [0-9]+ steps" "$out/$name.log" | tail -1)
  if [ "$rc" -eq 0 ]; then summary+=("PASS $name ($((SECONDS - t0)) s): $last")
  else summary+=("FAIL $name (rc $rc, $((SECONDS - t0)) s): ${last:-no final line}; see $out/$name.log"); failed=1; fi
}

if ! { cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
         -DMDR_BUILD_BENCH=OFF -DMDR_BUILD_EXAMPLES=OFF >"$out/configure.log" 2>&1 &&
       cmake --build "$build" -j "$(nproc)" --target mdr_soak >"$out/build.log" 2>&1; }; then
  echo "FAIL build (see $out/configure.log, $out/build.log)"
  tail -20 "$out/build.log" "$out/configure.log" 2>/dev/null
  exit 1
fi
soak=$build/tests/mdr_soak

run soak "$soak" --steps "$steps" --check-every "$every"
if command -v compute-sanitizer >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  cs=(compute-sanitizer --error-exitcode 1)
  run memcheck "${cs[@]}" --tool memcheck --leak-check full "$soak" --steps "$san_steps" --check-every "$every"
  run initcheck "${cs[@]}" --tool initcheck "$soak" --steps "$((san_steps / 2))" --check-every "$every"
  run synccheck "${cs[@]}" --tool synccheck "$soak" --steps "$((san_steps / 2))" --check-every "$every"
else
  summary+=("SKIP compute-sanitizer (no GPU or no compute-sanitizer)")
fi
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
exit $failed
