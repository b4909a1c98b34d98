#!/usr/bin/env python3
"""peer_torch.py: the PyTorch peer of mdr-bench.

Reads DIR/plans.json (written by mdr-bench), allocates the same buffers as
torch uint8 CUDA tensors (one per buffer, sizes from the JSON), and times the
same step (zero every plan segment + upload the token ids) four ways:

  torch-eager          t[off:off+n].zero_() per segment + the id upload
  torch-foreach        torch._foreach_zero_(segment views) + the id upload
  torch-graph          torch-eager captured in a torch.cuda.CUDAGraph, replayed
  torch-foreach-graph  torch-foreach captured the same way

The id upload is ids_gpu[:t].copy_(ids_pinned[:t], non_blocking=True) from a
pinned host tensor. Figures, measured as mdr-bench does (bench/README.md):
  gpu_us_*     events around one step whose work was queued behind a
               torch.cuda._sleep() spin, so they see GPU time only
  loop_us_mean N steps back to back between two events, divided by N
  cpu_us_*     time.perf_counter() around the submitting call, the stream
               drained every 4 steps
Each (preset, policy, strategy) is validated first: buffers poisoned, one
step, plan bytes read back as zero, ids arrived.

Writes DIR/peer_torch.json with the case keys of results.json (preset,
policy, tokens, strategy). Usage:
  python3 bench/peer_torch.py [--dir bench-out/latest] [--reps 200] [--quick]
"""
import argparse
import json
import os
import sys
import time

torch = None  # imported in main(), so that --help works without it


def import_torch():
    """torch, or exit with what to install."""
    try:
        import torch as t
    except ModuleNotFoundError:
        sys.exit("peer_torch: needs torch (a CUDA build): "
                 "pip install -r bench/requirements-peer.txt --extra-index-url "
                 "https://download.pytorch.org/whl/cu130 (the index of your CUDA version)")
    return t

STRATEGIES = ["torch-eager", "torch-foreach", "torch-graph", "torch-foreach-graph"]
QUICK_TOKENS = {1, 8, 64, 512, 4096}
QUICK_REPS = 30
POISON = 0xA5
FIRST_TOKEN_ID = 1000  # ids of a step: FIRST_TOKEN_ID + i, as in mdr-bench
CPU_BATCH = 4          # steps between drains when timing the CPU
MIN_BLOCK_US = 50.0    # the spin that holds the stream lasts at least this


def percentile(values, q):
    v = sorted(values)
    if not v:
        return None
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


def summary(values, key):
    return {f"{key}_med": percentile(values, 0.5), f"{key}_p10": percentile(values, 0.1),
            f"{key}_p90": percentile(values, 0.9)}


def sleep_cycles_per_us():
    """Cycles of torch.cuda._sleep per microsecond, measured."""
    cycles = 1_000_000
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cycles)  # warm-up
    start.record()
    torch.cuda._sleep(cycles)
    stop.record()
    torch.cuda.synchronize()
    return cycles / (start.elapsed_time(stop) * 1e3)


class PresetBuffers:
    """The buffers a preset's plans touch, plus token_ids, as uint8 tensors."""

    def __init__(self, entry):
        names = {s["buffer"] for p in entry["plans"] for s in p["segments"]}
        names.add(entry["token_ids"])
        self.buffers = {n: torch.empty(entry["buffers"][n], dtype=torch.uint8, device="cuda")
                        for n in sorted(names)}
        m = entry["M"]
        self.ids_gpu = self.buffers[entry["token_ids"]][: m * 4].view(torch.int32)
        self.ids_pinned = torch.arange(FIRST_TOKEN_ID, FIRST_TOKEN_ID + m, dtype=torch.int32).pin_memory()

    def poison(self):
        for t in self.buffers.values():
            t.fill_(POISON)


def make_eager_step(bufs, plan, tokens, foreach):
    segs = [(bufs.buffers[s["buffer"]], s["offset"], s["bytes"]) for s in plan["segments"]]
    ids_gpu, ids_pinned = bufs.ids_gpu, bufs.ids_pinned

    def upload():
        ids_gpu[:tokens].copy_(ids_pinned[:tokens], non_blocking=True)

    if foreach:
        def step():
            torch._foreach_zero_([t[o:o + n] for t, o, n in segs])
            upload()
    else:
        def step():
            for t, o, n in segs:
                t[o:o + n].zero_()
            upload()
    return step


