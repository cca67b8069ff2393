#!/usr/bin/python3
"""Summarises a bench/compare_collectives.sh run: the median over rounds of
each (implementation, ranks, op, size), the ratios of spmd to its peers, and
whether each of issue 6's targets holds; then draws one plot per rank count.

    /usr/bin/python3 bench/compare_collectives.py DIR

The peers: OpenMPI over TCP ("mpi"), Gloo through its own C++ API ("gloo",
bench/peers/gloo_bench.cpp, one row per Gloo algorithm) and PyTorch's gloo
backend ("torch", which calls one Gloo algorithm per op). "gloo best" is,
per op and size, the Gloo algorithm with the best median over the rounds.

Targets (spmd's TCP backend against the peers, same machine, same run):
  all_reduce, all_gather, reduce_scatter, broadcast at 1 MiB..256 MiB:
      busbw >= 1.5x Gloo's best algorithm's and >= 1.0x OpenMPI's;
  all_reduce at 8 B..4 KiB: time <= 0.5x Gloo's ring (gloo::allreduce's
      ring, what PyTorch calls) and <= 1.0x OpenMPI's;
  all_to_all and sendrecv at 1 MiB..256 MiB: busbw >= 1.0x OpenMPI's.
"""
import collections
import json
import os
import statistics
import subprocess
import sys

from bench_lines import interleaved_rows

BANDWIDTH_VS_GLOO = {"all_reduce", "all_gather", "reduce_scatter", "broadcast"}
GLOO_RING = "gloo-allreduce(RING)"


def load(directory):
    """{(p, sweep): {impl: {(op, size): [row, ...]}}} from r<round>_<impl>_<p>_<sweep>.json.
    Gloo's rows are kept per algorithm, under their own impl ("gloo-<Algorithm>")."""
    data = collections.defaultdict(lambda: collections.defaultdict(lambda: collections.defaultdict(list)))
    for _, impl, p, sweep, row in interleaved_rows(directory):
        key = row["impl"] if impl == "gloo" else impl
        data[(p, sweep)][key][(row["op"], int(row["size"]))].append(row)
    return data


def median(rows, key):
    return statistics.median(r[key] for r in rows) if rows else None


def figure(by_impl, impl, op, size, key):
    return median(by_impl.get(impl, {}).get((op, size), []), key)


def best_gloo(by_impl, op, size, key):
    """(value, algorithm) of the Gloo algorithm with the best median (highest
    busbw, or lowest time)."""
    found = [(median(rows[(op, size)], key), impl[len("gloo-"):])
             for impl, rows in by_impl.items() if impl.startswith("gloo-") and (op, size) in rows]
    if not found:
        return None, "-"
    return (min if key == "time_us" else max)(found)


def size_label(b):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return f"{b / scale:g} {unit}"
    return f"{b} B"


def fmt(x, spec="%.2f"):
    return "-" if x is None else spec % x


def ratio(a, b):
    return a / b if a and b else None


def judge(checks, where, misses, higher_is_better):
    """'ok' or 'MISS' for [(peer, ratio, bound)], recording each miss."""
    verdict = "ok"
    for peer, r, bound in checks:
        if r is not None and (r < bound if higher_is_better else r > bound):
            verdict = "MISS"
            sign = "<" if higher_is_better else ">"
            misses.append(f"{where}: spmd/{peer} {r:.2f} {sign} {bound}")
    return verdict


