#!/bin/bash
# Call 2: node updates through the driver's entry point (the tree as carried). First the whole tree is built and,
# in the lab, main's build (base: driver updates) is timed beside itself with MDR_NODE_UPDATE_DRIVER=0 (rtupdate:
# the runtime's call), every bench pinned to CPU 3; then the whole GPU ctest and the backend_cuda suite under
# memcheck.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
d=/tmp/sl2; b=/tmp/b2; rm -rf $d; mkdir -p $d; t0=$SECONDS
( cmake -S . -B $b -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DMDR_REQUIRE_TESTS=ON > $d/build-all.log 2>&1 &&
  timeout 200 cmake --build $b -j 16 >> $d/build-all.log 2>&1 ); echo "build rc $? $((SECONDS - t0)) s" > $d/checks.txt
t1=$SECONDS
timeout 300 python3 dev/stage_lab.py $d base rtupdate --runs 3 --pin 3 -- --strategies graph-fused,graph-fused-inputs,graph-dynamic --tokens 1,2,4,8,16,24,32,64 --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt
t1=$SECONDS
( cd $b && timeout 170 ctest --output-on-failure --no-tests=error -j 4 > $d/ctest.log 2>&1 ); echo "ctest rc $? $((SECONDS - t1)) s" >> $d/checks.txt
t1=$SECONDS
timeout 90 compute-sanitizer --error-exitcode 1 --tool memcheck --report-api-errors no $b/tests/test_backend_cuda --jobs 1 > $d/memcheck-backend_cuda.log 2>&1
echo "memcheck backend_cuda rc $? $((SECONDS - t1)) s" >> $d/checks.txt
cp $d/stage_lab.txt $d/lab.out $d/checks.txt $d/ctest.log $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call2.tar.xz sl2
tail -75 $d/stage_lab.txt; cat $d/checks.txt; grep -i "fail" $d/ctest.log | head; tail -3 $d/ctest.log; grep -h "ERROR SUMMARY\|Synthesis" $d/memcheck-*.log
