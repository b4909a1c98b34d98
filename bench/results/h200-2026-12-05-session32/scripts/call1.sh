#!/bin/bash
# Call 1, run from a checkout of main (no branch beside it: the branches
# stage-direct and stage-direct-fast did not reach this checkout). Asks the
# question those branches left before their own: does the larger image
# class's launch itself cost what steps with inputs pay over ids only at
# 1-2 sequences under policy all?
#   base          main
#   idslarge      ids-only inline steps in the large image class
#   idspad        ids-only steps in the small class, parameters padded to
#                 the large class's 6400 bytes (the block's size alone)
#   largelist256  the large class in the list form with a 256-chunk list
#                 (4096 bytes of parameters, under the small class's 4592)
# stage_lab validates each with the step-input suites on the GPU, then
# times ids only, the whole table staged and the table kept on the device,
# 1-64 sequences, GLM-5.3, policy all, three interleaved runs pinned to CPU
# 3; then memcheck of stage_inline, step_inputs and graph_cache on base's
# build, as the call's time allows. LAB_VARIANTS, LAB_RUNS, LAB_TIMEOUT
# (default 500 s) and CALL_LIMIT (600 s) shorten it where less time is left.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s32c1; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
pack() { cp $d/checks.txt $d/stage_lab.txt $OUT/ 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call1.tar.xz s32c1); }
t1=$SECONDS
timeout ${LAB_TIMEOUT:-500} python3 dev/stage_lab.py $d ${LAB_VARIANTS:-base idslarge idspad largelist256} \
  --runs ${LAB_RUNS:-3} --builds 3 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4,8,16,32,64 --presets glm-5.3-flash-tp2 --policies all --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
cs="compute-sanitizer --error-exitcode 1 --tool memcheck --report-api-errors no"
for s in stage_inline step_inputs graph_cache; do  # as long as the call's time allows
  [ $SECONDS -lt $(( ${CALL_LIMIT:-600} - 55 )) ] || { echo "memcheck $s skipped: no time left" >> $d/checks.txt; continue; }
  t1=$SECONDS
  timeout 40 $cs $d/base/build/tests/test_$s --jobs 1 > $d/memcheck-$s.log 2>&1
  echo "memcheck $s base rc $? $((SECONDS - t1)) s: $(grep -h 'Synthesis' $d/memcheck-$s.log | tr -s ' ') $(grep -h 'ERROR SUMMARY' $d/memcheck-$s.log)" >> $d/checks.txt
done
pack
cat $d/checks.txt
sed -n '/policy all$/,/^$/p' $d/stage_lab.txt | head -30
