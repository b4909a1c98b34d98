#!/bin/bash
# Call 4: everything the step inputs still owe an H200 (figures and checks), in one machine start.
# First the lab: main beside the stage_lab candidates imgpair and pairword
# (ids only, the whole table staged, the table on the device; 1-64
# sequences, GLM-5.3, policies all and seed, two interleaved runs pinned to
# CPU 3, each variant validated first by its step-input suites on the
# GPU). Then session 33's call 2 on main, with what time is left: the
# whole tree built for sm_90, every suite, the decode example with host ids
# and device-fed, compute-sanitizer on the staging and graph-cache suites.
# CALL_LIMIT (default 560 s) bounds it; LAB_TIMEOUT (default 300 s) bounds
# the lab; LAB_VARIANTS, LAB_RUNS and LAB_POLICIES change what it times.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s34c4; rm -rf $d; mkdir -p $d/lab $d/c2; nvidia-smi -L > $d/checks.txt
lim=${CALL_LIMIT:-560}
# Three files come back (a call returns at most 8): the lab's table, the
# checks, and an archive of every log, call 2's included.
pack() { cp $d/checks.txt $OUT/ 2>/dev/null; cp $d/lab/stage_lab.txt $OUT/stage_lab.txt 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call4.tar.xz s34c4); }
t1=$SECONDS
timeout ${LAB_TIMEOUT:-300} python3 dev/stage_lab.py $d/lab ${LAB_VARIANTS:-base imgpair pairword} \
  --runs ${LAB_RUNS:-2} --builds 3 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4,8,16,32,64 --presets glm-5.3-flash-tp2 --policies ${LAB_POLICIES:-all,seed} --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
OUT=$d/c2 CALL_LIMIT=$(( lim - SECONDS )) bash bench/results/h200-2026-12-06-session33/scripts/call2.sh > $d/c2.out 2>&1
echo "call 2 rc $?" >> $d/checks.txt; cat /tmp/s33c2/checks.txt >> $d/checks.txt; pack
cat $d/checks.txt
sed -n '/policy all$/,/^$/p' $d/lab/stage_lab.txt | head -30
grep -E "Skipped|Failed|\*\*\*" $d/c2/ctest.log | head -20
