#!/bin/bash
# Call 3: the table kernel's grid (DYNAMIC's node update). Its grid is sized to stay resident at ZF_BLOCKS_PER_SM (6)
# blocks a SM, but its 64 registers let four fit. tablegrid sizes the grid at what the occupancy API says fits;
# tablelb6 holds the kernel at 40 registers instead (its stage code spills). graph-dynamic-count (the device-count
# kernel, 40 registers, untouched) is the control. Main's build beside them, three interleaved runs, pinned to CPU 3.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=/tmp/crit/usr PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
d=/tmp/sl3; rm -rf $d; mkdir -p $d; t1=$SECONDS
nvidia-smi -L > $d/checks.txt
timeout 540 python3 dev/stage_lab.py $d base tablegrid tablelb6 --runs 3 --builds 3 --pin 3 -- --strategies graph-dynamic,graph-dynamic-count --tokens 1,2,8,64,512,4096 --presets glm-5.3-flash-tp2 --policies seed,all --cpu-reps 500 --force > $d/lab.out 2>&1
echo "lab rc $? $((SECONDS - t1)) s" >> $d/checks.txt
cp $d/stage_lab.txt $d/lab.out $d/checks.txt $OUT/ 2>/dev/null
cd /tmp && tar --exclude='*/src' --exclude='*/build' -cJf $OUT/call3.tar.xz sl3
tail -80 $d/stage_lab.txt; cat $d/checks.txt
