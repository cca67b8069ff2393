#!/usr/bin/python3
"""Runs spmd-bench-fsdp's variants beside DDP and prints one table.

For each --worlds size N: DDP, FSDP (prefetch, reshard after forward), FSDP
without prefetch, and FSDP keeping units gathered from forward to backward,
all on N ranks x --threads threads with the same GPT-2 config and global
batch. They alternate for --rounds rounds (ddp, fsdp, fsdp-no-prefetch,
fsdp-keep, ddp, ...) so that a noisy shared machine slows all alike; each
figure is the median over rounds, each ratio the median of the rounds'
pairwise ratios against the same round's DDP.

  bench/fsdp_bench.py [--build build] [--config small] [--worlds 2,4] [--threads 1]
                      [--rounds 3] [--steps 6] [--batch 8]
"""
import argparse
import os
import statistics
import sys

from bench_lines import last_result

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, env):
    return last_result(cmd, env, "fsdp_bench", "spmd-fsdp ")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--config", default="small")
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    bench = os.path.join(args.build, "bench", "spmd-bench-fsdp")
    common = ["--config", args.config, "--threads", str(args.threads), "--steps", str(args.steps),
              "--batch", str(args.batch)]
    variants = {
        "ddp": ["--mode", "ddp"],
        "fsdp": ["--mode", "fsdp"],
        "fsdp, no prefetch": ["--mode", "fsdp", "--no-prefetch"],
        "fsdp, kept after forward": ["--mode", "fsdp", "--keep-after-forward"],
    }
    for world in (int(w) for w in args.worlds.split(",")):
        launch = [os.path.join(args.build, "launcher", "spmdrun"), "--standalone",
                  "--nproc-per-node", str(world), bench]
        results = {name: [] for name in variants}
        for r in range(args.rounds):
            for name, flags in variants.items():
                res = run(launch + flags + common, env)
                results[name].append(res)
                print(f"N={world} round {r}: {name} {float(res['tokens_per_s']):,.0f} tok/s",
                      file=sys.stderr)

        def med(name, key):
            return statistics.median(float(res[key]) for res in results[name])

        def ratio(name, key):  # the median of the rounds' pairwise ratios against DDP
            return statistics.median(float(x[key]) / float(y[key])
                                     for x, y in zip(results[name], results["ddp"]))

        print(f"\n{args.config} config, global batch {args.batch}, {world} ranks x "
              f"{args.threads} thread(s), median of {args.rounds} interleaved rounds\n")
        print("| run | tok/s | vs DDP | step ms | model state peak MB | vs DDP | activations MB "
              "| comm ms/step | hidden |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name in variants:
            print(f"| {name} | {med(name, 'tokens_per_s'):,.0f} | {ratio(name, 'tokens_per_s'):.2f} "
                  f"| {med(name, 'step_ms'):.1f} | {med(name, 'state_peak_bytes') / 2**20:.1f} "
                  f"| {ratio(name, 'state_peak_bytes'):.2f} "
                  f"| {med(name, 'activation_bytes') / 2**20:.1f} | {med(name, 'comm_ms'):.1f} "
                  f"| {med(name, 'hidden_share'):.0%} |")


if __name__ == "__main__":
    main()
