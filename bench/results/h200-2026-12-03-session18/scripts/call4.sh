#!/bin/bash
# Call 4: main (base) beside inlack (a diagnostic: inline launches also write the ack word to host memory, as a
# ring step does) and huge32 (branch huge's fifth inline class with LARGE_INLINE_ZERO_MAX at 32 MiB, so that steps
# with inputs at 17-32 sequences go inline under policy all).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
d=/tmp/sl4; rm -rf $d; mkdir -p $d
t0=$SECONDS
timeout 540 python3 dev/stage_lab.py $d base inlack huge32=.device-variant-huge32 --runs 2 --builds 3 -- --strategies graph-fused,graph-fused-inputs --tokens 1,2,4,8,16,24,32,64 --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t0)) s" >> $d/lab.out
cp $d/stage_lab.txt $d/lab.out $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call4.tar.xz sl4
tail -64 $d/stage_lab.txt; grep -i "fail\|valid" $d/lab.out | tail -4; tail -1 $d/lab.out
