#!/bin/bash
# Call 2: main as it stands checked on the GPU the call gets: configure and
# build everything, ctest (every suite; the several-GPU ones skip on one
# card), compute-sanitizer memcheck of the staging and graph-cache suites,
# initcheck of stage_inline, and the decode example over 200 steps with
# host ids and fed from the device. CALL_LIMIT (default 560 s) bounds it.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
d=/tmp/s33c2; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
lim=${CALL_LIMIT:-560}
pack() { cp $d/*.txt $d/*.log $d/*.json $OUT/ 2>/dev/null; }
t1=$SECONDS
cmake -S . -B $d/build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DMDR_REQUIRE_TESTS=ON > $d/configure.log 2>&1 &&
  cmake --build $d/build -j "$(nproc)" > $d/build.log 2>&1
echo "build rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
t1=$SECONDS
(cd $d/build && timeout $(( lim / 2 )) ctest -j 4 --output-on-failure > $d/ctest.log 2>&1)
echo "ctest rc $? $((SECONDS - t1)) s: $(grep -h 'tests passed' $d/ctest.log)" >> $d/checks.txt; pack
for f in "" --device-fed; do
  timeout 60 $d/build/examples/mdr_decode_loop --steps 200 $f --json $d/decode_loop${f:+_fed}.json > $d/decode${f:+_fed}.log 2>&1
  echo "decode $f rc $?: $(tail -1 $d/decode${f:+_fed}.log)" >> $d/checks.txt
done
pack
cs="compute-sanitizer --error-exitcode 1 --report-api-errors no"
for s in memcheck:stage_inline memcheck:step_inputs memcheck:graph_cache memcheck:staging initcheck:stage_inline; do
  tool=${s%%:*}; t=${s#*:}
  [ $SECONDS -lt $(( lim - 45 )) ] || { echo "$tool $t skipped: no time left" >> $d/checks.txt; continue; }
  t1=$SECONDS
  timeout $(( lim - SECONDS - 5 < 120 ? lim - SECONDS - 5 : 120 )) $cs --tool $tool $d/build/tests/test_$t --jobs 1 > $d/$tool-$t.log 2>&1
  echo "$tool $t rc $? $((SECONDS - t1)) s: $(grep -h 'Synthesis' $d/$tool-$t.log | tr -s ' ') $(grep -h 'ERROR SUMMARY' $d/$tool-$t.log)" >> $d/checks.txt
  pack
done
cat $d/checks.txt; grep -E "Skipped|Failed|\*\*\*" $d/ctest.log | head -20
