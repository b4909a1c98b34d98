#!/bin/bash
# Session 17 call 11: main (ad8c000) vs tabparam (the count's input table carried in a larger-class inline launch's
# parameters, written by the cache), policy all at 1-16 tokens, three runs each; tabparam's full ctest, staging suites under memcheck, decode example.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
git log --oneline -1 > $OUT/tree.txt 2>&1
d=/tmp/sl11; rm -rf $d; mkdir -p $d
t0=$SECONDS
timeout 400 python3 dev/stage_lab.py $d base tabparam=.device-variant-tabparam --runs 3 --builds 2 -- --strategies graph-fused,graph-fused-inputs --tokens 1,2,4,8,16 --presets glm-5.3-flash-tp2 --policies all --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t0)) s" >> $d/lab.out
b=$d/tabparam/build
t1=$SECONDS
( timeout 150 cmake --build $b -j 16 > $d/build-all.log 2>&1 && cd $b && timeout 150 ctest --output-on-failure --no-tests=error -j 4 > $d/ctest.log 2>&1; echo "ctest rc $? $((SECONDS - t1)) s" >> $d/checks.txt )
cs="compute-sanitizer --error-exitcode 1 --tool memcheck"
san() { local n=$1; shift; ( t1=$SECONDS; timeout 100 "$@" > $d/$n.log 2>&1; echo "rc $? $n $((SECONDS - t1)) s" >> $d/checks.txt ) & }
san memcheck-stage_inline $cs $b/tests/test_stage_inline --jobs 1
san memcheck-graph_cache $cs --report-api-errors no $b/tests/test_graph_cache --jobs 1
san memcheck-step_inputs $cs --report-api-errors no $b/tests/test_step_inputs --jobs 1
( timeout 30 $b/examples/mdr_decode_loop --steps 200 --json $d/decode_loop.json > $d/decode.log 2>&1; echo "decode rc $?" >> $d/checks.txt
  timeout 30 $b/examples/mdr_decode_loop --steps 200 --device-fed --json $d/decode_loop_fed.json > $d/decode_fed.log 2>&1; echo "decode-fed rc $?" >> $d/checks.txt ) &
wait
cp $d/stage_lab.txt $d/lab.out $d/checks.txt $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call11.tar.xz sl11
tail -22 $d/stage_lab.txt; cat $d/checks.txt; tail -1 $d/lab.out; tail -3 $d/ctest.log
