#!/usr/bin/env python3
"""Side-by-side of two builds' mdr-bench runs made with the same command.

Each side is one or more results.json folders (repeated runs, alternated
with the other side's in one device call). For every (preset, policy,
tokens, strategy) measured on both sides it prints the median over runs of
gpu_us_med, cpu_us_med and loop_us_mean per side, and new/old ratios.
The last lines summarise the ratio spread per strategy, so a reader can see
whether a change is within the run-to-run noise: each side's spread
against itself (max/min of its runs' medians, per case) is printed for GPU
and CPU when that side has two runs or more.

Usage: compare_bench.py --old DIR [DIR...] --new DIR [DIR...] [--strategies a,b]
       compare_bench.py --self-test   (checks the report on made-up runs)
"""
import argparse
import json
import os
import statistics
import sys

FIELDS = ("gpu_us_med", "cpu_us_med", "loop_us_mean")


def load(dirs):
    """{key: {field: [values over runs]}} from each dir's results.json."""
    out = {}
    for d in dirs:
        path = os.path.join(d, "results.json")
        with open(path) as f:
            cases = json.load(f).get("cases", [])
        for c in cases:
            if not c.get("measured", True):
                continue
            key = (c["preset"], c["policy"], c["tokens"], c["strategy"])
            slot = out.setdefault(key, {k: [] for k in FIELDS})
            for k in FIELDS:
                v = c.get(k)
                if isinstance(v, (int, float)):
                    slot[k].append(float(v))
    return out


def med(v):
    return statistics.median(v) if v else float("nan")


def noise_lines(old, new, keys):
    """Each side's run-to-run noise over `keys`: per case, max/min of its
    runs' medians; the median and largest of those, for GPU and CPU. A side
    or field with fewer than two runs of a case is left out."""
    lines = []
    for name, side in (("old", old), ("new", new)):
        for label, field in (("GPU", "gpu_us_med"), ("CPU", "cpu_us_med")):
            spread = []
            for k in keys:
                v = side[k][field]
                if len(v) >= 2 and min(v) > 0:
                    spread.append(max(v) / min(v))
            if spread:
                lines.append(f"run-to-run noise of the {name} build (max/min of its runs' {label} medians): "
                             f"median {med(spread):.3f}, max {max(spread):.3f}")
    return lines


def self_test():
    """The report on made-up runs: ratios of medians, and each side's noise."""
    import tempfile

    def case(tokens, gpu, cpu):
        return {"preset": "p", "policy": "all", "tokens": tokens, "strategy": "graph-fused",
                "gpu_us_med": gpu, "cpu_us_med": cpu, "loop_us_mean": gpu}

    runs = {"old1": [case(1, 10.0, 2.0), case(64, 20.0, 1.0)], "old2": [case(1, 10.0, 3.0), case(64, 22.0, 1.0)],
            "old3": [case(1, 10.0, 4.0), case(64, 21.0, 1.0)], "new1": [case(1, 5.0, 2.0), case(64, 21.0, 2.0)],
            "new2": [case(1, 5.0, 2.0), case(64, 21.0, 2.0)]}
    with tempfile.TemporaryDirectory() as tmp:
        for name, cases in runs.items():
            os.makedirs(os.path.join(tmp, name))
            with open(os.path.join(tmp, name, "results.json"), "w") as f:
                json.dump({"cases": cases + [dict(case(8, 1.0, 1.0), measured=False)]}, f)
        old = load([os.path.join(tmp, n) for n in ("old1", "old2", "old3")])
        new = load([os.path.join(tmp, n) for n in ("new1", "new2")])
    keys = sorted(k for k in old if k in new)
    assert [k[2] for k in keys] == [1, 64], keys  # the unmeasured case is left out
    assert old[keys[0]]["cpu_us_med"] == [2.0, 3.0, 4.0]
    assert med(new[keys[0]]["gpu_us_med"]) / med(old[keys[0]]["gpu_us_med"]) == 0.5
    lines = noise_lines(old, new, keys)
    want = ["run-to-run noise of the old build (max/min of its runs' GPU medians): median 1.050, max 1.100",
            "run-to-run noise of the old build (max/min of its runs' CPU medians): median 1.500, max 2.000",
            "run-to-run noise of the new build (max/min of its runs' GPU medians): median 1.000, max 1.000",
            "run-to-run noise of the new build (max/min of its runs' CPU medians): median 1.000, max 1.000"]
    assert lines == want, lines
    assert noise_lines(new, load([]), []) == []
    print("compare_bench self-test: ok")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", nargs="+", required=True, help="results folders of the previous build")
    ap.add_argument("--new", nargs="+", required=True, help="results folders of this build")
    ap.add_argument("--strategies", default="", help="comma-separated strategies to show (default: all)")
    a = ap.parse_args()
    old, new = load(a.old), load(a.new)
    want = set(s for s in a.strategies.split(",") if s)
    keys = sorted(k for k in old if k in new and (not want or k[3] in want))
    if not keys:
        print("compare_bench: no case measured on both sides", file=sys.stderr)
        return 1
    print(f"{'preset':<20} {'policy':<6} {'tokens':>6} {'strategy':<14} "
          f"{'gpu old':>9} {'gpu new':>9} {'new/old':>8} {'cpu old':>8} {'cpu new':>8} {'new/old':>8}")
    ratios = {}
    for k in keys:
        go, gn = med(old[k]["gpu_us_med"]), med(new[k]["gpu_us_med"])
        co, cn = med(old[k]["cpu_us_med"]), med(new[k]["cpu_us_med"])
        rg = gn / go if go == go and go > 0 else float("nan")
        rc = cn / co if co == co and co > 0 else float("nan")
        ratios.setdefault(k[3], []).append((rg, rc))
        print(f"{k[0]:<20} {k[1]:<6} {k[2]:>6} {k[3]:<14} {go:9.2f} {gn:9.2f} {rg:8.3f} {co:8.2f} {cn:8.2f} {rc:8.3f}")
    print()
    print("new/old per strategy: median [min, max] over cases (GPU | CPU)")
    for s, rs in sorted(ratios.items()):
        g = [r[0] for r in rs if r[0] == r[0]]
        c = [r[1] for r in rs if r[1] == r[1]]
        gs = f"{med(g):.3f} [{min(g):.3f}, {max(g):.3f}]" if g else "n/a"
        cs = f"{med(c):.3f} [{min(c):.3f}, {max(c):.3f}]" if c else "n/a"
        print(f"  {s:<14} GPU {gs} | CPU {cs}")
    for line in noise_lines(old, new, keys):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
