#!/bin/bash
# Call 6 (written, not run: the session's device time ran out): device-id steps with host inputs at GLM-5.3's
# sizes, and #26 with mdr zeroing only the rows in use. mdr-bench's bench-inputs block (device-check's `bench`
# phase: graph-fused, graph-fused-inputs, graph-fused-dev and graph-fused-dev-inputs at 1-64 tokens, two presets),
# then Qwen3-0.6B with (b) and (d) in one pool under --mdr-rows all.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
d=/tmp/s22c6; rm -rf $d
BENCH_ARGS="--quick --presets glm-5.3-flash-tp2" timeout 420 bash scripts/device-check.sh $d build bench
echo "device-check rc $?" >> $d/summary.txt
export MDR_LIBRARY=$PWD/build-device/libmdr.so PYTHONPATH=$PWD/python
timeout 150 python3 examples/python/hf_decode.py --model 0.6b --batch 1,4,16 --steps 128 --reps 3 --sdpa math \
  --no-generate --no-compile --no-ref-timing --time b,b2,d --share-pool --mdr-rows all --json $d/hf_rows_all.json \
  > $d/hf_rows_all.log 2>&1
echo "hf rows all rc $?" >> $d/summary.txt
cp $d/summary.txt $d/hf_rows_all.* $OUT/ 2>/dev/null
cd /tmp && tar -cJf $OUT/call6.tar.xz s22c6
cat $d/summary.txt; grep -A14 "^step inputs" $d/bench-inputs.log 2>/dev/null | head -60; grep -A4 "^path" $d/hf_rows_all.log
