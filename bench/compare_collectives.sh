#!/usr/bin/env bash
# Runs spmd-bench and its peers side by side, in one go, for 2 and 4 ranks:
# spmd's TCP backend over TCP sockets (SPMD_TRANSPORT=tcp: on one host it
# would otherwise use shared memory; bench/compare_shm.sh compares that),
# OpenMPI over TCP (bench/peers/mpi_bench.c), Gloo's every
# algorithm through its C++ API (bench/peers/gloo_bench.cpp, built by CMake
# where libgloo-dev is installed) and PyTorch's gloo
# (bench/peers/torch_gloo_bench.py), the same sweeps, interleaved round by
# round so that every implementation meets the same noise. Then prints the
# ratio tables (medians over the rounds; the best Gloo algorithm per op and
# size) and draws the plots.
#
#   bench/compare_collectives.sh [--rounds 3] [--ranks "2 4"] [--out DIR] [--quick]
#                                [--sweeps "small large"] [--impls "spmd mpi gloo torch"]
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
only_impls=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) max_large=16M; shift ;;
    --sweeps) sweeps=$2; shift 2 ;;
    --impls) only_impls=$2; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--ranks \"2 4\"] [--out DIR] [--quick] [--sweeps \"small large\"] [--impls \"spmd mpi gloo torch\"]" >&2; exit 2 ;;
  esac
done
out=${out:-$build/compare}
mkdir -p "$out" "$build/bench-peers"
rm -f "$out"/*.json

spmdrun=$build/launcher/spmdrun
bench=$build/bench/spmd-bench
gloo_bench=$build/bench/gloo_bench
[ -x "$spmdrun" ] && [ -x "$bench" ] || { echo "build spmdrun and spmd-bench first" >&2; exit 1; }
mpicc -O2 -o "$build/bench-peers/mpi_bench" "$root/bench/peers/mpi_bench.c"
impls=(spmd mpi gloo torch)
if [ ! -x "$gloo_bench" ]; then
  echo "compare: no $gloo_bench (libgloo-dev missing, or target gloo_bench not built): Gloo's own algorithms are left out" >&2
  impls=(spmd mpi torch)
fi
if [ -n "$only_impls" ]; then
  read -r -a impls <<< "$only_impls"
fi

large_ops=all_reduce,broadcast,all_gather,reduce_scatter,all_to_all,sendrecv
# -a 3: a row's time is the slowest rank's (nccl-tests' -a 3), the time until
# the collective is done everywhere; the default mean lets a broadcast's root,
# which may finish writing before the others finish reading, count as speed.
small_flags=(-b 8 -e 4K -f 8 -n 200 -w 20 -c 0 -a 3)
large_flags=(-b 1M -e "$max_large" -f 4 -n 5 -w 2 -c 0 -a 3)

# run IMPL P SWEEP OPS FLAGS... : one invocation, its JSON in $out.
run() {
  local impl=$1 p=$2 sweep=$3 ops=$4 round=$5
  shift 5
  local json="$out/r${round}_${impl}_${p}_${sweep}.json"
  case "$impl" in
    spmd) SPMD_TRANSPORT=tcp "$spmdrun" --standalone --nproc-per-node "$p" "$bench" "$ops" "$@" --json "$json" ;;
    mpi) mpirun -np "$p" --oversubscribe --allow-run-as-root --bind-to none \
           --mca pml ob1 --mca btl self,tcp "$build/bench-peers/mpi_bench" "$ops" "$@" --json "$json" ;;
    gloo) "$gloo_bench" --nprocs "$p" "$ops" "$@" --json "$json" ;;
    torch) /usr/bin/python3 "$root/bench/peers/torch_gloo_bench.py" --nprocs "$p" "$ops" "$@" \
           --json "$json" ;;
  esac > "$out/r${round}_${impl}_${p}_${sweep}.txt" 2>&1 || echo "compare: $impl on $p ranks ($sweep) failed; see $out" >&2
}

# shellcheck source=bench/interleave.sh
. "$root/bench/interleave.sh"
interleave compare "$rounds" "$ranks" "$sweeps" "${impls[@]}"

/usr/bin/python3 "$root/bench/compare_collectives.py" "$out"
