#!/usr/bin/python3
"""spmd-plan's predictions beside real runs of spmd-train on CPU ranks.

For each layout of the small GPT-2 config (ddp, fsdp, tp, pp under 1F1B and
GPipe on 2 ranks; hsdp 2 x 2 on 4 ranks), it

1. measures the machine: spmd-bench's busbw of all_reduce, all_gather,
   reduce_scatter and sendrecv on 2 ranks (--json), once; then, before each
   layout, with as many processes at once as the layout has ranks (the
   ranks share the cores as the layout's will):
   - `spmd-plan --measure cpu`: the f32 GEMM of 512^3's FLOP/s and the
     memory bandwidth of an elementwise add, each over a window;
   - the model's own rate, from one-rank runs of the unsplit model on a
     rank's share of the batch (FLOPs per token x tokens / median step);
   so that the layout and its rates meet the same load on a shared machine,
   for --rounds rounds;
2. asks spmd-plan for the layout's largest rank's peak memory and its step
   time three ways: from the GEMM rate alone (--gemm-tflops), from the GEMM
   rate and the memory bandwidth (--mem-bw: the other ops' bytes over it,
   train/step_traffic.h), and from the model's rate; each with the busbw
   (--busbw) and the CPU's peak (--peak-tflops, for MFU); and writes the
   layout as a config (--write-config);
3. runs spmd-train with that config for --steps steps and reads each
   rank's JSON lines: the median step time after the first two steps, and
   the allocator's peak over the steps and ranks;

then prints one table: predicted and measured peak memory and step time,
and their errors; and the comparison from the GEMM rate and bandwidth with
each run's fastest step in place of its median, which a burst of the
machine's other load moves less. The targets (issue 39): memory within 15%,
step time within 25% given the GEMM rate and the busbw. Run it with no build
beside it (flock /tmp/build.lock); the load average is printed before and
after.

  flock /tmp/build.lock bench/plan_calibration.py [--build build] [--steps 6] [--rows 4]
                                                  [--rounds 3]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

from bench_lines import run_lines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name: (ranks, --layout, pp schedule)
LAYOUTS = {
    "ddp": (2, "dp_replicate=2", "1f1b"),
    "fsdp": (2, "dp_shard=2", "1f1b"),
    "tp": (2, "tp=2", "1f1b"),
    "pp 1f1b": (2, "pp=2,microbatches=4", "1f1b"),
    "pp gpipe": (2, "pp=2,microbatches=4", "gpipe"),
    "hsdp": (4, "dp_replicate=2,dp_shard=2", "1f1b"),
}


def binary(args, *path):
    return os.path.join(args.build, *path)


def train_cmd(args, ranks):
    train = binary(args, "train", "spmd-train")
    if ranks == 1:
        return [train]
    return [binary(args, "launcher", "spmdrun"), "--standalone", "--nproc-per-node", str(ranks),
            train]


def write_config(path, args, global_batch, schedule):
    with open(path, "w") as f:
        f.write(f'[model]\npreset = "small"\ntie_embeddings = false\n\n[training]\nglobal_batch = {global_batch}\n'
                f'steps = {args.steps}\nthreads = 1\n\n[parallel]\npp_schedule = "{schedule}"\n\n'
                f'[metrics]\nlog_every = 1000\n\n[checkpoint]\nfolder = ""\n')


def run_rows(cmd, env, folder, ranks):
    """The output lines of an spmd-train run, and each rank's JSON lines."""
    lines = run_lines(cmd + [f"--metrics.run_folder={folder}"], env, "plan_calibration",
                      timeout=900)
    rows = []
    for r in range(ranks):
        with open(os.path.join(folder, f"metrics_rank{r}.jsonl")) as f:
            rows.append([json.loads(l) for l in f if l.strip()])
    return lines, rows


def rate_line(lines, pattern, what):
    """FLOP/s from the first of spmd-train's lines that `pattern` matches:
    a number, then G or T (of FLOP/s)."""
    for l in lines:
        m = re.search(pattern, l)
        if m:
            return float(m.group(1)) * (1e9 if m.group(2) == "G" else 1e12)
    sys.exit(f"plan_calibration: no {what} line from spmd-train")


def peak_rate(lines):
    """The `mfu against X GFLOP/s per rank` line: the hardware's peak."""
    return rate_line(lines, r"^mfu against ([\d.]+) (G|T)FLOP/s per rank", "mfu")


