#!/bin/bash
# Call 3: main (cdc2d96) on the GPU: device-check's build, the whole ctest
# (-j 4; the several-GPU suites skip on one GPU) and the decode example
# (200 steps, host ids and device-fed, paged attention against the CPU
# reference); then memcheck of the staging and graph-cache suites
# (zero_fused, stage_inline; graph_cache and step_inputs with
# --report-api-errors no: they provoke API errors on purpose).
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
d=$OUT  # written in place, so that a cut run still brings back what it did
STEP_TIMEOUT=240 timeout 400 bash scripts/device-check.sh $d build tests decode > $d/device-check.out 2>&1
echo "device-check rc $?" >> $d/summary.txt
cs="compute-sanitizer --error-exitcode 1 --tool memcheck"
for s in zero_fused stage_inline graph_cache step_inputs; do
  extra=""; case $s in graph_cache|step_inputs) extra="--report-api-errors no";; esac
  t1=$SECONDS
  timeout 120 $cs $extra build-device/tests/test_$s --jobs 1 > $d/memcheck-$s.log 2>&1
  echo "memcheck $s rc $? $((SECONDS - t1)) s: $(grep -h 'Synthesis' $d/memcheck-$s.log | tr -s ' ') $(grep -h 'ERROR SUMMARY' $d/memcheck-$s.log)" >> $d/summary.txt
done
cat $d/summary.txt
