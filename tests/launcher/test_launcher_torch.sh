#!/usr/bin/env bash
# A PyTorch program under spmdrun, as under torchrun: torch_all_reduce.py
# (init_process_group("gloo"), env://) on
#   1. one node:   --standalone --nproc-per-node 2
#   2. two nodes:  two spmdrun launchers on loopback, --nnodes 2, 2 ranks each
#   3. a failing script under torch's @record, whose TORCHELASTIC_ERROR_FILE
#      the failure report must quote
# PyTorch's rank 0 binds MASTER_PORT for its own store, so the job runs only
# if spmdrun keeps its store elsewhere (SPMD_AGENT_STORE) and leaves
# MASTER_PORT free. Checks every rank's sum (n(n+1)/2), one MASTER_ADDR:PORT
# for the whole job, and that it is not the launcher's store.
# Needs Debian's python3-torch; exits 77 (ctest: skipped) without it.
#
# usage: test_launcher_torch.sh SPMDRUN
set -uo pipefail
spmdrun=$1
script=$(cd "$(dirname "$0")" && pwd)/torch_all_reduce.py
python=/usr/bin/python3  # Debian's, where python3-torch lives (not a virtualenv's)

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }

[ -x "$python" ] || skip "no $python"
"$python" -c "import torch.distributed as d; assert d.is_available()" 2>/dev/null ||
  skip "$python cannot import torch.distributed (Debian package python3-torch)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export GLOO_SOCKET_IFNAME=lo  # the ranks meet on loopback, whatever the host name resolves to
export OMP_NUM_THREADS=1

# check_job LABEL WORLD OUTPUT...: every rank of a world of WORLD printed a
# right sum, all with one MASTER_ADDR:PORT, which is not the agent's store.
check_job() {
  local label=$1 world=$2 all master store expected
  shift 2
  all=$(cat "$@")
  expected=$((world * (world + 1) / 2))
  for ((r = 0; r < world; r++)); do
    grep -Eq "^\[rank$r\]: TORCH rank=$r world=$world .* sum=$expected expected=$expected OK$" \
      <<<"$all" || fail "$label: rank $r did not print the sum $expected"
  done
  master=$(sed -n 's/^\[rank0\]: TORCH .* master=\([^ ]*\) .*/\1/p' <<<"$all")
  store=$(sed -n 's/^\[rank0\]: TORCH .* agent_store=\([^ ]*\) .*/\1/p' <<<"$all")
  [ "$(grep -c " master=$master " <<<"$all")" -eq "$world" ] ||
    fail "$label: the ranks were not all given MASTER_ADDR:PORT $master"
  [ -n "$store" ] && [ "$store" != "<unset>" ] && [ "$store" != "$master" ] ||
    fail "$label: MASTER_ADDR:PORT $master is the launcher's store ($store)"
  echo "$label: $world ranks, sums $expected, MASTER $master, agent store $store"
}

timeout 90 "$spmdrun" --standalone --nproc-per-node 2 "$python" "$script" \
  >"$tmp/one.out" 2>"$tmp/one.err" ||
  { rc=$?; cat "$tmp"/one.*; fail "one node: spmdrun exited with $rc"; }
check_job "one node" 2 "$tmp/one.out"

# The launchers' store port: one the kernel finds free now.
port=$("$python" -c 'import socket
s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
for node in 0 1; do
  timeout 90 "$spmdrun" --nnodes 2 --node-rank $node --master-port "$port" --nproc-per-node 2 \
    --rdzv-timeout 30 --run-id torch2 "$python" "$script" \
    >"$tmp/two$node.out" 2>"$tmp/two$node.err" &
  pids[node]=$!
done
for node in 0 1; do
  wait "${pids[node]}" ||
    { rc=$?; cat "$tmp"/two*; fail "two nodes: node $node's spmdrun exited with $rc"; }
done
check_job "two nodes" 4 "$tmp/two0.out" "$tmp/two1.out"
grep -q " agent_store=127.0.0.1:$port " "$tmp/two1.out" ||
  fail "two nodes: node 1's workers were not told of the store at 127.0.0.1:$port"

# 3. PyTorch's own @record writes the failed worker's TORCHELASTIC_ERROR_FILE
# (spmdrun sets one per worker); spmdrun's failure report quotes it.
cat >"$tmp/record.py" <<'PY'
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    raise ValueError("loss is nan at step 7")

main()
PY
timeout 90 "$spmdrun" --standalone --log-dir "$tmp/logs" --rdzv-id rec "$python" "$tmp/record.py" \
  >"$tmp/rec.out" 2>"$tmp/rec.err"
rc=$?
[ "$rc" -eq 1 ] || { cat "$tmp"/rec.*; fail "@record: spmdrun exited with $rc, not 1"; }
file="$tmp/logs/rec/attempt_0/rank_0/error.json"
[ -s "$file" ] || { cat "$tmp"/rec.*; fail "@record wrote no $file"; }
grep -q "^  error file    : $file$" "$tmp/rec.err" &&
  grep -q "^  error         : ValueError: loss is nan at step 7$" "$tmp/rec.err" &&
  grep -q "^  its call stack (from the error file):$" "$tmp/rec.err" ||
  { cat "$tmp/rec.err"; fail "@record: the report does not quote the error file"; }
echo "@record: the report quotes $file"
echo "PASSED"
