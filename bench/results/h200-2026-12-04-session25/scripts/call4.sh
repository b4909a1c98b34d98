#!/bin/bash
# Call 4: main with inputs kept in place padded after the stage block's last
# barrier (base) against the tree before (.device-prev: `git archive
# 1c907ea`): stage_lab validates both with the step-input suites on the
# GPU, then times ids only, the whole table staged and the table kept on
# the device, 1-32 sequences, GLM-5.3, both policies, three interleaved
# runs pinned to CPU 3; memcheck of test_step_inputs on base's build; then
# device-check's build, the whole GPU ctest and the decode example (host
# ids and device-fed, paged attention against the CPU reference) on main,
# and memcheck of test_graph_cache.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s25c4; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
pack() { cp $d/checks.txt $d/stage_lab.txt $OUT/ 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call4.tar.xz s25c4); }
t1=$SECONDS
timeout 200 python3 dev/stage_lab.py $d base prev=.device-prev --runs 3 --builds 2 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4,8,16,32 --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
cs="compute-sanitizer --error-exitcode 1 --tool memcheck --report-api-errors no"
t1=$SECONDS
timeout 30 $cs $d/base/build/tests/test_step_inputs --jobs 1 > $d/memcheck-step_inputs.log 2>&1
echo "memcheck step_inputs rc $? $((SECONDS - t1)) s: $(grep -h 'Synthesis' $d/memcheck-step_inputs.log | tr -s ' ') $(grep -h 'ERROR SUMMARY' $d/memcheck-step_inputs.log)" >> $d/checks.txt
pack
t1=$SECONDS
STEP_TIMEOUT=240 timeout 290 bash scripts/device-check.sh $d/dc build tests decode > $d/device-check.out 2>&1
echo "device-check rc $? $((SECONDS - t1)) s" >> $d/checks.txt; cat $d/dc/summary.txt >> $d/checks.txt; pack
t1=$SECONDS
timeout 50 $cs build-device/tests/test_graph_cache --jobs 1 > $d/memcheck-graph_cache.log 2>&1
echo "memcheck graph_cache rc $? $((SECONDS - t1)) s: $(grep -h 'Synthesis' $d/memcheck-graph_cache.log | tr -s ' ') $(grep -h 'ERROR SUMMARY' $d/memcheck-graph_cache.log)" >> $d/checks.txt
pack
cat $d/checks.txt
grep -A40 -E "^== glm" $d/stage_lab.txt | head -120
