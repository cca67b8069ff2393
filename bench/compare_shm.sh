#!/usr/bin/env bash
# spmd over shared memory beside spmd over TCP and OpenMPI over shared memory
# (--mca btl self,vader), on 2 and 4 ranks of this machine, interleaved round
# by round (the order rotates) so that all three meet the same noise; then
# the machine's ceiling (spmd-shm-ceiling: memcpy bandwidth, a cache line's
# round trip) and the tables of bench/compare_shm.py: the median over rounds
# of each figure and of the pairwise ratios (shm / peer, same round).
#
#   bench/compare_shm.sh [--rounds 5] [--ranks "2 4"] [--out DIR] [--sweeps "small medium large"]
#                        [--baseline BUILD_DIR]
#
# --baseline runs spmd of another build (its spmdrun and spmd-bench) as two
# more implementations in the same rounds, "shm_base" and "tcp_base", and
# adds a table of this build over that one (the A/B of a change: build the
# commit before it into another folder and name it here).
#
# Sweeps: all_reduce 8 B..4 KiB (latency); all_reduce, all_gather,
# reduce_scatter and broadcast at 1 and 4 MiB (medium: 50 calls a size, so
# that one call a moment late on this shared machine moves the mean of
# 40-60 us calls little) and at 16 and 64 MiB (large: 10 calls) (bandwidth). Every call
# is waited for before the next (-z 2), as MPI's blocking calls are; a row's
# time is the slowest rank's (-a 3). Needs spmdrun, spmd-bench and
# spmd-shm-ceiling built (SPMD_BUILD_DIR, default build/), mpicc/mpirun and
# taskset.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SPMD_BUILD_DIR:-$root/build}
rounds=5
ranks="2 4"
out=""
sweeps="small medium large"
baseline=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --sweeps) sweeps=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--ranks \"2 4\"] [--out DIR] [--sweeps \"small medium large\"] [--baseline BUILD_DIR]" >&2; exit 2 ;;
  esac
done
out=${out:-$build/compare-shm}
mkdir -p "$out" "$build/bench-peers"
rm -f "$out"/*.json "$out"/*.txt "$out"/*.jsonl

spmdrun=$build/launcher/spmdrun
bench=$build/bench/spmd-bench
ceiling=$build/bench/spmd-shm-ceiling
for exe in "$spmdrun" "$bench" "$ceiling"; do
  [ -x "$exe" ] || { echo "build $(basename "$exe") first" >&2; exit 1; }
done
mpicc -O2 -o "$build/bench-peers/mpi_bench" "$root/bench/peers/mpi_bench.c"

impls=(shm tcp vader)
if [ -n "$baseline" ]; then
  for exe in "$baseline/launcher/spmdrun" "$baseline/bench/spmd-bench"; do
    [ -x "$exe" ] || { echo "--baseline: $exe is not built" >&2; exit 1; }
  done
  impls+=(shm_base tcp_base)
fi
# 2000 warm-up calls: with 100, the first size (8 B) was bimodal over
# shared memory (1.6 or 3-5 us from one start to the next), the ranks not
# yet in step; each peer gets the same.
small_flags=(-b 8 -e 4K -f 8 -n 5000 -w 2000 -c 0 -a 3)
medium_flags=(-b 1M -e 4M -f 4 -n 50 -w 10 -c 0 -a 3)
large_flags=(-b 16M -e 64M -f 4 -n 10 -w 3 -c 0 -a 3)
large_ops=all_reduce,all_gather,reduce_scatter,broadcast

# Each rank on a core of its own when the cores are enough (spmd's through
# taskset, by LOCAL_RANK, on one CPU of each physical core this script may
# use; OpenMPI's by --bind-to core, its default for 2 ranks): unbound, the
# scheduler now and then left both of 2 spinning ranks on one core for a
# whole run, which put the 8-byte all_reduce at 4-21 us instead of 1-1.3
# (docs/measurements/shm.md). A bound rank sees one CPU, so its spin budget
# would default to 50 / ranks us (tuning.h); SPMD_TCP_SPIN_US=50 keeps the
# budget an unbound rank gets when the ranks do not outnumber the cores.
# More ranks than cores: none is bound.
bind_cpus=$(/usr/bin/python3 -c '
import os
seen, cpus = set(), []
for c in sorted(os.sched_getaffinity(0)):
    topology = f"/sys/devices/system/cpu/cpu{c}/topology/"
    try:
        core = tuple(open(topology + f).read().strip() for f in ("physical_package_id", "core_id"))
    except OSError:
        core = ("cpu", c)
    if core not in seen:
        seen.add(core)
        cpus.append(str(c))
print(" ".join(cpus))')
cores=$(echo "$bind_cpus" | wc -w)
run() {
  local impl=$1 p=$2 sweep=$3 ops=$4 round=$5
  shift 5
  local json="$out/r${round}_${impl}_${p}_${sweep}.json"
  local bind=none
  [ "$p" -le "$cores" ] && bind=core
  case "$impl" in
    shm|tcp|shm_base|tcp_base)
      local from=$build transport=${impl%_base}
      [ "$impl" = "$transport" ] || from=$baseline
      if [ "$bind" = core ]; then
        SPMD_TRANSPORT=$transport SPMD_TCP_SPIN_US=50 BENCH_CPUS="$bind_cpus" \
          "$from/launcher/spmdrun" --standalone --nproc-per-node "$p" \
          sh -c 'exec taskset -c "$(echo $BENCH_CPUS | cut -d" " -f$((LOCAL_RANK + 1)))" "$@"' \
          sh "$from/bench/spmd-bench" "$ops" "$@" -z 2 --json "$json"
      else
        SPMD_TRANSPORT=$transport "$from/launcher/spmdrun" --standalone --nproc-per-node "$p" \
          "$from/bench/spmd-bench" "$ops" "$@" -z 2 --json "$json"
      fi ;;
    vader) mpirun -np "$p" --oversubscribe --allow-run-as-root --bind-to "$bind" \
             --mca pml ob1 --mca btl self,vader "$build/bench-peers/mpi_bench" "$ops" "$@" --json "$json" ;;
  esac > "$out/r${round}_${impl}_${p}_${sweep}.txt" 2>&1 || echo "compare_shm: $impl on $p ranks ($sweep) failed; see $out" >&2
}

# The machine's load before and after (it is shared: the figures are only
# as quiet as it was), and its ceiling at both ends.
cat /proc/loadavg > "$out/loadavg.txt"
"$ceiling" > "$out/ceiling.jsonl"
# shellcheck source=bench/interleave.sh
. "$root/bench/interleave.sh"
interleave compare_shm "$rounds" "$ranks" "$sweeps" "${impls[@]}"
"$ceiling" >> "$out/ceiling.jsonl"
cat /proc/loadavg >> "$out/loadavg.txt"

/usr/bin/python3 "$root/bench/compare_shm.py" "$out"
