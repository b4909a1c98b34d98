#!/bin/bash
# Session 16 call 7: main vs inlistxl (the list inline form for every class, on main's image-first stage block);
# then main's staging and graph-cache suites under memcheck and the decode example.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
git log --oneline -1 > $OUT/tree.txt 2>&1
mkdir -p /tmp/sl7
t0=$SECONDS
timeout 200 python3 dev/stage_lab.py /tmp/sl7 base inlistxl=.device-variant-inlistxl --runs 2 --builds 2 -- --strategies graph-fused,graph-fused-inputs --tokens 1,2,4,8 --presets glm-5.3-flash-tp2 --policies all --cpu-reps 1000 --force > /tmp/sl7/lab.out 2>&1
echo "lab rc $? $((SECONDS - t0)) s" >> /tmp/sl7/lab.out
b=/tmp/sl7/base/build
cs="compute-sanitizer --error-exitcode 1 --tool memcheck"
san() { local n=$1; shift; ( t1=$SECONDS; timeout 100 "$@" > /tmp/sl7/$n.log 2>&1; echo "rc $? $n $((SECONDS - t1)) s" >> /tmp/sl7/checks.txt ) & }
san memcheck-stage_inline $cs $b/tests/test_stage_inline --jobs 1
san memcheck-graph_cache $cs --report-api-errors no $b/tests/test_graph_cache --jobs 1
san memcheck-step_inputs $cs --report-api-errors no $b/tests/test_step_inputs --jobs 1
( timeout 100 cmake --build $b -j 8 --target mdr_decode_loop > /tmp/sl7/decode-build.log 2>&1 &&
  timeout 30 $b/examples/mdr_decode_loop --steps 200 --json /tmp/sl7/decode_loop.json > /tmp/sl7/decode.log 2>&1; echo "decode rc $?" >> /tmp/sl7/checks.txt
  timeout 30 $b/examples/mdr_decode_loop --steps 200 --device-fed --json /tmp/sl7/decode_loop_fed.json > /tmp/sl7/decode_fed.log 2>&1; echo "decode-fed rc $?" >> /tmp/sl7/checks.txt ) &
wait
cp /tmp/sl7/stage_lab.txt /tmp/sl7/checks.txt $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call7.tar.xz sl7
tail -25 /tmp/sl7/lab.out; cat /tmp/sl7/checks.txt; tail -2 /tmp/sl7/decode.log /tmp/sl7/decode_fed.log
