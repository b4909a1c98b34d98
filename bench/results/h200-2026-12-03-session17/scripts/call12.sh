#!/bin/bash
# Session 17 call 12: main (e3c1b91) against the build before this session's staging work (796260d, archived into
# .device-variant-prev): issue 22's step-input figures at 1-256 tokens, both row policies, two runs each.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
d=/tmp/sl12; rm -rf $d; mkdir -p $d
t0=$SECONDS
timeout 450 python3 dev/stage_lab.py $d base prev=.device-variant-prev --runs 2 --builds 2 -- --strategies graph-fused,graph-fused-inputs --tokens 1,2,4,8,16,32,64,256 --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t0)) s" >> $d/lab.out
cp $d/stage_lab.txt $d/lab.out $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call12.tar.xz sl12
tail -42 $d/stage_lab.txt; tail -1 $d/lab.out
