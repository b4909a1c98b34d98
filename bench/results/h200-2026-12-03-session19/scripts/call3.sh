#!/bin/bash
# Call 3: the bindings on the GPU (main with node updates through the driver): the Python package's pytest suite
# with its torch cases, python/bench_step.py (5000 steps), the Rust GPU bundle (built here by rust/gpu-tests.sh
# and carried), and hf_decode's smoke test. Logs archived into $OUT.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
d=/tmp/dc3; rm -rf $d
HF_MODELS=" " PY_BENCH_STEPS=5000 timeout 560 bash scripts/device-check.sh $d build python rust hf
echo "device-check rc $?" >> $d/summary.txt
cp $d/summary.txt $OUT/ 2>/dev/null
cd /tmp && tar -cJf $OUT/call3.tar.xz dc3
cat $d/summary.txt; tail -5 $d/python-tests.log; tail -12 $d/rust-gpu.log; tail -4 $d/hf-smoke.log; tail -12 $d/python-bench-step.log
