#!/usr/bin/env bash
# spmd programs other than spmd-bench started without spmdrun, as Open MPI's
# mpirun and Slurm's srun start them. Each asks launched() (runtime/env.h),
# not "is RANK set", so each forms one job of N ranks:
#   1. spmd-train, DDP on 2 ranks under mpirun: one job, a metrics file per
#      rank (two separate trainings would each be rank 0 and write
#      metrics_rank0.jsonl both);
#   2. spmd-train with the built-in (one-rank) layout under mpirun -np 2:
#      refused, naming the world of 2, not run twice;
#   3. 02_spawn_and_store under mpirun: two ranks of one job meet through
#      the store (it spawned a world of its own in each process before);
#   4. spmd-bench-tp --mode tp under mpirun: tp over 2 ranks;
#   5. spmd-train, DDP on 2 tasks with Slurm's variables made up as srun
#      sets them (no Slurm here; test_slurm_env.sh does the same for a
#      plain worker).
# Parts 1-4 need Open MPI's mpirun (Debian package openmpi-bin); without it
# they are skipped and part 5 runs alone (exit 77 only when nothing ran).
#
# usage: test_mpirun_programs.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1 source=$2
# shellcheck source=tests/launcher/slurm_ports.sh
source "$(dirname "$0")/slurm_ports.sh"
train=$build/train/spmd-train
fail() { echo "FAILED: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
free_port() { python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export OMP_NUM_THREADS=1
ran=0

if command -v mpirun >/dev/null && mpirun --version 2>&1 | grep -q "Open MPI"; then
  if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
  mpi() {  # mpi OUT PROGRAM ARGS...: mpirun -np 2 on a fresh port
    local out=$1; shift
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) timeout 120 mpirun -np 2 --oversubscribe \
      -x MASTER_ADDR -x MASTER_PORT -x OMP_NUM_THREADS "$@" >"$out" 2>&1
  }
  # 1.
  mpi "$tmp/ddp" "$train" --config "$source/configs/ddp.toml" --training.steps 2 \
    --metrics.run_folder "$tmp/run" --checkpoint.folder "$tmp/ck"
  rc=$?; cat "$tmp/ddp"
  [ $rc -eq 0 ] || fail "spmd-train ddp under mpirun exited with $rc"
  for r in 0 1; do
    [ "$(grep -c "\"loss\"" "$tmp/run/metrics_rank$r.jsonl")" -eq 2 ] ||
      fail "rank $r did not write its 2 steps to metrics_rank$r.jsonl"
  done
  # 2.
  mpi "$tmp/alone" "$train" --training.steps 2 --metrics.run_folder "$tmp/run1"
  rc=$?; cat "$tmp/alone"
  [ $rc -ne 0 ] || fail "a one-rank layout ran on mpirun's 2 ranks"
  grep -q "the world has 2" "$tmp/alone" || fail "the refusal does not name the world of 2"
  # 3.
  mpi "$tmp/02" "$build/examples/02_spawn_and_store"
  rc=$?; cat "$tmp/02"
  [ $rc -eq 0 ] || fail "02_spawn_and_store under mpirun exited with $rc"
  grep -q "^rank 1 of 2 " "$tmp/02" || fail "02 did not run as rank 1 of 2"
  grep -q "^all 2 ranks met through the store" "$tmp/02" || fail "02's ranks did not meet"
  grep -q "^spawning" "$tmp/02" && fail "02 spawned a world of its own under mpirun"
  # 4.
  mpi "$tmp/tp" "$build/bench/spmd-bench-tp" --mode tp --config tiny --steps 1 --warmup 0
  rc=$?; cat "$tmp/tp"
  [ $rc -eq 0 ] || fail "spmd-bench-tp under mpirun exited with $rc"
  grep -q "mode=tp .*world=2" "$tmp/tp" || fail "spmd-bench-tp did not run tp on a world of 2"
  ran=1
else
  echo "SKIPPED parts 1-4: no Open MPI mpirun (Debian package openmpi-bin)"
fi

# 5. Slurm's variables for a two-task, one-node step; the store port derives
# from the job and step ids (runtime/env.h): the job id is picked so it is free.
job=$(draw_slurm_job 100000 1 1)
for r in 0 1; do
  env -i PATH="$PATH" OMP_NUM_THREADS=1 SLURM_JOB_ID="$job" SLURM_STEP_ID=0 SLURM_PROCID=$r \
    SLURM_LOCALID=$r SLURM_NTASKS=2 SLURM_NNODES=1 SLURM_NODEID=0 SLURM_TASKS_PER_NODE=2 \
    SLURM_JOB_NODELIST=127.0.0.1 timeout 120 "$train" --config "$source/configs/ddp.toml" \
    --training.steps 2 --metrics.run_folder "$tmp/srun" >"$tmp/srun.$r" 2>&1 &
done
wait
cat "$tmp/srun.0" "$tmp/srun.1"
for r in 0 1; do
  [ -f "$tmp/srun/metrics_rank$r.jsonl" ] && [ "$(grep -c "\"loss\"" "$tmp/srun/metrics_rank$r.jsonl")" -eq 2 ] ||
    fail "task $r under Slurm's variables did not write its 2 steps"
done
echo "PASSED (mpirun parts: $([ $ran -eq 1 ] && echo run || echo skipped))"
