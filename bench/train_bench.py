#!/usr/bin/python3
"""Runs spmd-bench-train and its PyTorch peer side by side and prints the ratios.

For each config (tiny, small) and thread count (1, 2) it runs both programs
--rounds times, alternating spmd and torch so that a noisy shared machine
slows both alike, keeps each side's best round (the least disturbed), and
prints tokens/s, peak RSS and the ratios spmd/torch.

  bench/train_bench.py [--build build] [--configs tiny,small] [--threads 1,2]
                       [--rounds 2] [--steps 20]
"""
import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse(line):
    fields = dict(kv.split("=", 1) for kv in line.split()[1:])
    return float(fields["tokens_per_s"]), float(fields["peak_rss_mb"]), int(fields["params"])


def run(cmd, env):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"train_bench: {' '.join(cmd)} failed:\n{out.stdout}{out.stderr}")
    lines = out.stdout.strip().splitlines()
    return [l for l in lines if l.startswith("#")], parse(lines[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--configs", default="tiny,small")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    spmd_bin = os.path.join(args.build, "bench", "spmd-bench-train")
    peer = os.path.join(ROOT, "bench", "peers", "torch_train.py")

    rows, notes = [], set()
    for config in args.configs.split(","):
        steps = args.steps if config == "tiny" else max(3, args.steps // 4)
        for threads in (int(t) for t in args.threads.split(",")):
            env = dict(os.environ, OMP_NUM_THREADS=str(threads))
            common = ["--config", config, "--threads", str(threads), "--steps", str(steps)]
            best = {"spmd": (0, 0, 0), "torch": (0, 0, 0)}
            for _ in range(args.rounds):
                _, s = run([spmd_bin] + common, env)
                info, t = run(["/usr/bin/python3", peer] + common, env)
                notes.update(info)
                best["spmd"] = max(best["spmd"], s)
                best["torch"] = max(best["torch"], t)
            rows.append((config, threads, best["spmd"], best["torch"]))
            print(f"{config} {threads}: spmd {best['spmd'][0]:.0f} tok/s, "
                  f"torch {best['torch'][0]:.0f} tok/s", file=sys.stderr)

    for n in sorted(notes):
        print(n)
    print(f"| config | params | threads | spmd tok/s | torch tok/s | speed ratio | "
          f"spmd peak RSS MB | torch peak RSS MB | RSS ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for config, threads, (s_tok, s_rss, params), (t_tok, t_rss, _) in rows:
        print(f"| {config} | {params:,} | {threads} | {s_tok:,.0f} | {t_tok:,.0f} | "
              f"{s_tok / t_tok:.2f}x | {s_rss:.0f} | {t_rss:.0f} | {s_rss / t_rss:.2f} |")


if __name__ == "__main__":
    main()
