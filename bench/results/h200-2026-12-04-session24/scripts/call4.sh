#!/bin/bash
# Call 4: steps with inputs take at least the large image class (51f257a)
# against the tree before it (.device-prev: `git archive 7b70962`):
# stage_lab validates both with the step-input suites on the GPU, then
# times ids only, the whole table staged, the table kept on the device, and
# device ids with and without inputs, 1-32 sequences, GLM-5.3, both
# policies, three interleaved runs pinned to CPU 3; memcheck of
# test_stage_inline and test_step_inputs on this tree's build; then
# Qwen3-0.6B (b) and (d) in one pool under rows all at batch 1 and 4 with
# each tree's library, and 8 steps of this tree's under torch's profiler.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s24c4; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt; t0=$SECONDS
left() { echo $((570 - (SECONDS - t0))); }
pack() { cp $d/checks.txt $d/stage_lab.txt $d/hf_*.log $OUT/ 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call4.tar.xz s24c4); }
t1=$SECONDS
timeout 300 python3 dev/stage_lab.py $d base prev=.device-prev --runs 3 --builds 2 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable,graph-fused-dev,graph-fused-dev-inputs \
  --tokens 1,2,4,8,16,32 --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
cs="compute-sanitizer --error-exitcode 1 --tool memcheck"
for s in stage_inline step_inputs; do
  extra=""; [ $s = step_inputs ] && extra="--report-api-errors no"
  t1=$SECONDS
  timeout 90 $cs $extra $d/base/build/tests/test_$s --jobs 1 > $d/memcheck-$s.log 2>&1
  echo "memcheck $s rc $? $((SECONDS - t1)) s: $(grep -h 'Synthesis' $d/memcheck-$s.log | tr -s ' ') $(grep -h 'ERROR SUMMARY' $d/memcheck-$s.log)" >> $d/checks.txt
done
pack
export PYTHONPATH=$PWD/python
for lib in base prev; do
  [ $(left) -lt 100 ] && break
  t1=$SECONDS
  MDR_LIBRARY=$d/$lib/build/libmdr.so timeout 110 python3 examples/python/hf_decode.py --model 0.6b --batch 1,4 \
    --steps 128 --reps 3 --sdpa math --no-generate --no-compile --no-ref-timing --time b,d --share-pool \
    --mdr-rows all --json $d/hf_$lib.json > $d/hf_$lib.log 2>&1
  echo "hf $lib rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
done
if [ $(left) -gt 50 ]; then
  t1=$SECONDS
  MDR_LIBRARY=$d/base/build/libmdr.so timeout $(left) python3 examples/python/hf_decode.py --model 0.6b --batch 1 \
    --steps 32 --reps 1 --sdpa math --no-generate --no-compile --no-ref-timing --time b,d --share-pool \
    --mdr-rows all --profile 8 --json $d/hf_profile_base.json > $d/hf_profile_base.log 2>&1
  echo "hf profile base rc $? $((SECONDS - t1)) s" >> $d/checks.txt
fi
pack
cat $d/checks.txt
grep -A80 -E "^(GPU|step inputs|compare)" $d/stage_lab.txt | head -150
for f in $d/hf_*.log; do echo "== $f"; grep -E "^== batch|^\(b|^\(d|^targets|zero_|Memcpy HtoD" $f; done
