#!/bin/bash
# Call 3: the step inputs' figures and checks on an H200, only if the card
# that came is one: session 34's call4.sh (the lab base imgpair pairword at
# 1-64 sequences, both policies, then session 33's call2.sh's checks).
# On any other card it stops at once, so that a second H100 run of calls
# 1-2 costs the session no more than the machine's start.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
nvidia-smi -L | tee $OUT/card.txt
if ! grep -q H200 $OUT/card.txt; then echo "not an H200: nothing run"; exit 0; fi
LAB_VARIANTS=${LAB_VARIANTS:-base} CALL_LIMIT=${CALL_LIMIT:-540} bash bench/results/h200-2026-12-06-session34/scripts/call4.sh
