#!/usr/bin/python3
"""spmd-train under ddp, fsdp, tp and pp beside PyTorch DDP, and the
checkpoint's save speed beside the disk's.

Speed: --rounds interleaved rounds of PyTorch DDP (bench/peers/torch_ddp.py,
gloo, the same GPT-2 config and per-rank batch) and spmd-train with each
layout on --world ranks x --threads threads (pp: --world stages, each
running the whole global batch, 1F1B over --batch microbatches, the head
untied as a pipeline needs, which adds the head's weights to every step). spmd-train's tokens/s is the
median of its steps after the first two (its JSON lines); each ratio is the
median of the rounds' pairwise ratios against the same round's PyTorch run.

Checkpoint: spmd-train (fsdp layout) saves after every step, synchronously
and then with checkpoint.async = true; the medians (over the saves after
the first) of the synchronous save's time and of the asynchronous one's
stall (the staging copy; its line also gives the writer's time), and the
bytes per rank, beside `dd` writing the same bytes to the same filesystem,
one dd per rank at once as the ranks write,
with and without conv=fdatasync (the checkpoint syncs every file it
writes, runtime/durable_file.h: the synced dd is its peer).

With --baseline BUILD, every round also runs each layout with that other
build's spmd-train, right after this build's, and the table adds this
build's tokens/s over the baseline's (the median of the rounds' pairwise
ratios): the A/B of a change, both builds meeting the same noise.

  bench/train_layouts.py [--build build] [--config small] [--world 2] [--threads 1]
                         [--rounds 3] [--steps 8] [--batch 4] [--baseline BUILD]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench_lines import parse, run_lines, spmd_train_rows
from train_bench import spmd_core, spmd_info

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def spmd_train(args, env, layout, run_folder, extra=(), build=None):
    flags = [f"--model.preset={args.config}", f"--training.steps={args.steps}",
             f"--training.global_batch={args.batch * args.world}",
             f"--training.threads={args.threads}"] + layout + list(extra)
    return spmd_train_rows(build or args.build, args.world, flags, run_folder, env, "train_layouts")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--config", default="small")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4, help="sequences per rank per step")
    ap.add_argument("--baseline", help="another build folder, run in the same rounds")
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    # PyTorch on the OpenBLAS core spmd runs (Debian's OpenBLAS may pick a
    # narrower one for this CPU, which spmd corrects for itself: docs/cpu.md).
    info = spmd_info(args.build)
    torch_env = dict(env)
    if spmd_core(info) and "OPENBLAS_CORETYPE" not in env:
        torch_env["OPENBLAS_CORETYPE"] = spmd_core(info).upper()
    print("\n".join(info) + f"\n# torch: OPENBLAS_CORETYPE={torch_env.get('OPENBLAS_CORETYPE', '(unset)')}")
    tmp = tempfile.mkdtemp(prefix="spmd_train_layouts_")
    layouts = {
        "ddp": [f"--parallel.dp_replicate={args.world}"],
        "fsdp": [f"--parallel.dp_shard={args.world}"],
        "tp": [f"--parallel.tp={args.world}"],
        "pp": [f"--parallel.pp={args.world}", f"--parallel.pp_microbatches={args.batch}",
               "--model.tie_embeddings=false"],
    }
    torch = ["/usr/bin/python3", os.path.join(ROOT, "bench", "peers", "torch_ddp.py"), "--nproc",
             str(args.world), "--config", args.config, "--threads", str(args.threads),
             "--steps", str(args.steps), "--batch", str(args.batch)]
    speed = {name: [] for name in ["torch ddp"] + list(layouts)}
    base = {name: [] for name in layouts}
    for r in range(args.rounds):
        lines = [l for l in run_lines(torch, torch_env, "train_layouts") if l.startswith("torch-ddp ")]
        speed["torch ddp"].append(float(parse(lines[-1])["tokens_per_s"]))
        for name, layout in layouts.items():
            rows = spmd_train(args, env, layout, os.path.join(tmp, name))
            steps = [x for x in rows if "tokens_per_s" in x]
            speed[name].append(statistics.median(x["tokens_per_s"] for x in steps[2:]))
            if args.baseline:
                rows = spmd_train(args, env, layout, os.path.join(tmp, name + "_base"),
                                  build=args.baseline)
                steps = [x for x in rows if "tokens_per_s" in x]
                base[name].append(statistics.median(x["tokens_per_s"] for x in steps[2:]))
        print(f"round {r}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in speed.items()),
              file=sys.stderr)

    print(f"\n{args.config} config, {args.batch} sequences per rank per step, {args.world} ranks x "
          f"{args.threads} thread(s), median of {args.rounds} interleaved rounds\n")
    print("| run | tok/s (all ranks) | vs PyTorch DDP |" + (" vs baseline |" if args.baseline else ""))
    print("|---|---|---|" + ("---|" if args.baseline else ""))
    for name, v in speed.items():
        ratio = statistics.median(a / b for a, b in zip(v, speed["torch ddp"]))
        label = name if name == "torch ddp" else f"spmd-train {name}"
        vs_base = ""
        if args.baseline:
            vs_base = " - |" if name not in base else \
                f" {statistics.median(a / b for a, b in zip(v, base[name])):.2f} |"
        print(f"| {label} | {statistics.median(v):,.0f} | {ratio:.2f} |" + vs_base)

    # Checkpoint saves beside dd: a save after every step, synchronous, then
    # asynchronous (the step's stall: the staging copy); the medians over the
    # saves after the first (which allocates), and dd with the same bytes.
    medians = {}
    for mode in ("false", "true"):
        folder = os.path.join(tmp, f"ck_{mode}")
        rows = spmd_train(args, env, layouts["fsdp"], os.path.join(tmp, f"ck_run_{mode}"),
                          [f"--checkpoint.folder={folder}", "--checkpoint.interval=1",
                           "--checkpoint.keep=1", f"--checkpoint.async={mode}"])
        saves = [x for x in rows if "checkpoint_ms" in x][1:]  # the saves' own lines
        medians[mode] = (statistics.median(float(x["checkpoint_ms"]) for x in saves),
                         statistics.median(float(x.get("checkpoint_write_ms", "nan")) for x in saves),
                         int(saves[-1]["checkpoint_bytes"]), len(saves))
        shutil.rmtree(folder)
    sync_ms, _, nbytes, n = medians["false"]
    stall_ms, write_ms, _, n_async = medians["true"]
    mib = nbytes / 2**20
    print(f"\ncheckpoint (fsdp, {args.world} ranks, a save after every step, the median of {n} "
          f"saves after the first): rank 0 wrote {mib:.1f} MiB in {sync_ms:.0f} ms: "
          f"{mib / sync_ms * 1e3:.0f} MiB/s (all ranks at once)")
    print(f"checkpoint.async = true: the step stalls {stall_ms:.1f} ms ({stall_ms / sync_ms:.1%} of "
          f"the synchronous save; median of {n_async}), the writer takes {write_ms:.0f} ms")
    # dd as the ranks write: `world` files of the same bytes at once, one dd
    # each, into one folder of the same filesystem; the rate is one file's
    # bytes over the slowest dd's time, as the save's is rank 0's bytes over
    # its time.
    folder = os.path.join(tmp, "dd")
    os.makedirs(folder)
    count = max(1, nbytes // 2**20)
    for sync in ("", "conv=fdatasync"):
        procs = [subprocess.Popen(["dd", "if=/dev/zero", f"of={os.path.join(folder, f'dd{r}.bin')}",
                                   "bs=1M", f"count={count}"] + ([sync] if sync else []),
                                  stderr=subprocess.PIPE, text=True) for r in range(args.world)]
        times = []
        for p in procs:
            m = re.search(r"copied, ([0-9.]+) s, ", p.communicate(timeout=600)[1])
            times.append(float(m.group(1)) if m else float("nan"))
        rate = count / max(times)
        print(f"dd {sync or '(page cache)'}, {args.world} at once: {rate:.0f} MiB/s each; the "
              f"synchronous save is {mib / sync_ms * 1e3 / rate:.0%} of it")
        for r in range(args.world):
            os.remove(os.path.join(folder, f"dd{r}.bin"))
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
