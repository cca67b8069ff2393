#!/usr/bin/python3
"""spmd's f32 GEMM beside every OpenBLAS core this CPU runs, one thread.

spmd chooses OpenBLAS's core by timing the candidates at start-up
(tensor/cpu/blas.h). This checks the choice from outside: for --rounds
rounds it runs `spmd-bench-ops --gemm-only --threads 1` once with the
choice left to spmd (SPMD_BLAS_CORE=auto) and once per candidate core
(SPMD_BLAS_CORE=<core>), interleaved, and reads each run's GFLOP/s of
ops::matmul ("ours") and of cblas_sgemm called directly ("openblas") at
every shape of its table. It prints each core's median cblas rate per
shape, and the median over rounds of ours(auto) / the best core's cblas
rate in the same round: the target of issue 38 is >= 0.9 at 2048^3.

  bench/gemm_cores.py [--build build] [--rounds 3] [--min-time 0.3]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys


def run(binary, core, min_time):
    env = dict(os.environ, SPMD_BLAS_CORE=core)
    out = subprocess.run([binary, "--gemm-only", "--threads", "1", "--min-time", str(min_time)],
                         capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        sys.exit(f"gemm_cores: SPMD_BLAS_CORE={core} {binary} failed:\n{out.stdout}{out.stderr}")
    rows, header = {}, []
    for line in out.stdout.splitlines():
        if line.startswith("#"):
            header.append(line)
        m = re.match(r"\s+(\d+x\d+\s+\.\s+\d+x\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", line)
        if m:
            rows[" ".join(m.group(1).split())] = (float(m.group(2)), float(m.group(4)))
    return header, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.3)
    args = ap.parse_args()
    binary = os.path.join(args.build, "bench", "spmd-bench-ops")
    header, _ = run(binary, "auto", 0.01)
    blas = next(l for l in header if l.startswith("# blas:"))
    m = re.search(r"measured fastest at 1 thread: ([^;]+) GFLOP/s", blas)
    if not m:
        sys.exit(f"gemm_cores: spmd made no choice to check here ({blas})")
    cores = [c.strip().split()[0] for c in m.group(1).split(",")]
    load_before = os.getloadavg()
    runs = {c: [] for c in ["auto"] + cores}
    for _ in range(args.rounds):
        for c in ["auto"] + cores:
            runs[c].append(run(binary, c, args.min_time)[1])
    load_after = os.getloadavg()

    print("\n".join(l for l in header if not l.startswith("# gemm ")))
    print(f"# {args.rounds} rounds, each: spmd's own choice then every candidate core, "
          f"interleaved; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    shapes = list(runs["auto"][0])
    print("| shape (MxK . KxN) | spmd's matmul (auto) | " +
          " | ".join(f"cblas {c}" for c in cores) + " | auto / best core (min-max) |")
    print("|---|---|" + "---|" * len(cores) + "---|")
    for s in shapes:
        ours = statistics.median(r[s][0] for r in runs["auto"])
        per_core = [statistics.median(r[s][1] for r in runs[c]) for c in cores]
        ratios = [runs["auto"][i][s][0] / max(runs[c][i][s][1] for c in cores)
                  for i in range(args.rounds)]
        print(f"| {s} | {ours:.1f} | " + " | ".join(f"{v:.1f}" for v in per_core) +
              f" | {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) |")


if __name__ == "__main__":
    main()
