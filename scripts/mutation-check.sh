#!/usr/bin/env bash
# The all-reduce protocol's mutation check: plant the old stale-flag barrier
# (barrier values derived from a call counter that other paths advance:
# 2E+1 and 2E+2) in a scratch copy of the tree, build the host-only suite
# of the protocol, and require that it FAILS. A pass means the suite can no
# longer see the bug it was written for.
# Usage: bash scripts/mutation-check.sh [scratch-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=${1:-$(mktemp -d /tmp/mdr-mutation.XXXXXX)}
mkdir -p "$scratch"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$scratch"
hdr="$scratch/kernels/ar_protocol.h"
good='{ return st->barriers + k; }'
bad='{ return 2u * st->calls + k; }'
grep -qF "$good" "$hdr" || { echo "mutation-check: the barrier value in kernels/ar_protocol.h changed; update this script"; exit 1; }
sed -i "s/{ return st->barriers + k; }/{ return 2u * st->calls + k; }/" "$hdr"
grep -qF "$bad" "$hdr" || { echo "mutation-check: the mutation was not planted"; exit 1; }
echo "== mutation-check: planted the stale-flag barrier in $hdr"
cmake -S "$scratch" -B "$scratch/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMDR_ENABLE_CUDA=OFF \
  -DMDR_BUILD_BENCH=OFF -DMDR_BUILD_EXAMPLES=OFF -DMDR_BUILD_DEV=OFF -DMDR_REQUIRE_TESTS=ON >/dev/null
cmake --build "$scratch/build" -j "$(nproc)" --target test_ar_protocol >/dev/null
if MDR_AR_TWIN_CALLS=200 "$scratch/build/tests/test_ar_protocol" --jobs 1 >"$scratch/mutant.log" 2>&1; then
  echo "mutation-check: FAILED: the suite passes with the stale-flag barrier planted ($scratch/mutant.log)"
  exit 1
fi
grep -E "^\[FAIL\]" "$scratch/mutant.log" | sed 's/^/mutation-check: caught: /'
echo "mutation-check: ok (the planted bug fails the suite)"
[ -n "${1:-}" ] || rm -rf "$scratch"
