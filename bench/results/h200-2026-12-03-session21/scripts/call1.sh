#!/bin/bash
# Call 1: (a) session 20's call 5: Nsight Compute's gpu__time_duration of the fused kernel for the ids-only step at
# 8 tokens, seed policy, inline and through the ring (MDR_STAGE_INLINE=0), beside mdr-bench's event-timed medians;
# (b) the step inputs' CPU at 4-16 sequences: the large and extra-large image classes in the table form
# (stage_lab variants xltable, largetable) against main, three interleaved runs, pinned to CPU 3.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
d=/tmp/s21c1; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
# (b) first: it is the longer part and the one the next decision needs.
t1=$SECONDS
timeout 330 python3 dev/stage_lab.py $d/lab base xltable largetable --runs 3 --builds 3 --pin 3 -- --strategies graph-fused,graph-fused-inputs --tokens 1,2,4,8,16 --presets glm-5.3-flash-tp2 --policies all --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt
cp $d/lab/stage_lab.txt $d/stage_lab.txt 2>/dev/null
# (a) session 20's call 5, unchanged but for its output folder.
mkdir -p $d/nc && OUT_SAVE=$OUT && OUT=$d/nc timeout 200 bash bench/results/h200-2026-12-03-session20/scripts/call5.sh > $d/call5.out 2>&1
echo "call5 rc $?" >> $d/checks.txt; OUT=$OUT_SAVE
cp $d/stage_lab.txt $d/lab.out $d/checks.txt $d/call5.out $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' --exclude='*.tar.xz' -cJf $OUT/call1.tar.xz s21c1 nc5
tail -60 $d/stage_lab.txt; cat $d/checks.txt $d/call5.out | tail -20