def capture(step):
    """Capture `step` into a CUDAGraph (warmed up on a side stream first)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    torch.cuda.synchronize()
    return graph


def make_step(bufs, plan, tokens, strategy):
    eager = make_eager_step(bufs, plan, tokens, foreach="foreach" in strategy)
    if not strategy.endswith("graph"):
        return eager, None
    graph = capture(eager)
    return graph.replay, graph


def validate(bufs, plan, tokens, step, label):
    bufs.poison()
    torch.cuda.synchronize()
    step()
    torch.cuda.synchronize()
    for s in plan["segments"]:
        view = bufs.buffers[s["buffer"]][s["offset"]:s["offset"] + s["bytes"]]
        if bool((view != 0).any()):
            sys.exit(f"peer_torch: validation failed ({label}): {s['buffer']} not zeroed")
    got = bufs.ids_gpu[:tokens].cpu()
    if not torch.equal(got, bufs.ids_pinned[:tokens]):
        sys.exit(f"peer_torch: validation failed ({label}): token ids did not arrive")


def time_case(step, reps, events, cycles_per_us):
    for _ in range(10):  # warm-up
        step()
    torch.cuda.synchronize()
    cpu = []
    for i in range(reps):
        if i % CPU_BATCH == 0:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        cpu.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    block_us = max(MIN_BLOCK_US, 4 * percentile(cpu, 0.9))
    block_cycles = int(block_us * cycles_per_us)
    for i in range(reps):
        torch.cuda._sleep(block_cycles)
        events[i][0].record()
        step()
        events[i][1].record()
    torch.cuda.synchronize()
    gpu = [a.elapsed_time(b) * 1e3 for a, b in events[:reps]]
    start, stop = events[0]
    start.record()
    for _ in range(reps):
        step()
    stop.record()
    torch.cuda.synchronize()
    loop = start.elapsed_time(stop) * 1e3 / reps
    return {**summary(gpu, "gpu_us"), "loop_us_mean": loop, **summary(cpu, "cpu_us")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="bench-out/latest", help="folder holding plans.json (default bench-out/latest, the newest mdr-bench run)")
    ap.add_argument("--reps", type=int, default=200, help="timed steps per figure (default 200)")
    ap.add_argument("--quick", action="store_true", help="reps 30, tokens 1,8,64,512,4096 only")
    args = ap.parse_args()
    global torch
    torch = import_torch()
    reps = QUICK_REPS if args.quick and args.reps == 200 else args.reps
    if not torch.cuda.is_available():
        sys.exit("peer_torch: no CUDA device")
    with open(os.path.join(args.dir, "plans.json")) as f:
        plans = json.load(f)

    cycles_per_us = sleep_cycles_per_us()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    cases = []
    todo = [(e, p, s) for e in plans["presets"] for s in STRATEGIES for p in e["plans"]
            if not args.quick or p["tokens"] in QUICK_TOKENS]
    print(f"{'preset':18} {'policy':6} {'tokens':>6} {'strategy':20} {'MB':>9} "
          f"{'GPU us med [p10-p90]':>24} {'loop us':>8} {'CPU us':>8}")
    validated = set()
    bufs, bufs_preset = None, None
    for k, (entry, plan, strategy) in enumerate(todo, 1):
        preset, policy, tokens = entry["preset"], plan["policy"], plan["tokens"]
        print(f"[{k}/{len(todo)}] {preset} {policy} {tokens} {strategy}", file=sys.stderr, flush=True)
        if bufs_preset != preset:
            bufs = None
            torch.cuda.empty_cache()
            bufs, bufs_preset = PresetBuffers(entry), preset
        step, graph = make_step(bufs, plan, tokens, strategy)
        key = (preset, policy, strategy)
        if key not in validated:
            validate(bufs, plan, tokens, step, f"{preset} {policy} {strategy} at {tokens} tokens")
            validated.add(key)
        figures = time_case(step, reps, events, cycles_per_us)
        del graph
        case = {"preset": preset, "policy": policy, "tokens": tokens, "strategy": strategy,
                "bytes": plan["bytes"], "segments": len(plan["segments"]), **figures}
        cases.append(case)
        print(f"{preset:18} {policy:6} {tokens:6} {strategy:20} {plan['bytes'] / 1e6:9.3f} "
              f"{case['gpu_us_med']:9.2f} [{case['gpu_us_p10']:.2f}-{case['gpu_us_p90']:.2f}] "
              f"{case['loop_us_mean']:8.2f} {case['cpu_us_med']:8.2f}", flush=True)

    props = torch.cuda.get_device_properties(0)
    out = {"command": sys.argv, "reps": reps,
           "machine": {"gpu": props.name, "sm_count": props.multi_processor_count,
                       "torch": torch.__version__, "cuda": torch.version.cuda},
           "cases": cases}
    path = os.path.join(args.dir, "peer_torch.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
