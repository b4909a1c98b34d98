#!/bin/bash
# Session 17 call 9: main (524d4ae) vs listcap (the list inline form in a 256-chunk class beside the 544 one; branch archived into .device-variant-listcap),
# policy all at 1-8 tokens, three runs each; listcap's stage_inline under memcheck.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
git log --oneline -1 > $OUT/tree.txt 2>&1
d=/tmp/sl9; rm -rf $d; mkdir -p $d
t0=$SECONDS
timeout 400 python3 dev/stage_lab.py $d base listcap=.device-variant-listcap --runs 3 --builds 2 -- --strategies graph-fused,graph-fused-inputs --tokens 1,2,4,8 --presets glm-5.3-flash-tp2 --policies all --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t0)) s" >> $d/lab.out
t1=$SECONDS; timeout 100 compute-sanitizer --error-exitcode 1 --tool memcheck $d/listcap/build/tests/test_stage_inline --jobs 1 > $d/memcheck-listcap-stage_inline.log 2>&1
echo "rc $? memcheck-listcap-stage_inline $((SECONDS - t1)) s" >> $d/checks.txt
cp $d/stage_lab.txt $d/lab.out $d/checks.txt $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call9.tar.xz sl9
tail -22 $d/stage_lab.txt; cat $d/checks.txt; tail -1 $d/lab.out
