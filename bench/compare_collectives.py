#!/usr/bin/python3
"""Summarises a bench/compare_collectives.sh run: the median over rounds of
each (implementation, ranks, op, size), the ratios of spmd to its peers, and
whether each of issue 6's targets holds; then draws one plot per rank count.

    /usr/bin/python3 bench/compare_collectives.py DIR

Targets (spmd's TCP backend against the peers, same machine, same run):
  all_reduce, all_gather, reduce_scatter, broadcast at 1 MiB..256 MiB:
      busbw >= 1.5x Gloo's and >= 1.0x OpenMPI's;
  all_reduce at 8 B..4 KiB: time <= 0.5x Gloo's (ring) and <= 1.0x OpenMPI's;
  all_to_all and sendrecv at 1 MiB..256 MiB: busbw >= 1.0x OpenMPI's.
The Gloo figures are PyTorch's gloo backend (what torch.distributed exposes).
"""
import collections
import glob
import json
import os
import re
import statistics
import subprocess
import sys

BANDWIDTH_VS_GLOO = {"all_reduce", "all_gather", "reduce_scatter", "broadcast"}
IMPLS = ("spmd", "mpi", "gloo")


def load(directory):
    """{(p, sweep): {impl: {(op, size): [row, ...]}}} from r<round>_<impl>_<p>_<sweep>.json."""
    data = collections.defaultdict(lambda: collections.defaultdict(lambda: collections.defaultdict(list)))
    for path in sorted(glob.glob(os.path.join(directory, "r*_*_*_*.json"))):
        m = re.match(r"r(\d+)_(\w+?)_(\d+)_(\w+)\.json", os.path.basename(path))
        if not m:
            continue
        _, impl, p, sweep = m.groups()
        with open(path) as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    data[(int(p), sweep)][impl][(row["op"], int(row["size"]))].append(row)
    return data


def median(rows, key):
    return statistics.median(r[key] for r in rows) if rows else None


def size_label(b):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return f"{b / scale:g} {unit}"
    return f"{b} B"


def fmt(x, spec="%.2f"):
    return "-" if x is None else spec % x


def large_table(p, by_impl, misses):
    print(f"\n== {p} ranks: busbw (GB/s), median over rounds; ratio = spmd / peer")
    print(f"{'op':<15}{'size':>9}{'spmd':>8}{'mpi':>8}{'gloo':>8}{'/mpi':>8}{'/gloo':>8}  target")
    keys = sorted({k for impl in by_impl.values() for k in impl}, key=lambda k: (k[0], k[1]))
    for op, size in keys:
        bw = {i: median(by_impl.get(i, {}).get((op, size), []), "busbw") for i in IMPLS}
        r_mpi = bw["spmd"] / bw["mpi"] if bw["spmd"] and bw["mpi"] else None
        r_gloo = bw["spmd"] / bw["gloo"] if bw["spmd"] and bw["gloo"] else None
        need = [("mpi", r_mpi, 1.0)]
        if op in BANDWIDTH_VS_GLOO:
            need.append(("gloo", r_gloo, 1.5))
        verdict = "ok"
        for peer, r, want in need:
            if r is not None and r < want:
                verdict = "MISS"
                misses.append(f"{p} ranks {op} {size_label(size)}: spmd/{peer} {r:.2f} < {want}")
        if op not in BANDWIDTH_VS_GLOO | {"all_to_all", "sendrecv"}:
            verdict = "-"
        print(f"{op:<15}{size_label(size):>9}{fmt(bw['spmd']):>8}{fmt(bw['mpi']):>8}"
              f"{fmt(bw['gloo']):>8}{fmt(r_mpi):>8}{fmt(r_gloo):>8}  {verdict}")


def small_table(p, by_impl, misses):
    print(f"\n== {p} ranks: all_reduce time (us), median over rounds; ratio = spmd / peer "
          "(targets: /mpi <= 1.0, /gloo <= 0.5)")
    print(f"{'size':>9}{'spmd':>9}{'mpi':>9}{'gloo':>9}{'/mpi':>8}{'/gloo':>8}  target")
    keys = sorted({k for impl in by_impl.values() for k in impl}, key=lambda k: k[1])
    for op, size in keys:
        t = {i: median(by_impl.get(i, {}).get((op, size), []), "time_us") for i in IMPLS}
        r_mpi = t["spmd"] / t["mpi"] if t["spmd"] and t["mpi"] else None
        r_gloo = t["spmd"] / t["gloo"] if t["spmd"] and t["gloo"] else None
        verdict = "ok"
        for peer, r, want in (("mpi", r_mpi, 1.0), ("gloo", r_gloo, 0.5)):
            if r is not None and r > want:
                verdict = "MISS"
                misses.append(f"{p} ranks all_reduce {size_label(size)}: time spmd/{peer} {r:.2f} > {want}")
        print(f"{size_label(size):>9}{fmt(t['spmd'], '%.1f'):>9}{fmt(t['mpi'], '%.1f'):>9}"
              f"{fmt(t['gloo'], '%.1f'):>9}{fmt(r_mpi):>8}{fmt(r_gloo):>8}  {verdict}")


def plot(directory, ranks):
    here = os.path.dirname(os.path.abspath(__file__))
    for p in ranks:
        files = []
        for impl in IMPLS:
            merged = os.path.join(directory, f"merged_{impl}_{p}.json")
            with open(merged, "w") as out:
                for path in sorted(glob.glob(os.path.join(directory, f"r*_{impl}_{p}_*.json"))):
                    out.write(open(path).read())
            if os.path.getsize(merged):
                files.append(merged)
        png = os.path.join(directory, f"busbw_{p}ranks.png")
        subprocess.run(["/usr/bin/python3", os.path.join(here, "plot_collectives.py"), *files,
                        "-o", png, "--title", f"busbw, {p} ranks on one machine (median of rounds)"],
                       check=False)


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else "build/compare"
    data = load(directory)
    if not data:
        sys.exit(f"compare_collectives: no results in {directory}")
    misses = []
    ranks = sorted({p for p, _ in data})
    for p in ranks:
        if (p, "small") in data:
            small_table(p, data[(p, "small")], misses)
        if (p, "large") in data:
            large_table(p, data[(p, "large")], misses)
    print("\n== targets missed:" if misses else "\n== every target met")
    for m in misses:
        print("  " + m)
    plot(directory, ranks)


if __name__ == "__main__":
    main()
