#!/bin/bash
# Call 4: the table kernel's grid on main (0f205e1): the whole tree built, the whole GPU ctest, zero_fused and
# graph_cache under memcheck, then main against the build before the change (4bcf19b, carried as .device-prev) on
# DYNAMIC steps, two interleaved runs, pinned to CPU 3.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
d=/tmp/sl4; b=/tmp/b4; rm -rf $d; mkdir -p $d; t0=$SECONDS
nvidia-smi -L > $d/checks.txt
( cmake -S . -B $b -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DMDR_REQUIRE_TESTS=ON > $d/build-all.log 2>&1 &&
  timeout 200 cmake --build $b -j 16 >> $d/build-all.log 2>&1 ); echo "build rc $? $((SECONDS - t0)) s" >> $d/checks.txt
t1=$SECONDS
( cd $b && timeout 170 ctest --output-on-failure --no-tests=error -j 4 > $d/ctest.log 2>&1 ); echo "ctest rc $? $((SECONDS - t1)) s" >> $d/checks.txt
for s in zero_fused graph_cache; do
  t1=$SECONDS
  timeout 80 compute-sanitizer --error-exitcode 1 --tool memcheck --report-api-errors no $b/tests/test_$s --jobs 1 > $d/memcheck-$s.log 2>&1
  echo "memcheck $s rc $? $((SECONDS - t1)) s" >> $d/checks.txt
done
t1=$SECONDS
timeout 200 python3 dev/stage_lab.py $d base prev=.device-prev --runs 2 --builds 2 --pin 3 -- --strategies graph-dynamic,graph-dynamic-count --tokens 1,8,64,512 --presets glm-5.3-flash-tp2 --policies seed,all --cpu-reps 300 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt
cp $d/stage_lab.txt $d/lab.out $d/checks.txt $d/ctest.log $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call4.tar.xz sl4
tail -40 $d/stage_lab.txt; cat $d/checks.txt; grep -i "fail" $d/ctest.log | head; tail -3 $d/ctest.log; grep -h "ERROR SUMMARY\|Synthesis" $d/memcheck-*.log
