#!/bin/bash
# Call 2: branch stage-direct at ae687c4 (base: inline images of the larger classes
# copied by direct words, MDR_STAGE_DIRECT) against main before it (prev:
# e045b39, .device-prev from `git archive e045b39`), with phasesimg (stage
# block clock stamps, on stage-direct) beside them. stage_lab validates
# each with the step-input suites on the GPU, then times ids only, the
# whole table staged and the table kept on the device, 1-64 sequences,
# GLM-5.3, both policies, three interleaved runs pinned to CPU 3; then
# memcheck of stage_inline, step_inputs and graph_cache on base's build.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s29c2; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
pack() { cp $d/checks.txt $d/stage_lab.txt $OUT/ 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call2.tar.xz s29c2); }
t1=$SECONDS
timeout 420 python3 dev/stage_lab.py $d base prev=.device-prev phasesimg --runs 3 --builds 2 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4,8,16,32,64 --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
cs="compute-sanitizer --error-exitcode 1 --tool memcheck --report-api-errors no"
for s in stage_inline step_inputs graph_cache; do
  t1=$SECONDS
  timeout 40 $cs $d/base/build/tests/test_$s --jobs 1 > $d/memcheck-$s.log 2>&1
  echo "memcheck $s base rc $? $((SECONDS - t1)) s: $(grep -h 'Synthesis' $d/memcheck-$s.log | tr -s ' ') $(grep -h 'ERROR SUMMARY' $d/memcheck-$s.log)" >> $d/checks.txt
done
pack
cat $d/checks.txt
grep -A60 "with inputs over ids only" $d/stage_lab.txt | head -60
grep -B2 -A30 "phases stamps" $d/stage_lab.txt | head -50
