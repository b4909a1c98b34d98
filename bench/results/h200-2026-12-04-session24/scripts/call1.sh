#!/bin/bash
# Call 1: Qwen3-0.6B through mdr with main, all four paths in one process:
# (a) generate, (b) torch's CUDA graph, (b2) the same captured again into a
# pool of its own, (c) torch.compile reduce-overhead, (d) mdr's cache, with
# (b) and (d) in one graph pool (--share-pool) and (d) zeroing the rows in
# use (--mdr-rows all); batch 1, 4 and 16, 128 steps, three interleaved
# runs. Then, in a process of its own, 8 steps of (b) and (d) under torch's
# profiler at batch 1 and 4: what mdr's kernel takes against (b)'s copy.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too)
export PYTHONUNBUFFERED=1
d=$OUT; b=/tmp/b24; t0=$SECONDS; nvidia-smi -L > $d/checks.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $d/checks.txt
( cmake -S . -B $b -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DMDR_BUILD_TESTS=OFF \
    -DMDR_BUILD_EXAMPLES=OFF -DMDR_BUILD_BENCH=OFF -DMDR_BUILD_DEV=OFF > /tmp/b24.log 2>&1 &&
  timeout 200 cmake --build $b -j 16 --target mdr >> /tmp/b24.log 2>&1 )
echo "build rc $? $((SECONDS - t0)) s" >> $d/checks.txt
export MDR_LIBRARY=$b/libmdr.so PYTHONPATH=$PWD/python
left() { echo $((580 - (SECONDS - t0))); }
t1=$SECONDS
timeout $(left) python3 examples/python/hf_decode.py --model ${MODEL:-0.6b} --batch 1,4,16 --prompt 32 --steps 128 \
  --sdpa math --reps 3 --no-ref-timing --time b,b2,c,d --share-pool --mdr-rows all --trace \
  --json $d/hf_${MODEL:-0.6b}.json > $d/hf_${MODEL:-0.6b}.log 2>&1
echo "hf ${MODEL:-0.6b} four paths rc $? $((SECONDS - t1)) s" >> $d/checks.txt
if [ -z "$MODEL" ] && [ $(left) -gt 70 ]; then
  t1=$SECONDS
  timeout $(left) python3 examples/python/hf_decode.py --model 0.6b --batch 1,4 --prompt 32 --steps 32 \
    --sdpa math --reps 1 --no-ref-timing --no-generate --no-compile --time b,d --share-pool --mdr-rows all \
    --profile 8 --json $d/hf_0.6b_profile.json > $d/hf_0.6b_profile.log 2>&1
  echo "hf 0.6b profile rc $? $((SECONDS - t1)) s" >> $d/checks.txt
fi
cat $d/checks.txt
for f in $d/hf_*.log; do echo "== $f"; grep -E "^== batch|^\(|^targets|checks|^profile|zero_|Memcpy" $f | head -60; done
