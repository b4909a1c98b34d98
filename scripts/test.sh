#!/usr/bin/env bash
# Build mdr and run every test suite (GPU cases skip themselves without a
# device). Installs Criterion through apt-get when it is missing.
# Then the Rust crates (rust/test.sh) when cargo is on PATH.
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
(cd "$build" && ctest --output-on-failure --no-tests=error -j "$(nproc)")
# The Python suite (python/tests) on this build's libmdr (not under
# MDR_SANITIZE; MDR_SKIP_PYTHON=1 leaves it to .ci/run's own stage).
if [ -n "${MDR_SANITIZE:-}" ] || [ "${MDR_SKIP_PYTHON:-0}" = 1 ]; then echo "== python: skipped here"
else bash python/test.sh "$build"; fi
# The Rust crates (rust/test.sh), against this build's libmdr, when cargo is
# here (not under MDR_SANITIZE; MDR_SKIP_RUST=1 leaves them to .ci/run's stage).
if [ -n "${MDR_SANITIZE:-}" ] || [ "${MDR_SKIP_RUST:-0}" = 1 ]; then echo "== rust: skipped here"
elif command -v cargo >/dev/null; then MDR_DIR="$(cd "$build" && pwd)" bash rust/test.sh
else echo "== rust: skipped (no cargo on PATH)"; fi
