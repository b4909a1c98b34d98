#!/usr/bin/env python3
"""plot.py: figures from mdr-bench's results (and the PyTorch peer's).

Reads DIR/results.json and, when present, DIR/peer_torch.json; writes
  DIR/<preset>-<policy>.png  GPU us per step against tokens (log x, log y), one
                             line per strategy (mdr's solid, torch's dashed),
                             and the floor (bytes / write ceiling + one
                             1-kernel graph replay) in black
  DIR/cpu-us.png             CPU us per step against tokens, one panel per
                             preset (first policy of the run), one line per
                             strategy; a host-backend run says "host
                             backend" in every title
Needs matplotlib (pip install -r bench/requirements-plot.txt); --help
works without it.
Usage: python3 bench/plot.py [--dir bench-out/latest]
"""
import argparse
import json
import os
import sys
from collections import defaultdict

plt = None  # matplotlib.pyplot, imported in main(), so that --help works without it


def import_pyplot():
    """matplotlib.pyplot on the Agg backend, or exit with what to install."""
    try:
        import matplotlib
    except ModuleNotFoundError:
        sys.exit("plot: needs matplotlib: pip install -r bench/requirements-plot.txt")
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot
    return pyplot


def load(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return json.load(f)["cases"]


def backend_of(path):
    """The run's backend ("cuda", "host"), from results.json's machine."""
    with open(path) as f:
        return (json.load(f).get("machine") or {}).get("backend", "unknown")


def series(cases, key):
    """{(preset, policy): {strategy: [(tokens, value)]}} of the cases with a value."""
    out = defaultdict(lambda: defaultdict(list))
    for c in cases:
        if c.get(key) is not None:
            out[(c["preset"], c["policy"])][c["strategy"]].append((c["tokens"], c[key]))
    for by_strategy in out.values():
        for points in by_strategy.values():
            points.sort()
    return out


def floor_points(cases, preset, policy):
    pts = {c["tokens"]: c["floor_us"] for c in cases
           if c["preset"] == preset and c["policy"] == policy and c.get("floor_us") is not None}
    return sorted(pts.items())


def draw(ax, by_strategy, torch_strategies):
    for strategy, points in sorted(by_strategy.items()):
        xs, ys = zip(*points)
        style = "--" if strategy in torch_strategies else "-"
        ax.plot(xs, ys, style, marker="o", markersize=3, label=strategy)


def plot_gpu(out_dir, mdr_cases, torch_cases):
    gpu = series(mdr_cases + torch_cases, "gpu_us_med")
    torch_strategies = {c["strategy"] for c in torch_cases}
    written = []
    for (preset, policy), by_strategy in sorted(gpu.items()):
        fig, ax = plt.subplots(figsize=(8, 5))
        draw(ax, by_strategy, torch_strategies)
        floor = floor_points(mdr_cases, preset, policy)
        if floor:
            xs, ys = zip(*floor)
            ax.plot(xs, ys, "k-", linewidth=2, label="floor")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens")
        ax.set_ylabel("GPU us per step (median)")
        ax.set_title(f"{preset}, policy {policy}: zero plan + token-id upload")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        path = os.path.join(out_dir, f"{preset}-{policy}.png")
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        written.append(path)
    return written


def plot_cpu(out_dir, mdr_cases, torch_cases, backend):
    cpu = series(mdr_cases + torch_cases, "cpu_us_med")
    if not cpu:
        return []
    torch_strategies = {c["strategy"] for c in torch_cases}
    first_policy = (mdr_cases or torch_cases)[0]["policy"]
    presets = sorted({preset for preset, policy in cpu if policy == first_policy})
    fig, axes = plt.subplots(1, len(presets), figsize=(5 * len(presets), 4.5), squeeze=False)
    for ax, preset in zip(axes[0], presets):
        draw(ax, cpu[(preset, first_policy)], torch_strategies)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens")
        host = backend == "host"
        ax.set_ylabel("CPU us per step (median)" + (", host backend" if host else ""))
        ax.set_title(f"{preset}, policy {first_policy}" + (" (host backend)" if host else ""))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    if backend == "host":
        fig.suptitle("host backend, no GPU: CPU work of the host emulation (ranks nothing on a GPU)", fontsize=9)
    path = os.path.join(out_dir, "cpu-us.png")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return [path]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="bench-out/latest", help="folder holding results.json (default bench-out/latest, the newest mdr-bench run)")
    args = ap.parse_args()
    global plt
    plt = import_pyplot()
    mdr_cases = load(os.path.join(args.dir, "results.json"))
    torch_cases = load(os.path.join(args.dir, "peer_torch.json"))
    if not mdr_cases:
        raise SystemExit(f"plot: no cases in {args.dir}/results.json")
    written = plot_gpu(args.dir, mdr_cases, torch_cases)
    if not written:
        print("plot: no GPU figures (host backend run): GPU plots skipped")
    written += plot_cpu(args.dir, mdr_cases, torch_cases, backend_of(os.path.join(args.dir, "results.json")))
    for path in written:
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
