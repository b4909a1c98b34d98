#!/bin/bash
# Call 10: where an inline device-id step with inputs spends its time. stage_lab's `span` variant (every block of
# the staged and inline zeroing kernels stamps its start and end; one launch in 64 prints the stage block against
# the zeroing blocks, dev=1 for device ids), built, validated by the step-input suites, then timed once: GLM-5.3
# under MDR_ROWS_ALL, 1-8 sequences, host-id and device-id steps with positions, sequence lengths and a 128-entry
# block table, and the ids-only device step.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
d=/tmp/s22c10; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
t1=$SECONDS
timeout 190 python3 dev/stage_lab.py $d span --runs 1 -- --strategies graph-fused,graph-fused-inputs,graph-fused-dev,graph-fused-dev-inputs \
  --tokens 1,2,4,8 --presets glm-5.3-flash-tp2 --policies all --reps 640 --cpu-reps 200 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt
cp $d/stage_lab.txt $d/lab.out $d/checks.txt $d/span/ctest.log $OUT/ 2>/dev/null
grep -h "^span " $d/span/bench-*.log > $OUT/span-lines.txt 2>/dev/null
cat $d/checks.txt; tail -30 $d/stage_lab.txt
