#!/bin/bash
# Call 5: main (the large class for steps with inputs) on the GPU:
# device-check's build, the whole ctest (-j 4; the several-GPU suites skip
# on one GPU) and the decode example (host ids and device-fed, paged
# attention against the CPU reference); memcheck of test_graph_cache.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
d=$OUT  # written in place, so that a cut run still brings back what it did
STEP_TIMEOUT=240 timeout 330 bash scripts/device-check.sh $d build tests decode > $d/device-check.out 2>&1
echo "device-check rc $?" >> $d/summary.txt
t1=$SECONDS
timeout 60 compute-sanitizer --error-exitcode 1 --tool memcheck --report-api-errors no build-device/tests/test_graph_cache \
  --jobs 1 > $d/memcheck-graph_cache.log 2>&1
echo "memcheck graph_cache rc $? $((SECONDS - t1)) s: $(grep -h 'Synthesis' $d/memcheck-graph_cache.log | tr -s ' ') $(grep -h 'ERROR SUMMARY' $d/memcheck-graph_cache.log)" >> $d/summary.txt
cat $d/summary.txt; tail -5 $d/device-check.out
