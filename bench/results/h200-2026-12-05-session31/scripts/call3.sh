#!/bin/bash
# Call 3 (written in the session before; run here as it was, with the
# lab's time bound LAB_TIMEOUT, default 520 s, and the call's CALL_LIMIT,
# default 600 s; LAB_VARIANTS and LAB_RUNS where the time left asks for a
# shorter lab), run from a checkout of
# branch stage-direct-fast with two archived trees beside it
# (without bench/results: 3.5 MiB each where they would be 18, within what
# a call carries):
#   git archive main -- . ':(exclude)bench/results' | tar -x -C .device-prev
#   git archive stage-direct -- . ':(exclude)bench/results' | tar -x -C .device-step2
# carried with .device-deps. Trees:
#   base  stage-direct-fast: the larger classes' inline images copied by
#         direct words, no input-table entry read before the copy (the
#         device inputs' work told by MDR_STAGE_DIRECT_COPY/_PAD), and a
#         launch with no device-to-device input on a straight path first in
#         the stage block's code (mdr_stage_inline_direct), not through the
#         general block's far branches;
#   step2 stage-direct: the same without the straight path;
#   prev  main.
# Beside them, patched from base: phasesimg (the stage block's clock stamps;
# tab=1 a larger class's general block, tab=2 its straight path), idslarge
# (ids-only steps in the large image class: does the class's launch cost
# what steps with inputs pay over ids only at 1-2 sequences?) and idspad
# (the small class's parameters padded to the large class's 6400 bytes: the
# block's size alone). stage_lab validates each with the step-input suites on
# the GPU, then times ids only, the whole table staged and the table kept on
# the device, 1-64 sequences, GLM-5.3, policy all (where the gap is; at seed
# policy these steps take the ring or the small class, which the change does
# not touch), three interleaved runs pinned to CPU 3; then memcheck of
# stage_inline, step_inputs and graph_cache on base's build, as the call's
# 600 s allow.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s31c3; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
pack() { cp $d/checks.txt $d/stage_lab.txt $OUT/ 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call3.tar.xz s31c3); }
t1=$SECONDS
timeout ${LAB_TIMEOUT:-520} python3 dev/stage_lab.py $d ${LAB_VARIANTS:-base step2=.device-step2 prev=.device-prev idslarge idspad phasesimg} \
  --runs ${LAB_RUNS:-3} --builds 3 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4,8,16,32,64 --presets glm-5.3-flash-tp2 --policies all --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
cs="compute-sanitizer --error-exitcode 1 --tool memcheck --report-api-errors no"
for s in stage_inline step_inputs graph_cache; do  # as long as the call's 600 s allow
  [ $SECONDS -lt $(( ${CALL_LIMIT:-600} - 55 )) ] || { echo "memcheck $s skipped: no time left" >> $d/checks.txt; continue; }
  t1=$SECONDS
  timeout 40 $cs $d/base/build/tests/test_$s --jobs 1 > $d/memcheck-$s.log 2>&1
  echo "memcheck $s base rc $? $((SECONDS - t1)) s: $(grep -h 'Synthesis' $d/memcheck-$s.log | tr -s ' ') $(grep -h 'ERROR SUMMARY' $d/memcheck-$s.log)" >> $d/checks.txt
done
pack
cat $d/checks.txt
sed -n '/policy all$/,/^$/p' $d/stage_lab.txt | head -30
grep -B2 -A16 "phases stamps" $d/stage_lab.txt | head -24
