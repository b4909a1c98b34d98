#!/bin/bash
# Call 3, from a checkout of main with dev/stage_lab.py's onealloc variant:
# base, inlspec (the stage block compiled for a host-valued inline step's
# flags; call 2) and onealloc (mdr-bench's three input destinations in one
# allocation), timed as call 1 (ids only, the whole table staged, the table
# on the device; 1-64 sequences, GLM-5.3, policy all), four interleaved runs
# pinned to CPU 3, each variant validated first by the step-input suites on
# the GPU. Asks whether the allocations a step with inputs stores to, not
# the stage block's length, make what it pays over ids only at 1-2
# sequences.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s32c3; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
pack() { cp $d/checks.txt $d/stage_lab.txt $OUT/ 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call3.tar.xz s32c3); }
t1=$SECONDS
timeout ${LAB_TIMEOUT:-400} python3 dev/stage_lab.py $d base inlspec onealloc \
  --runs ${LAB_RUNS:-4} --builds 3 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4,8,16,32,64 --presets glm-5.3-flash-tp2 --policies all --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
cat $d/checks.txt
sed -n '/policy all$/,/^$/p' $d/stage_lab.txt | head -30
