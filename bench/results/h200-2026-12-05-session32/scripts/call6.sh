#!/bin/bash
# Call 6 (written, not run in this session: its device time was spent), from
# a checkout of main with the build before this session's change beside it:
#   git archive 45a8adf -- . ':(exclude)bench/results' | tar -x -C .device-prev
# carried with .device-deps. Variants:
#   base      main (mdr_stage_inline_block; images of at most 72 vectors
#             dealt over the warps by vector)
#   prev      45a8adf: for the README's figures, main against the build
#             before on the card this call gets (calls 1-4 were an H100's)
#   imgpair   the dealing by 32-byte sectors (half the sectors a warp)
#   pairall   imgpair's map for every image (the extra-large classes too)
#   wordtail  a piece's part-vector stored in words where aligned
#   pairword  imgpair and wordtail together
# timed as calls 1-4 (ids only, the whole table staged, the table on the
# device; 1-64 sequences, GLM-5.3, policy all), three interleaved runs
# pinned to CPU 3, each validated first by the step-input suites on the
# GPU; then phases on base at 1, 2 and 4 sequences as time allows.
# LAB_VARIANTS, LAB_RUNS, LAB_TIMEOUT (default 460 s) shorten it.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
export PYTHONUNBUFFERED=1
d=/tmp/s32c6; rm -rf $d; mkdir -p $d/lab $d/ph; nvidia-smi -L > $d/checks.txt
pack() { cp $d/checks.txt $OUT/ 2>/dev/null; cp $d/lab/stage_lab.txt $OUT/stage_lab.txt 2>/dev/null
         cp $d/ph/stage_lab.txt $OUT/phases_lab.txt 2>/dev/null
         (cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call6.tar.xz s32c6); }
t1=$SECONDS
timeout ${LAB_TIMEOUT:-460} python3 dev/stage_lab.py $d/lab ${LAB_VARIANTS:-base prev=.device-prev imgpair pairall wordtail pairword} \
  --runs ${LAB_RUNS:-3} --builds 3 --pin 3 -- \
  --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
  --tokens 1,2,4,8,16,32,64 --presets glm-5.3-flash-tp2 --policies all --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
if [ $SECONDS -lt $(( ${CALL_LIMIT:-590} - 90 )) ]; then
  t1=$SECONDS
  timeout $(( ${CALL_LIMIT:-590} - SECONDS - 10 )) python3 dev/stage_lab.py $d/ph phases --runs 1 --builds 1 -- \
    --strategies graph-fused,graph-fused-inputs,graph-fused-inputs-devtable \
    --tokens 1,2,4 --presets glm-5.3-flash-tp2 --policies all --cpu-reps 200 --force > $d/ph.out 2>&1
  echo "phases lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt; pack
fi
cat $d/checks.txt
sed -n '/policy all$/,/^$/p' $d/lab/stage_lab.txt | head -30
grep -A16 "phases stamps" $d/ph/stage_lab.txt | head -20
