#!/bin/bash
# Call 2: main's mdr-bench beside the build before the step inputs
# (d006a59, the tree in .device-prev: `git archive d006a59 -- .
# ':(exclude)bench/results' | tar -x -C .device-prev`, carried), the two
# run alternately COMPARE_RUNS times (default 3) with the same arguments,
# pinned to CPU 3 (PIN_CPU) by taskset (the old build has no --pin), then
# scripts/compare_bench.py: does any step at 64-4096 tokens get slower?
# Steps without inputs only (the old build has none). CALL_LIMIT (default
# 560 s) bounds it.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
d=/tmp/s35c2; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
lim=${CALL_LIMIT:-560}
pack() { cp $d/checks.txt $d/compare.txt $OUT/ 2>/dev/null
         (cd /tmp && tar --exclude='*/build*' -cJf $OUT/call2.tar.xz s35c2); }
t1=$SECONDS
for side in prev new; do
  src=.; [ $side = prev ] && src=.device-prev
  (cmake -S $src -B $d/build-$side -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
     -DMDR_BUILD_TESTS=OFF -DMDR_BUILD_EXAMPLES=OFF > $d/configure-$side.log 2>&1 &&
   cmake --build $d/build-$side -j "$(nproc)" --target mdr-bench > $d/build-$side.log 2>&1) &
done
wait
echo "builds $((SECONDS - t1)) s: $(ls $d/build-*/bench/mdr-bench | tr '\n' ' ')" >> $d/checks.txt
for side in prev new; do $d/build-$side/bench/mdr-bench --version >> $d/checks.txt 2>&1; done
args=${COMPARE_ARGS:---strategies graph-fused,graph-fused-dev,graph-dynamic --tokens 1,8,64,128,256,512,1024,2048,4096 --presets glm-5.3-flash-tp2,qwen3-next-80b --policies all,seed --cpu-reps 1000 --no-graph-costs}
olds=() news=()
for i in $(seq 1 "${COMPARE_RUNS:-3}"); do
  for side in prev new; do
    left=$(( lim - SECONDS - 20 ))
    [ $left -gt 30 ] || { echo "run $side-$i skipped: no time left" >> $d/checks.txt; continue; }
    t1=$SECONDS
    timeout $left taskset -c ${PIN_CPU:-3} $d/build-$side/bench/mdr-bench $args --out $d/$side-$i > $d/$side-$i.log 2>&1
    rc=$?
    echo "run $side-$i rc $rc $((SECONDS - t1)) s" >> $d/checks.txt
    [ $rc = 0 ] && { [ $side = prev ] && olds+=($d/$side-$i) || news+=($d/$side-$i); }
  done
  [ ${#olds[@]} -gt 0 ] && [ ${#news[@]} -gt 0 ] &&
    python3 scripts/compare_bench.py --old "${olds[@]}" --new "${news[@]}" > $d/compare.txt 2>&1
  pack
done
cat $d/checks.txt; tail -40 $d/compare.txt
