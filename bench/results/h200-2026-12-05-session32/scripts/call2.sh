#!/bin/bash
# Call 2, from a checkout of main with dev/stage_lab.py's inlspec variant:
# the stage block of a host-valued inline step (FETCH | INLINE) compiled
# for those flags, its ring, device-id and spread branches pruned. Asks
# whether the code path's branches (instruction fetches of code block 0 has
# not run in the launch) are what steps with inputs pay over ids only at
# 1-2 sequences under policy all.
#   1. base and inlspec timed as call 1 (ids only, the whole table staged,
#      the table on the device; 1-64 sequences, GLM-5.3, policy all, three
#      interleaved runs pinned to CPU 3), each validated first by the
#      step-input suites on the GPU;
#   2. phases and inlspecph (the stage block's SM clock stamps, one run,
#      1, 2 and 4 sequences): where each block's image is stored and ends;
#   3. memcheck of stage_inline, step_inputs and graph_cache on inlspec's
#      build, as the call's time allows.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s32c2; rm -rf $d; mkdir -p $d/lab $d/ph; nvidia-smi -L > $d/checks.txt
pack() { cp $d/checks.txt $OUT/ 2>/dev/null; cp $d/lab/stage_lab.txt $OUT/stage_lab.txt 2>/dev/null
         cp $d/ph/stage_lab.txt $OUT/phases_lab.txt 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call2.tar.xz s32c2); }
t1=$SECONDS
timeout ${LAB_TIMEOUT:-280} python3 dev/stage_lab.py $d/lab base inlspec \
  --runs ${LAB_RUNS:-3} --builds 2 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4,8,16,32,64 --presets glm-5.3-flash-tp2 --policies all --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
t1=$SECONDS
timeout ${PH_TIMEOUT:-170} python3 dev/stage_lab.py $d/ph phases inlspecph --runs 1 --builds 2 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4 --presets glm-5.3-flash-tp2 --policies all --cpu-reps 200 --force > $d/ph.out 2>&1
echo "phases lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
cs="compute-sanitizer --error-exitcode 1 --tool memcheck --report-api-errors no"
for s in stage_inline step_inputs graph_cache; do  # as long as the call's time allows
  [ $SECONDS -lt $(( ${CALL_LIMIT:-590} - 45 )) ] || { echo "memcheck $s skipped: no time left" >> $d/checks.txt; continue; }
  t1=$SECONDS
  timeout 40 $cs $d/lab/inlspec/build/tests/test_$s --jobs 1 > $d/memcheck-$s.log 2>&1
  echo "memcheck $s inlspec rc $? $((SECONDS - t1)) s: $(grep -h 'Synthesis' $d/memcheck-$s.log | tr -s ' ') $(grep -h 'ERROR SUMMARY' $d/memcheck-$s.log)" >> $d/checks.txt
done
pack
cat $d/checks.txt
sed -n '/policy all$/,/^$/p' $d/lab/stage_lab.txt | head -30
grep -A20 "phases stamps" $d/ph/stage_lab.txt | head -30
