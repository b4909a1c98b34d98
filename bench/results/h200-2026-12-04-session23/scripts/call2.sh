#!/bin/bash
# Call 2: the inline stage block reads through the launch's parameter itself
# (ld.param) where one address a warp serves: a small-class ids-only image
# (1-24 ids) and a device-id step's header count. stage_lab validates this
# tree and main before it (.device-prev: `git archive e558f67`) with the
# step-input suites on the GPU, then times host-id and device-id steps with
# and without inputs, 1-32 sequences, GLM-5.3, both policies, three
# interleaved runs pinned to CPU 3; then memcheck of test_stage_inline on
# this tree's build.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
d=/tmp/s23c2; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
t1=$SECONDS
timeout 420 python3 dev/stage_lab.py $d base prev=.device-prev --runs 3 --builds 2 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-dev,graph-fused-dev-inputs --tokens 1,2,4,8,16,24,32 \
  --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt
t1=$SECONDS
timeout 120 compute-sanitizer --error-exitcode 1 --tool memcheck --report-api-errors no $d/base/build/tests/test_stage_inline \
  --jobs 1 > $d/memcheck-stage_inline.log 2>&1
echo "memcheck stage_inline rc $? $((SECONDS - t1)) s" >> $d/checks.txt
cp $d/stage_lab.txt $d/lab.out $d/checks.txt $d/memcheck-stage_inline.log $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call2.tar.xz s23c2
tail -70 $d/stage_lab.txt; cat $d/checks.txt; grep "ERROR SUMMARY\|Synthesis" $d/memcheck-stage_inline.log
