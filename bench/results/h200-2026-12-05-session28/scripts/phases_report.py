#!/usr/bin/env python3
"""Medians of stage_lab's phases stamps: the "phases ..." lines of the bench
logs (bench-*.log) under DIR (the variant's folder), grouped by inputs,
tokens, sequences, image bytes and device ids. t0 is thread 0 (the ids' lane), t1 thread 1 (the
first input's); each is [1] image copied, [2] votes done, [3] at the last
barrier, [4] past it, [5] the end, in SM cycles from the stage block's
entry; ns the stage block's whole span by %globaltimer.

Usage: phases_report.py DIR"""
import os, re, statistics, sys

groups = {}
root = sys.argv[1]
for dirpath, _, files in os.walk(root):
    for f in files:
        if not (f.startswith("bench-") and f.endswith(".log")):
            continue
        for line in open(os.path.join(dirpath, f), errors="replace"):
            if not line.startswith("phases "):
                continue
            kv = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
            try:
                key = tuple(int(kv[k]) for k in ("inputs", "tokens", "seqs", "img", "dev"))
                vals = [int(x) for x in kv["t0"].split(",")] + [int(x) for x in kv["t1"].split(",")] + [int(kv["ns"])]
            except (KeyError, ValueError):
                continue
            groups.setdefault(key, []).append(vals)
cols = ["t0 img", "t0 vote", "t0 bar<", "t0 bar>", "t0 end", "t1 img", "t1 vote", "t1 bar<", "t1 bar>", "t1 end", "ns"]
print(f"{'inputs':>6} {'tokens':>6} {'seqs':>4} {'img':>5} {'dev':>3} {'n':>4} " + " ".join(f"{c:>8}" for c in cols))
for k in sorted(groups):
    v = groups[k]
    med = [statistics.median(r[i] for r in v) for i in range(len(cols))]
    print(f"{k[0]:6d} {k[1]:6d} {k[2]:4d} {k[3]:5d} {k[4]:3d} {len(v):4d} " + " ".join(f"{m:8.0f}" for m in med))
if not groups:
    print("no phases lines found")
