#!/usr/bin/python3
"""Runs spmd-bench-train and its PyTorch peer in interleaved pairs and prints the ratios.

For each config (tiny, small) and thread count (1, 2) it runs --pairs pairs,
spmd then torch, then spmd, then torch... (A B A B), so that a noisy shared
machine slows both sides alike, and reports the median of the pairwise
ratios spmd/torch of tokens/s with their range, beside each side's median
tokens/s and peak RSS, and spmd's median MFU against the hardware's peak
(spmd-bench-train's, as spmd-train's: train/flops.h). The header names the
CPU model, the capability spmd's kernels ran with, the BLAS core each side
ran its GEMMs on, and the peak of each thread count (one run's measure).

The torch side's OpenBLAS core: Debian's PyTorch uses Debian's OpenBLAS,
which picks its SSE3 core (Prescott) on CPUs newer than its table; spmd
picks the right one itself (tensor/cpu/blas.h). So that the ratio measures
the code and not the GEMM kernels, --torch-coretype match (the default) sets
OPENBLAS_CORETYPE for torch to the core spmd runs; keep leaves torch's
environment as it is (what a user who sets nothing gets).

After the pairs of each row, --profile-top N (8 by default, 0 for none)
runs each side once more with its profiler on (spmd's runtime/profiler.h,
torch.profiler's key_averages) and prints the N ops of largest self time
per step side by side, with the share of the step the profiled ops account
for: the gap, by name. (Those runs are not in the ratios.)

--baseline PATH runs another spmd-bench-train (an older build, or this one)
as the B side instead of torch: before/after figures of a change, pair by
pair; --baseline-capability NAME runs it with SPMD_CPU_CAPABILITY=NAME (the
gain of one capability over another, with the same binary on both sides);
--baseline-args=ARGS adds flags to the baseline's command line
(--baseline build/bench/spmd-bench-train --baseline-args=--unfused: the
gain of the fused kernels, docs/cpu.md).

  bench/train_bench.py [--build build] [--configs tiny,small] [--threads 1,2]
                       [--pairs 5] [--steps 20] [--torch-coretype match|keep] [--profile-top 8]
                       [--baseline path/to/spmd-bench-train [--baseline-capability avx2]
                        [--baseline-args=--unfused]]
"""
import argparse
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TORCH_INFO = r"""
import ctypes, torch
core = "?"
try:
    lib = ctypes.CDLL("libopenblas.so.0")
    lib.openblas_get_corename.restype = ctypes.c_char_p
    core = lib.openblas_get_corename().decode()
except OSError:
    pass
cap = [l.split(":", 1)[1].strip() for l in torch.__config__.show().splitlines()
       if "CPU capability usage" in l]
print(torch.__version__, core, cap[0] if cap else "?")
"""


def parse(line):
    """tokens/s, peak RSS MB, parameters and MFU (nan for the torch peer, which has none)."""
    fields = dict(kv.split("=", 1) for kv in line.split()[1:])
    return (float(fields["tokens_per_s"]), float(fields["peak_rss_mb"]), int(fields["params"]),
            float(fields.get("mfu", "nan")))


def run_lines(cmd, env):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"train_bench: {' '.join(cmd)} failed:\n{out.stdout}{out.stderr}")
    return out.stdout.strip().splitlines()


def run(cmd, env):
    lines = [l for l in run_lines(cmd, env) if not l.startswith("#op")]
    return [l for l in lines if l.startswith("#")], parse(lines[-1])


def profile(cmd, env, top):
    """The '#op' rows (name, phase, self ms, calls per step) and '#op_total' of one run."""
    rows, total = [], None
    for line in run_lines(cmd + ["--profile-top", str(top)], env):
        f = line.split("\t")
        if f[0] == "#op":
            rows.append((f[1], f[2], float(f[3]), float(f[4])))
        elif f[0] == "#op_total":
            total = (float(f[1]), float(f[2]))
    return rows, total


def print_profiles(profiles, top, b_name):
    for config, threads, (a_rows, a_total), (b_rows, b_total) in profiles:
        print(f"\ntop {top} ops by self time, {config}, {threads} thread(s), ms per step "
              f"(one profiled run of each side):")
        for side, total in (("spmd", a_total), (b_name, b_total)):
            if total:
                print(f"  {side}: the ops' self times sum to {total[0]:.2f} ms of a "
                      f"{total[1]:.2f} ms mean step ({100 * total[0] / total[1]:.0f}%)")
        print(f"| # | spmd op | phase | ms | calls | {b_name} op | ms | calls |")
        print("|---|---|---|---|---|---|---|---|")
        for i in range(max(len(a_rows), len(b_rows))):
            a = a_rows[i] if i < len(a_rows) else ("", "", None, None)
            b = b_rows[i] if i < len(b_rows) else ("", "", None, None)
            cell = lambda v, fmt: format(v, fmt) if v is not None else ""
            print(f"| {i + 1} | {a[0]} | {a[1]} | {cell(a[2], '.2f')} | {cell(a[3], '.0f')} | "
                  f"{b[0]} | {cell(b[2], '.2f')} | {cell(b[3], '.0f')} |")


def spmd_info(build):
    """spmd's '# cpu:' (model, capability) and '# blas:' lines, from the spmd-bench-train run."""
    train = os.path.join(build, "bench", "spmd-bench-train")
    if os.path.exists(train):
        out = subprocess.run([train, "--info"], capture_output=True, text=True)
        if out.returncode == 0:
            return out.stdout.strip().splitlines()
    model = "?"
    with open("/proc/cpuinfo") as f:
        model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    return [f"# cpu: {model} (no {train}: capability and BLAS core unknown)"]


