#!/bin/bash
# Call 1: issue 22's open figures taken apart in one lab run on main (d9aa425): base; seedinline (the larger
# image classes inline at seed policy too); ring (MDR_STAGE_INLINE=0: ids-only steps through the ring as well);
# onestage (MDR_STAGE_SPREAD=0). The bench now gives the copy floor beside +CPU.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt 2>&1
d=/tmp/sl1; rm -rf $d; mkdir -p $d
t0=$SECONDS
timeout 500 python3 dev/stage_lab.py $d base seedinline ring onestage --runs 2 --builds 2 -- --strategies graph-fused,graph-fused-inputs --tokens 1,2,4,8,16,32,64 --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t0)) s" >> $d/lab.out
cp $d/stage_lab.txt $d/lab.out $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call1.tar.xz sl1
tail -60 $d/stage_lab.txt; tail -3 $d/lab.out
