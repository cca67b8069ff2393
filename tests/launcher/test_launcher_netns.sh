#!/usr/bin/env bash
# Two spmdrun "nodes" that really have different addresses: each runs in a
# network namespace of its own, joined by a veth pair (10.213.7.1 and
# 10.213.7.2, private to the namespaces, so the host's networks are never
# touched). Node 1 can reach node 0's store only over the veth link.
#   1. static:  --node-rank 0/1 --master-addr 10.213.7.1
#   2. dynamic: both --rdzv-endpoint 10.213.7.1:PORT, no node rank; the
#      launcher that can bind that address (node 0's namespace) hosts.
# In both, spmd workers meet at the store (SPMD_AGENT_STORE), and every rank
# gets one MASTER_ADDR:MASTER_PORT on the node of rank 0, which rank 0 binds.
# Needs root and iproute2; exits 77 (ctest: skipped) with the reason otherwise.
#
# usage: test_launcher_netns.sh SPMDRUN WORKER
set -uo pipefail
spmdrun=$1
worker=$2

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "no 'ip' command (Debian package iproute2)"

ns0=spmd$$a
ns1=spmd$$b
tmp=$(mktemp -d)
cleanup() {
  ip netns del "$ns0" 2>/dev/null
  ip netns del "$ns1" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$ns0" 2>"$tmp/err" || skip "ip netns add failed: $(cat "$tmp/err")"
ip netns add "$ns1" || fail "ip netns add $ns1"
ip link add "sv$$a" type veth peer name "sv$$b" 2>"$tmp/err" || skip "no veth support: $(cat "$tmp/err")"
ip link set "sv$$a" netns "$ns0" && ip link set "sv$$b" netns "$ns1" || fail "moving the veth ends"
ip -n "$ns0" addr add 10.213.7.1/24 dev "sv$$a" && ip -n "$ns1" addr add 10.213.7.2/24 dev "sv$$b" ||
  fail "addresses"
ip -n "$ns0" link set lo up && ip -n "$ns0" link set "sv$$a" up || fail "links up in $ns0"
ip -n "$ns1" link set lo up && ip -n "$ns1" link set "sv$$b" up || fail "links up in $ns1"

# run_node NAMESPACE NAME ARGS...: spmdrun in the background, output in $tmp/NAME.*
run_node() {
  local ns=$1 name=$2
  shift 2
  ip netns exec "$ns" timeout 40 "$spmdrun" --nnodes 2 --nproc-per-node 2 --rdzv-timeout 20 \
    --run-id netns "$@" "$worker" --print-env --store --bind-master \
    >"$tmp/$name.out" 2>"$tmp/$name.err" &
}

# check_job LABEL STORE: the two nodes' output is one job of 4 ranks, the
# store at STORE reached from both sides
check_job() {
  local label=$1 store=$2 all master_addr master_port
  all=$(cat "$tmp/$label"0.out "$tmp/$label"1.out)
  # Rank 0 runs on node 0, whichever namespace that is: MASTER_ADDR is its address.
  master_addr=10.213.7.2
  grep -qx "\[rank0\]: ENV RANK=0" "$tmp/$label"0.out && master_addr=10.213.7.1
  master_port=$(sed -n 's/^\[rank0\]: ENV MASTER_PORT=//p' <<<"$all")
  grep -qx "\[rank0\]: BOUND MASTER_PORT=$master_port" <<<"$all" ||
    fail "$label: rank 0 could not bind MASTER_PORT"
  for r in 0 1 2 3; do
    grep -qx "\[rank$r\]: ENV RANK=$r" <<<"$all" || fail "$label: rank $r did not run"
    grep -qx "\[rank$r\]: ENV WORLD_SIZE=4" <<<"$all" || fail "$label: rank $r world size"
    grep -qx "\[rank$r\]: ENV MASTER_ADDR=$master_addr" <<<"$all" || fail "$label: rank $r master"
    grep -qx "\[rank$r\]: ENV MASTER_PORT=$master_port" <<<"$all" || fail "$label: rank $r port"
    grep -qx "\[rank$r\]: ENV SPMD_AGENT_STORE=$store" <<<"$all" || fail "$label: rank $r store at"
    grep -qx "\[rank$r\]: STORE OK ranks=4 attempt=0" <<<"$all" || fail "$label: rank $r store"
  done
  echo "$label: ranks 0-3 of one job across two namespaces"
}

port=29517
run_node "$ns0" static0 --node-rank 0 --master-addr 10.213.7.1 --master-port $port
pid0=$!
run_node "$ns1" static1 --node-rank 1 --master-addr 10.213.7.1 --master-port $port
pid1=$!
wait $pid0 || { cat "$tmp"/static0.*; fail "static: node 0 exited with $?"; }
wait $pid1 || { cat "$tmp"/static1.*; fail "static: node 1 exited with $?"; }
check_job static 10.213.7.1:$port
# Node 1's ranks are 2 and 3 and ran in node 1's namespace.
grep -qx "\[rank2\]: ENV GROUP_RANK=1" "$tmp/static1.out" || fail "static: node 1 ran the wrong ranks"

run_node "$ns1" dynamic1 --rdzv-endpoint 10.213.7.1:$((port + 1))  # the client may start first
pid1=$!
sleep 0.3
run_node "$ns0" dynamic0 --rdzv-endpoint 10.213.7.1:$((port + 1))
pid0=$!
wait $pid0 || { cat "$tmp"/dynamic0.*; fail "dynamic: node in $ns0 exited with $?"; }
wait $pid1 || { cat "$tmp"/dynamic1.*; fail "dynamic: node in $ns1 exited with $?"; }
check_job dynamic 10.213.7.1:$((port + 1))
echo "PASSED"
