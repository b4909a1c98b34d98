#!/bin/bash
# Call 11 (written, not run: the session's device time ran out): stage_lab's `idswarp` candidate (an inline
# device-id step's last warp, which copies the ids, takes no part in the image's copy) against main, GLM-5.3,
# 1-16 sequences, both policies, host-id and device-id steps with and without inputs, three interleaved runs
# pinned to CPU 3.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
d=/tmp/c11; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
t1=$SECONDS
timeout 470 python3 dev/stage_lab.py $d base idswarp --runs 3 --builds 2 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-dev,graph-fused-dev-inputs --tokens 1,2,4,8,16 \
  --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt
cp $d/stage_lab.txt $d/lab.out $d/checks.txt $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call11.tar.xz c11
tail -60 $d/stage_lab.txt; cat $d/checks.txt
