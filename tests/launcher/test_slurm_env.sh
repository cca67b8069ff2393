#!/usr/bin/env bash
# spmd programs started as Slurm starts them, with Slurm's variables made up
# (no Slurm here) and no spmdrun: spmd_test_comm_worker joins through env://.
#   1. An `sbatch -n2` script that runs the program outside srun: task 0 of 2
#      in no job step (no SLURM_STEP_ID). It must stop at once, saying why,
#      not wait for a task that never starts.
#   2. Two job steps of one job at once (`srun --overlap` twice), two tasks
#      each: the steps derive different store ports from SLURM_JOB_ID and
#      SLURM_STEP_ID, so each finds its own store and all four tasks finish.
#
# usage: test_slurm_env.sh COMM_WORKER
set -uo pipefail
worker=$1
# shellcheck source=tests/launcher/slurm_ports.sh
source "$(dirname "$0")/slurm_ports.sh"

fail() { echo "FAILED: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT

# task JOB STEP PROCID OUT: one task of a two-task, one-node step on 127.0.0.1
# (STEP "-" for none), in an environment of Slurm's variables alone.
task() {
  local step=()
  [ "$2" != "-" ] && step=(SLURM_STEP_ID="$2")
  env -i PATH="$PATH" OMP_NUM_THREADS=1 SLURM_JOB_ID="$1" "${step[@]}" SLURM_PROCID="$3" \
    SLURM_LOCALID="$3" SLURM_NTASKS=2 SLURM_NNODES=1 SLURM_NODEID=0 SLURM_TASKS_PER_NODE=2 \
    SLURM_JOB_NODELIST=127.0.0.1 timeout 60 "$worker" --timeout-ms 20000 >"$4" 2>&1
}

# 1. The batch script itself: task 0 of 2, no step.
start=$(date +%s)
task 4242 - 0 "$tmp/batch"
rc=$?
elapsed=$(($(date +%s) - start))
cat "$tmp/batch"
[ "$rc" -eq 1 ] || fail "the batch-script run exited with $rc, not 1"
grep -q "SLURM_STEP_ID is not" "$tmp/batch" || fail "the batch-script run did not say why"
grep -q "start the program with srun" "$tmp/batch" || fail "the batch-script run gave no way out"
[ "$elapsed" -lt 10 ] || fail "the batch-script run took $elapsed s to stop"

# 2. Steps 0 and 1 of one job at once. The job id is picked so that both
# steps' ports (slurm_ports.sh, worked out apart from the code) are free now.
job=$(draw_slurm_job 100000 1 2)
p0=$(slurm_port "$job" 0) p1=$(slurm_port "$job" 1)
echo "job $job: step 0 on port $p0, step 1 on port $p1"
for step in 0 1; do
  for r in 0 1; do task "$job" "$step" "$r" "$tmp/step$step.$r" & done
done
wait
for step in 0 1; do
  for r in 0 1; do
    cat "$tmp/step$step.$r"
    grep -q "^DONE rank $r$" "$tmp/step$step.$r" || fail "step $step task $r did not finish"
  done
done
echo "PASSED"
