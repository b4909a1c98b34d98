#!/bin/bash
# Call 5: device-id steps with host inputs inline (the launch's parameters, no slot read over PCIe). The whole tree
# built; the staging, inline, cache and input suites and the decode examples on the GPU; memcheck of stage_inline;
# then Qwen3-0.6B (hf_decode, (b) and (d) in one pool, d0: mdr's own part) with the route (default) and with
# MDR_STAGE_INLINE=0 (device steps on the ring, as before), one process each.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
d=/tmp/s21c5; b=/tmp/b21c5; rm -rf $d; mkdir -p $d; t0=$SECONDS
( cmake -S . -B $b -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DMDR_REQUIRE_TESTS=ON > $d/build.log 2>&1 &&
  timeout 200 cmake --build $b -j 16 >> $d/build.log 2>&1 ); echo "build rc $? $((SECONDS - t0)) s" > $d/checks.txt
t1=$SECONDS
( cd $b && timeout 150 ctest --output-on-failure --no-tests=error -j 4 -R "stage_inline|graph_cache|staging|step_inputs|decode_loop" > $d/ctest.log 2>&1 )
echo "ctest rc $? $((SECONDS - t1)) s" >> $d/checks.txt
t1=$SECONDS
timeout 60 compute-sanitizer --error-exitcode 1 --tool memcheck --report-api-errors no $b/tests/test_stage_inline --jobs 1 \
  --filter 'stage_inline/device_id*' > $d/memcheck-stage_inline-device.log 2>&1
echo "memcheck stage_inline device rc $? $((SECONDS - t1)) s" >> $d/checks.txt
export MDR_LIBRARY=$b/libmdr.so PYTHONPATH=$PWD/python
for k in 1; do
  for route in on off; do
    t1=$SECONDS
    env $([ $route = off ] && echo MDR_STAGE_INLINE=0) timeout 110 python3 examples/python/hf_decode.py --model 0.6b --batch 1,4,16 \
      --steps 128 --reps 3 --sdpa math --no-generate --no-compile --no-ref-timing --time b,d,d0 --share-pool \
      --json $d/hf_inline_${route}_$k.json > $d/hf_inline_${route}_$k.log 2>&1
    echo "hf route $route run $k rc $? $((SECONDS - t1)) s" >> $d/checks.txt
  done
done
cp $d/*.json $d/*.log $d/checks.txt $OUT/ 2>/dev/null
cat $d/checks.txt; tail -4 $d/ctest.log; grep "ERROR SUMMARY\|Synthesis" $d/memcheck-*.log
python3 - $d <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "hf_inline_*.json"))):
    try:
        r = json.load(open(f))
    except Exception as e:
        print(os.path.basename(f), "unreadable", e); continue
    for bt in r.get("batches", []):
        P = bt["paths"]; s = bt.get("mdr_stats", {})
        print(os.path.basename(f), "b", bt["batch"], " ".join("%s %.4f" % (k, P[k]["gpu_ms"]) for k in ("b", "d", "d0") if "gpu_ms" in P.get(k, {})),
              "inline_steps", s.get("inline_steps"), "steps", s.get("steps"), "checks", all(bt["checks"].values()))
PY
