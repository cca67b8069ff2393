#!/usr/bin/env bash
# A rank killed mid-run under `spmdrun --max-restarts 1`: spmdrun restarts
# the group, the new ranks resume from the last checkpoint, and the run ends
# with the losses of an uninterrupted run (same layout: to the last bit of
# an f32 loss, as tests/train/test_trainer.cpp explains). A checkpoint that
# `latest` does not name (as a save cut off mid-write leaves it) is never
# loaded: a planted half-written step folder beside the real ones is ignored.
#
# usage: test_train_restart.sh SPMDRUN SPMD_TRAIN
set -uo pipefail
spmdrun=$1 train=$2
fail() { echo "FAILED: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1

common=(--model.preset=tiny --training.steps=40 --training.global_batch=4 --training.threads=1
        --parallel.dp_shard=2 --checkpoint.interval=10 --metrics.log_every=100)

# The uninterrupted run.
timeout 300 "$spmdrun" --standalone --nproc-per-node 2 "$train" "${common[@]}" \
  --checkpoint.folder="$tmp/whole" --metrics.run_folder="$tmp/whole_run" >"$tmp/whole.log" 2>&1 ||
  fail "the uninterrupted run failed: $(tail -5 "$tmp/whole.log")"

# The interrupted one: a half-written folder planted where the step-20 one
# will go... is replaced by the real save; one planted past the end stays
# unnamed by `latest` and must never be read.
mkdir -p "$tmp/ck/step_00000090" && echo garbage >"$tmp/ck/step_00000090/index.json"
timeout 300 "$spmdrun" --standalone --nproc-per-node 2 --max-restarts 1 "$train" "${common[@]}" \
  --checkpoint.folder="$tmp/ck" --checkpoint.keep=0 --metrics.run_folder="$tmp/run" \
  >"$tmp/run.log" 2>&1 &
job=$!
# Kill one rank (-9, no chance to clean up) once the step-20 checkpoint is named.
for _ in $(seq 1 3000); do
  grep -q step_00000020 "$tmp/ck/latest" 2>/dev/null && break
  sleep 0.01
done
grep -q step_00000020 "$tmp/ck/latest" || fail "no checkpoint at step 20 appeared"
victim=$(pgrep -f -- "--metrics.run_folder=$tmp/run" | while read -r p; do
  [ "$(ps -o comm= -p "$p")" = spmd-train ] && echo "$p"; done | head -1)
[ -n "$victim" ] || fail "no worker to kill"
kill -9 "$victim"
wait $job || fail "the restarted job failed: $(tail -20 "$tmp/run.log")"
grep -q "resumed from" "$tmp/run.log" || fail "the job did not resume: $(tail -20 "$tmp/run.log")"

# The last step of both runs, and every resumed step, agree.
/usr/bin/python3 "$(dirname "$0")/same_losses.py" "$tmp/whole_run/metrics_rank0.jsonl" \
  "$tmp/run/metrics_rank0.jsonl" 40 || fail "losses differ"
echo "OK"
