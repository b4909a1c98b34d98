#!/bin/bash
# Call 3, the short form of session 33's call 1 for what device time is
# left: main beside the stage_lab candidates imgpair and pairword, ids
# only, the whole table staged, the table on the device; 1-8 sequences,
# GLM-5.3, policy all, two interleaved runs pinned to CPU 3, each variant
# validated first by the step-input suites on the GPU. CALL_LIMIT (default
# 240 s) bounds it; LAB_VARIANTS and LAB_POLICIES change what it times.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s34c3; rm -rf $d; mkdir -p $d/lab; nvidia-smi -L > $d/checks.txt
lim=${CALL_LIMIT:-240}
pack() { cp $d/checks.txt $OUT/ 2>/dev/null; cp $d/lab/stage_lab.txt $OUT/stage_lab.txt 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call3.tar.xz s34c3); }
t1=$SECONDS
timeout $(( lim - 10 )) python3 dev/stage_lab.py $d/lab ${LAB_VARIANTS:-base imgpair pairword} \
  --runs 2 --builds 2 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4,8 --presets glm-5.3-flash-tp2 --policies ${LAB_POLICIES:-all} --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
cat $d/checks.txt
sed -n '/policy all$/,/^$/p' $d/lab/stage_lab.txt | head -30
tail -5 $d/lab.out
