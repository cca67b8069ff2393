#!/usr/bin/python3
"""Runs spmd-bench-pp beside one process and prints one table.

The small transformer (untied head, 6 blocks, T 256) with a global batch of
--batch sequences: one process (--single), then the pipeline on --world
ranks for each schedule and microbatch count, --threads threads per rank.
Within a round each schedule runs right after a single run of its own, for
--rounds rounds, so that a machine whose speed drifts from one minute to
the next (this one's moved by up to 40%) slows both sides of a pair alike;
each figure is the median over rounds, and a schedule's speed ratio the
median of its pairwise ratios against the single run just before it.
Printed per row: tokens/s, the measured bubble beside the schedule's
simulated one ((p-1)/(m+p-1) for GPipe and 1F1B), the most (stage, microbatch) pairs a rank holds (which
activation memory follows) and each rank's activation peak (the
allocator's peak during the step less what stays allocated after it) and
each rank's CPU time in a step (all its threads): a step's CPU time near
its wall time says the rank had its core; well below it, that it waited
(its neighbour, or other jobs on the machine).

  bench/pp_bench.py [--build build] [--world 2] [--threads 1] [--rounds 2] [--steps 3]
                    [--batch 16] [--schedules gpipe,1f1b,interleaved,zbh1]
                    [--microbatches 1,2,4,8,16]
"""
import argparse
import os
import statistics
import sys

from bench_lines import parse, run_lines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, env):
    return [parse(l) for l in run_lines(cmd, env, "pp_bench") if l.startswith("spmd-pp ")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--schedules", default="gpipe,1f1b,interleaved,zbh1")
    ap.add_argument("--microbatches", default="1,2,4,8,16")
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    bench = os.path.join(args.build, "bench", "spmd-bench-pp")
    common = ["--threads", str(args.threads), "--steps", str(args.steps), "--batch", str(args.batch)]
    single = [bench, "--single"] + common

    def pipeline(schedule):
        return [os.path.join(args.build, "launcher", "spmdrun"), "--standalone",
                "--nproc-per-node", str(args.world), bench, "--schedules", schedule,
                "--microbatches", args.microbatches] + common

    singles, rows, paired = [], {}, {}  # paired: (schedule, m) -> the single run before each
    for r in range(args.rounds):
        for schedule in args.schedules.split(","):
            before = run(single, env)[0]
            singles.append(before)
            for res in run(pipeline(schedule), env):
                key = (res["schedule"], int(res["m"]))
                rows.setdefault(key, []).append(res)
                paired.setdefault(key, []).append(before)
        print(f"round {r}: done", file=sys.stderr)

    def med(results, key):
        return statistics.median(float(x[key]) for x in results)

    print(f"\nsmall transformer (untied head), global batch {args.batch}, {args.world} stages x "
          f"{args.threads} thread(s), one process x {args.threads}; median of {args.rounds} "
          f"rounds, each schedule paired with the single run just before it\n")
    def per_rank(results, key):  # per rank, the median over rounds
        per = [[float(v) for v in str(x[key]).split(",")] for x in results]
        return " / ".join(f"{statistics.median(col):.0f}" for col in zip(*per))

    print("| run | m | tok/s | step ms | bubble measured | predicted | microbatches in flight | "
          "activations MB per rank | CPU ms per rank | tok/s vs one process |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(f"| one process | — | {med(singles, 'tokens_per_s'):,.0f} | {med(singles, 'step_ms'):.0f} | "
          f"— | — | 1 | {per_rank(singles, 'act_mb')} | {per_rank(singles, 'cpu_ms')} | 1.00 |")
    for (name, m), results in rows.items():
        ratio = statistics.median(float(x["tokens_per_s"]) / float(s["tokens_per_s"])
                                  for x, s in zip(results, paired[(name, m)]))
        print(f"| {name} | {m} | {med(results, 'tokens_per_s'):,.0f} | {med(results, 'step_ms'):.0f} | "
              f"{med(results, 'bubble'):.3f} | {results[0]['predicted']} | {results[0]['in_flight']} | "
              f"{per_rank(results, 'act_mb')} | {per_rank(results, 'cpu_ms')} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
