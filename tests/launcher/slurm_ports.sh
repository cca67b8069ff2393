# shellcheck shell=bash
# Sourced by the launcher tests that start programs as Slurm does. Without
# MASTER_PORT, a Slurm job step's store listens on a port derived from its
# job and step ids (runtime/env.h); these tests draw job ids whose ports are
# free now, so that a port some other process holds cannot fail them.

# slurm_port JOB STEP: the store's port, worked out here apart from the code.
slurm_port() { echo $((20000 + ($1 + 7919 * $2) % 12000)); }

# bindable PORT: whether a socket can bind 127.0.0.1:PORT now.
bindable() {
  python3 -c 'import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null
}

# draw_slurm_job BASE JOBS STEPS: prints a job id, BASE plus a random draw,
# such that jobs JOB..JOB+JOBS-1 with steps 0..STEPS-1 all have free ports
# (50 draws at most; the last one is printed either way).
draw_slurm_job() {
  local job free j s
  for _ in $(seq 50); do
    job=$(($1 + RANDOM * 7 + RANDOM % 7))
    free=1
    for ((j = 0; j < $2; ++j)); do
      for ((s = 0; s < $3; ++s)); do
        bindable "$(slurm_port $((job + j)) $s)" || free=0
      done
    done
    [ $free = 1 ] && break
  done
  echo "$job"
}
