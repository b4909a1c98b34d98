#!/usr/bin/env bash
# The main job: build mdr-bench (Release, without the tests) and run it.
# Without a GPU it runs on the host backend, says so, and runs a short sweep
# (about half a minute on 2 cores; --full for the whole one). Every run
# writes a fresh bench-out/<UTC timestamp>/ (bench-out/latest points to it);
# its last lines are the headline: the strategies against eager memsets,
# what was measured, what wins. bench/README.md explains the output.
# Usage: bash scripts/run.sh [mdr-bench options]     (options: --help)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-run -DCMAKE_BUILD_TYPE=Release -DMDR_BUILD_TESTS=OFF >/dev/null
cmake --build build-run -j "$(nproc)" --target mdr-bench >/dev/null
exec ./build-run/bench/mdr-bench "$@"
