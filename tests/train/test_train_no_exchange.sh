#!/usr/bin/env bash
# A checkpoint saved over an older one of the same step on a filesystem
# that cannot exchange two names (no_rename_exchange: the kernel refuses
# renameat2's RENAME_EXCHANGE with EINVAL). save_sharded then sets the older
# folder aside as "<step>.old" and renames the new one into place: two
# renames, and a SIGKILL between them (SPMD_FAULT_AT=checkpoint.set_aside)
# leaves the step folder that `latest` names absent. The next run resumes
# from the set-aside folder, saying so, to the uninterrupted run's losses,
# and its pruning removes the leftovers. Without the kill the fallback
# leaves one whole folder. And where the kernel can exchange, the point is
# never reached.
#
# usage: test_train_no_exchange.sh SPMDRUN SPMD_TRAIN NO_RENAME_EXCHANGE
set -uo pipefail
spmdrun=$1 train=$2 no_exchange=$3
here=$(dirname "$0")
fail() { echo "FAILED: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1

"$no_exchange" true || { echo "SKIPPED: $no_exchange cannot refuse exchanges here"; exit 77; }

job() {  # job LOG FOLDER STEPS [env or the wrapper...] -- [flags...]
  local log=$1 folder=$2 steps=$3 pre=()
  shift 3
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do pre+=("$1"); shift; done
  shift
  env "${pre[@]}" timeout 120 "$spmdrun" --standalone --nproc-per-node 2 "$train" \
    --model.preset=tiny --training.steps="$steps" --training.threads=1 --parallel.dp_shard=2 \
    --checkpoint.interval=2 --checkpoint.keep=1 --metrics.log_every=100 \
    --checkpoint.folder="$tmp/$folder" --metrics.run_folder="$tmp/${folder}_run" "$@" \
    >>"$tmp/$log.log" 2>&1
}
last_lines() { tail -5 "$tmp/$1.log"; }

job whole whole 4 -- || fail "the uninterrupted run failed: $(last_lines whole)"

# A run whose latest is step 2: killed as its second save begins.
older() {  # older LOG FOLDER
  job "$1" "$2" 4 SPMD_FAULT_AT=checkpoint.begin:2 SPMD_FAULT_RANK=0 -- &&
    fail "the older run was not killed: $(last_lines "$1")"
  [ "$(cat "$tmp/$2/latest")" = step_00000002 ] || fail "the older run's latest: $(ls "$tmp/$2")"
}

# 1. A fresh run saving step 2 over the older one, cut between the two
#    renames.
older a ck
job b ck 4 SPMD_FAULT_AT=checkpoint.set_aside:1 SPMD_FAULT_RANK=0 "$no_exchange" -- \
  --checkpoint.resume=false && fail "the fresh run was not killed: $(last_lines b)"
grep -q "SPMD_FAULT_AT: SIGKILL" "$tmp/b.log" || fail "no kill at the set-aside: $(last_lines b)"
[ "$(cat "$tmp/ck/latest")" = step_00000002 ] || fail "latest moved: $(cat "$tmp/ck/latest")"
[ ! -e "$tmp/ck/step_00000002" ] || fail "the step folder is there: the cut was not between"
[ -f "$tmp/ck/step_00000002.old/index.json" ] || fail "nothing set aside: $(ls "$tmp/ck")"

# 2. The next run resumes from the set-aside folder, to the same losses, and
#    its pruning removes what the cut left (the .old and the new .tmp).
job c ck 4 -- || fail "the run after the cut failed: $(last_lines c)"
grep -q "which is absent, and .*step_00000002.old holds it" "$tmp/c.log" ||
  fail "the resume did not say where it read: $(grep -a checkpoint "$tmp/c.log" | head -3)"
grep -q "resumed from $tmp/ck at step 2 " "$tmp/c.log" ||
  fail "the rerun did not resume at step 2: $(grep -a resumed "$tmp/c.log")"
/usr/bin/python3 "$here/same_losses.py" "$tmp/whole_run/metrics_rank0.jsonl" \
  "$tmp/ck_run/metrics_rank0.jsonl" 4 || fail "the resumed run's losses differ"
left=$(cd "$tmp/ck" && ls -d step_* 2>/dev/null | tr '\n' ' ')
[ "$left" = "step_00000004 " ] || fail "pruning left: $left"

# 3. The fallback, not cut, leaves one whole folder where the older was.
older d ck2
job e ck2 4 SPMD_FAULT_AT=checkpoint.begin:2 SPMD_FAULT_RANK=0 "$no_exchange" -- \
  --checkpoint.resume=false && fail "the fresh run (2) was not killed: $(last_lines e)"
left=$(cd "$tmp/ck2" && ls -d step_* 2>/dev/null | tr '\n' ' ')
[ "$left" = "step_00000002 " ] || fail "the fallback left: $left"
[ -f "$tmp/ck2/step_00000002/index.json" ] || fail "step 2 is not whole"

# 4. Where the kernel exchanges, no save takes the two renames.
job f ck2 4 SPMD_FAULT_AT=checkpoint.set_aside:1 -- --checkpoint.resume=false ||
  fail "an exchanging save reached the set-aside point: $(last_lines f)"
echo "OK: cut between the two renames, resumed from the folder set aside"
