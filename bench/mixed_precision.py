#!/usr/bin/python3
"""spmd-train in bf16 mixed precision beside f32, on the default job.

Speed: --rounds interleaved pairs (f32 then bf16, the order swapped every
other round) of spmd-train on --config (the model preset) for --steps steps
on --world ranks x --threads threads, the default job's layout (FSDP over
the ranks). Each run's tokens/s is the median of its steps after the first
two (its JSON lines); the ratio quoted is the median of the rounds' pairwise
bf16 / f32 ratios.

Quality and memory: the default job (configs/default.toml) for
--quality-steps steps in each precision, the same seed: the held-out loss at
the end (both within the stated 2% of each other?), and each run's largest
per-rank allocator peak (mem_peak of rank 0's JSON lines).

  bench/mixed_precision.py [--build build] [--config small] [--world 2] [--threads 1]
                           [--rounds 3] [--steps 12] [--quality-steps 600]
"""
import argparse
import os
import statistics
import subprocess
import tempfile

from bench_lines import spmd_train_rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args, env, precision, flags, folder):
    return spmd_train_rows(args.build, args.world,
                           [f"--config={os.path.join(ROOT, 'configs', 'default.toml')}",
                            f"--training.mixed_precision={precision}",
                            f"--training.threads={args.threads}"] + flags, folder, env,
                           "mixed_precision")


def tokens_per_s(rows):
    return statistics.median(r["tokens_per_s"] for r in rows[2:])


def cpu_model():
    fields = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if ":" in line:
                key, value = line.split(":", 1)
                fields.setdefault(key.strip(), value.strip())
    return (f"{fields.get('model name', '?')} (family {fields.get('cpu family', '?')}, model "
            f"{fields.get('model', '?')}), avx512_bf16: {'avx512_bf16' in fields.get('flags', '')}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--config", default="small")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--quality-steps", type=int, default=600)
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    print(f"cpu: {cpu_model()}; load average {os.getloadavg()[0]:.2f} at start")

    with tempfile.TemporaryDirectory(prefix="spmd_mixed_") as tmp:
        speed = {"f32": [], "bf16": []}
        ratios = []
        for r in range(args.rounds):
            order = ["f32", "bf16"] if r % 2 == 0 else ["bf16", "f32"]
            got = {}
            for precision in order:
                rows = run(args, env, precision,
                           [f"--model.preset={args.config}", f"--training.steps={args.steps}",
                            "--schedule.warmup_steps=0", "--metrics.eval_every=0"],
                           os.path.join(tmp, f"speed_{r}_{precision}"))
                got[precision] = tokens_per_s(rows)
                speed[precision].append(got[precision])
            ratios.append(got["bf16"] / got["f32"])
            print(f"round {r}: f32 {got['f32']:.0f} tok/s, bf16 {got['bf16']:.0f} tok/s, "
                  f"bf16/f32 {ratios[-1]:.3f}", flush=True)

        quality = {}
        for precision in ["f32", "bf16"]:
            rows = run(args, env, precision,
                       [f"--training.steps={args.quality_steps}",
                        f"--schedule.warmup_steps={min(50, args.quality_steps)}",
                        f"--metrics.eval_every={args.quality_steps}"],
                       os.path.join(tmp, f"quality_{precision}"))
            val = [r["val_loss"] for r in rows if "val_loss" in r]
            quality[precision] = (val[-1] if val else float("nan"),
                                  max(r["mem_peak"] for r in rows))

    f32_val, f32_peak = quality["f32"]
    bf16_val, bf16_peak = quality["bf16"]
    print()
    print(f"| what | f32 | bf16 | bf16 / f32 | target |")
    print(f"|---|---|---|---|---|")
    print(f"| tokens/s, {args.config} config, {args.world} ranks x {args.threads} threads "
          f"(median of {args.rounds} pairs) | {statistics.median(speed['f32']):.0f} | "
          f"{statistics.median(speed['bf16']):.0f} | {statistics.median(ratios):.3f} | >= 1.3 |")
    print(f"| val loss after {args.quality_steps} steps, default job | {f32_val:.4f} | "
          f"{bf16_val:.4f} | {bf16_val / f32_val:.4f} | within 2% |")
    print(f"| rank 0's allocator peak, default job | {f32_peak / 2**20:.1f} MiB | "
          f"{bf16_peak / 2**20:.1f} MiB | {bf16_peak / f32_peak:.3f} | <= 0.7 |")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
