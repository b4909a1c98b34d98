#!/bin/bash
# Call 5: main (3290358, its stage code 85de580's), the figures of record at 1-64 sequences, beside
# the diagnostic large256 (the large image class at 256 bytes): stage_lab
# validates both with the step-input suites on the GPU, then times ids
# only, the whole table staged and the table kept on the device, GLM-5.3,
# both policies, three interleaved runs pinned to CPU 3.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s25c5; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
t1=$SECONDS
timeout 250 python3 dev/stage_lab.py $d base large256 --runs 3 --builds 2 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4,8,16,32,64 --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt
cp $d/checks.txt $d/stage_lab.txt $OUT/
(cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call5.tar.xz s25c5)
cat $d/checks.txt; grep -A60 "with inputs over ids only" $d/stage_lab.txt | head -40