def large_table(p, by_impl, misses):
    print(f"\n== {p} ranks: busbw (GB/s), median over rounds; ratio = spmd / peer")
    print(f"{'op':<15}{'size':>9}{'spmd':>7}{'mpi':>7}{'gloo':>7}  {'(best Gloo algorithm)':<27}"
          f"{'torch':>7}{'/mpi':>7}{'/gloo':>7}{'/torch':>7}  target")
    keys = sorted({k for impl in by_impl.values() for k in impl})
    for op, size in keys:
        bw = {i: figure(by_impl, i, op, size, "busbw") for i in ("spmd", "mpi", "torch")}
        gloo, algo = best_gloo(by_impl, op, size, "busbw")
        r_mpi, r_gloo, r_torch = ratio(bw["spmd"], bw["mpi"]), ratio(bw["spmd"], gloo), ratio(bw["spmd"], bw["torch"])
        checks = [("mpi", r_mpi, 1.0)] + ([("gloo", r_gloo, 1.5)] if op in BANDWIDTH_VS_GLOO else [])
        verdict = judge(checks, f"{p} ranks {op} {size_label(size)}", misses, True)
        if op not in BANDWIDTH_VS_GLOO | {"all_to_all", "sendrecv"}:
            verdict = "-"
        print(f"{op:<15}{size_label(size):>9}{fmt(bw['spmd']):>7}{fmt(bw['mpi']):>7}{fmt(gloo):>7}  "
              f"{'(' + algo + ')':<27}{fmt(bw['torch']):>7}{fmt(r_mpi):>7}{fmt(r_gloo):>7}"
              f"{fmt(r_torch):>7}  {verdict}")


def small_table(p, by_impl, misses):
    print(f"\n== {p} ranks: all_reduce time (us), median over rounds; ratio = spmd / peer "
          "(targets: /mpi <= 1.0, /ring <= 0.5)")
    print(f"{'size':>9}{'spmd':>8}{'mpi':>8}{'ring':>8}{'gloo':>8}  {'(best Gloo algorithm)':<27}"
          f"{'torch':>8}{'/mpi':>7}{'/ring':>7}{'/gloo':>7}{'/torch':>7}  target")
    keys = sorted({k for impl in by_impl.values() for k in impl}, key=lambda k: k[1])
    for op, size in keys:
        t = {i: figure(by_impl, i, op, size, "time_us") for i in ("spmd", "mpi", "torch", GLOO_RING)}
        gloo, algo = best_gloo(by_impl, op, size, "time_us")
        r = {k: ratio(t["spmd"], v) for k, v in
             (("mpi", t["mpi"]), ("ring", t[GLOO_RING]), ("gloo", gloo), ("torch", t["torch"]))}
        verdict = judge([("mpi", r["mpi"], 1.0), ("gloo ring", r["ring"], 0.5)],
                        f"{p} ranks all_reduce {size_label(size)} time", misses, False)
        print(f"{size_label(size):>9}{fmt(t['spmd'], '%.1f'):>8}{fmt(t['mpi'], '%.1f'):>8}"
              f"{fmt(t[GLOO_RING], '%.1f'):>8}{fmt(gloo, '%.1f'):>8}  {'(' + algo + ')':<27}"
              f"{fmt(t['torch'], '%.1f'):>8}{fmt(r['mpi']):>7}{fmt(r['ring']):>7}{fmt(r['gloo']):>7}"
              f"{fmt(r['torch']):>7}  {verdict}")


def write_rows(path, rows):
    with open(path, "w") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    return path


def plot(directory, data, ranks):
    """One PNG per rank count: spmd, OpenMPI, PyTorch's gloo, and per size
    the best Gloo algorithm's rows."""
    here = os.path.dirname(os.path.abspath(__file__))
    for p in ranks:
        sweeps = [by_impl for (q, _), by_impl in data.items() if q == p]
        files = []
        for impl in ("spmd", "mpi", "torch"):
            rows = [r for by_impl in sweeps for rs in by_impl.get(impl, {}).values() for r in rs]
            if rows:
                files.append(write_rows(os.path.join(directory, f"merged_{impl}_{p}.json"), rows))
        best = []
        for by_impl in sweeps:
            for op, size in {k for i, rows in by_impl.items() if i.startswith("gloo-") for k in rows}:
                _, algo = best_gloo(by_impl, op, size, "busbw")
                best += [dict(r, impl="gloo (best algorithm)") for r in by_impl["gloo-" + algo][(op, size)]]
        if best:
            files.append(write_rows(os.path.join(directory, f"merged_gloo_{p}.json"), best))
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
    plot(directory, data, ranks)


if __name__ == "__main__":
    main()
