#!/usr/bin/env bash
# Crash consistency of checkpoints, at exact points (runtime/fault.h): a job
# of 4 steps saving after steps 2 and 4 (FSDP over 2 ranks, keep 1) is
# killed with SIGKILL at a point of a save, by SPMD_FAULT_AT, in rank 0, in
# rank 1, or in the launcher (spmdrun, which takes its workers with it).
# After each kill, `latest` (when there is one) names a whole checkpoint,
# and the job run again resumes from it, or from scratch, and ends with the
# losses of an uninterrupted run. 40 points: each step of the save
# (checkpoint.*), every sync and rename of a file, and writes spread over
# the shards; 6 of them with checkpoint.async, on the writer's thread.
#
# usage: test_train_faults.sh SPMDRUN SPMD_TRAIN
set -uo pipefail
spmdrun=$1 train=$2
here=$(dirname "$0")
fail() { echo "FAILED: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1

extra=()  # more flags for every job (the asynchronous cuts below)
job() {  # job NAME [env...]: the 4-step job into $tmp/NAME_ck, $tmp/NAME_run
  local name=$1
  shift
  env "$@" timeout 120 "$spmdrun" --standalone --nproc-per-node 2 "$train" \
    --model.preset=tiny --training.steps=4 --training.threads=1 --parallel.dp_shard=2 \
    --checkpoint.interval=2 --checkpoint.keep=1 --metrics.log_every=100 "${extra[@]}" \
    --checkpoint.folder="$tmp/${name}_ck" --metrics.run_folder="$tmp/${name}_run" \
    >>"$tmp/$name.log" 2>&1
}

job whole || fail "the uninterrupted run failed: $(tail -5 "$tmp/whole.log")"

n=0
cut() {  # cut RANK SPEC: kill there, check the folder, run again, compare
  local rank=$1 spec=$2 name="cut$n"
  n=$((n + 1))
  job "$name" SPMD_FAULT_RANK="$rank" SPMD_FAULT_AT="$spec" &&
    fail "$spec on rank $rank: the job was not killed: $(tail -5 "$tmp/$name.log")"
  # The worker says where it killed; the launcher, killed, cannot pass that
  # on, but the job must then have ended before its last line.
  if [[ $spec == *:parent ]]; then
    grep -q "memory of rank 0" "$tmp/$name.log" &&
      fail "$spec: the job ran to its end: $(tail -5 "$tmp/$name.log")"
    grep -q "SPMD_FAULT_AT=" "$tmp/$name.log" && fail "$spec: refused: $(tail -5 "$tmp/$name.log")"
  else
    grep -q "SPMD_FAULT_AT: SIGKILL" "$tmp/$name.log" ||
      fail "$spec on rank $rank: no kill happened: $(tail -5 "$tmp/$name.log")"
  fi
  local ck="$tmp/${name}_ck" at=""
  if [ -f "$ck/latest" ]; then
    at=$(cat "$ck/latest")
    [ -f "$ck/$at/index.json" ] && [ -f "$ck/$at/train_state.json" ] ||
      fail "$spec on rank $rank: latest names $at, which is not a whole checkpoint: $(ls "$ck" "$ck/$at" 2>&1)"
  fi
  : >"$tmp/$name.log"  # the rerun's log alone
  job "$name" || fail "$spec on rank $rank: the run after the kill failed: $(tail -5 "$tmp/$name.log")"
  # It resumed from what latest named (step_00000002 -> step 2), or started
  # afresh when there was none.
  if [ -n "$at" ]; then
    grep -q "resumed from $ck at step $((10#${at#step_})) " "$tmp/$name.log" ||
      fail "$spec on rank $rank: the rerun did not resume from $at: $(grep -a resumed "$tmp/$name.log")"
  else
    grep -q "resumed from" "$tmp/$name.log" && fail "$spec on rank $rank: resumed with no latest"
  fi
  /usr/bin/python3 "$here/same_losses.py" "$tmp/whole_run/metrics_rank0.jsonl" \
    "$tmp/${name}_run/metrics_rank0.jsonl" 4 || fail "$spec on rank $rank: losses differ"
  rm -rf "$ck" "$tmp/${name}_run"
}

# Rank 0: every step of the second save (the first is then the one to keep),
# every sync and rename of a file over both saves, and writes in the shards.
for point in begin folder shard index synced renamed latest pruned; do
  cut 0 "checkpoint.$point:2"
done
for k in 1 2 3 4 5 6 7 8; do cut 0 "file.sync:$k"; done
for k in 1 2; do cut 0 "file.rename:$k"; done
for k in 40 120 200 280; do cut 0 "*:$k"; done
# Rank 1 (its own shard; rank 0 waits on it, then fails).
for point in begin folder shard; do cut 1 "checkpoint.$point:2"; done
for spec in file.sync:1 file.sync:2 "*:100" "*:250"; do cut 1 "$spec"; done
# The launcher, at rank 0's points.
for point in shard index renamed latest; do cut 0 "checkpoint.$point:2:parent"; done
cut 0 "*:150:parent"
# checkpoint.async: the same points, hit on the writer's thread while the
# next steps train.
extra=(--checkpoint.async=true)
for spec in checkpoint.shard:2 checkpoint.renamed:2 checkpoint.latest:1 file.sync:3 "*:200"; do
  cut 0 "$spec"
done
cut 1 "checkpoint.shard:1"
extra=()
# A malformed spec is refused at the first point, naming it.
job bad SPMD_FAULT_AT=checkpoint && fail "SPMD_FAULT_AT=checkpoint was not refused"
grep -q "SPMD_FAULT_AT=checkpoint: expected <name>:<n>\[:parent\]" "$tmp/bad.log" ||
  fail "the refusal does not say what is expected: $(grep -a SPMD_FAULT "$tmp/bad.log" | head -3)"
echo "OK: $n kills, each resumed to the uninterrupted run's losses"