def spmd_core(info):
    """The OpenBLAS core named on the '# blas:' line, or None."""
    for line in info:
        if line.startswith("# blas:") and " core " in line:
            return line.split(" core ", 1)[1].split()[0]
    return None


def torch_info(env):
    out = subprocess.run(["/usr/bin/python3", "-c", TORCH_INFO], capture_output=True, text=True,
                         env=env)
    if out.returncode != 0:
        return "torch: not importable"
    version, core, cap = out.stdout.split()
    return f"torch {version}, OpenBLAS core {core}, CPU capability {cap}"


def side_b(args, peer, common):
    if args.baseline:
        return [args.baseline] + common + args.baseline_args.split()
    return ["/usr/bin/python3", peer] + common


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--configs", default="tiny,small")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--torch-coretype", choices=["match", "keep"], default="match")
    ap.add_argument("--profile-top", type=int, default=8,
                    help="after each row's pairs, the N ops of largest self time of each side")
    ap.add_argument("--baseline", help="another spmd-bench-train to run as the B side")
    ap.add_argument("--baseline-capability", help="SPMD_CPU_CAPABILITY for the baseline")
    ap.add_argument("--baseline-args", default="", help="extra flags for the baseline")
    args = ap.parse_args()
    if args.pairs < 5:
        sys.exit("train_bench: --pairs must be at least 5 (a median of fewer ratios is noise)")
    spmd_bin = os.path.join(args.build, "bench", "spmd-bench-train")
    peer = os.path.join(ROOT, "bench", "peers", "torch_train.py")
    b_name = "baseline" if args.baseline else "torch"

    info = spmd_info(args.build)
    b_env = dict(os.environ)
    core = spmd_core(info)
    if not args.baseline and args.torch_coretype == "match" and core:
        b_env["OPENBLAS_CORETYPE"] = core.upper()
    if args.baseline and args.baseline_capability:
        b_env["SPMD_CPU_CAPABILITY"] = args.baseline_capability
    header = info + [f"# spmd kernels forced by SPMD_CPU_CAPABILITY={os.environ['SPMD_CPU_CAPABILITY']}"
                     if os.environ.get("SPMD_CPU_CAPABILITY") else "# spmd kernels: the best "
                     "capability of the CPU (SPMD_CPU_CAPABILITY unset)"]
    if args.baseline:
        forced = f" with SPMD_CPU_CAPABILITY={args.baseline_capability}" \
            if args.baseline_capability else ""
        header.append(f"# B side: {args.baseline} {args.baseline_args}".rstrip() + forced)
    else:
        how = (f"OPENBLAS_CORETYPE={b_env['OPENBLAS_CORETYPE']} set to match spmd"
               if "OPENBLAS_CORETYPE" in b_env and args.torch_coretype == "match"
               else "its environment as given")
        header.append(f"# {torch_info(b_env)} ({how})")
    load_before = os.getloadavg()
    header.append(f"# {args.pairs} interleaved pairs (spmd, {b_name}) per row; ratio: the median "
                  f"of the pairwise spmd/{b_name} tokens/s ratios (min-max)")

    rows, notes, profiles, peaks = [], set(), [], {}
    for config in args.configs.split(","):
        steps = args.steps if config == "tiny" else max(3, args.steps // 4)
        for threads in (int(t) for t in args.threads.split(",")):
            common = ["--config", config, "--threads", str(threads), "--steps", str(steps)]
            a_runs, b_runs = [], []
            for _ in range(args.pairs):
                a_info, a = run([spmd_bin] + common, dict(os.environ, OMP_NUM_THREADS=str(threads)))
                for l in a_info:
                    if l.startswith("# mfu against"):
                        peaks[threads] = f"# {threads} thread(s): spmd's {l[2:]}"
                b_info, b = run(side_b(args, peer, common), dict(b_env, OMP_NUM_THREADS=str(threads)))
                notes.update(b_info)
                a_runs.append(a)
                b_runs.append(b)
            ratios = [a[0] / b[0] for a, b in zip(a_runs, b_runs)]
            rows.append((config, threads, a_runs, b_runs, ratios))
            print(f"{config} {threads}: ratios " + " ".join(f"{r:.2f}" for r in ratios),
                  file=sys.stderr)
            if args.profile_top > 0:
                profiles.append((config, threads,
                                 profile([spmd_bin] + common,
                                         dict(os.environ, OMP_NUM_THREADS=str(threads)),
                                         args.profile_top),
                                 profile(side_b(args, peer, common),
                                         dict(b_env, OMP_NUM_THREADS=str(threads)),
                                         args.profile_top)))

    load_after = os.getloadavg()
    header.append("# load average (1, 5, 15 min): " + " ".join(f"{x:.2f}" for x in load_before) +
                  " before, " + " ".join(f"{x:.2f}" for x in load_after) + " after")
    for line in header + sorted(notes) + [peaks[t] for t in sorted(peaks)]:
        print(line)
    print(f"| config | params | threads | spmd tok/s | {b_name} tok/s | spmd/{b_name} (min-max) | "
          f"spmd MFU | spmd peak RSS MB | {b_name} peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for config, threads, a_runs, b_runs, ratios in rows:
        med = lambda runs, k: statistics.median(r[k] for r in runs)
        print(f"| {config} | {a_runs[0][2]:,} | {threads} | {med(a_runs, 0):,.0f} | "
              f"{med(b_runs, 0):,.0f} | {statistics.median(ratios):.2f}x "
              f"({min(ratios):.2f}-{max(ratios):.2f}) | {100 * med(a_runs, 3):.1f}% | "
              f"{med(a_runs, 1):.0f} | {med(b_runs, 1):.0f} |")
    print_profiles(profiles, args.profile_top, b_name)


if __name__ == "__main__":
    main()
