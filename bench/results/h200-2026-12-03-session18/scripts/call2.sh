#!/bin/bash
# Call 2: issue 22's route choices side by side on main (base): seedinline (the larger classes inline at seed
# policy too); small16 / small32 (the small class inline only while the zero plan is at most 16 / 32 MiB, trees of
# branch smallrule); ntcopy (a ring slot's larger pieces written with streaming stores, tree of branch ntcopy).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
lscpu | head -20 > $OUT/cpu.txt 2>&1
d=/tmp/sl2; rm -rf $d; mkdir -p $d
t0=$SECONDS
timeout 540 python3 dev/stage_lab.py $d base seedinline small16=.device-variant-small16 small32=.device-variant-small32 ntcopy=.device-variant-ntcopy --runs 2 --builds 3 -- --strategies graph-fused,graph-fused-inputs --tokens 1,2,4,8,16,24,32,64 --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t0)) s" >> $d/lab.out
cp $d/stage_lab.txt $d/lab.out $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call2.tar.xz sl2
tail -64 $d/stage_lab.txt; grep -i "fail\|valid" $d/lab.out | tail -4; tail -1 $d/lab.out
