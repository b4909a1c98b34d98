#!/bin/bash
# Call 5: the tree that lands (main with mdr_stage_inline_block and the
# image dealt over the warps) checked on the GPU: configure and build the
# staging and graph suites, run them (ctest), then memcheck of stage_inline
# and step_inputs as the call's time allows (CALL_LIMIT, default 300 s).
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
d=/tmp/s32c5; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
pack() { cp $d/*.txt $d/*.log $OUT/ 2>/dev/null; }
t1=$SECONDS
cmake -S . -B $d/build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DMDR_REQUIRE_TESTS=ON > $d/configure.log 2>&1 &&
  cmake --build $d/build -j "$(nproc)" --target test_stage_inline test_staging stage_emulated test_step_inputs \
    test_graph_cache test_zero_fused > $d/build.log 2>&1
echo "build rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
t1=$SECONDS
(cd $d/build && ctest -R '^(stage_inline|staging|staging_emulated|staging_emulated_inline|step_inputs|graph_cache|zero_fused)$' \
   --output-on-failure > $d/ctest.log 2>&1)
echo "ctest rc $? $((SECONDS - t1)) s: $(grep -h 'tests passed' $d/ctest.log)" >> $d/checks.txt; pack
cs="compute-sanitizer --error-exitcode 1 --tool memcheck --report-api-errors no"
for s in stage_inline step_inputs; do
  [ $SECONDS -lt $(( ${CALL_LIMIT:-300} - 30 )) ] || { echo "memcheck $s skipped: no time left" >> $d/checks.txt; continue; }
  t1=$SECONDS
  timeout 30 $cs $d/build/tests/test_$s --jobs 1 > $d/memcheck-$s.log 2>&1
  echo "memcheck $s rc $? $((SECONDS - t1)) s: $(grep -h 'Synthesis' $d/memcheck-$s.log | tr -s ' ') $(grep -h 'ERROR SUMMARY' $d/memcheck-$s.log)" >> $d/checks.txt
done
pack
cat $d/checks.txt; grep -E "Skipped|Failed|\*\*\*" $d/ctest.log | head
