#!/bin/bash
# Call 1: where a staged step's time goes at seed policy (span: every block's start and end stamped, ring and
# inline launches of the same build), and what the runtime's cudaGraphLaunch wrapper costs a step on the host
# (drvlaunch: the driver's cuGraphLaunch). Main's build (base) is timed beside them, every bench pinned to CPU 3.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
d=/tmp/sl1; rm -rf $d; mkdir -p $d; t1=$SECONDS
nvidia-smi -L > $d/checks.txt
timeout 480 python3 dev/stage_lab.py $d base span span+ring drvlaunch --runs 3 --builds 3 --pin 3 -- --strategies graph-fused,graph-fused-inputs --tokens 1,2,4,8,16 --presets glm-5.3-flash-tp2 --policies seed,all --cpu-reps 1000 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt
cp $d/stage_lab.txt $d/lab.out $d/checks.txt $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call1.tar.xz sl1
tail -90 $d/stage_lab.txt; cat $d/checks.txt
