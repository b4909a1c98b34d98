#!/bin/bash
# Call 1: main (e846b82, base) against two ways to take the larger image
# classes' table-entry wait off the stage block's critical path: ownlate
# (stage_lab's patch: the entry's test after the image's loads are issued)
# and branch stage-preload as it would land (.device-prev: `git archive
# stage-preload`, 4611203: ownlate plus the inline kernels' first image
# vector and table entry loaded ahead of every branch), with span (stage_lab's
# diagnostic: each block of a staged launch stamps its start and end) beside
# them, for where the stage block ends if neither closes the gap. stage_lab validates
# each with the step-input suites on the GPU (the first GPU run of the two
# CUDA cases written without one), then times ids only, the whole table
# staged and the table kept on the device, 1-64 sequences, GLM-5.3, both
# policies, three interleaved runs pinned to CPU 3; then memcheck of
# stage_inline and step_inputs on base's build, and of those and graph_cache
# on the branch's.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s28c1; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
pack() { cp $d/checks.txt $d/stage_lab.txt $OUT/ 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call1.tar.xz s28c1); }
t1=$SECONDS
timeout 450 python3 dev/stage_lab.py $d base ownlate preloadbr=.device-prev span --runs 3 --builds 2 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4,8,16,32,64 --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
cs="compute-sanitizer --error-exitcode 1 --tool memcheck --report-api-errors no"
for vs in base:stage_inline base:step_inputs preloadbr:stage_inline preloadbr:step_inputs preloadbr:graph_cache; do
  v=${vs%:*}; s=${vs#*:}
  t1=$SECONDS
  timeout 40 $cs $d/$v/build/tests/test_$s --jobs 1 > $d/memcheck-$v-$s.log 2>&1
  echo "memcheck $s $v rc $? $((SECONDS - t1)) s: $(grep -h 'Synthesis' $d/memcheck-$v-$s.log | tr -s ' ') $(grep -h 'ERROR SUMMARY' $d/memcheck-$v-$s.log)" >> $d/checks.txt
done
pack
cat $d/checks.txt
grep -A60 "with inputs over ids only" $d/stage_lab.txt | head -60
