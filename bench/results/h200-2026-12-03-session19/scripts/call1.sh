#!/bin/bash
# Call 1: main (base) beside inlack (inline launches also write the ack word, as a ring step does: what that
# host-memory write costs at seed policy) and drvupdate (the inline node update through the driver's entry point:
# what the runtime's per-call lookup costs the host); then, for #26, hf_decode at batch 1 with torch's second
# capture (b2) taken before (b).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
d=/tmp/sl1; rm -rf $d; mkdir -p $d
t0=$SECONDS
timeout 400 python3 dev/stage_lab.py $d base drvupdate inlack --runs 3 --builds 3 -- --strategies graph-fused,graph-fused-inputs --tokens 1,2,4,8,16,24,32,64 --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t0)) s" >> $d/lab.out
cp $d/stage_lab.txt $d/lab.out $OUT/ 2>/dev/null
# #26: is torch's fast batch-1 capture the process's first torch capture, or (b) itself?
b=$d/base/build
t1=$SECONDS
( export PYTHONPATH=$PWD/python MDR_LIBRARY=$b/libmdr.so
  timeout $((590 - SECONDS)) python3 examples/python/hf_decode.py --model 0.6b --batch 1 --steps 128 --reps 3 --sdpa math \
    --no-generate --no-compile --no-ref-timing --time b,b2,d --first b2 --json $OUT/hf_first_b2_b1.json ) > $d/hf.log 2>&1
echo "hf rc $? $((SECONDS - t1)) s" >> $d/hf.log
cp $d/hf.log $OUT/
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call1.tar.xz sl1
tail -70 $d/stage_lab.txt; grep -i "fail\|valid" $d/lab.out | tail -4; tail -1 $d/lab.out; tail -25 $d/hf.log
