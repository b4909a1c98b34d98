#!/usr/bin/env bash
# The main job: build mdr (without the tests) and run the benchmark. Without
# a GPU it runs on the host backend and says so on its first line.
# Usage: bash scripts/run.sh [mdr-bench options]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-run -DCMAKE_BUILD_TYPE=Release -DMDR_BUILD_TESTS=OFF >/dev/null
cmake --build build-run -j "$(nproc)" >/dev/null
exec ./build-run/bench/mdr-bench "$@"
