#!/bin/bash
# Call 4, from a checkout of main with dev/stage_lab.py's imgspread variant
# (inlspec, and an inline image's vectors dealt over the stage block's warps:
# vector j to lane j / 8 of warp j % 8):
#   1. base, inlspec and imgspread timed as call 3 (four interleaved runs,
#      policy all, 1-64 sequences), each validated first by the step-input
#      suites on the GPU;
#   2. imgspreadph (its stage block's SM clock stamps, one run, 1, 2 and 4
#      sequences), beside call 2's inlspecph and phases.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s32c4; rm -rf $d; mkdir -p $d/lab $d/ph; nvidia-smi -L > $d/checks.txt
pack() { cp $d/checks.txt $OUT/ 2>/dev/null; cp $d/lab/stage_lab.txt $OUT/stage_lab.txt 2>/dev/null
         cp $d/ph/stage_lab.txt $OUT/phases_lab.txt 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call4.tar.xz s32c4); }
t1=$SECONDS
timeout ${LAB_TIMEOUT:-260} python3 dev/stage_lab.py $d/lab base inlspec imgspread \
  --runs ${LAB_RUNS:-4} --builds 3 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4,8,16,32,64 --presets glm-5.3-flash-tp2 --policies all --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
t1=$SECONDS
timeout ${PH_TIMEOUT:-110} python3 dev/stage_lab.py $d/ph imgspreadph --runs 1 --builds 1 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4 --presets glm-5.3-flash-tp2 --policies all --cpu-reps 200 --force > $d/ph.out 2>&1
echo "phases lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
cat $d/checks.txt
sed -n '/policy all$/,/^$/p' $d/lab/stage_lab.txt | head -30
grep -A16 "phases stamps" $d/ph/stage_lab.txt | head -20
