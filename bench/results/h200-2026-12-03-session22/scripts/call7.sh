#!/bin/bash
# Call 7: device-id steps with host inputs, the two stage changes against main before them (.device-prev, a
# `git archive 6ce5039`): the inline launch copies the device ids ahead of the image (by the block's last
# threads), and a ring launch spreads its slot's read over several stage blocks (block 0 copies the ids).
# stage_lab validates both trees with the step-input suites on the GPU, then times ids only and with positions,
# sequence lengths and a 128-entry block table, host and device ids, 1-64 sequences, GLM-5.3, both policies,
# three interleaved runs pinned to CPU 3; memcheck of the spread and device-id cases on base's build.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
d=/tmp/s22c7; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
t1=$SECONDS
timeout 470 python3 dev/stage_lab.py $d base prev=.device-prev --runs 3 --builds 2 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-dev,graph-fused-dev-inputs --tokens 1,2,4,8,16,32,64 \
  --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt
t1=$SECONDS
timeout 60 compute-sanitizer --error-exitcode 1 --tool memcheck --report-api-errors no $d/base/build/tests/test_stage_inline \
  --jobs 1 --filter 'stage_inline/@(device_id*|a_large_slot_spread*)' > $d/memcheck-stage_inline.log 2>&1
echo "memcheck stage_inline rc $? $((SECONDS - t1)) s" >> $d/checks.txt
cp $d/stage_lab.txt $d/lab.out $d/checks.txt $d/memcheck-stage_inline.log $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call7.tar.xz s22c7
tail -60 $d/stage_lab.txt; cat $d/checks.txt; grep "ERROR SUMMARY\|Synthesis" $d/memcheck-stage_inline.log
