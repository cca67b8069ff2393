#!/usr/bin/env bash
# Section 16.6 on one machine: which axis of the mesh to put across a slow
# link. Two "hosts" (network, UTS and mount namespaces each, as
# tests/launcher/test_two_hosts.sh makes them) joined by a veth pair shaped
# with tc's token bucket (tbf) to RATE each way; one spmdrun per host, 2
# ranks each (ranks 0, 1 on host A; 2, 3 on host B). spmd-train trains the
# config under each layout, and the table gives its tokens/s (the median of
# the steps after the first two) and the bytes that crossed the link per
# step (the veth's tx counters of both ends, before and after, over the
# steps):
#   fsdp          dp_shard 4: every all_gather and reduce_scatter spans the link
#   hsdp          dp_replicate 2 across the link, dp_shard 2 within each host
#   tp across     tp 4: every block's activations cross the link, twice a pass
#   tp within     tp 2 within each host, dp_replicate 2 across
# Rounds alternate the layouts (A B C D A B C D ...).
# Needs root, iproute2 (ip, tc) and util-linux's unshare.
#
# The model: GPT-2-shaped, 4 layers, C 256, 4 heads (so that tp 4 divides
# them), T 128, the byte vocabulary: 3.2 M parameters.
#
#   bench/slow_link.sh [--build build] [--steps 6] [--rate 200mbit] [--rounds 2]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build steps=6 rate=200mbit rounds=2
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "slow_link: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "slow_link: needs root (namespaces, tc)" >&2; exit 1; }
spmdrun=$(realpath "$build/launcher/spmdrun") train=$(realpath "$build/train/spmd-train")
# The slow link: RATE out of each end (the token bucket holds 256 KiB).
. bench/two_hosts.sh
two_hosts_up slow 10.213.12 "$rate" 256kb
export OMP_NUM_THREADS=1

# run NAME FLAGS...: one training on both hosts; appends "tok/s bytes/step" to $tmp/NAME
port=29711
run() {
  local name=$1; shift
  port=$((port + 1))
  local flags=(--model.preset=custom --model.n_layers=4 --model.d_model=256 --model.n_heads=4
               --model.seq_len=128 --training.steps="$steps" --training.global_batch=8
               --training.threads=1 --metrics.log_every=1 --metrics.run_folder="$tmp/run_$name"
               "$@")
  local node=(--nnodes 2 --nproc-per-node 2 --master-addr 10.213.12.1 --master-port "$port"
              --rdzv-timeout 60 --run-id "$name$port")
  rm -rf "$tmp/run_$name"
  local before
  before=$(tx)
  for h in "hostA $nsA 0" "hostB $nsB 1"; do
    read -r host ns node_rank <<<"$h"
    on_host 900 "$ns" "$host" 256m "$spmdrun" "${node[@]}" --node-rank "$node_rank" \
      "$train" "${flags[@]}" >"$tmp/$name.$host.log" 2>&1 &
  done
  wait -n && wait -n || { tail -5 "$tmp/$name".*.log; echo "slow_link: $name failed" >&2; exit 1; }
  local after
  after=$(tx)
  /usr/bin/python3 - "$tmp/run_$name/metrics_rank0.jsonl" "$((after - before))" "$steps" \
    >>"$tmp/$name" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
tps = statistics.median(r["tokens_per_s"] for r in rows[2:]) if len(rows) > 2 else float("nan")
print(f"{tps:.0f} {int(sys.argv[2]) / int(sys.argv[3]):.0f}")
PY
}

layouts=("fsdp|--parallel.dp_shard=4"
         "hsdp|--parallel.dp_replicate=2 --parallel.dp_shard=2"
         "tp across|--parallel.tp=4"
         "tp within|--parallel.tp=2 --parallel.dp_replicate=2")
echo "# slow_link: 4 layers, C 256, T 128, $steps steps, global batch 8, 2 hosts x 2 ranks x 1 thread," \
     "the link shaped to $rate each way (tc tbf); $(grep -m1 'model name' /proc/cpuinfo |
     cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < rounds; ++r)); do
  for l in "${layouts[@]}"; do
    name=${l%%|*}
    # shellcheck disable=SC2086  # the flags are words
    run "${name// /_}" ${l#*|}
  done
done
echo "| layout | tokens/s (all ranks) | MiB across the link per step |"
echo "|---|---|---|"
for l in "${layouts[@]}"; do
  name=${l%%|*}
  /usr/bin/python3 - "$tmp/${name// /_}" "$name" <<'PY'
import statistics, sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
print(f"| {sys.argv[2]} | {statistics.median(r[0] for r in rows):,.0f} | "
      f"{statistics.median(r[1] for r in rows) / 2**20:,.1f} |")
PY
done
