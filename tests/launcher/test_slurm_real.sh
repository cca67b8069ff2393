#!/usr/bin/env bash
# spmd programs under a real Slurm: a one-node cluster of this machine
# (Debian's slurm-wlm and munge, which scripts/setup.sh installs), started
# by the test in a folder of its own, on ports of its own, with a munge
# daemon of its own; then srun starts the programs as it starts them on a
# cluster, with Slurm's own variables (the first host of SLURM_STEP_NODELIST
# as MASTER_ADDR, the store's port from the job id: runtime/env.h).
#   1. srun -n 2 spmd-train, DDP: one job of 2 ranks, a metrics file per rank;
#   2. srun -n 2 spmd-bench all_reduce, checked: 2 ranks, no wrong value;
#   3. srun -n 2 02_spawn_and_store: the ranks meet through the store;
#   4. srun -n 2 spmd-train with the built-in one-rank layout: refused,
#      naming the world of 2.
# Needs root (the daemons), slurmctld, slurmd, srun and munged; exits 77
# (ctest: skipped) with the reason when they are missing or do not start.
#
# usage: test_slurm_real.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1 source=$2
# shellcheck source=tests/launcher/slurm_ports.sh
source "$(dirname "$0")/slurm_ports.sh"
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "needs root to start Slurm's daemons"
for p in slurmctld slurmd srun munged munge; do
  command -v "$p" >/dev/null || PATH=$PATH:/usr/sbin command -v "$p" >/dev/null ||
    skip "no $p (Debian packages slurm-wlm and munge: scripts/setup.sh)"
done
export PATH=$PATH:/usr/sbin
tmp=$(mktemp -d)
chmod 755 "$tmp"
pids=()
# The step daemons (slurmstepd) of the test's jobs hold files under $tmp:
# the jobs end first, then the daemons, then any step daemon left.
ours() {
  for p in $(pgrep -x slurmstepd); do
    ls -l "/proc/$p/fd" 2>/dev/null | grep -q "$tmp" && echo "$p"
  done
}
cleanup() {
  for _ in $(seq 50); do
    [ -z "$(squeue -h 2>/dev/null)" ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for _ in $(seq 20); do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for _ in $(seq 50); do
    [ -z "$(ours)" ] && break
    sleep 0.1
  done
  for p in $(ours); do kill -9 "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# munge: a key and a daemon of the test's own, on its own socket.
mkdir -p "$tmp/munge"
dd if=/dev/urandom of="$tmp/munge/key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge/key"
munged --force --key-file="$tmp/munge/key" --socket="$tmp/munge/sock" \
  --pid-file="$tmp/munge/pid" --log-file="$tmp/munge/log" --seed-file="$tmp/munge/seed" \
  >"$tmp/munge/out" 2>&1 || skip "munged does not start: $(cat "$tmp/munge/out" "$tmp/munge/log")"
pids+=("$(cat "$tmp/munge/pid")")
munge --socket="$tmp/munge/sock" -n | unmunge --socket="$tmp/munge/sock" >/dev/null 2>&1 ||
  skip "munge does not answer on its socket"

# A one-node cluster named after this host. Its first job id is drawn: the
# store's port comes from it (runtime/env.h), and other tests make up job
# ids of their own. The draw keeps the ports of the test's 4 jobs free now.
first_job=$(draw_slurm_job 1000 4 1)
host=$(hostname -s)
mkdir -p "$tmp/state" "$tmp/spool" "$tmp/log"
cat >"$tmp/slurm.conf" <<EOF
ClusterName=spmdtest
FirstJobId=$first_job
SlurmctldHost=$host
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/sock
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
MpiDefault=none
SlurmUser=root
SlurmdUser=root
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=spmd Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF=$tmp/slurm.conf
slurmctld -D -i >"$tmp/log/ctld.out" 2>&1 &
pids+=($!)
slurmd -D >"$tmp/log/slurmd.out" 2>&1 &
pids+=($!)
disown -a  # killed at the end without the shell's "Killed" lines
for _ in $(seq 100); do
  sinfo -h -o %t 2>/dev/null | grep -q idle && break
  sleep 0.2
done
sinfo -h -o %t 2>/dev/null | grep -q idle ||
  skip "Slurm's node did not come up: $(tail -3 "$tmp/log/slurmctld.log" "$tmp/log/slurmd.log" 2>&1)"
echo "Slurm $(sinfo -V | cut -d' ' -f2): node $host idle"

# The store's host is the first of the step's nodes: this host's name.
getent hosts "$host" >/dev/null || skip "this host's name ($host) does not resolve"
export OMP_NUM_THREADS=1
run() {  # run OUT ARGS...: srun -n 2 with a bound
  local out=$1; shift
  timeout 120 srun -n 2 --overcommit --kill-on-bad-exit=1 "$@" >"$out" 2>&1
}
# 1.
run "$tmp/ddp" "$build/train/spmd-train" --config "$source/configs/ddp.toml" --training.steps 2 \
  --metrics.run_folder "$tmp/run" --checkpoint.folder "$tmp/ck"
rc=$?; cat "$tmp/ddp"
[ $rc -eq 0 ] || fail "spmd-train ddp under srun exited with $rc"
for r in 0 1; do
  [ "$(grep -c "\"loss\"" "$tmp/run/metrics_rank$r.jsonl")" -eq 2 ] ||
    fail "rank $r did not write its 2 steps to metrics_rank$r.jsonl"
done
echo "ok   srun -n 2 spmd-train: one DDP job of 2 ranks"
# 2.
run "$tmp/bench" "$build/bench/spmd-bench" all_reduce -b 8 -e 64K -f 8 -c 1 -n 2 -w 1
rc=$?; cat "$tmp/bench"
[ $rc -eq 0 ] || fail "spmd-bench under srun exited with $rc"
grep -q "# spmd-bench: impl spmd-tcp, device cpu, 2 ranks" "$tmp/bench" || fail "not 2 ranks"
grep -q "Out of bounds values : 0 OK" "$tmp/bench" || fail "spmd-bench found wrong values"
echo "ok   srun -n 2 spmd-bench all_reduce: 2 ranks, checked"
# 3.
run "$tmp/02" "$build/examples/02_spawn_and_store"
rc=$?; cat "$tmp/02"
[ $rc -eq 0 ] || fail "02_spawn_and_store under srun exited with $rc"
grep -q "^all 2 ranks met through the store" "$tmp/02" || fail "02's ranks did not meet"
grep -q "^spawning" "$tmp/02" && fail "02 spawned a world of its own under srun"
echo "ok   srun -n 2 02_spawn_and_store: the ranks met through the store"
# 4.
run "$tmp/alone" "$build/train/spmd-train" --training.steps 2 --metrics.run_folder "$tmp/run1"
rc=$?; cat "$tmp/alone"
[ $rc -ne 0 ] || fail "a one-rank layout ran on srun's 2 tasks"
grep -q "the world has 2" "$tmp/alone" || fail "the refusal does not name the world of 2"
echo "ok   srun -n 2 spmd-train with a one-rank layout: refused"
echo PASSED
