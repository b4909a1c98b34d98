#!/bin/bash
# Call 5: is a ring step's +0.3 us at seed policy inside the kernel? Nsight Compute's gpu__time_duration of the
# fused kernel (zero_static_kernel) for the same ids-only step inline (main) and through the ring
# (MDR_STAGE_INLINE=0), at 8 tokens, against mdr-bench's event-timed GPU medians of the same runs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
d=/tmp/nc5; b=/tmp/b5; rm -rf $d; mkdir -p $d; t0=$SECONDS
( cmake -S . -B $b -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DMDR_BUILD_TESTS=OFF > $d/build.log 2>&1 &&
  timeout 120 cmake --build $b -j 16 --target mdr-bench >> $d/build.log 2>&1 ); echo "build rc $? $((SECONDS - t0)) s" > $d/checks.txt
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for mode in inline ring; do
  for t in 8; do
    t1=$SECONDS
    env $([ $mode = ring ] && echo MDR_STAGE_INLINE=0) timeout 60 $NCU --clock-control none --cache-control none \
      --metrics gpu__time_duration.sum -k regex:zero_static_kernel --launch-skip 300 --launch-count 150 --csv \
      $b/bench/mdr-bench --strategies graph-fused --tokens $t --presets glm-5.3-flash-tp2 --policies seed \
      --reps 200 --cpu-reps 200 --pin 3 --out $d/bench-$mode-$t --force > $d/ncu-$mode-$t.csv 2> $d/ncu-$mode-$t.err
    echo "ncu $mode $t rc $? $((SECONDS - t1)) s" >> $d/checks.txt
  done
done
python3 - $d > $d/summary.txt <<'PY'
import csv, glob, os, statistics, sys
d = sys.argv[1]
for f in sorted(glob.glob(os.path.join(d, "ncu-*.csv"))):
    vals = []
    for r in csv.reader(l for l in open(f, errors="replace") if l.startswith('"')):
        if len(r) > 3 and r[-3] == "gpu__time_duration.sum":
            try:
                vals.append(float(r[-1].replace(",", "")) / (1000.0 if r[-2] == "nsecond" else 1.0 if r[-2] == "usecond" else 1e-3))
            except ValueError:
                pass
    tag = os.path.basename(f)[4:-4]
    bench = ""
    rc = os.path.join(d, "bench-" + tag, "results.csv")
    if os.path.exists(rc):
        rows = list(csv.DictReader(open(rc)))
        bench = " bench GPU med " + ",".join(r["gpu_us_med"] for r in rows)
    print(f"{tag}: n {len(vals)} kernel us median {statistics.median(vals):.3f} p10 {sorted(vals)[len(vals)//10]:.3f}" if vals else f"{tag}: no samples", bench)
PY
cp $d/summary.txt $d/checks.txt $OUT/ 2>/dev/null
cd /tmp && tar -cJf $OUT/call5.tar.xz --exclude='b5' nc5
cat $d/summary.txt $d/checks.txt; head -c 600 $d/ncu-inline-8.err
