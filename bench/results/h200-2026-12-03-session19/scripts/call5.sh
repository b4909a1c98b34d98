#!/bin/bash
# Call 5: main after the preload's lookup became optional (cbd1a30): backend_cuda and stage_inline on the GPU, and
# a small pinned mdr-bench run. Logs straight into $OUT.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
b=/tmp/b5; o=$OUT; t0=$SECONDS
cmake -S . -B $b -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DMDR_REQUIRE_TESTS=ON > $o/build.log 2>&1 &&
  cmake --build $b -j 16 --target test_backend_cuda test_stage_inline mdr-bench >> $o/build.log 2>&1
echo "build rc $? $((SECONDS - t0)) s" > $o/checks.txt
( cd $b && timeout 100 ctest --output-on-failure --no-tests=error -R '^(backend_cuda|stage_inline)$' > $o/ctest.log 2>&1 ); echo "ctest rc $?" >> $o/checks.txt
timeout 60 $b/bench/mdr-bench --pin 3 --presets glm-5.3-flash-tp2 --tokens 1,8 --strategies graph-fused,graph-fused-inputs --policies all --reps 300 --cpu-reps 1000 --out /tmp/pb > $o/bench.log 2>&1
echo "bench rc $?" >> $o/checks.txt; grep -h pinned_cpu /tmp/pb/results.json >> $o/checks.txt
cat $o/checks.txt; tail -4 $o/ctest.log; grep -E "^pinned|^step inputs" -A4 $o/bench.log | head -12
