#!/usr/bin/env bash
# Build mdr and run every test suite (GPU cases skip themselves without a
# device). Installs Criterion through apt-get when it is missing.
# Usage: bash scripts/test.sh [build-dir]   (env MDR_SANITIZE=address,undefined to sanitize)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
if ! pkg-config --exists criterion 2>/dev/null; then
  echo "== installing libcriterion-dev"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get install -y libcriterion-dev >/dev/null 2>&1 ||
    { $sudo_cmd apt-get update -qq && $sudo_cmd apt-get install -y libcriterion-dev >/dev/null; }
fi
# MDR_REQUIRE_TESTS: a missing Criterion fails the configure instead of
# leaving the suites out (ctest --no-tests=error alone would still pass on the
# few tests that need no Criterion).
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMDR_REQUIRE_TESTS=ON \
  -DMDR_SANITIZE="${MDR_SANITIZE:-}" >/dev/null
cmake --build "$build" -j "$(nproc)"
if [ -z "${MDR_SANITIZE:-}" ]; then bash python/test.sh "$build"; fi # Python suite (python/tests)
cd "$build" && ctest --output-on-failure --no-tests=error -j "$(nproc)"
