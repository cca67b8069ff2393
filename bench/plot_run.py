#!/usr/bin/python3
"""Draws an spmd-train run's curves: loss (and held-out loss) and tokens/s
against the step, from the JSON lines rank 0 wrote.

Reads RUN/metrics_rank0.jsonl (metrics.run_folder; a resumed run appends, and
a step seen twice keeps its last line) and writes one PNG of two panels:
loss and val_loss on the left, tokens/s and MFU on the right: `mfu`
(against the hardware's peak) dotted and `gemm_mfu` (against the GEMM
measured at start; runs before it was logged have none) dash-dotted. Several
runs draw side by side, each in its own colour, labelled by its folder name.

  spmdrun --standalone --nproc-per-node 2 build/train/spmd-train --config configs/fsdp.toml
  bench/plot_run.py runs/fsdp runs/ddp --out runs/curves.png
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_run(folder):
    path = os.path.join(folder, "metrics_rank0.jsonl")
    if not os.path.exists(path):
        raise SystemExit(f"plot_run: {path} does not exist (is {folder} a run folder?)")
    by_step = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"plot_run: {path}:{n}: not a JSON line ({e})")
            if "loss" in row:  # a save's own line has none
                by_step[row["step"]] = row
    if not by_step:
        raise SystemExit(f"plot_run: {path} holds no step")
    return [by_step[s] for s in sorted(by_step)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run folders (metrics.run_folder)")
    ap.add_argument("--out", required=True, help="the PNG to write")
    args = ap.parse_args()

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    mfu_axis = right.twinx()
    for i, folder in enumerate(args.runs):
        rows = read_run(folder)
        name = os.path.basename(os.path.normpath(folder))
        colour = f"C{i}"
        steps = [r["step"] for r in rows]
        left.plot(steps, [r["loss"] for r in rows], color=colour, label=f"{name} loss")
        val = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
        if val:
            left.plot(*zip(*val), "o--", color=colour, label=f"{name} val_loss")
        right.plot(steps, [r["tokens_per_s"] for r in rows], color=colour, label=f"{name} tok/s")
        if all("mfu" in r for r in rows):
            mfu_axis.plot(steps, [100 * r["mfu"] for r in rows], ":", color=colour,
                          label=f"{name} MFU")
        if all("gemm_mfu" in r for r in rows):
            mfu_axis.plot(steps, [100 * r["gemm_mfu"] for r in rows], "-.", color=colour,
                          label=f"{name} MFU vs GEMM")
        print(f"{name}: {len(rows)} steps, loss {rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f}, "
              f"median {sorted(r['tokens_per_s'] for r in rows)[len(rows) // 2]:.0f} tok/s")
    left.set_xlabel("step")
    left.set_ylabel("loss")
    left.legend(fontsize=8)
    right.set_xlabel("step")
    right.set_ylabel("tokens/s")
    mfu_axis.set_ylabel("MFU (%): dotted vs peak, dash-dot vs GEMM")
    right.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
