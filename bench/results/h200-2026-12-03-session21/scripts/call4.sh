#!/bin/bash
# Call 4 (#26): with (b) and (d) in one pool (--share-pool), where (d)'s +16-22 us over (b) goes: the same run with
# (d) zeroing only the rows in use (--mdr-rows all), mdr's own part timed alone (d0, an empty body), and 8 steps
# of each graph path under torch's profiler (the kernels whose time differs most from (b)'s).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
d=/tmp/s21c4; b=/tmp/b21c4; rm -rf $d; mkdir -p $d; t0=$SECONDS
( cmake -S . -B $b -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DMDR_BUILD_TESTS=OFF > $d/build.log 2>&1 &&
  timeout 150 cmake --build $b -j 16 --target mdr >> $d/build.log 2>&1 ); echo "build rc $? $((SECONDS - t0)) s" > $d/checks.txt
export MDR_LIBRARY=$b/libmdr.so PYTHONPATH=$PWD/python
t1=$SECONDS
timeout 400 python3 examples/python/hf_decode.py --model 0.6b --batch 1,4,16 --steps 128 --reps 3 --sdpa math \
  --no-generate --no-compile --no-ref-timing --time b,d,d0 --share-pool --mdr-rows all --profile 8 \
  --json $d/hf_share_pool_rows_all.json > $d/hf_share_pool_rows_all.log 2>&1
echo "hf share-pool rows all rc $? $((SECONDS - t1)) s" >> $d/checks.txt
cp $d/*.json $d/*.log $d/checks.txt $OUT/ 2>/dev/null
cat $d/checks.txt; grep -v "^(c)\|^beside" $d/hf_share_pool_rows_all.log | tail -80
