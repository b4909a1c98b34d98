#!/usr/bin/env python3
"""ar_ablate.py — where the one-shot's time goes: dev/all_reduce_compare
built against copies of kernels/ with one piece of the protocol taken out
at a time, each run on the one-GPU two-rank harness beside the v1 kernel.

A lab measurement, never a product build: an ablated kernel gives up the
exactness or the give-up the protocol needs (kernels/ar_protocol.h). Each
patch must match exactly once, so a kernel that moved on fails loudly here
instead of measuring something else.

Ablations:
  base      the kernels as they are
  nohdr     the one-shot sends and waits for no header vector
  noleave   the spin loops never poll the abort words or the clock
  nosync    the one-shot stores its sums without the block's
            __syncthreads after the poll (the header's verdict unawaited)
  nosig     the lockstep signature is the vector count (no hash)
  vecload   the block's counters read as one 16-byte load (a candidate)
  nopre     no barrier after thread 0 clears the give-up flag (the other
            threads may read shared memory not yet cleared: a lab figure
            only, validated like the rest before it is timed)
  noend     no barrier before the counters advance (thread 0 advances them
            when its own part is done)
  all       nohdr + noleave + nosync + nosig
  bare      all + nopre + noend: what is left is the counters, the row
            count and the code's shape

Usage: dev/ar_ablate.py OUT_DIR [names...] [-- compare args]
Writes OUT_DIR/<name>/all_reduce_compare.csv and OUT_DIR/ablate.txt (the
one-shot rows of every build's table)."""
import concurrent.futures
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HDR_SEND = ("if (r != p.rank) st_volatile((uint4 *)(p.peer[r] + base + (size_t)p.rank * slot_bytes) + blockIdx.x, hv);",
            "if (r != p.rank && false) st_volatile((uint4 *)(p.peer[r] + base + (size_t)p.rank * slot_bytes) + blockIdx.x, hv);")
HDR_WAIT = ("bool hdone = !head, ddone = !have;", "bool hdone = true, ddone = !have; (void)head;")
LEAVE = ("if ((++s.turns % MDR_ARP_POLL_EVERY) != 0) return 0;", "++s.turns;\n  return 0;")
SYNC = ("  __syncthreads();\n  if (*(volatile int *)s_bad) return false;\n  if (have) {", "  if (have) {")
SIG = ("MDR_ARP_FN uint32_t mdr_arp_signature_of(uint64_t fixed, size_t nvec, int one) {\n",
       "MDR_ARP_FN uint32_t mdr_arp_signature_of(uint64_t fixed, size_t nvec, int one) {\n"
       "  if (nvec != (size_t)-1) return (uint32_t)nvec & 0x7fffffffu;\n")
VEC = ("  st.calls = mine->calls;\n  st.one_shot = mine->one_shot;\n  st.barriers = mine->barriers;\n",
       "  const uint4 c4 = ld_volatile((const uint4 *)mine);\n  st.calls = c4.x;\n  st.one_shot = c4.y;\n"
       "  st.barriers = c4.z;\n")

ABLATIONS = {
    "base": [],
    "nohdr": [("all_reduce.cu", HDR_SEND), ("all_reduce.cu", HDR_WAIT)],
    "noleave": [("ar_device.cuh", LEAVE)],
    "nosync": [("all_reduce.cu", SYNC)],
    "nosig": [("ar_protocol.h", SIG)],
    "vecload": [("ar_device.cuh", VEC)],
}
PRE = ("  __syncthreads(); /* s_bad is set */\n  bool ok;", "  bool ok;")
END = ("  __syncthreads(); /* every thread is here, those that gave up too */\n  if (!ok || *(volatile int *)&s_bad) return;",
       "  if (!ok) return;")
ABLATIONS["nopre"] = [("all_reduce.cu", PRE)]
ABLATIONS["noend"] = [("all_reduce.cu", END)]
ABLATIONS["all"] = ABLATIONS["nohdr"] + ABLATIONS["noleave"] + ABLATIONS["nosync"] + ABLATIONS["nosig"]
ABLATIONS["bare"] = ABLATIONS["all"] + ABLATIONS["nopre"] + ABLATIONS["noend"]


def build(out, name):
    src = os.path.join(out, name, "kernels")
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(os.path.join(ROOT, "kernels"), src)
    for fname, (old, new) in ABLATIONS[name]:
        path = os.path.join(src, fname)
        text = open(path).read()
        n = text.count(old)
        if n != 1:
            sys.exit(f"ar_ablate: {name}: the patch for {fname} matches {n} times (want 1): {old[:60]!r}")
        open(path, "w").write(text.replace(old, new))
    exe = os.path.join(out, name, "all_reduce_compare")
    cmd = ["nvcc", "-O3", "-std=c++17", "-arch=sm_90", f"-I{src}", f"-I{ROOT}/staging", f"-I{ROOT}/plan",
           os.path.join(ROOT, "dev", "all_reduce_compare.cu"), os.path.join(src, "all_reduce.cu"), "-o", exe]
    subprocess.run(cmd, check=True)
    return exe


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    extra = []
    if "--" in args:
        extra = args[args.index("--") + 1:]
        args = args[:args.index("--")]
    out, names = args[0], args[1:] or list(ABLATIONS)
    for n in names:
        if n not in ABLATIONS:
            sys.exit(f"ar_ablate: no ablation {n!r} (have {', '.join(ABLATIONS)})")
    os.makedirs(out, exist_ok=True)
    print(f"ar_ablate: building {', '.join(names)}", flush=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(names)) as pool:
        exes = dict(zip(names, pool.map(lambda n: build(out, n), names)))
    lines = []
    for n in names:
        print(f"ar_ablate: running {n}", flush=True)
        r = subprocess.run([exes[n], os.path.join(out, n)] + extra, capture_output=True, text=True)
        open(os.path.join(out, n, "run.log"), "w").write(r.stdout + r.stderr)
        if r.returncode != 0:
            lines.append(f"{n}: FAILED rc {r.returncode}")
            continue
        for line in r.stdout.splitlines():
            if "one-shot" in line and "|" in line:
                lines.append(f"{n:8s} {line}")
    text = "\n".join(lines) + "\n"
    open(os.path.join(out, "ablate.txt"), "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
