#!/usr/bin/env bash
# The Python package's suite (python/tests) with the system python3
# (/usr/bin/python3, not the first python3 on PATH) and Debian's numpy and
# pytest, installed with apt-get when missing. Runs from the source tree
# (PYTHONPATH=python): no pip needed. The library: $MDR_LIBRARY, else
# <build-dir>/libmdr.so, built (target mdr only) when missing. GPU cases
# (test_gpu_torch.py) skip themselves without torch and a GPU.
# Usage: bash python/test.sh [build-dir] [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
build=${1:-build}
[ $# -gt 0 ] && shift
if ! "$PY" -c "import numpy, pytest" 2>/dev/null; then
  echo "== installing python3-numpy python3-pytest"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get install -y python3-numpy python3-pytest >/dev/null 2>&1 ||
    { $sudo_cmd apt-get update -qq && $sudo_cmd apt-get install -y python3-numpy python3-pytest >/dev/null; }
fi
if [ -z "${MDR_LIBRARY:-}" ]; then
  if [ ! -e "$build/libmdr.so" ]; then
    echo "== building libmdr in $build"
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$build" --target mdr -j "$(nproc)" >/dev/null
  fi
  MDR_LIBRARY=$(cd "$build" && pwd)/libmdr.so
  export MDR_LIBRARY
fi
echo "== python suite: $("$PY" --version), library $MDR_LIBRARY"
PYTHONPATH=python${PYTHONPATH:+:$PYTHONPATH} "$PY" -m pytest -q -p no:cacheprovider python/tests "$@"
