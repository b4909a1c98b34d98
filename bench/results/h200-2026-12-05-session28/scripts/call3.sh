#!/bin/bash
# Call 3: main (ca2d9c3, its stage code e846b82's: base) against branch stage-lean as it would land
# (.device-prev: `git archive stage-lean`): a kept-in-place input's table
# entry stored to shared memory only when a count falls short (phases, call
# 2: the votes' step costs the device-table step some 210 cycles more than
# the whole-table step), and a piece's word-sized tail stored in words
# rather than bytes. stage_lab validates both with the step-input suites on
# the GPU, then times ids only, the whole table staged and the table kept
# on the device, 1-8 sequences, GLM-5.3, policy all (where the gap is),
# two interleaved runs pinned to CPU 3 (cut to fit the session's device time).
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s28c3; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
pack() { cp $d/checks.txt $d/stage_lab.txt $OUT/ 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call3.tar.xz s28c3); }
t1=$SECONDS
timeout 170 python3 dev/stage_lab.py $d base leanbr=.device-prev --runs 2 --builds 2 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4,8 --presets glm-5.3-flash-tp2 --policies all --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
cat $d/checks.txt
grep -A20 "with inputs over ids only" $d/stage_lab.txt | head -24
