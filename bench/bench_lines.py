"""What the training benchmarks' drivers (ddp, tp, pp, fsdp, train_layouts,
cp, moe) share: running one side's command and reading its
`name key=value ...` result lines, or spmd-train's JSON lines; and what the
collective comparisons (compare_collectives, compare_shm) share: reading
the per-round files bench/interleave.sh leaves."""
import glob
import json
import os
import re
import subprocess
import sys


def parse(line):
    """{key: value} of a result line `name key=value key=value ...`."""
    return {k: v for k, v in (kv.split("=", 1) for kv in line.split()[1:])}


def run_lines(cmd, env, tool, timeout=3600):
    """The command's output lines, without spmdrun's `[rankN]: ` prefix; exits
    naming `tool` and the command, with its output, when it fails."""
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if out.returncode != 0:
        sys.exit(f"{tool}: {' '.join(cmd)} failed:\n{out.stdout}{out.stderr}")
    return [l.split("]: ", 1)[-1] for l in out.stdout.strip().splitlines()]


def last_result(cmd, env, tool, prefix, timeout=1800):
    """{key: value} of the command's last line starting with `prefix`; exits
    naming `tool` and the command when there is none."""
    lines = [l for l in run_lines(cmd, env, tool, timeout=timeout) if l.startswith(prefix)]
    if not lines:
        sys.exit(f"{tool}: no result line from {' '.join(cmd)}")
    return parse(lines[-1])


def spmd_train_rows(build, world, flags, run_folder, env, tool, timeout=1800):
    """Rank 0's JSON lines (one dict a step) of spmd-train run with `flags` on
    `world` ranks (under spmdrun --standalone; one rank: alone) into
    `run_folder`; exits naming `tool` when the run fails."""
    train = os.path.join(build, "train", "spmd-train")
    cmd = [train] if world == 1 else [os.path.join(build, "launcher", "spmdrun"), "--standalone",
                                      "--nproc-per-node", str(world), train]
    run_lines(cmd + list(flags) + [f"--metrics.run_folder={run_folder}",
                                   "--metrics.log_every=1000"], env, tool, timeout=timeout)
    with open(os.path.join(run_folder, "metrics_rank0.jsonl")) as f:
        return [json.loads(line) for line in f]


# The ops the peers run in place (one buffer), as spmd's ProcessGroup takes them.
PEERS_IN_PLACE = ("all_reduce", "broadcast", "reduce")


def like_the_peers(row):
    """The row with the figures of the form the peers run: spmd-bench's
    top-level figures are its out-of-place set (nccl-tests' first column),
    which for all_reduce, broadcast and reduce is a copy and then the call;
    the peers (bench/peers/) call those in place, so their comparison takes
    spmd's in-place set. Rows of the peers pass unchanged."""
    cell = row.get("in_place")
    if row.get("op") not in PEERS_IN_PLACE or not cell:
        return row
    return dict(row, time_us=cell["time_us"], algbw=cell["algbw"], busbw=cell["busbw"])


def interleaved_rows(directory):
    """(round, impl, ranks, sweep, row) for every JSON line of the files
    r<round>_<impl>_<ranks>_<sweep>.json in `directory` (bench/interleave.sh),
    each row's figures those of the form the peers run (like_the_peers)."""
    for path in sorted(glob.glob(os.path.join(directory, "r*_*_*_*.json"))):
        m = re.match(r"r(\d+)_(\w+?)_(\d+)_(\w+)\.json", os.path.basename(path))
        if not m:
            continue
        rnd, impl, p, sweep = m.groups()
        with open(path) as f:
            for line in f:
                if line.strip():
                    yield int(rnd), impl, int(p), sweep, like_the_peers(json.loads(line))
