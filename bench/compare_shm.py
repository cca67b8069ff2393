#!/usr/bin/python3
"""Summarises a bench/compare_shm.sh run: for each ranks, op and size, the
median over rounds of spmd over shared memory ("shm"), spmd over TCP ("tcp")
and OpenMPI's vader ("vader"), the median of the pairwise ratios (shm / peer
in the same round), the fraction of memcpy bandwidth shm's busbw reaches
(spmd-shm-ceiling, same size), and whether issue 22's targets hold:
  all_reduce, all_gather, reduce_scatter, broadcast at 1..64 MiB on 2 ranks:
      busbw >= 1.5x vader's and >= 1.5x tcp's;
  all_reduce of 8 B on 2 ranks: time <= 2 us and <= 0.5x vader's.
With a baseline build in the run (compare_shm.sh --baseline: "shm_base",
"tcp_base"), a last table gives this build over it, the median of the
pairwise ratios of each round (time for the latency sweep, busbw for the
others: > 1 is faster for busbw, slower for time).

    /usr/bin/python3 bench/compare_shm.py DIR
"""
import collections
import json
import os
import statistics
import sys

from bench_lines import interleaved_rows

BANDWIDTH_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


def load(directory):
    """{(p, sweep, op, size): {impl: {round: row}}}."""
    data = collections.defaultdict(lambda: collections.defaultdict(dict))
    for rnd, impl, p, sweep, row in interleaved_rows(directory):
        data[(p, sweep, row["op"], int(row["size"]))][impl][rnd] = row
    return data


def ceiling(directory):
    """memcpy GB/s by size (the best), the lowest round trip and post exchange (ns), the CPU."""
    memcpy, trips, exchanges, cpu = collections.defaultdict(list), [], [], "?"
    path = os.path.join(directory, "ceiling.jsonl")
    if os.path.exists(path):
        for line in open(path):
            row = json.loads(line)
            cpu = row["cpu"]
            if row["figure"] == "memcpy":
                memcpy[row["bytes"]].append(row["gbps"])
            elif row["figure"] == "post_exchange":
                exchanges.append(row["ns"])
            else:
                trips.append(row["ns"])
    lowest = lambda xs: min(xs) if xs else None
    return {b: max(v) for b, v in memcpy.items()}, lowest(trips), lowest(exchanges), cpu


def med(xs):
    return statistics.median(xs) if xs else None


def pairwise(by_impl, a, b, key):
    """Median over the rounds both ran of a's figure over b's."""
    rounds = set(by_impl.get(a, {})) & set(by_impl.get(b, {}))
    return med([by_impl[a][r][key] / by_impl[b][r][key] for r in rounds if by_impl[b][r][key] > 0])


def fmt(x, spec="%.2f"):
    return "-" if x is None else spec % x


def size_label(b):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return f"{b // scale} {unit}"
    return f"{b} B"


def print_baseline(data):
    """This build over the baseline build, when the run had one."""
    if not any("shm_base" in by_impl for by_impl in data.values()):
        return
    print("\n== this build / baseline build (median of the rounds' pairwise ratios; "
          "time for all_reduce latency, busbw for the rest)")
    print(f"{'ranks':>5} {'op':>15} {'size':>8} {'shm':>7} {'tcp':>7}")
    for (p, sweep, op, size), by_impl in sorted(data.items(), key=lambda kv: (kv[0][0], kv[0][1] != "small", kv[0][2], kv[0][3])):
        key = "time_us" if sweep == "small" else "busbw"
        rs, rt = pairwise(by_impl, "shm", "shm_base", key), pairwise(by_impl, "tcp", "tcp_base", key)
        print(f"{p:>5} {op + (' (time)' if key == 'time_us' else ''):>15} {size_label(size):>8} "
              f"{fmt(rs):>7} {fmt(rt):>7}")


