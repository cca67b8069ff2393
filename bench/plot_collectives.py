#!/usr/bin/python3
"""Draws busbw against message size from spmd-bench JSON files (and the
peers' under bench/peers/, which write the same keys): one line per file, one
panel per collective, log-log axes, so a run is compared with others at a
glance.

    /usr/bin/python3 bench/plot_collectives.py spmd.json mpi.json gloo.json -o busbw.png

A file's line is labelled with its `impl` and `nranks` keys (or --labels).
When a file holds several rows of the same op and size (repeated rounds), the
median is drawn. spmd-bench's all_reduce, broadcast and reduce are drawn from
their in-place set, the form the peers run (bench_lines.like_the_peers).
"""
import argparse
import collections
import json
import statistics
import sys

import matplotlib

from bench_lines import like_the_peers

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path) as f:
        return [like_the_peers(json.loads(line)) for line in f if line.strip()]


def size_label(b):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= scale:
            return f"{b / scale:g}{unit}"
    return f"{b}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="JSON-lines files from spmd-bench or a peer")
    ap.add_argument("-o", "--output", default="busbw.png")
    ap.add_argument("--labels", help="comma-separated labels, one per file")
    ap.add_argument("--title", default="busbw against message size")
    a = ap.parse_args()
    labels = a.labels.split(",") if a.labels else []
    runs = []  # (label, {op: {size: [busbw]}})
    for i, path in enumerate(a.files):
        rows = load(path)
        if not rows:
            print(f"plot_collectives: {path} has no rows", file=sys.stderr)
            continue
        label = labels[i] if i < len(labels) else f"{rows[0].get('impl', path)} ({rows[0].get('nranks', '?')} ranks)"
        by_op = collections.defaultdict(lambda: collections.defaultdict(list))
        for r in rows:
            by_op[r["op"]][int(r["size"])].append(float(r["busbw"]))
        runs.append((label, by_op))
    ops = sorted({op for _, by_op in runs for op in by_op})
    if not ops:
        sys.exit("plot_collectives: nothing to plot")
    cols = min(3, len(ops))
    rows_n = (len(ops) + cols - 1) // cols
    fig, axes = plt.subplots(rows_n, cols, figsize=(5.5 * cols, 4 * rows_n), squeeze=False)
    for k, op in enumerate(ops):
        ax = axes[k // cols][k % cols]
        for label, by_op in runs:
            if op not in by_op:
                continue
            sizes = sorted(by_op[op])
            ax.plot(sizes, [statistics.median(by_op[op][s]) for s in sizes], marker="o",
                    markersize=3, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(op)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.grid(True, which="both", alpha=0.3)
        ticks = sorted({s for _, by_op in runs for s in by_op.get(op, {})})
        if ticks:
            step = max(1, len(ticks) // 8)
            ax.set_xticks(ticks[::step])
            ax.set_xticklabels([size_label(s) for s in ticks[::step]], rotation=45)
        ax.legend(fontsize=7)
    for k in range(len(ops), rows_n * cols):
        axes[k // cols][k % cols].axis("off")
    fig.suptitle(a.title)
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)
    print(f"plot_collectives: wrote {a.output}")


if __name__ == "__main__":
    main()
