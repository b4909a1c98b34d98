#!/usr/bin/env bash
# Device check on a GPU machine: build for sm_90, run the test suites, run
# the GPU suites again under compute-sanitizer (memcheck, initcheck,
# synccheck), run the kernel variants, the decode-loop example and the
# benchmark, and print a short table last. Everything is logged under OUT.
#
# Usage: bash scripts/device-check.sh OUT [phase...]
#   phases: build tests sanitize variants sweep probe ncu decode soak bench peer compare variant tp tpsan arproto overhead floor paramload params python rust hf
#   python: the Python package's pytest suite (GPU cases with torch) and python/bench_step.py
#   rust: rust/gpu-out/run.sh, the Rust GPU bundle built elsewhere and carried (rust/gpu-tests.sh)
#   arproto: mdr's all-reduce protocol on one GPU: the ar_gpu suite (AR_GPU_CALLS,
#     default 100000); tests/ar_gpu_procs (ranks as processes) with 2 and 4
#     ranks, plainly and under memcheck and synccheck (AR_PROCS_SAN_CALLS,
#     default 100; each such run under STEP_TIMEOUT, default 900 s here),
#     and plainly with rank 1 of 4 destroyed while the others wait (--destroy-rank 1),
#     dev/all_reduce_compare (the kernels before and after the protocol rebuild)
#     and dev/all_reduce_norm_compare (the fused norm against the unfused chain,
#     under MDR_AR_NORM_FUSE=always, never and auto)
#   tpsan: the several-GPU suites under compute-sanitizer (memcheck; synccheck
#     for all_reduce)
#   overhead: the host's cost of a step, piece by piece, and its tails (dev/step_overhead_probe)
#   floor: where a small device-id step's GPU time goes (dev/step_floor_probe,
#     FLOOR_REPS reps per case)
#   paramload: what the inline stage block pays to read its image from the
#     kernel's parameters, beside ld.param and L2 (dev/param_load_probe,
#     PARAMLOAD_REPS graph replays per case, default 200)
#   params: a small step's inputs in the kernel's parameters
#     (node update per step) beside the staging slot, device-resident inputs
#     and zeroing alone (dev/step_params_probe, PARAMS_REPS reps per case,
#     default 2000; PARAMS_ARGS adds arguments, e.g. --zero-mib 2,4,16)
#   hf: Hugging Face transformers' Qwen3 decoded through mdr
#     (examples/python/hf_decode.py: torch + transformers on python3): its
#     smoke test, then per model in HF_MODELS (default "0.6b 1.7b") one run
#     over the batch sizes in HF_BATCHES (default "1 4 16") of HF_STEPS greedy
#     steps (default 128) after a 32-token prompt, JSON in OUT/hf_<model>.json;
#     attention pinned to SDPA's HF_SDPA backend (default math: with torch's
#     own choice the eager loop does not repeat itself at batch 16);
#     HF_ARGS adds arguments (default --no-compile --no-ref-timing --share-pool
#     --time b,b2,d: (b) and (d) in one graph pool, so that their placement is
#     the same, and (b2), torch's second capture in a pool of its own, for
#     the spread placement gives; path (c)
#     compiles for ~50 s per batch size, so both models with it do not fit
#     one call, and the eager reference takes ~40 ms a step; HF_ARGS=" "
#     runs every path), HF_TIMEOUT bounds each run (default 600 s)
#   tp: the several-GPU phase (two GPUs or more): the comm, all_reduce and
#     backend_cuda suites, soaks of mdr's all-reduce
#     (TP_SOAK replays, default 100000, per algorithm in TP_SOAK_ALGOS), the
#     TP=2 decode loop, mdr-bench-tp (TP_BENCH_RUNS times; with TP_PDL_AB
#     set, each time also with MDR_AR_PDL=0 first), mdr-bench-tp --norm
#     (the fused all-reduce + residual + RMSNorm; TP_NORM_ARGS; under
#     MDR_AR_NORM_FUSE=always, never and auto) and
#     mdr-bench-tp --barrier (mdr's block barrier against NCCL's LSA barrier)
#   (default: build tests sanitize variants decode bench peer)
#   env BENCH_ARGS: extra arguments for mdr-bench (default --quick)
#   variant: a branch's tree beside this one (VARIANT, default .device-variant,
#     made with `git archive BRANCH | tar -x -C .device-variant` and carried):
#     built to build-variant, then for each of VARIANT_RUNS rounds (default 2)
#     both trees' all_reduce_compare and step-inputs bench alternately, and
#     the variant's ar_gpu suite (VARIANT_AR_CALLS calls, default 100000; 0
#     skips it) and
#     its step_inputs, staging and graph_cache suites once
#   compare: the previous build side by side with this one. PREV names a
#     source tree of it (default .device-prev, made here with
#     `git archive REV | tar -x -C .device-prev` and carried); both
#     mdr-bench builds run COMPARE_RUNS times each, alternately, with the
#     same COMPARE_ARGS, and scripts/compare_bench.py prints the ratios.
#     COMPARE_PIN=CPU runs both on that one CPU (taskset: an older
#     mdr-bench may lack --pin), so their CPU figures compare.
# Criterion comes from .device-deps/criterion/*.deb, made by
# scripts/fetch-criterion-debs.sh (docs/GPU-MACHINE.md).
set -uo pipefail
# NVLink multicast stays off on the shared GPU machines, for this script and
# every child (docs/GPU-MACHINE.md); scripts/device-env.sh sets it again,
# with Criterion's paths.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${1:?usage: device-check.sh OUT [phase...]}
shift
phases=${*:-build tests sanitize variants decode bench peer}
cd "$(dirname "$0")/.."
# shellcheck source=scripts/device-env.sh
. scripts/device-env.sh
mkdir -p "$out"
log="$out/device-check.log"
summary="$out/summary.txt"
: >"$summary"
has() { [[ " $phases " == *" $1 "* ]]; }
note() { echo "$*" | tee -a "$summary"; }
run() { # name, command...: run, log, record pass/fail
  local name=$1; shift
  echo "== $name: $*" >>"$log"
  local t0=$SECONDS
  if timeout "${STEP_TIMEOUT:-300}" "$@" >"$out/$name.log" 2>&1; then note "PASS $name ($((SECONDS - t0)) s)"
  else note "FAIL $name (rc $?, $((SECONDS - t0)) s) — see $name.log"; tail -20 "$out/$name.log"; fi
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv >"$out/gpu.txt" 2>&1
nvcc --version | tail -1 >>"$out/gpu.txt"

build=build-device
if has build; then
  run configure cmake -S . -B $build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DMDR_REQUIRE_TESTS=ON
  run build cmake --build $build -j "$(nproc)"
fi
if has tests; then
  run ctest bash -c "cd $build && ctest --output-on-failure --no-tests=error -j 4"
fi
if has sanitize; then
  cs="compute-sanitizer --error-exitcode 1 --target-processes all"
  # backend and graph_cache provoke CUDA API errors on purpose (illegal
  # calls under capture): memory errors only there.
  for suite in zero_fused arena stage_inline; do
    run "memcheck-$suite" $cs --tool memcheck $build/tests/test_$suite --jobs 1
  done
  for suite in backend graph_cache step_inputs; do
    run "memcheck-$suite" $cs --tool memcheck --report-api-errors no $build/tests/test_$suite --jobs 1
  done
  # compute-sanitizer serialises kernels, so the case showing that no call
  # waits for a busy unrelated stream cannot hold there: the other cases.
  run memcheck-backend_cuda $cs --tool memcheck --report-api-errors no $build/tests/test_backend_cuda --jobs 1 \
    --filter 'backend_cuda/[at]*'

  for suite in zero_fused graph_cache step_inputs stage_inline; do
    run "initcheck-$suite" $cs --tool initcheck $build/tests/test_$suite --jobs 1
    run "synccheck-$suite" $cs --tool synccheck $build/tests/test_$suite --jobs 1
  done
fi
if has variants; then
  run variants $build/dev/zero_fused_variants "$out/zero_fused_variants.csv"
fi
if has sweep; then
  # The promoted kernel's launch shape: chunk bytes x 16-byte stores in
  # flight per thread, each build validated and timed by the variants
  # program (rows "lib").
  shapes="4096:1 8192:2 16384:4 16384:2 32768:8 65536:8"
  for sh in $shapes; do
    chunk=${sh%%:*} unroll=${sh##*:}
    nvcc -O3 -std=c++17 -arch=sm_90 -Ikernels -Istaging -Iplan -Iinclude -DMDR_STATIC_DEFINE -DMDR_ZERO_CHUNK=$chunk -DZF_UNROLL=$unroll \
      dev/zero_fused_variants.cu kernels/zero_fused.cu -o "/tmp/zfv_${chunk}_${unroll}" &
  done
  wait
  for sh in $shapes; do
    chunk=${sh%%:*} unroll=${sh##*:}
    run "sweep-c${chunk}-u${unroll}" "/tmp/zfv_${chunk}_${unroll}"
    grep -E '^(lib|memset) ' "$out/sweep-c${chunk}-u${unroll}.log" | sed "s/^/chunk $chunk unroll $unroll: /" >>"$out/sweep.txt"
  done
  cat "$out/sweep.txt"
fi
if has probe; then
  # DYNAMIC's three implementations side by side (dev/dynamic_switch_probe.cu)
  run probe $build/dev/dynamic_switch_probe --reps "${PROBE_REPS:-200}" --csv "$out/dynamic_probe.csv"
fi
if has ncu; then
  # Launch shape and throughput of the driver's memset kernel beside the
  # fused kernel's variants (first launches of the variants program).
  run ncu ncu --section LaunchStats --section SpeedOfLight --section Occupancy \
    -k 'regex:emset|zero_static|zero_v2|zero_v9|zero_v10' -c 24 $build/dev/zero_fused_variants
fi
if has decode; then
  run decode-loop $build/examples/mdr_decode_loop --steps 200 --json "$out/decode_loop.json"
  run decode-loop-device-fed $build/examples/mdr_decode_loop --steps 200 --device-fed --json "$out/decode_loop_fed.json"
  run decode-prepare-4096 $build/examples/mdr_decode_loop --max-tokens 4096 --prepare-all 4096 --pad-kernels 8 \
    --zero fused --steps 20 --json "$out/decode_prepare_4096.json"
  run decode-loop-initcheck compute-sanitizer --error-exitcode 1 --tool initcheck $build/examples/mdr_decode_loop --steps 10
  run decode-loop-memcheck compute-sanitizer --error-exitcode 1 --tool memcheck $build/examples/mdr_decode_loop --steps 10
fi
if has soak; then
  run soak env STEPS="${SOAK_STEPS:-100000}" bash scripts/soak.sh "$out/soak"
fi
if has bench; then
  run bench $build/bench/mdr-bench ${BENCH_ARGS:---quick} --out "$out/bench" --force
  # the step-inputs figures, read off one run: graph-fused-inputs
  # beside graph-fused at 1-64 tokens, the same with the ids on the
  # device, and with the block table kept on the device (the three
  # `step inputs:` blocks and their goal lines)
  run bench-inputs $build/bench/mdr-bench \
    --strategies graph-fused,graph-fused-inputs,graph-fused-dev,graph-fused-dev-inputs,graph-fused-inputs-devtable \
    --tokens 1,2,4,8,16,32,64 \
    --presets glm-5.3-flash-tp2,qwen3-next-80b --cpu-reps 4000 --out "$out/bench-inputs" --force
fi
if has peer; then
  run peer env PYTHONUNBUFFERED=1 python3 bench/peer_torch.py --dir "$out/bench" ${PEER_ARGS:---quick}
  run plot python3 bench/plot.py --dir "$out/bench"
fi
if has tp; then
  ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
  if [ "$ngpu" -lt 2 ]; then
    note "SKIP tp (needs two GPUs, found $ngpu)"
  else
    nvidia-smi topo -m >"$out/topo.txt" 2>&1
    run tp-suites bash -c "$build/tests/test_comm --jobs 1 --verbose && $build/tests/test_backend_cuda --jobs 1 --verbose"
    # mdr's all-reduce kernels: their suite, soaks of TP_SOAK replays
    # across the epoch's wrap, the decode loop, then the benchmark (with
    # TP_PDL_AB set, each time also with programmatic dependent launch off)
    run tp-all-reduce $build/tests/test_all_reduce --jobs 1 --verbose
    for algo in ${TP_SOAK_ALGOS:-auto one-shot two-shot}; do
      run "soak-tp-$algo" $build/bench/mdr-bench-tp --soak "${TP_SOAK:-100000}" --soak-algo "$algo" \
        --out "$out/soak-tp-$algo" --force
    done
    run decode-tp $build/examples/mdr_decode_tp ${TP_DECODE_ARGS:---steps 240 --dynamic} --json "$out/decode_tp.json"
    for i in $(seq 1 "${TP_BENCH_RUNS:-1}"); do
      if [ -n "${TP_PDL_AB:-}" ]; then
        run "bench-tp-nopdl-$i" env MDR_AR_PDL=0 $build/bench/mdr-bench-tp ${TP_BENCH_ARGS:---quick} \
          --out "$out/bench-tp-nopdl-$i" --force
      fi
      run "bench-tp-$i" $build/bench/mdr-bench-tp ${TP_BENCH_ARGS:---quick} --out "$out/bench-tp-$i" --force
    done
    # the fused all-reduce + residual + RMSNorm against the unfused chain and
    # NCCL + RMSNorm (1-128 tokens, hidden 4096/6144/8192; TP_NORM_ARGS): the
    # fused kernel everywhere (always: where the crossover is), the library's
    # chain (never) and the shipped crossover (auto)
    for fuse in always never auto; do
      run "bench-tp-norm-$fuse" env MDR_AR_NORM_FUSE=$fuse $build/bench/mdr-bench-tp --norm ${TP_NORM_ARGS:-} \
        --out "$out/bench-tp-norm-$fuse" --force
    done
    # mdr's block barrier against NCCL's LSA barrier, both validated first
    run bench-tp-barrier $build/bench/mdr-bench-tp --barrier --out "$out/bench-tp-barrier" --force
  fi
fi
if has tpsan; then
  cs="compute-sanitizer --error-exitcode 1 --target-processes all"
  # (not the two-process case: its ranks' NCCL start-up under the tool outlasts its timeout)
  run memcheck-comm $cs --tool memcheck --report-api-errors no $build/tests/test_comm --jobs 1 --filter 'comm/[!t]*'
  run memcheck-backend_cuda-2gpu $cs --tool memcheck --report-api-errors no $build/tests/test_backend_cuda --jobs 1 \
    --filter 'backend_cuda/[at]*'
  run memcheck-all-reduce $cs --tool memcheck --report-api-errors no $build/tests/test_all_reduce --jobs 1
  run synccheck-all-reduce $cs --tool synccheck $build/tests/test_all_reduce --jobs 1 --filter 'all_reduce/gpu_[ke]*'
fi
if has arproto; then
  # mdr's all-reduce protocol on one GPU (the ar_gpu harness: 2, 4 and 8
  # ranks, AR_GPU_CALLS random calls per rank count), the kernels with
  # ranks as processes plainly and under the sanitizers, and the kernels
  # before and after the protocol rebuild side by side (dev/all_reduce_compare)
  run ar-gpu env MDR_AR_GPU_CALLS="${AR_GPU_CALLS:-100000}" $build/tests/test_ar_gpu --jobs 1 --verbose
  # Not the ar_gpu suite under compute-sanitizer: its ranks are threads of
  # one process, the tool serialises a process's kernels, and a rank's
  # kernel spins until its peers' kernels run, so they never meet (a hang).
  # tests/ar_gpu_procs runs each rank as a process (slabs shared through
  # CUDA IPC); processes time-slice on the GPU, so the ranks meet under the
  # tool too. --target-processes all: the tool follows the forked ranks.
  for n in 2 4; do
    run ar-procs-$n $build/tests/ar_gpu_procs --ranks $n
  done
  # a rank that goes away while its peers (other processes) wait in a call:
  # it raises their regions' abort words, and each peer must end within
  # 100 ms with the give-up cause PEER, rows untouched, stream usable
  run ar-procs-destroy $build/tests/ar_gpu_procs --ranks 4 --destroy-rank 1
  cs="compute-sanitizer --error-exitcode 1 --target-processes all"
  for tool in memcheck synccheck; do
    for n in 2 4; do
      STEP_TIMEOUT=${STEP_TIMEOUT:-900} run $tool-ar-procs-$n $cs --tool $tool $build/tests/ar_gpu_procs --ranks $n \
        --calls "${AR_PROCS_SAN_CALLS:-100}" --timeout-s 300
    done
  done
  # The control: a rank the tool did not watch would pass unchecked. The last
  # rank reads past an allocation once (--plant-oob 1); memcheck must fail
  # the run and name the read.
  STEP_TIMEOUT=${STEP_TIMEOUT:-900} run memcheck-ar-procs-planted bash -c "! $cs --tool memcheck \
    $build/tests/ar_gpu_procs --ranks 2 --calls 20 --plant-oob 1 --timeout-s 300 >'$out/planted.log' 2>&1 &&
    grep -q 'Invalid __global__ read' '$out/planted.log'"
  mkdir -p "$out/ar-compare"
  run ar-compare $build/dev/all_reduce_compare "$out/ar-compare" ${AR_COMPARE_ARGS:---reps 400}
  # the fused all-reduce + residual + RMSNorm against the unfused chain, ranks
  # on one GPU (a first look; the figures belong to tp's bench-tp-norm): the
  # fused kernel everywhere (always), the library's chain (never) and the
  # shipped crossover (auto), each against the chain by hand
  for fuse in always never auto; do
    mkdir -p "$out/ar-norm-compare-$fuse"
    run "ar-norm-compare-$fuse" env MDR_AR_NORM_FUSE=$fuse $build/dev/all_reduce_norm_compare \
      "$out/ar-norm-compare-$fuse" ${AR_NORM_ARGS:---reps 400}
  done
fi
if has overhead; then
  run overhead $build/dev/step_overhead_probe
fi
if has floor; then
  run floor $build/dev/step_floor_probe --reps "${FLOOR_REPS:-300}" --csv "$out/step_floor.csv"
fi
if has paramload; then
  run paramload $build/dev/param_load_probe --reps "${PARAMLOAD_REPS:-200}" --csv "$out/param_load.csv"
fi
if has params; then
  run params $build/dev/step_params_probe --reps "${PARAMS_REPS:-2000}" --csv "$out/step_params.csv" ${PARAMS_ARGS:-}
fi
if has python; then
  # the Python package's suite (its GPU cases: torch bodies under mdr's
  # capture, zero-copy views, mode (b) inside torch.cuda.graph) and the
  # CPU cost of a step from Python beside CUDAGraph.replay()
  pyenv=(env MDR_LIBRARY="$PWD/$build/libmdr.so" PYTHONPATH="python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1)
  run python-tests "${pyenv[@]}" python3 -m pytest -q -rs -p no:cacheprovider python/tests
  run python-bench-step "${pyenv[@]}" python3 python/bench_step.py --steps "${PY_BENCH_STEPS:-20000}" --tokens 8 \
    --json "$out/bench_step.json"
fi
if has rust; then
  # the Rust crates' GPU cases and the Rust-against-C CPU figure:
  # the bundle built where cargo is (rust/gpu-tests.sh) and carried here
  if [ -x rust/gpu-out/run.sh ]; then run rust-gpu bash rust/gpu-out/run.sh
  else note "SKIP rust-gpu: no rust/gpu-out bundle (build it with rust/gpu-tests.sh and carry it)"; fi
fi
if has hf; then
  hfenv=(env MDR_LIBRARY="$PWD/$build/libmdr.so" PYTHONPATH="python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1)
  if python3 -c "import pytest" 2>/dev/null; then
    STEP_TIMEOUT=${HF_TIMEOUT:-600} run hf-smoke "${hfenv[@]}" python3 -m pytest -q -rs -p no:cacheprovider \
      python/tests/test_hf_decode_smoke.py
  else  # no pytest for torch's python: the smoke test's command itself
    STEP_TIMEOUT=${HF_TIMEOUT:-600} run hf-smoke "${hfenv[@]}" python3 examples/python/hf_decode.py \
      --tiny --steps 4 --batch 1,4 --reps 1 --no-compile --json "$out/hf_smoke.json"
  fi
  # one process per model, every batch size in it: the model is made (and
  # torch.compile'd) once
  hb=$(echo ${HF_BATCHES:-1 4 16} | tr ' ' ',')
  for m in ${HF_MODELS:-0.6b 1.7b}; do
    STEP_TIMEOUT=${HF_TIMEOUT:-600} run "hf-$m" "${hfenv[@]}" python3 examples/python/hf_decode.py \
      --model "$m" --batch "$hb" --prompt 32 --steps "${HF_STEPS:-128}" --sdpa "${HF_SDPA:-math}" \
      ${HF_ARGS:---no-compile --no-ref-timing --share-pool --time b,b2,d} \
      --json "$out/hf_$m.json"
  done
fi
if has variant; then
  vt=${VARIANT:-.device-variant}
  if [ ! -d "$vt" ]; then
    note "SKIP variant: no tree at $vt (git archive BRANCH | tar -x -C $vt, and carry it)"
  else
    run variant-configure cmake -S "$vt" -B build-variant -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DMDR_REQUIRE_TESTS=ON
    run variant-build cmake --build build-variant -j "$(nproc)"
    if [ "${VARIANT_AR_CALLS:-100000}" != 0 ]; then  # 0: a variant whose all-reduce kernels are main's
      run variant-ar-gpu env MDR_AR_GPU_CALLS="${VARIANT_AR_CALLS:-100000}" build-variant/tests/test_ar_gpu --jobs 1 --verbose
    fi
    run variant-suites bash -c "cd build-variant && ctest --output-on-failure -R '^(step_inputs|staging|graph_cache|decode_loop)'"
    ins=(--strategies graph-fused,graph-fused-inputs --tokens 1,2,4,8,16,32,64 --presets glm-5.3-flash-tp2,qwen3-next-80b
      --cpu-reps 4000 --force)
    for i in $(seq 1 "${VARIANT_RUNS:-2}"); do
      for side in main variant; do
        b=$build; [ $side = variant ] && b=build-variant
        mkdir -p "$out/ar-compare-$side-$i"
        run "ar-compare-$side-$i" $b/dev/all_reduce_compare "$out/ar-compare-$side-$i" --reps 400
        run "bench-inputs-$side-$i" $b/bench/mdr-bench "${ins[@]}" --out "$out/bench-inputs-$side-$i"
      done
    done
  fi
fi
if has compare; then
  prev=${PREV:-.device-prev}
  cargs=${COMPARE_ARGS:---quick}
  run prev-configure cmake -S "$prev" -B build-prev -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DMDR_BUILD_TESTS=OFF -DMDR_BUILD_EXAMPLES=OFF
  run prev-build cmake --build build-prev -j "$(nproc)" --target mdr-bench
  olds=() news=() pin=()
  [ -n "${COMPARE_PIN:-}" ] && pin=(taskset -c "$COMPARE_PIN")
  for i in $(seq 1 "${COMPARE_RUNS:-2}"); do
    run "compare-prev-$i" "${pin[@]}" build-prev/bench/mdr-bench $cargs --out "$out/compare-prev-$i"
    run "compare-new-$i" "${pin[@]}" $build/bench/mdr-bench $cargs --out "$out/compare-new-$i" --force
    olds+=("$out/compare-prev-$i") news+=("$out/compare-new-$i")
  done
  python3 scripts/compare_bench.py --old "${olds[@]}" --new "${news[@]}" | tee "$out/compare.txt"
fi
echo
echo "== summary"
cat "$summary"
# The device tool brings back few files: pack the logs when asked.
if [ -n "${PACK:-}" ]; then
  tar -C "$out" -czf /tmp/device-logs.tgz . && find "$out" -mindepth 1 -delete &&
    mv /tmp/device-logs.tgz "$out/logs.tgz" && tar -xzf "$out/logs.tgz" -C "$out" ./summary.txt
fi
