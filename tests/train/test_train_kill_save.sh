#!/usr/bin/env bash
# A rank killed (-9) in the middle of a checkpoint save, under
# `spmdrun --max-restarts 1`: the half-written step folder is never loaded;
# the restarted ranks resume from the checkpoint `latest` named at the kill,
# and the run ends with the losses of an uninterrupted run.
#
# The kill lands inside the save: the script spins until the save's
# temporary folder (<step>.tmp, made by rank 0 before any rank writes)
# appears, kills a worker at once, and checks that `latest` still names the
# step before.
#
# usage: test_train_kill_save.sh SPMDRUN SPMD_TRAIN
set -uo pipefail
spmdrun=$1 train=$2
fail() { echo "FAILED: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1

# The small preset (T cut to 64): its steps and its 62 MiB saves are slow
# enough that the workers are found, and the save caught, between two saves.
common=(--model.preset=small --model.seq_len=64 --training.steps=12 --training.global_batch=4
        --training.threads=1 --parallel.dp_shard=2 --checkpoint.interval=4 --metrics.log_every=100)

timeout 300 "$spmdrun" --standalone --nproc-per-node 2 "$train" "${common[@]}" \
  --checkpoint.folder="$tmp/whole" --metrics.run_folder="$tmp/whole_run" >"$tmp/whole.log" 2>&1 ||
  fail "the uninterrupted run failed: $(tail -5 "$tmp/whole.log")"

timeout 300 "$spmdrun" --standalone --nproc-per-node 2 --max-restarts 1 "$train" "${common[@]}" \
  --checkpoint.folder="$tmp/ck" --checkpoint.keep=0 --metrics.run_folder="$tmp/run" \
  >"$tmp/run.log" 2>&1 &
job=$!
workers() {
  pgrep -f -- "--metrics.run_folder=$tmp/run" | while read -r p; do
    [ "$(ps -o comm= -p "$p")" = spmd-train ] && echo "$p"; done
}
# Wait for the step-4 save to be complete, then find the workers while the
# next steps run, then spin until the step-8 save has begun.
for _ in $(seq 1 3000); do
  grep -q step_00000004 "$tmp/ck/latest" 2>/dev/null && break
  sleep 0.01
done
grep -q step_00000004 "$tmp/ck/latest" || fail "no checkpoint at step 4 appeared"
victim=$(workers | tail -1)
[ -n "$victim" ] || fail "no worker to kill"
deadline=$((SECONDS + 120))
while [ ! -d "$tmp/ck/step_00000008.tmp" ] && [ $SECONDS -lt $deadline ]; do :; done
kill -9 "$victim"
[ -d "$tmp/ck/step_00000008.tmp" ] || fail "the step-8 save never began"
at_kill=$(cat "$tmp/ck/latest")
[ "$at_kill" = step_00000004 ] ||
  fail "the save finished before the kill landed (latest: $at_kill); the test did not cut a save"
wait $job || fail "the restarted job failed: $(tail -20 "$tmp/run.log")"
grep -q "resumed from $tmp/ck at step 4 " "$tmp/run.log" ||
  fail "the job did not resume from step 4: $(grep -a resumed "$tmp/run.log")"

/usr/bin/python3 "$(dirname "$0")/same_losses.py" "$tmp/whole_run/metrics_rank0.jsonl" \
  "$tmp/run/metrics_rank0.jsonl" 12 || fail "losses differ"
echo "OK"
