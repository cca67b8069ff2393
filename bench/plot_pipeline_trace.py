#!/usr/bin/python3
"""Draws a pipeline run's timeline: one row per rank, time on the x-axis.

Reads the Chrome traces a run wrote with SPMD_TRACE=DIR (DIR/trace_rank*.json,
one per rank), keeps the executor's actions (category "pipeline": F<mb>s<stage>
forwards, B<mb>s<stage> backwards, W<mb>s<stage> weight passes of a split
backward, each from after its receive to before its send), and draws the
last --steps steps as boxes: forwards light, weight passes middle, backwards
dark, the gaps between them the bubble. With several stages a rank, each
box names its stage too.

  SPMD_TRACE=/tmp/tr spmdrun --standalone --nproc-per-node 4 build/examples/07_pipeline ...
  bench/plot_pipeline_trace.py /tmp/tr docs/img/pipeline_1f1b.png [--steps 1] [--title TEXT]
"""
import argparse
import glob
import json
import os
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def actions(path):
    with open(path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return sorted((e for e in events if e.get("cat") == "pipeline"), key=lambda e: e["ts"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace_dir")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=1, help="the last N steps")
    ap.add_argument("--title", default="", help="what the run was (default: the trace folder)")
    args = ap.parse_args()
    files = sorted(glob.glob(os.path.join(args.trace_dir, "trace_rank*.json")),
                   key=lambda p: int(re.search(r"rank(\d+)", p).group(1)))
    ranks = [actions(p) for p in files]
    if not ranks or not all(ranks):
        raise SystemExit(f"plot_pipeline_trace: no pipeline actions in {args.trace_dir}")
    # A step runs each of a rank's actions once: as many as it has names.
    kept = [r[-len({e["name"] for e in r}) * args.steps:] for r in ranks]
    several = any(len({e["name"].split("s")[1] for e in r}) > 1 for r in kept)
    colors = {"F": ("#9ecae1", "black"), "W": ("#4292c6", "white"), "B": ("#08519c", "white")}
    t0 = min(r[0]["ts"] for r in kept)
    fig, ax = plt.subplots(figsize=(12, 0.6 * len(kept) + 1))
    for rank, events in enumerate(kept):
        for e in events:
            face, ink = colors[e["name"][0]]
            ax.broken_barh([((e["ts"] - t0) / 1e3, e["dur"] / 1e3)], (rank - 0.4, 0.8),
                           facecolors=face, edgecolor="white")
            ax.text((e["ts"] - t0 + e["dur"] / 2) / 1e3, rank,
                    e["name"] if several else e["name"].split("s")[0],
                    ha="center", va="center", fontsize=7, color=ink)
    ax.set_yticks(range(len(kept)), [f"rank {r}" for r in range(len(kept))])
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    title = args.title or os.path.basename(args.trace_dir.rstrip("/"))
    ax.set_title(f"{title}: forwards light, W middle, backwards dark, gaps are the bubble")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
