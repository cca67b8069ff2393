#!/usr/bin/python3
"""Runs spmd-bench-tp's modes side by side and prints one table.

Four runs of the same GPT-2 config and global batch, --threads threads per
rank: one process (single), DDP on --world ranks, tensor parallelism on
--world ranks, and tensor + sequence parallelism. They alternate for
--rounds rounds (single, ddp, tp, tp+sp, single, ...) so that a noisy
shared machine slows all alike; each figure is the median over rounds, and
each ratio the median of the rounds' pairwise ratios. Also printed: the
time per step each TP rank waited on its collectives (the rest is compute),
per-rank parameter bytes against the unsplit model's, and the bytes the tp
group moved per step against the plan's formula (they must be equal).

  bench/tp_bench.py [--build build] [--config small] [--world 2] [--threads 1]
                    [--rounds 3] [--steps 6] [--batch 8]
"""
import argparse
import os
import statistics
import sys

from bench_lines import last_result

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, env):
    return last_result(cmd, env, "tp_bench", "spmd-tp ")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--config", default="small")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    bench = os.path.join(args.build, "bench", "spmd-bench-tp")
    common = ["--config", args.config, "--threads", str(args.threads), "--steps", str(args.steps),
              "--batch", str(args.batch)]
    launch = [os.path.join(args.build, "launcher", "spmdrun"), "--standalone",
              "--nproc-per-node", str(args.world), bench]
    runs = {
        "single": [bench, "--mode", "single"] + common,
        "ddp": launch + ["--mode", "ddp"] + common,
        "tp": launch + ["--mode", "tp"] + common,
        "tp+sp": launch + ["--mode", "tp", "--sp"] + common,
    }
    results = {name: [] for name in runs}
    for r in range(args.rounds):
        for name, cmd in runs.items():
            res = run(cmd, env)
            results[name].append(res)
            print(f"round {r}: {name} {float(res['tokens_per_s']):,.0f} tok/s", file=sys.stderr)

    def med(name, key):
        return statistics.median(float(res[key]) for res in results[name])

    def ratio(a, b):  # the median of the rounds' pairwise ratios of tokens/s
        return statistics.median(float(x["tokens_per_s"]) / float(y["tokens_per_s"])
                                 for x, y in zip(results[a], results[b]))

    print(f"\n{args.config} config, global batch {args.batch}, {args.world} ranks x "
          f"{args.threads} thread(s) (single: 1 process x {args.threads}), "
          f"median of {args.rounds} interleaved rounds\n")
    print("| run | tok/s | step ms | waiting on tp collectives, ms/step | params per rank, MB "
          "(unsplit) | tp bytes/step (formula) | peak RSS MB (rank 0) | tok/s vs single | vs DDP |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in runs:
        last = results[name][-1]
        mb = float(last["param_bytes"]) / 2**20
        whole = float(last["unsplit_param_bytes"]) / 2**20
        moved = (f"{int(last['tp_bytes']):,} ({int(last['formula_bytes']):,})"
                 if name.startswith("tp") else "n/a")
        wait = f"{med(name, 'comm_wait_ms'):.1f}" if name.startswith("tp") else "n/a"
        print(f"| {name} | {med(name, 'tokens_per_s'):,.0f} | {med(name, 'step_ms'):.1f} | {wait} | "
              f"{mb:.2f} ({whole:.2f}) | {moved} | {med(name, 'peak_rss_mb'):.0f} | "
              f"{ratio(name, 'single'):.2f} | {ratio(name, 'ddp'):.2f} |")
    for name in ("tp", "tp+sp"):
        for res in results[name]:
            if res["tp_bytes"] != res["formula_bytes"]:
                sys.exit(f"tp_bench: {name} moved {res['tp_bytes']} bytes, the formula says "
                         f"{res['formula_bytes']}")
    print("\ntp bytes per step equal the formula in every round.")


if __name__ == "__main__":
    main()
