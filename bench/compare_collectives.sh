#!/usr/bin/env bash
# Runs spmd-bench and its peers side by side, in one go, for 2 and 4 ranks:
# spmd's TCP backend, OpenMPI over TCP (bench/peers/mpi_bench.c) and PyTorch's
# gloo (bench/peers/torch_gloo_bench.py), the same sweeps, interleaved round
# by round so that every implementation meets the same noise. Then prints the
# ratio tables (medians over the rounds) and draws the plot.
#
#   bench/compare_collectives.sh [--rounds 3] [--ranks "2 4"] [--out DIR] [--quick]
#                                [--sweeps "small large"]
#
# Sweeps: all_reduce 8 B..4 KiB (latency), and all_reduce, broadcast,
# all_gather, reduce_scatter, all_to_all, sendrecv at 1 MiB..256 MiB
# (bandwidth). --quick stops the large sweep at 16 MiB. Needs a build
# (SPMD_BUILD_DIR, default build/), mpicc/mpirun (openmpi-bin) and
# /usr/bin/python3 with torch and matplotlib (scripts/setup.sh installs them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SPMD_BUILD_DIR:-$root/build}
rounds=3
ranks="2 4"
out=""
max_large=256M
sweeps="small large"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) max_large=16M; shift ;;
    --sweeps) sweeps=$2; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--ranks \"2 4\"] [--out DIR] [--quick] [--sweeps \"small large\"]" >&2; exit 2 ;;
  esac
done
out=${out:-$build/compare}
mkdir -p "$out" "$build/bench-peers"
rm -f "$out"/*.json

spmdrun=$build/launcher/spmdrun
bench=$build/bench/spmd-bench
[ -x "$spmdrun" ] && [ -x "$bench" ] || { echo "build spmdrun and spmd-bench first" >&2; exit 1; }
mpicc -O2 -o "$build/bench-peers/mpi_bench" "$root/bench/peers/mpi_bench.c"

large_ops=all_reduce,broadcast,all_gather,reduce_scatter,all_to_all,sendrecv
small_flags=(-b 8 -e 4K -f 8 -n 200 -w 20 -c 0)
large_flags=(-b 1M -e "$max_large" -f 4 -n 5 -w 2 -c 0)

# run IMPL P SWEEP OPS FLAGS... : one invocation, its JSON in $out.
run() {
  local impl=$1 p=$2 sweep=$3 ops=$4 round=$5
  shift 5
  local json="$out/r${round}_${impl}_${p}_${sweep}.json"
  case "$impl" in
    spmd) "$spmdrun" --standalone --nproc-per-node "$p" "$bench" "$ops" "$@" --json "$json" ;;
    mpi) mpirun -np "$p" --oversubscribe --allow-run-as-root --bind-to none \
           --mca pml ob1 --mca btl self,tcp "$build/bench-peers/mpi_bench" "$ops" "$@" --json "$json" ;;
    gloo) /usr/bin/python3 "$root/bench/peers/torch_gloo_bench.py" --nprocs "$p" "$ops" "$@" \
           --json "$json" ;;
  esac > "$out/r${round}_${impl}_${p}_${sweep}.txt" 2>&1 || echo "compare: $impl on $p ranks ($sweep) failed; see $out" >&2
}

impls=(spmd mpi gloo)
for round in $(seq 1 "$rounds"); do
  for p in $ranks; do
    # Rotate the order each round, so no implementation always runs first.
    for k in 0 1 2; do
      impl=${impls[$(( (k + round) % 3 ))]}
      echo "compare: round $round/$rounds, $p ranks, $impl" >&2
      case " $sweeps " in *" small "*) run "$impl" "$p" small all_reduce "$round" "${small_flags[@]}" ;; esac
      case " $sweeps " in *" large "*) run "$impl" "$p" large "$large_ops" "$round" "${large_flags[@]}" ;; esac
    done
  done
done

/usr/bin/python3 "$root/bench/compare_collectives.py" "$out"
