#!/usr/bin/env bash
# Hierarchical against flat collectives across a slow link. Two "hosts"
# (network, UTS and mount namespaces each, as tests/launcher/test_two_hosts.sh
# makes them) joined by a veth pair shaped with tc's token bucket (tbf) to
# RATE each way; one spmdrun per host, 2 ranks each (ranks 0, 1 on host A;
# 2, 3 on host B). spmd-bench runs all_reduce, all_gather and reduce_scatter
# of SIZE (f32, values checked), one op per run, with the hierarchical
# algorithms (SPMD_HIERARCHICAL=1) and with the flat ring
# (SPMD_HIERARCHICAL=0), in pairs of alternating order (A B, B A, A B, ...),
# and the table gives, per op, each side's median bus bandwidth (out of
# place), the median over the pairs of the ratio hierarchical/flat, and the
# MiB that crossed the link per call (the veth's tx counters of both ends,
# before and after each run, over its calls: warm-up, timed and checked, out
# of place and in place; the store's and the bench's own small messages
# count too).
#
# On 2 hosts x 2 ranks the flat ring crosses the link twice, one way each, and
# each of those links carries 2(p-1)/p = 1.5 times the buffer per all_reduce;
# the hierarchical one sends 2(H-1)/H = 1 times the buffer each way: 1.5x is
# its ceiling when the link is all that counts (parallel/comm/tcp/hierarchical.h).
# Needs root, iproute2 (ip, tc) and util-linux's unshare.
#
#   bench/hierarchical.sh [--build build] [--rate 1gbit] [--size 16M] [--pairs 6] [--iters 5]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build rate=1gbit size=16M pairs=6 iters=5
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    *) echo "hierarchical: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "hierarchical: needs root (namespaces, tc)" >&2; exit 1; }
spmdrun=$(realpath "$build/launcher/spmdrun") bench=$(realpath "$build/bench/spmd-bench")
# The slow link: RATE out of each end (the bucket holds 1 MiB: more than
# the rate's worth of a 4 ms timer tick at 1 Gbit/s, and than a 64 KiB GSO
# packet).
. bench/two_hosts.sh
two_hosts_up hier 10.213.13 "$rate" 1mb
export OMP_NUM_THREADS=1

# run NAME MODE OP: one spmd-bench of OP on both hosts with
# SPMD_HIERARCHICAL=MODE; appends a JSON line to $tmp/results.
port=29811
run() {
  local name=$1 mode=$2 op=$3
  port=$((port + 1))
  local node=(--nnodes 2 --nproc-per-node 2 --master-addr 10.213.13.1 --master-port "$port"
              --rdzv-timeout 60 --run-id "hier$port")
  local before after
  before=$(tx)
  for h in "hostA $nsA 0" "hostB $nsB 1"; do
    read -r host ns node_rank <<<"$h"
    on_host 300 "$ns" "$host" 512m env SPMD_HIERARCHICAL="$mode" "$spmdrun" "${node[@]}" \
      --node-rank "$node_rank" \
      "$bench" "$op" -b "$size" -e "$size" -n "$iters" -w 1 -c 1 \
      -J "$tmp/$name.$port.json" >"$tmp/$name.$host.log" 2>&1 &
  done
  wait -n && wait -n || { tail -5 "$tmp/$name".*.log; echo "hierarchical: $name failed" >&2; exit 1; }
  after=$(tx)
  /usr/bin/python3 - "$tmp/$name.$port.json" "$name" "$((after - before))" "$((2 * (iters + 2)))" \
    >>"$tmp/results" <<'PY'
import json, sys
doc, name, crossed, calls = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
assert doc["out_of_bounds"]["count"] == 0, f"{name}: wrong values"
for r in doc["results"]:
    print(json.dumps({"side": name, "op": r["op"], "busbw": r["out_of_place"]["bus_bw"],
                      "algorithm": r["algorithm"], "crossed": crossed / calls}))
PY
}

echo "# hierarchical: all_reduce, all_gather, reduce_scatter of $size (f32), 2 hosts x 2 ranks x 1" \
     "thread, the link shaped to $rate each way (tc tbf), $pairs pairs of -n $iters;" \
     "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(grep -c ^processor /proc/cpuinfo) CPUs," \
     "load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 0; i < pairs; ++i)); do
  echo "hierarchical: pair $((i + 1))/$pairs" >&2
  for op in all_reduce all_gather reduce_scatter; do
    if ((i % 2 == 0)); then
      run hierarchical 1 "$op" && run flat 0 "$op"
    else
      run flat 0 "$op" && run hierarchical 1 "$op"
    fi
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$tmp/results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| op | hierarchical busbw (GB/s) | flat busbw (GB/s) | median ratio of pairs | "
      "MiB across per call, hierarchical / flat | algorithms that ran |")
print("|---|---|---|---|---|---|")
for op in ("all_reduce", "all_gather", "reduce_scatter"):
    h = [r for r in rows if r["op"] == op and r["side"] == "hierarchical"]
    f = [r for r in rows if r["op"] == op and r["side"] == "flat"]
    ratios = [a["busbw"] / b["busbw"] for a, b in zip(h, f)]
    algos = sorted({r["algorithm"] for r in h}) + ["/"] + sorted({r["algorithm"] for r in f})
    print(f"| {op} | {statistics.median(r['busbw'] for r in h):.3f} | "
          f"{statistics.median(r['busbw'] for r in f):.3f} | {statistics.median(ratios):.2f} "
          f"({', '.join(f'{x:.2f}' for x in ratios)}) | "
          f"{statistics.median(r['crossed'] for r in h) / 2**20:.1f} / "
          f"{statistics.median(r['crossed'] for r in f) / 2**20:.1f} | {' '.join(algos)} |")
PY
