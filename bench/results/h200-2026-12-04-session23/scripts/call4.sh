#!/bin/bash
# Call 4: Qwen3 through mdr with main (c8b2adf): (b), (b2) and (d) in one
# pool at batch 16 (the row call 9 of the earlier folder lost to its time
# limit), under --mdr-rows all and at the seed's policy, then Qwen3-1.7B at
# batch 1, 4 and 16 under --mdr-rows all; one process each, written into
# OUT as they finish.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too)
export PYTHONUNBUFFERED=1
d=$OUT; b=/tmp/b23c4; t0=$SECONDS; nvidia-smi -L > $d/checks.txt
( cmake -S . -B $b -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DMDR_BUILD_TESTS=OFF \
    -DMDR_BUILD_EXAMPLES=OFF -DMDR_BUILD_BENCH=OFF -DMDR_BUILD_DEV=OFF > /tmp/b23c4.log 2>&1 &&
  timeout 200 cmake --build $b -j 16 --target mdr >> /tmp/b23c4.log 2>&1 )
echo "build rc $? $((SECONDS - t0)) s" >> $d/checks.txt
export MDR_LIBRARY=$b/libmdr.so PYTHONPATH=$PWD/python
common="--steps 128 --reps 3 --sdpa math --no-generate --no-compile --no-ref-timing --time b,b2,d --share-pool"
for rows in all seed; do
  t1=$SECONDS
  timeout 170 python3 examples/python/hf_decode.py --model 0.6b --batch 16 $common --mdr-rows $rows \
    --json $d/hf_0.6b_b16_rows_$rows.json > $d/hf_0.6b_b16_rows_$rows.log 2>&1
  echo "hf 0.6b batch 16 rows $rows rc $? $((SECONDS - t1)) s" >> $d/checks.txt
done
t1=$SECONDS
timeout 200 python3 examples/python/hf_decode.py --model 1.7b --batch 1,4,16 $common --mdr-rows all \
  --json $d/hf_1.7b_rows_all.json > $d/hf_1.7b_rows_all.log 2>&1
echo "hf 1.7b rows all rc $? $((SECONDS - t1)) s" >> $d/checks.txt
cat $d/checks.txt
for f in $d/hf_*.log; do echo "== $f"; grep -E "^== batch|^\(b|^\(d|^targets|checks" $f | head -30; done
