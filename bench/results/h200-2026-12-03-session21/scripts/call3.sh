#!/bin/bash
# Call 3 (#26): mdr.torch.GraphCache's pool= on the GPU: the torch-mode pytest cases (the shared-pool case and the
# refused pools among them) and hf_decode's smoke tests (--share-pool among them); then Qwen3-0.6B at batch 1, 4
# and 16 with (b) and (d) captured on one stream into one graph pool (--share-pool), (b2) in a pool of its own
# beside them, and batch 1 again with (d) captured first.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
d=/tmp/s21c3; b=/tmp/b21c3; rm -rf $d; mkdir -p $d; t0=$SECONDS
nvidia-smi -L > $d/checks.txt
( cmake -S . -B $b -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DMDR_BUILD_TESTS=OFF > $d/build.log 2>&1 &&
  timeout 150 cmake --build $b -j 16 --target mdr >> $d/build.log 2>&1 ); echo "build rc $? $((SECONDS - t0)) s" >> $d/checks.txt
export MDR_LIBRARY=$b/libmdr.so PYTHONPATH=$PWD/python
t1=$SECONDS
timeout 200 python3 -m pytest -q -rs -p no:cacheprovider python/tests/test_gpu_torch.py python/tests/test_hf_decode_smoke.py > $d/pytest.log 2>&1
echo "pytest rc $? $((SECONDS - t1)) s" >> $d/checks.txt
t1=$SECONDS
timeout 250 python3 examples/python/hf_decode.py --model 0.6b --batch 1,4,16 --steps 128 --reps 3 --sdpa math \
  --no-generate --no-compile --no-ref-timing --time b,b2,d --share-pool --json $d/hf_share_pool.json > $d/hf_share_pool.log 2>&1
echo "hf share-pool rc $? $((SECONDS - t1)) s" >> $d/checks.txt
t1=$SECONDS
left=$((575 - SECONDS)); [ $left -gt 30 ] && timeout $left python3 examples/python/hf_decode.py --model 0.6b --batch 1 --steps 128 --reps 3 --sdpa math \
  --no-generate --no-compile --no-ref-timing --time b,b2,d --share-pool --first d --json $d/hf_share_pool_first_d.json > $d/hf_share_pool_first_d.log 2>&1
echo "hf share-pool first d rc $? $((SECONDS - t1)) s" >> $d/checks.txt
cp $d/*.json $d/*.log $d/checks.txt $OUT/ 2>/dev/null
cd /tmp && tar -cJf $OUT/call3.tar.xz s21c3
cat $d/checks.txt; tail -4 $d/pytest.log; grep -A12 "== batch" $d/hf_share_pool.log | grep -v "^(c)\|^beside"; tail -8 $d/hf_share_pool_first_d.log
