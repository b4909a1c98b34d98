#!/bin/bash
# Call 2: the zeroing blocks' occupancy. ptxas gives every kernel that can stage 64 registers (the stage code's),
# four 256-thread blocks a SM, where the unstaged static kernel takes 32 (eight). lb8 and lb6 put the staging
# kernels under __launch_bounds__(ZF_BLOCK, 8 or 6) (32 or 40 registers; the stage code spills, in its one block).
# Main's build (base) beside them, three interleaved runs, every bench pinned to CPU 3.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
d=/tmp/sl2; rm -rf $d; mkdir -p $d; t1=$SECONDS
nvidia-smi -L > $d/checks.txt
timeout 540 python3 dev/stage_lab.py $d base lb8 lb6 --runs 3 --builds 3 --pin 3 -- --strategies graph-memset,graph-fused,graph-fused-dev,graph-fused-inputs,graph-dynamic --tokens 1,8,64,512,4096 --presets glm-5.3-flash-tp2 --policies seed,all --cpu-reps 500 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt
cp $d/stage_lab.txt $d/lab.out $d/checks.txt $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call2.tar.xz sl2
tail -80 $d/stage_lab.txt; cat $d/checks.txt
