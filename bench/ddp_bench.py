#!/usr/bin/python3
"""Runs spmd-bench-ddp and PyTorch DDP side by side and prints the ratios.

Both train the same GPT-2 config data-parallel on the CPU, --world ranks of
--threads threads each: spmd through spmdrun with its TCP backend, PyTorch
through torch.distributed.run with gloo. The two alternate for --rounds
rounds, so that a noisy shared machine slows both alike, and each side's
best round (the least disturbed) is kept. Printed: tokens/s (all ranks),
step time, the all_reduce time per step and the share of it hidden behind
backward (spmd: the communicator's busy time, and both sides as PyTorch's
DDP statistics measure it: the span from the first bucket's launch to the
last one's completion), and the speed ratio spmd/torch.

  bench/ddp_bench.py [--build build] [--config small] [--world 2] [--threads 1]
                     [--rounds 2] [--steps 10]
"""
import argparse
import os
import sys

from bench_lines import parse, run_lines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, env):
    lines = run_lines(cmd, env, "ddp_bench", timeout=1800)
    result = [l for l in lines if l.startswith(("spmd-ddp ", "torch-ddp "))]
    if not result:
        sys.exit(f"ddp_bench: no result line from {' '.join(cmd)}")
    return [l for l in lines if l.startswith("#")], parse(result[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--config", default="small")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    common = ["--config", args.config, "--threads", str(args.threads), "--steps", str(args.steps)]
    spmd = [os.path.join(args.build, "launcher", "spmdrun"), "--standalone", "--nproc-per-node",
            str(args.world), os.path.join(args.build, "bench", "spmd-bench-ddp")] + common
    torch = ["/usr/bin/python3", os.path.join(ROOT, "bench", "peers", "torch_ddp.py"),
             "--nproc", str(args.world)] + common

    best, notes = {}, set()
    for r in range(args.rounds):
        for name, cmd in (("spmd", spmd), ("torch", torch)):
            info, res = run(cmd, env)
            notes.update(info)
            print(f"round {r}: {name} {float(res['tokens_per_s']):,.0f} tok/s, span hidden "
                  f"{res['span_hidden_share']}", file=sys.stderr)
            if name not in best or float(res["tokens_per_s"]) > float(best[name]["tokens_per_s"]):
                best[name] = res
    for n in sorted(notes):
        print(n)
    s, t = best["spmd"], best["torch"]
    print(f"\n{args.config} config ({s['params']} parameters), {args.world} ranks x "
          f"{args.threads} thread(s), best of {args.rounds} rounds\n")
    print("| | tok/s (all ranks) | step ms | all_reduce busy ms/step | exposed ms | hidden share "
          "(busy) | first launch to last done, ms | hidden share (span, PyTorch's measure) | "
          "peak RSS MB (rank 0) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, res in (("spmd DDP (tcp)", s), ("PyTorch DDP (gloo)", t)):
        busy = (f"{res['comm_ms']} | {res['exposed_ms']} | {float(res['hidden_share']):.0%}"
                if "comm_ms" in res else "n/a | n/a | n/a")
        print(f"| {name} | {float(res['tokens_per_s']):,.0f} | {res['step_ms']} | {busy} | "
              f"{res['span_ms']} | {float(res['span_hidden_share']):.0%} | {res['peak_rss_mb']} |")
    print(f"\nspeed ratio spmd / torch: {float(s['tokens_per_s']) / float(t['tokens_per_s']):.2f}x")


if __name__ == "__main__":
    main()
