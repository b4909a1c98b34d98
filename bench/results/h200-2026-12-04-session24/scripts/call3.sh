#!/bin/bash
# Call 3: the block table kept in device memory (mdr-bench's
# graph-fused-inputs-devtable) beside the whole table staged from the host
# (graph-fused-inputs) and ids only (graph-fused): GLM-5.3, 1-64 tokens,
# both row policies, three runs, each pinned to CPU 3 (its CPU figures
# read within a run). The build is main with the strategy added.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too)
d=$OUT; b=/tmp/b24c3; t0=$SECONDS; nvidia-smi -L > $d/checks.txt
( cmake -S . -B $b -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DMDR_BUILD_TESTS=OFF \
    -DMDR_BUILD_EXAMPLES=OFF -DMDR_BUILD_DEV=OFF > /tmp/b24c3.log 2>&1 &&
  timeout 240 cmake --build $b -j 16 --target mdr-bench >> /tmp/b24c3.log 2>&1 )
echo "build rc $? $((SECONDS - t0)) s" >> $d/checks.txt
for i in 1 2 3; do
  t1=$SECONDS
  timeout 150 $b/bench/mdr-bench --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
    --tokens 1,2,4,8,16,32,64 --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 4000 --pin 3 \
    --out /tmp/c3run$i --force > $d/bench_run$i.txt 2>&1
  echo "run $i rc $? $((SECONDS - t1)) s" >> $d/checks.txt
  cp /tmp/c3run$i/results.csv $d/results_run$i.csv 2>/dev/null
done
cat $d/checks.txt
for i in 1 2 3; do echo "== run $i"; sed -n '/^step inputs/,/^goal/p' $d/bench_run$i.txt | grep -v "^$"; grep "^goal (step inputs" $d/bench_run$i.txt; done
