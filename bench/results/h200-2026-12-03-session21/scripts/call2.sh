#!/bin/bash
# Call 2: the transport trade-off for steps with inputs, side by side: main as it is (small steps inline, in the
# launch's parameters) against the same build with every step through the staging ring (stage_lab's `ring`
# switch, MDR_STAGE_INLINE=0), ids only and with positions, sequence lengths and a 128-entry block table,
# 1-64 sequences, both policies, three interleaved runs pinned to CPU 3.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
d=/tmp/s21c2; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
t1=$SECONDS
timeout 560 python3 dev/stage_lab.py $d base ring --runs 3 --builds 2 --pin 3 -- --strategies graph-fused,graph-fused-inputs --tokens 1,2,4,8,16,32,64 --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt
cp $d/stage_lab.txt $d/lab.out $d/checks.txt $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call2.tar.xz s21c2
tail -45 $d/stage_lab.txt; cat $d/checks.txt
