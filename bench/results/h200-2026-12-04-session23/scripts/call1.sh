#!/bin/bash
# Call 1: dev/param_load_probe (what the inline stage block pays to read its
# image from the kernel's parameters, beside device memory; the launch cost
# of each image class's parameter block), then stage_lab's `idswarp`
# against main (the earlier folder's call11.sh: GLM-5.3, 1-16 sequences,
# both policies, host-id and device-id steps with and without inputs, three
# interleaved runs pinned to CPU 3).
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
d=/tmp/s23c1; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
nvcc -O3 -arch=sm_90 -std=c++17 -Idev -o $d/param_load_probe dev/param_load_probe.cu >> $d/checks.txt 2>&1
timeout 120 $d/param_load_probe --reps 200 --csv $d/param_load.csv > $d/param_load.txt 2>&1
echo "probe rc $?" >> $d/checks.txt
cp $d/param_load.txt $d/param_load.csv $OUT/ 2>/dev/null
cat $d/param_load.txt
t1=$SECONDS
timeout 420 python3 dev/stage_lab.py $d/lab base idswarp --runs 3 --builds 2 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-dev,graph-fused-dev-inputs --tokens 1,2,4,8,16 \
  --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt
cp $d/lab/stage_lab.txt $d/lab.out $d/checks.txt $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call1.tar.xz s23c1/lab
tail -60 $d/lab/stage_lab.txt; cat $d/checks.txt
