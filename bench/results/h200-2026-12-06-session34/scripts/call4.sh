#!/bin/bash
# Call 4: everything the step inputs still owe an H200 (figures and checks), in one machine start.
# First the lab: main beside the stage_lab candidates imgpair and pairword
# (ids only, the whole table staged, the table on the device; 1-64
# sequences, GLM-5.3, policies all and seed, two interleaved runs pinned to
# CPU 3, each variant validated first by its step-input suites on the
# GPU). Then session 33's call 2 on main: the whole tree built for sm_90,
# every suite, the decode example with host ids and device-fed, memcheck of
# stage_inline, step_inputs, graph_cache and initcheck of stage_inline.
# CALL_LIMIT (default 560 s) bounds it; LAB_TIMEOUT (default 250 s) bounds
# the lab; LAB_VARIANTS, LAB_RUNS and LAB_POLICIES change what it times.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s34c4; rm -rf $d; mkdir -p $d/lab $d/chk; nvidia-smi -L > $d/checks.txt
lim=${CALL_LIMIT:-560}
# Only three files come back (a call returns at most 8), so
# every log travels in the archive.
pack() { cp $d/checks.txt $OUT/ 2>/dev/null; cp $d/lab/stage_lab.txt $OUT/stage_lab.txt 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call4.tar.xz s34c4); }
t1=$SECONDS
timeout ${LAB_TIMEOUT:-250} python3 dev/stage_lab.py $d/lab ${LAB_VARIANTS:-base imgpair pairword} \
  --runs ${LAB_RUNS:-2} --builds 3 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4,8,16,32,64 --presets glm-5.3-flash-tp2 --policies ${LAB_POLICIES:-all,seed} --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
c=$d/chk; t1=$SECONDS
cmake -S . -B $c/build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DMDR_REQUIRE_TESTS=ON > $c/configure.log 2>&1 &&
  cmake --build $c/build -j "$(nproc)" > $c/build.log 2>&1
echo "build rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
t1=$SECONDS; left=$(( lim - SECONDS - 150 ))
(cd $c/build && timeout $(( left > 60 ? left : 60 )) ctest -j 4 --output-on-failure > $c/ctest.log 2>&1)
echo "ctest rc $? $((SECONDS - t1)) s: $(grep -h 'tests passed' $c/ctest.log)" >> $d/checks.txt; pack
for f in "" --device-fed; do
  timeout 60 $c/build/examples/mdr_decode_loop --steps 200 $f --json $c/decode_loop${f:+_fed}.json > $c/decode${f:+_fed}.log 2>&1
  echo "decode $f rc $?: $(tail -1 $c/decode${f:+_fed}.log)" >> $d/checks.txt
done
pack
cs="compute-sanitizer --error-exitcode 1 --report-api-errors no"
for s in memcheck:stage_inline memcheck:step_inputs memcheck:graph_cache initcheck:stage_inline; do
  tool=${s%%:*}; t=${s#*:}
  [ $SECONDS -lt $(( lim - 35 )) ] || { echo "$tool $t skipped: no time left" >> $d/checks.txt; continue; }
  t1=$SECONDS
  timeout $(( lim - SECONDS - 5 < 120 ? lim - SECONDS - 5 : 120 )) $cs --tool $tool $c/build/tests/test_$t --jobs 1 > $c/$tool-$t.log 2>&1
  echo "$tool $t rc $? $((SECONDS - t1)) s: $(grep -h 'Synthesis' $c/$tool-$t.log | tr -s ' ') $(grep -h 'ERROR SUMMARY' $c/$tool-$t.log)" >> $d/checks.txt
done
pack
cat $d/checks.txt
sed -n '/policy all$/,/^$/p' $d/lab/stage_lab.txt | head -30
grep -E "Skipped|Failed|\*\*\*" $c/ctest.log | head -20
