#!/bin/bash
# Call 3: stage_lab's padneed (inputs kept in place skip the device-input
# pass and its barrier in an inline step whose real counts equal its copy
# counts: no pad rows to write) against main (base), after inplacepad took
# the device-table step 1.13-1.19x slower at 1-8 sequences under policy
# all (call 2): ids only, the whole table staged, the table kept on the
# device, 1-32 sequences, GLM-5.3, both policies, three interleaved runs
# pinned to CPU 3; memcheck of test_step_inputs on padneed's build.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s25c3; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
pack() { cp $d/checks.txt $d/stage_lab.txt $d/memcheck-*.log $OUT/ 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call3.tar.xz s25c3); }
t1=$SECONDS
timeout 400 python3 dev/stage_lab.py $d base padneed --runs 3 --builds 2 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4,8,16,32 --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
t1=$SECONDS
timeout 80 compute-sanitizer --error-exitcode 1 --tool memcheck --report-api-errors no \
  $d/padneed/build/tests/test_step_inputs --jobs 1 > $d/memcheck-step_inputs-padneed.log 2>&1
echo "memcheck step_inputs padneed rc $? $((SECONDS - t1)) s: $(grep -h 'Synthesis' $d/memcheck-step_inputs-padneed.log | tr -s ' ') $(grep -h 'ERROR SUMMARY' $d/memcheck-step_inputs-padneed.log)" >> $d/checks.txt
pack
cat $d/checks.txt
grep -A80 -E "^(GPU|step inputs|compare)" $d/stage_lab.txt | head -150
