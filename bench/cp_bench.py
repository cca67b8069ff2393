#!/usr/bin/python3
"""Context parallelism on an attention-heavy config: spmd-train with cp = 2
beside one process (cp = 1) on the same model, sequences and steps.

The model is a small-C, long-T GPT-2 (--seq-len tokens, C 64, 2 layers,
batch 1), so attention's activations dominate. For each side: tokens/s (the
median of the steps after the first two of spmd-train's JSON lines) and the
allocator's peak over a step (mem_peak: the model is tiny, so this is
activations), and that peak less what stays allocated after the step
(parameters, gradients, AdamW's moments): the activations'. Then
examples/11_context_parallel on the same model reports the share of the
ring's transfers hidden behind compute, forward and backward. They alternate for --rounds rounds; ratios are the median of
the rounds' pairwise ratios.

  bench/cp_bench.py [--build build] [--seq-len 2048] [--rounds 3] [--steps 6]
"""
import argparse
import os
import statistics
import sys
import tempfile

from bench_lines import run_lines, spmd_train_rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    tmp = tempfile.mkdtemp(prefix="spmd_cp_bench_")
    model = ["--model.preset=custom", f"--model.seq_len={args.seq_len}", "--model.n_layers=2",
             "--model.n_heads=4", "--model.d_model=64", "--training.global_batch=1",
             f"--training.steps={args.steps}", "--training.threads=1"]
    spmdrun = os.path.join(args.build, "launcher", "spmdrun")
    sides = {"cp=1 (one process)": (1, []), "cp=2": (2, ["--parallel.cp=2"])}  # ranks, flags
    res = {name: {"tok": [], "peak": [], "act": []} for name in sides}
    for r in range(args.rounds):
        for name, (world, layout) in sides.items():
            folder = os.path.join(tmp, f"{r}_{name[:4]}")
            rows = spmd_train_rows(args.build, world, model + layout, folder, env, "cp_bench")
            res[name]["tok"].append(statistics.median(x["tokens_per_s"] for x in rows[2:]))
            res[name]["peak"].append(max(x["mem_peak"] for x in rows[2:]))
            res[name]["act"].append(max(x["mem_peak"] - x["mem_allocated"] for x in rows[2:]))
        print(f"round {r}: " + ", ".join(f"{n} {v['tok'][-1]:,.0f} tok/s" for n, v in res.items()),
              file=sys.stderr)
    base = "cp=1 (one process)"
    print(f"\nGPT-2 C 64, 2 layers, T {args.seq_len}, batch 1, 1 thread per rank, median of "
          f"{args.rounds} interleaved rounds\n")
    print("| run | tok/s | vs cp=1 | peak per rank (MB) | vs cp=1 | activations per rank (MB) | vs cp=1 |")
    print("|---|---|---|---|---|---|---|")
    for name, v in res.items():
        tr = statistics.median(a / b for a, b in zip(v["tok"], res[base]["tok"]))
        pr = statistics.median(a / b for a, b in zip(v["peak"], res[base]["peak"]))
        ar = statistics.median(a / b for a, b in zip(v["act"], res[base]["act"]))
        print(f"| {name} | {statistics.median(v['tok']):,.0f} | {tr:.2f} | "
              f"{statistics.median(v['peak']) / 2**20:.1f} | {pr:.2f} | "
              f"{statistics.median(v['act']) / 2**20:.1f} | {ar:.2f} |")

    # The share of the ring's transfers hidden behind the blocks' compute,
    # forward and backward, from examples/11_context_parallel on the same model.
    print()
    example = [spmdrun, "--standalone", "--nproc-per-node", "2",
               os.path.join(args.build, "examples", "11_context_parallel"), "--seq-len",
               str(args.seq_len), "--layers", "2", "--d-model", "64", "--batch", "1", "--steps",
               str(args.steps)]
    for line in run_lines(example, env, "cp_bench"):
        if "ring transfers" in line:
            print(line)


if __name__ == "__main__":
    main()
