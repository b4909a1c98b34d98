#!/bin/bash
# Call 5: where a ring step's +0.3 us at seed policy comes from. stage_lab's
# `inlsame` (an inline step whose parameters equal those of its graph's last
# node update launches without updating again: mdr-bench stages the same ids
# every step, so its inline graphs then launch as a ring graph always does,
# with no update since the last launch) beside main and main's `ring` switch
# (MDR_STAGE_INLINE=0), ids-only host steps at 1-16 tokens, GLM-5.3, both
# policies, three interleaved runs pinned to CPU 3.
. scripts/device-env.sh  # multicast off (NCCL_NVLS_ENABLE=0, children too), Criterion's paths
d=/tmp/s23c5; rm -rf $d; mkdir -p $d; nvidia-smi -L > $d/checks.txt
t1=$SECONDS
timeout 500 python3 dev/stage_lab.py $d base inlsame ring --runs 3 --builds 2 --pin 3 -- \
  --strategies graph-fused --tokens 1,2,4,8,16 \
  --presets glm-5.3-flash-tp2 --policies seed,all --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt
cp $d/stage_lab.txt $d/lab.out $d/checks.txt $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call5.tar.xz s23c5
tail -40 $d/stage_lab.txt; cat $d/checks.txt