def flops_per_token(lines):
    for l in lines:
        m = re.search(r"([\d.]+) MFLOP per token", l)
        if m:
            return float(m.group(1)) * 1e6
    sys.exit("plan_calibration: no MFLOP per token in spmd-train's output")


def fastest_step_s(rows):
    return min(r["step_ms"] for r in rows if "step_ms" in r and r["step"] >= 2) / 1e3


def median_step_s(rows):
    return statistics.median(r["step_ms"] for r in rows if "step_ms" in r and r["step"] >= 2) / 1e3


def one_rank_rates(args, env, tmp, ranks):
    """`ranks` one-rank runs at once of the unsplit model on a rank's share
    of the batch: the model's rate (its FLOPs per step over its median step,
    and over its fastest), each the median over the runs, and the CPU's
    peak spmd-train reports."""
    config = os.path.join(tmp, f"one_{ranks}.toml")
    write_config(config, args, args.rows, "1f1b")
    procs, folders = [], []
    for i in range(ranks):
        folder = os.path.join(tmp, f"one_{ranks}_{i}")
        folders.append(folder)
        procs.append(subprocess.Popen(
            train_cmd(args, 1) + ["--config", config, f"--metrics.run_folder={folder}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
    model, fast, peak = [], [], 0
    for p, folder in zip(procs, folders):
        out, _ = p.communicate(timeout=900)
        if p.returncode != 0:
            sys.exit(f"plan_calibration: the one-rank run failed:\n{out}")
        lines = out.splitlines()
        with open(os.path.join(folder, "metrics_rank0.jsonl")) as f:
            rows = [json.loads(l) for l in f if l.strip()]
        model.append(flops_per_token(lines) * args.rows * 256 / median_step_s(rows))
        fast.append(flops_per_token(lines) * args.rows * 256 / fastest_step_s(rows))
        peak = peak_rate(lines)
    return statistics.median(model), statistics.median(fast), peak


def machine_rates(args, env, ranks):
    """`ranks` runs at once of `spmd-plan --measure cpu`: the GEMM's FLOP/s
    and the memory bandwidth (bytes/s), each the median over the runs."""
    cmd = [binary(args, "train", "spmd-plan"), "--measure", "cpu", "--measure-seconds", "4"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env) for _ in range(ranks)]
    gemm, memory = [], []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        if p.returncode != 0:
            sys.exit(f"plan_calibration: spmd-plan --measure failed:\n{out}")
        g = re.search(r"--gemm-tflops ([\d.]+)", out)
        m = re.search(r"--mem-bw ([\d.]+)", out)
        if not g or not m:
            sys.exit(f"plan_calibration: no rates in spmd-plan --measure's output:\n{out}")
        gemm.append(float(g.group(1)) * 1e12)
        memory.append(float(m.group(1)) * 1e9)
    return statistics.median(gemm), statistics.median(memory)


def plan(args, env, config, ranks, layout, rate, peak, busbw, extra=()):
    """spmd-plan's peak per device (bytes) and step (seconds) for the layout."""
    cmd = [binary(args, "train", "spmd-plan"), "--config", config, "--devices", str(ranks),
           "--devices-per-node", str(ranks), "--device-memory", "64GB", "--layout", layout,
           "--gemm-tflops", f"{rate / 1e12:.6f}", "--peak-tflops", f"{peak / 1e12:.6f}",
           "--busbw", busbw] + list(extra)
    out = run_lines(cmd, env, "plan_calibration", timeout=120)
    units = {"kB": 1e3, "MB": 1e6, "GB": 1e9, "s": 1, "ms": 1e-3, "us": 1e-6}
    memory = step = bound = None
    for l in out:
        m = re.match(r"\s+peak per device\s+([\d.]+) (kB|MB|GB)", l)
        if m:
            memory = float(m.group(1)) * units[m.group(2)]
        m = re.match(r"\s+step\s+([\d.]+) (s|ms|us)", l)
        if m:
            step = float(m.group(1)) * units[m.group(2)]
        m = re.match(r"\s+bound by\s+(.*\S)", l)
        if m:
            bound = m.group(1)
    if memory is None or step is None:
        sys.exit("plan_calibration: spmd-plan printed no peak or step:\n" + "\n".join(out))
    return memory, step, bound


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rows", type=int, default=4, help="sequences per data-parallel rank")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    tmp = tempfile.mkdtemp(prefix="spmd_plan_calibration_")
    print(f"# load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")]
    print(f"# cpu: {cpu[0] if cpu else '?'}, {os.cpu_count()} logical CPUs")

    busbw = os.path.join(tmp, "busbw.json")
    run_lines([binary(args, "launcher", "spmdrun"), "--standalone", "--nproc-per-node", "2",
               binary(args, "bench", "spmd-bench"), "all_reduce,all_gather,reduce_scatter,sendrecv",
               "-b", "16K", "-e", "64M", "-f", "4", "-n", "10", "--json", busbw], env,
              "plan_calibration", timeout=900)
    with open(busbw) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    for op in ("all_reduce", "all_gather", "reduce_scatter", "sendrecv"):
        big = max((r for r in rows if r["op"] == op), key=lambda r: r["size"])
        print(f"# busbw {op}, 2 ranks: {big['busbw']:.2f} GB/s at {big['size'] >> 20} MiB")

    # Each round runs every layout right after its own rates are measured,
    # so that both meet the same load on a shared machine.
    results = {name: [] for name in LAYOUTS}
    loads = []
    for rnd in range(args.rounds):
        for name, (ranks, layout, schedule) in LAYOUTS.items():
            gemm, memory = machine_rates(args, env, ranks)
            model, fast, peak = one_rank_rates(args, env, tmp, ranks)
            dp = 1
            for key in ("dp_replicate", "dp_shard"):
                m = re.search(key + r"=(\d+)", layout)
                dp *= int(m.group(1)) if m else 1
            stem = os.path.join(tmp, name.replace(" ", "_"))
            write_config(stem + "_base.toml", args, args.rows * dp, schedule)
            base = stem + "_base.toml"
            mem_bw = ["--mem-bw", f"{memory / 1e9:.3f}"]
            mem, step_gemm, _ = plan(args, env, base, ranks, layout, gemm, peak, busbw,
                                     ["--write-config", stem + ".toml"])
            _, step_traffic, bound = plan(args, env, base, ranks, layout, gemm, peak, busbw, mem_bw)
            _, step_model, _ = plan(args, env, base, ranks, layout, model, peak, busbw)
            _, rows = run_rows(train_cmd(args, ranks) + ["--config", stem + ".toml"], env,
                               stem + f"_r{rnd}", ranks)
            r = dict(mem=mem, measured_mem=max(x["mem_peak"] for rank in rows for x in rank
                                               if "mem_peak" in x),
                     gemm=step_gemm, traffic=step_traffic, model=step_model, bound=bound,
                     measured=median_step_s(rows[0]), fastest=fastest_step_s(rows[0]))
            results[name].append(r)
            print(f"# round {rnd} {name}: GEMM {gemm / 1e9:.1f} GFLOP/s, memory "
                  f"{memory / 1e9:.1f} GB/s, the model {model / 1e9:.1f} GFLOP/s per rank "
                  f"({ranks} at once); planned {step_traffic * 1e3:.0f} ms, measured "
                  f"{r['measured'] * 1e3:.0f} ms", flush=True)
        loads.append(os.getloadavg()[0])

    print(f"# load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; after each "
          f"round: {' '.join(f'{x:.2f}' for x in loads)}")
    print(f"\nsmall GPT-2 (6 layers, C 384, T 256, untied head), {args.rows} sequences per "
          f"data-parallel rank, 1 thread per rank, f32; step: median of steps 2..{args.steps - 1} "
          f"of rank 0; each figure the median of {args.rounds} rounds, each error the median of "
          f"the rounds' errors; the last two columns from the fastest step of each run in place "
          f"of the median\n")
    print("| layout | ranks | peak memory: planned | measured | error | step: planned from the "
          "GEMM rate alone | error | from the GEMM rate and memory bandwidth | error | from the "
          "model's rate | error | measured | bound (planned) | fastest: measured | error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    med = statistics.median
    for name, rs in results.items():
        def m(key):
            return med(r[key] for r in rs)

        def err(key, against="measured"):
            return med((r[key] - r[against]) / r[against] for r in rs)
        print(f"| {name} | {LAYOUTS[name][0]} | {m('mem') / 1e6:.1f} MB | "
              f"{m('measured_mem') / 1e6:.1f} MB | {err('mem', 'measured_mem'):+.0%} | "
              f"{m('gemm') * 1e3:.0f} ms | {err('gemm'):+.0%} | {m('traffic') * 1e3:.0f} ms | "
              f"{err('traffic'):+.0%} | {m('model') * 1e3:.0f} ms | {err('model'):+.0%} | "
              f"{m('measured') * 1e3:.0f} ms | {rs[-1]['bound']} | {m('fastest') * 1e3:.0f} ms | "
              f"{err('traffic', 'fastest'):+.0%} |")


if __name__ == "__main__":
    main()
