#!/bin/bash
# Call 2: main (e846b82 and stage_lab's phases variant) on the GPU.
# device-check's build, the whole GPU ctest, the decode example (host ids
# and device-fed, paged attention against the CPU reference) and the
# Python suite (GPU cases with torch); memcheck of test_graph_cache and
# test_staging; then stage_lab's phases diagnostic (SM clock stamps in an
# inline launch's stage block) at 1, 2 and 4 sequences, policy all: ids
# only, the whole table staged and the table kept on the device, one run.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s28c2; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
pack() { cp $d/checks.txt $OUT/ 2>/dev/null; cp $d/phases.txt $OUT/ 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' --exclude='*/build-device' -cJf $OUT/call2.tar.xz s28c2); }
t1=$SECONDS
STEP_TIMEOUT=200 timeout 330 bash scripts/device-check.sh $d/dc build tests decode python > $d/device-check.out 2>&1
echo "device-check rc $? $((SECONDS - t1)) s" >> $d/checks.txt; cat $d/dc/summary.txt >> $d/checks.txt; pack
cs="compute-sanitizer --error-exitcode 1 --tool memcheck --report-api-errors no"
for s in graph_cache staging; do
  t1=$SECONDS
  timeout 40 $cs build-device/tests/test_$s --jobs 1 > $d/memcheck-$s.log 2>&1
  echo "memcheck $s rc $? $((SECONDS - t1)) s: $(grep -h 'Synthesis' $d/memcheck-$s.log | tr -s ' ') $(grep -h 'ERROR SUMMARY' $d/memcheck-$s.log)" >> $d/checks.txt
done
pack
t1=$SECONDS
timeout 170 python3 dev/stage_lab.py $d/lab phases --runs 1 --builds 1 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4 --presets glm-5.3-flash-tp2 --policies all --cpu-reps 200 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt
python3 bench/results/h200-2026-12-05-session28/scripts/phases_report.py $d/lab/phases > $d/phases.txt 2>&1
cp $d/lab/stage_lab.txt $OUT/ 2>/dev/null
pack
cat $d/checks.txt; cat $d/phases.txt
