#!/bin/bash
# Call 1, with both row policies:
# main beside the build before the compiled stage block (45a8adf, carried
# in .device-prev, made with
#   git archive 45a8adf -- . ':(exclude)bench/results' | tar -x -C .device-prev)
# and the stage_lab candidates imgpair, pairall, wordtail, pairword; ids
# only, the whole table staged, the table on the device; 1-64 sequences,
# GLM-5.3, policies all and seed, three interleaved runs pinned to CPU 3,
# each variant validated first by the step-input suites on the GPU; then
# phases on main at 1, 2 and 4 sequences as time allows (CALL_LIMIT,
# default 560 s). LAB_VARIANTS, LAB_RUNS, LAB_TIMEOUT (default 400 s)
# shorten it; LAB_POLICIES (default all,seed) picks the row policies.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s33c1; rm -rf $d; mkdir -p $d/lab $d/ph; nvidia-smi -L > $d/checks.txt
lim=${CALL_LIMIT:-560}
pack() { cp $d/checks.txt $OUT/ 2>/dev/null; cp $d/lab/stage_lab.txt $OUT/stage_lab.txt 2>/dev/null
         cp $d/ph/stage_lab.txt $OUT/phases_lab.txt 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call1.tar.xz s33c1); }
t1=$SECONDS
timeout ${LAB_TIMEOUT:-400} python3 dev/stage_lab.py $d/lab ${LAB_VARIANTS:-base prev=.device-prev imgpair pairall wordtail pairword} \
  --runs ${LAB_RUNS:-3} --builds 3 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4,8,16,32,64 --presets glm-5.3-flash-tp2 --policies ${LAB_POLICIES:-all,seed} --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
if [ $SECONDS -lt $(( lim - 90 )) ]; then
  t1=$SECONDS
  timeout $(( lim - SECONDS - 10 )) python3 dev/stage_lab.py $d/ph phases --runs 1 --builds 1 -- \
    --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
    --tokens 1,2,4 --presets glm-5.3-flash-tp2 --policies all --cpu-reps 200 --force > $d/ph.out 2>&1
  echo "phases lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
fi
cat $d/checks.txt
sed -n '/policy all$/,/^$/p' $d/lab/stage_lab.txt | head -30
grep -A16 "phases stamps" $d/ph/stage_lab.txt | head -20
