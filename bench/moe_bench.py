#!/usr/bin/python3
"""Expert parallelism beside plain data parallelism on the same MoE model.

The model: the --config GPT-2 preset with every block's MLP an MoE of
--experts experts, top --top-k per token, no capacity limit. Two layouts of
spmd-train on --world ranks x 1 thread, each rank its own --batch sequences:

  dp   every rank holds all the experts (DDP averages every gradient)
  ep   the experts split over the ranks (each holds experts/world), tokens
       sent to their experts' owners by all_to_all and back

--rounds interleaved rounds (dp, ep, dp, ep, ...); each run's tokens/s is the
median of its steps after the first two, and the ratio the median of the
rounds' pairwise ratios. Then one run of examples/12_expert_parallel prints
the last step's tokens per expert (the load-balance histogram) and the
all_to_all bytes beside the formula.

  bench/moe_bench.py [--build build] [--config tiny] [--world 2] [--experts 8] [--top-k 2]
                     [--rounds 3] [--steps 8] [--batch 4]
"""
import argparse
import os
import statistics
import sys
import tempfile

from bench_lines import run_lines, spmd_train_rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tokens_per_s(args, env, layout, run_folder):
    """spmd-train's tokens/s for the MoE model under `layout`: the median of
    its steps after the first two."""
    flags = [f"--model.preset={args.config}", f"--model.n_experts={args.experts}",
             f"--model.moe_top_k={args.top_k}", f"--training.steps={args.steps}",
             f"--training.global_batch={args.batch * args.world}", "--training.threads=1",
             f"--parallel.dp_replicate={args.world}"] + layout
    rows = spmd_train_rows(args.build, args.world, flags, run_folder, env, "moe_bench")
    return statistics.median(r["tokens_per_s"] for r in rows[2:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4, help="sequences per rank per step")
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    tmp = tempfile.mkdtemp(prefix="spmd_moe_bench_")
    layouts = {"dp (all experts on every rank)": [],
               f"ep {args.world} (experts split)": [f"--parallel.ep={args.world}"]}
    speed = {name: [] for name in layouts}
    for r in range(args.rounds):
        for name, layout in layouts.items():
            speed[name].append(tokens_per_s(args, env, layout, os.path.join(tmp, str(len(speed[name])))))
        print(f"round {r}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in speed.items()),
              file=sys.stderr)
    base = list(layouts)[0]
    print(f"\n{args.config} with {args.experts} experts, top {args.top_k}, in every block; "
          f"{args.world} ranks x 1 thread, {args.batch} sequences per rank per step; "
          f"median of {args.rounds} interleaved rounds\n")
    print("| layout | tok/s (all ranks) | vs dp |")
    print("|---|---|---|")
    for name, v in speed.items():
        ratio = statistics.median(a / b for a, b in zip(v, speed[base]))
        print(f"| {name} | {statistics.median(v):,.0f} | {ratio:.2f} |")

    data = os.path.join(ROOT, "docs", "architecture.md")
    example = [os.path.join(args.build, "launcher", "spmdrun"), "--standalone", "--nproc-per-node",
               str(args.world), os.path.join(args.build, "examples", "12_expert_parallel"),
               "--data", data, "--steps", "5", "--experts", str(args.experts), "--top-k",
               str(args.top_k), "--batch", str(args.batch), "--log-every", "100"]
    print("\n12_expert_parallel, the last of 5 steps:\n")
    for line in run_lines(example, env, "moe_bench"):
        print(line)


if __name__ == "__main__":
    main()
