#!/bin/bash
# Call 2 (call 1's inplacepad did not build: __ffs, which the host
# emulation lacks; the patch now walks the lanes): stage_lab's inplacepad (a step whose device-resident inputs are
# all kept in place skips the block-wide device-input pass and its barrier;
# warp 0 writes their pad rows) against main (base): both validated by the
# step-input suites on the GPU (the in-place test among them), then ids
# only, the whole table staged and the table kept on the device, 1-32
# sequences, GLM-5.3, both policies, three interleaved runs pinned to CPU 3;
# ipseed (inplacepad, and the larger classes inline at any plan length:
# the device-table step at seed policy at 16 sequences inline); memcheck of
# test_step_inputs on the two variants' builds.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s25c2; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
pack() { cp $d/checks.txt $d/stage_lab.txt $d/memcheck-*.log $OUT/ 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call2.tar.xz s25c2); }
t1=$SECONDS
timeout 400 python3 dev/stage_lab.py $d base inplacepad ipseed --runs 3 --builds 3 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4,8,16,32 --presets glm-5.3-flash-tp2 --policies all,seed --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
for v in inplacepad ipseed; do
  t1=$SECONDS
  timeout 80 compute-sanitizer --error-exitcode 1 --tool memcheck --report-api-errors no \
    $d/$v/build/tests/test_step_inputs --jobs 1 > $d/memcheck-step_inputs-$v.log 2>&1
  echo "memcheck step_inputs $v rc $? $((SECONDS - t1)) s: $(grep -h 'Synthesis' $d/memcheck-step_inputs-$v.log | tr -s ' ') $(grep -h 'ERROR SUMMARY' $d/memcheck-step_inputs-$v.log)" >> $d/checks.txt
  pack
done
cat $d/checks.txt
grep -A80 -E "^(GPU|step inputs|compare)" $d/stage_lab.txt | head -150
