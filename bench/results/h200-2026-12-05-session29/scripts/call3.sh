#!/bin/bash
# Call 3 (planned; the machine was not lent again this session): a checkout
# of branch stage-direct, its stage code as of 689138a (base: the larger classes' inline
# images copied by direct words, and no input-table entry read before the
# copy, the device inputs' work told by MDR_STAGE_DIRECT_COPY/_PAD) against
# main (prev: .device-prev from `git archive main`), with phasesimg (stage block clock stamps, on base; its lines
# now say whether the launch carries the input table, tab=1, so a small
# class's launch at seed policy no longer shares a row with a larger
# class's), idslarge (ids-only steps in the large image class: does the
# class's launch cost what steps with inputs pay over ids only at 1-2
# sequences?) and idspad (the small class's parameters padded to the large
# class's 6400 bytes: the block's size alone) beside them, and directfast
# (a DIRECT launch with no device-to-device input takes a straight-line
# path at the stage block's entry, not the general block's far branches:
# whether the block's code, not its reads, is the cost). stage_lab validates each with the step-input suites on the GPU,
# then times ids only, the whole table staged and the table kept on the
# device, 1-64 sequences, GLM-5.3, policy all (where the gap is; at seed
# policy these steps take the ring or the small class, which the change
# does not touch), three interleaved runs pinned to CPU 3; then memcheck of
# stage_inline, step_inputs and graph_cache on base's build.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s29c3; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
pack() { cp $d/checks.txt $d/stage_lab.txt $OUT/ 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call3.tar.xz s29c3); }
t1=$SECONDS
timeout 520 python3 dev/stage_lab.py $d base prev=.device-prev idslarge idspad directfast phasesimg --runs 3 --builds 3 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4,8,16,32,64 --presets glm-5.3-flash-tp2 --policies all --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
cs="compute-sanitizer --error-exitcode 1 --tool memcheck --report-api-errors no"
for s in stage_inline step_inputs graph_cache; do  # as long as the call's 600 s allow
  [ $SECONDS -lt 545 ] || { echo "memcheck $s skipped: no time left" >> $d/checks.txt; continue; }
  t1=$SECONDS
  timeout 40 $cs $d/base/build/tests/test_$s --jobs 1 > $d/memcheck-$s.log 2>&1
  echo "memcheck $s base rc $? $((SECONDS - t1)) s: $(grep -h 'Synthesis' $d/memcheck-$s.log | tr -s ' ') $(grep -h 'ERROR SUMMARY' $d/memcheck-$s.log)" >> $d/checks.txt
done
pack
cat $d/checks.txt
sed -n '/policy all$/,/^$/p' $d/stage_lab.txt | head -30
grep -B2 -A16 "phases stamps" $d/stage_lab.txt | head -24
