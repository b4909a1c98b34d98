#!/usr/bin/env bash
# The main job: build mdr-bench (Release, without the tests) and run it.
# With a GPU (nvidia-smi lists one) it builds the CUDA backend in build-run/
# and times on the GPU. Without one it builds the host backend alone in
# build-run-host/ (the CUDA kernels would not run anyway), runs on the host
# backend, says so, and runs a short sweep with the strategies interleaved
# in rounds (--full for the whole one): on 2 cores about 30 s warm, build
# included. Every run writes a fresh bench-out/<UTC timestamp>/
# (bench-out/latest points to it); its last lines are the headline: the
# strategies against eager memsets, what was measured, what wins (a winner
# only beyond the spread between rounds). bench/README.md explains the output.
# Usage: bash scripts/run.sh [mdr-bench options]     (options: --help)
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  build=build-run
  cuda=ON
else
  build=build-run-host
  cuda=OFF
  echo "run.sh: no GPU found (nvidia-smi lists none): building the host backend only, in $build/" >&2
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMDR_BUILD_TESTS=OFF -DMDR_ENABLE_CUDA="$cuda" >/dev/null
cmake --build "$build" -j "$(nproc)" --target mdr-bench >/dev/null
exec "./$build/bench/mdr-bench" "$@"
