#!/bin/bash
# Call 4: the tree that would land (branch stage-direct-fast) on the GPU:
# device-check's build, the whole GPU ctest, the decode example (host ids
# and device-fed, paged attention against the CPU reference) and the
# Python suite (GPU cases with torch); then memcheck of the staging and
# graph-cache suites and the zeroing kernels on that build.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s31c4; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
pack() { cp $d/checks.txt $OUT/ 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' --exclude='*/build-device' -cJf $OUT/call4.tar.xz s31c4); }
t1=$SECONDS
STEP_TIMEOUT=200 timeout 380 bash scripts/device-check.sh $d/dc build tests decode python > $d/device-check.out 2>&1
echo "device-check rc $? $((SECONDS - t1)) s" >> $d/checks.txt; cat $d/dc/summary.txt >> $d/checks.txt; pack
cs="compute-sanitizer --error-exitcode 1 --tool memcheck --report-api-errors no"
for s in stage_inline step_inputs graph_cache zero_fused; do  # as long as the call's 600 s allow
  [ $SECONDS -lt $(( ${CALL_LIMIT:-600} - 55 )) ] || { echo "memcheck $s skipped: no time left" >> $d/checks.txt; continue; }
  t1=$SECONDS
  timeout 45 $cs build-device/tests/test_$s --jobs 1 > $d/memcheck-$s.log 2>&1
  echo "memcheck $s rc $? $((SECONDS - t1)) s: $(grep -h 'Synthesis' $d/memcheck-$s.log | tr -s ' ') $(grep -h 'ERROR SUMMARY' $d/memcheck-$s.log)" >> $d/checks.txt
done
pack
cat $d/checks.txt