def main(directory):
    data = load(directory)
    memcpy, trip_ns, exchange_ns, cpu = ceiling(directory)
    print(f"CPU: {cpu}")
    load_path = os.path.join(directory, "loadavg.txt")
    if os.path.exists(load_path):
        loads = [" ".join(line.split()[:3]) for line in open(load_path) if line.strip()]
        print("load average (1, 5, 15 min) before and after: " + "; ".join(loads))
    print("ceiling: memcpy " + ", ".join(f"{size_label(b)} {g:.1f} GB/s" for b, g in sorted(memcpy.items()))
          + f"; cache-line round trip {fmt(trip_ns, '%.0f')} ns"
          + f"; 2-core post exchange (the 8 B all_reduce's floor) {fmt(exchange_ns, '%.0f')} ns")
    verdicts = []
    for p in sorted({k[0] for k in data}):
        print(f"\n== {p} ranks, all_reduce latency (us, median over rounds; ratio = shm / peer, median of pairs)")
        print(f"{'size':>8} {'shm':>8} {'tcp':>8} {'vader':>8} {'shm/tcp':>8} {'shm/vader':>9}")
        for (pp, sweep, op, size), by_impl in sorted(data.items()):
            if pp != p or sweep != "small":
                continue
            t = {i: med([r["time_us"] for r in by_impl.get(i, {}).values()]) for i in ("shm", "tcp", "vader")}
            rv = pairwise(by_impl, "shm", "vader", "time_us")
            print(f"{size_label(size):>8} {fmt(t['shm']):>8} {fmt(t['tcp']):>8} {fmt(t['vader']):>8} "
                  f"{fmt(pairwise(by_impl, 'shm', 'tcp', 'time_us')):>8} {fmt(rv):>9}")
            if p == 2 and size == 8 and t["shm"] is not None:
                verdicts.append((f"8 B all_reduce on 2 ranks: {t['shm']:.2f} us <= 2 us", t["shm"] <= 2.0))
                if rv is not None:
                    floor = ""
                    if t["vader"] is not None and exchange_ns is not None:
                        floor = (f" (0.5x vader: {500 * t['vader']:.0f} ns; two bare threads "
                                 f"exchanging posts: {exchange_ns:.0f} ns)")
                    verdicts.append((f"8 B all_reduce on 2 ranks: {rv:.2f}x vader <= 0.5x{floor}", rv <= 0.5))
        print(f"\n== {p} ranks, busbw (GB/s, median over rounds; ratio = shm / peer, median of pairs; "
              "memcpy = shm busbw / memcpy GB/s at that size)")
        print(f"{'op':>15} {'size':>8} {'shm':>7} {'tcp':>7} {'vader':>7} {'shm/tcp':>8} {'shm/vader':>9} {'memcpy':>7}")
        for (pp, sweep, op, size), by_impl in sorted(data.items(), key=lambda kv: (kv[0][2], kv[0][3])):
            if pp != p or sweep == "small":
                continue
            bw = {i: med([r["busbw"] for r in by_impl.get(i, {}).values()]) for i in ("shm", "tcp", "vader")}
            rt, rv = pairwise(by_impl, "shm", "tcp", "busbw"), pairwise(by_impl, "shm", "vader", "busbw")
            frac = bw["shm"] / memcpy[size] if bw["shm"] is not None and size in memcpy else None
            print(f"{op:>15} {size_label(size):>8} {fmt(bw['shm']):>7} {fmt(bw['tcp']):>7} {fmt(bw['vader']):>7} "
                  f"{fmt(rt):>8} {fmt(rv):>9} {fmt(frac):>7}")
            if p == 2 and op in BANDWIDTH_OPS:
                if rv is not None:
                    verdicts.append((f"{op} {size_label(size)} on 2 ranks: {rv:.2f}x vader >= 1.5x", rv >= 1.5))
                if rt is not None:
                    verdicts.append((f"{op} {size_label(size)} on 2 ranks: {rt:.2f}x tcp >= 1.5x", rt >= 1.5))
    print_baseline(data)
    print("\n== targets")
    for text, ok in verdicts:
        print(f"  {'met ' if ok else 'MISSED'}  {text}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
