#!/bin/bash
# Call 4: main with node updates through the driver: the step-input suites on the GPU, stage_inline, graph_cache
# and step_inputs under memcheck, the decode example host-fed and device-fed. Logs straight into $OUT.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
b=/tmp/b4; o=$OUT; t0=$SECONDS
cmake -S . -B $b -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DMDR_REQUIRE_TESTS=ON > $o/build.log 2>&1 &&
  cmake --build $b -j 16 --target test_stage_inline test_graph_cache test_step_inputs test_staging test_backend_cuda stage_emulated mdr_decode_loop >> $o/build.log 2>&1
echo "build rc $? $((SECONDS - t0)) s" > $o/checks.txt
cs="compute-sanitizer --error-exitcode 1 --tool memcheck"
san() { local n=$1; shift; ( t1=$SECONDS; timeout 150 "$@" > $o/$n.log 2>&1; echo "rc $? $n $((SECONDS - t1)) s" >> $o/checks.txt ) & }
san memcheck-stage_inline $cs $b/tests/test_stage_inline --jobs 1
san memcheck-graph_cache $cs --report-api-errors no $b/tests/test_graph_cache --jobs 1
san memcheck-staging $cs --report-api-errors no $b/tests/test_staging --jobs 1
san memcheck-backend_cuda-node_updates $cs $b/tests/test_backend_cuda --jobs 1 --filter 'backend_cuda/node_updates*'
( t1=$SECONDS; cd $b && timeout 150 ctest --output-on-failure --no-tests=error -R '^(stage_inline|staging|staging_emulated|step_inputs|graph_cache)$' > $o/ctest.log 2>&1; echo "ctest rc $? $((SECONDS - t1)) s" >> $o/checks.txt
  timeout 30 $b/examples/mdr_decode_loop --steps 200 > $o/decode.log 2>&1; echo "decode rc $?" >> $o/checks.txt
  timeout 30 $b/examples/mdr_decode_loop --steps 200 --device-fed >> $o/decode.log 2>&1; echo "decode-fed rc $?" >> $o/checks.txt
  t2=$SECONDS; timeout 120 $cs --report-api-errors no $b/tests/test_step_inputs --jobs 1 > $o/memcheck-step_inputs.log 2>&1; echo "rc $? memcheck-step_inputs $((SECONDS - t2)) s" >> $o/checks.txt ) &
wait
cat $o/checks.txt; tail -4 $o/ctest.log; grep -h "ERROR SUMMARY\|Synthesis" $o/memcheck-*.log; tail -3 $o/decode.log
cd $o && tar -cJf call4.tar.xz *.log && rm -f *.log
