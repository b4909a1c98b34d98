#!/bin/bash
# Call 8: as call 9, with hf_decode's host-time loop interleaving the paths step by step (the first form of
# commit 03b9044, amended before it reached main): the paths share one static cache, so it overran the cache
# (device-side assert in index_copy_).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
d=/tmp/s22c8; b=/tmp/b22c8; rm -rf $d; mkdir -p $d; t0=$SECONDS; nvidia-smi -L > $d/checks.txt
( cmake -S . -B $b -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DMDR_BUILD_TESTS=OFF \
    -DMDR_BUILD_EXAMPLES=OFF > $d/build.log 2>&1 && timeout 200 cmake --build $b -j 16 --target mdr >> $d/build.log 2>&1 )
echo "build rc $? $((SECONDS - t0)) s" >> $d/checks.txt
export MDR_LIBRARY=$b/libmdr.so PYTHONPATH=$PWD/python
t1=$SECONDS
timeout 150 python3 -m pytest -q python/tests/test_hf_decode_smoke.py > $d/pytest-smoke.log 2>&1
echo "pytest smoke rc $? $((SECONDS - t1)) s" >> $d/checks.txt
for rows in all seed; do
  t1=$SECONDS
  timeout 140 python3 examples/python/hf_decode.py --model 0.6b --batch 1,4,16 --steps 128 --reps 3 --sdpa math \
    --no-generate --no-compile --no-ref-timing --time b,b2,d --share-pool --mdr-rows $rows \
    --json $d/hf_rows_$rows.json > $d/hf_rows_$rows.log 2>&1
  echo "hf rows $rows rc $? $((SECONDS - t1)) s" >> $d/checks.txt
done
cp $d/*.json $d/*.log $d/checks.txt $OUT/ 2>/dev/null
cat $d/checks.txt; tail -3 $d/pytest-smoke.log
for rows in all seed; do echo "== rows $rows"; grep -E "^== batch|^\(b|^\(d|^targets" $d/hf_rows_$rows.log; done
