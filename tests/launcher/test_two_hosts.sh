#!/usr/bin/env bash
# Two "hosts" on one machine, and spmd jobs of 4 ranks (2 per host) across
# them. Each host is a set of namespaces of its own: network (a veth pair
# joins the two, 10.213.9.1 and 10.213.9.2, private to them), UTS (its own
# host name, hostA or hostB) and mount (a private tmpfs on /dev/shm). So
# the host backend's identity of a host (parallel/comm/host/transport.h:
# host name, boot id, /dev/shm's device and inode) differs between them and
# ranks on different hosts can reach each other only over the veth link.
# One spmdrun per host, static rendezvous on host A's address.
#   a. spmd-bench runs every collective, dtype and reduction over small
#      sizes (-b 0, though spmd-bench skips sizes of no element; odd element
#      counts among them), checked: no wrong value, and
#      its "# Using devices" lines say that pairs within a host use shared
#      memory and pairs across hosts TCP, and its "# Algorithm" line that
#      the group takes the hierarchical collectives. Then all_reduce,
#      all_gather and reduce_scatter up to 1 MB, every dtype and reduction,
#      forced hierarchical at every size and forced flat
#      (SPMD_HIERARCHICAL=1, 0): checked, and each row of -J says which
#      algorithm ran it.
#   b. spmd-train with HSDP, dp_replicate=2 x dp_shard=2: the mesh is
#      (dp_replicate, dp_shard) with dp_shard innermost, so ranks 0,1 (host
#      A) hold the shards of one replica and ranks 2,3 (host B) of the
#      other; gradients are reduce-scattered within a host and all-reduced
#      across. Its losses and grad norms per step and every parameter at
#      the end (checkpoint exported) equal one process's (same_training.py).
#      AdamW with a large eps: its update is then nearly linear in the
#      gradient, so the runs' different summation orders move parameters by
#      rounding only (with eps 1e-8 an element whose gradient is near zero
#      steps by +-lr on its sign, which rounding may flip).
#   c. The interface variables: each host has a second interface (alt0, a
#      veth whose both ends stay on that host) that routes to no other host.
#      SPMD_SOCKET_IFNAME picks the interface of the store and of the links,
#      GLOO_SOCKET_IFNAME that of the links alone (as in PyTorch, where it
#      is Gloo's and the store ignores it).
#      - SPMD_SOCKET_IFNAME=alt0 on host B: its launcher connects to the
#        store from alt0's address, to which host A cannot answer, and fails
#        within --rdzv-timeout naming the store's address, its own and the
#        variable; on both hosts: host A's launcher refuses at once to host
#        the store on alt0 when the other node looks for it at --master-addr.
#      - GLOO_SOCKET_IFNAME=alt0 on both: the store is reached as usual, and
#        a cross-host link fails within the group's timeout with an error
#        that names the peer and the address it tried (host B's ranks fail
#        first: host A's launcher then stops its own).
#      - SPMD_SOCKET_IFNAME naming the veth works end to end, the store
#        bound to host A's veth address alone.
#      - a name no interface has is an error listing those that exist (host
#        A's launcher, at once).
#   d. The link goes down mid-collective (host B's veth end set down during
#      a loop of large all_reduces): every rank fails within the group's
#      timeout, naming the op, its sequence number and the other host's
#      ranks with that host's name and address; host B's launcher, cut off
#      from the store on host A, stops its workers within its read_timeout
#      and says why; both exit non-zero within 15 s and nothing of the job
#      is left on either host.
# Needs root, iproute2 and util-linux's unshare; exits 77 (ctest: skipped)
# with the reason otherwise, or when the namespaces cannot be made.
#
# usage: test_two_hosts.sh SPMDRUN SPMD_BENCH SPMD_TRAIN
set -uo pipefail
spmdrun=$1 bench=$2 train=$3
here=$(cd "$(dirname "$0")" && pwd)

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || skip "needs root to create namespaces"
command -v ip >/dev/null || skip "no 'ip' command (Debian package iproute2)"
command -v unshare >/dev/null || skip "no 'unshare' command (Debian package util-linux)"

nsA=spmdh$$a nsB=spmdh$$b
vethA=hv$$a vethB=hv$$b
tmp=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for ns in "$nsA" "$nsB"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$nsA" 2>"$tmp/err" || skip "ip netns add failed: $(cat "$tmp/err")"
ip netns add "$nsB" || fail "ip netns add $nsB"
ip link add "$vethA" type veth peer name "$vethB" 2>"$tmp/err" ||
  skip "no veth support: $(cat "$tmp/err")"
ip link set "$vethA" netns "$nsA" && ip link set "$vethB" netns "$nsB" || fail "moving the veth ends"
ip -n "$nsA" addr add 10.213.9.1/24 dev "$vethA" && ip -n "$nsB" addr add 10.213.9.2/24 dev "$vethB" ||
  fail "addresses"
# alt: 10.213.10.1 on host A, 10.213.11.1 on host B, neither reachable from the other.
for host in "$nsA 10" "$nsB 11"; do
  read -r ns net <<<"$host"
  ip -n "$ns" link add alt0 type veth peer name alt1 &&
    ip -n "$ns" addr add "10.213.$net.1/24" dev alt0 && ip -n "$ns" link set lo up &&
    ip -n "$ns" link set alt0 up && ip -n "$ns" link set alt1 up || fail "$ns's interfaces"
done
ip -n "$nsA" link set "$vethA" up && ip -n "$nsB" link set "$vethB" up || fail "veth up"
timeout 10 ip netns exec "$nsA" unshare --uts --mount --propagation private \
  sh -c 'hostname hostA && mount -t tmpfs none /dev/shm' 2>"$tmp/err" ||
  skip "cannot make UTS and mount namespaces: $(cat "$tmp/err")"

export OMP_NUM_THREADS=1
# on_host NAME NS OUT COMMAND...: COMMAND on host NAME, output in OUT, at most 60 s.
on_host() {
  local name=$1 ns=$2 out=$3
  shift 3
  timeout -k 5 60 ip netns exec "$ns" unshare --uts --mount --propagation private \
    sh -c 'hostname "$0" && mount -t tmpfs -o size=64m spmd-shm /dev/shm && exec "$@"' \
    "$name" "$@" >"$out" 2>&1
}

# job LABEL PORT ENV_A ENV_B PROGRAM ARGS...: PROGRAM on 4 ranks, ranks 0,1
# on host A (with the variables ENV_A, "K=V ..."), 2,3 on host B; output in
# $tmp/LABEL.A and .B; their exit codes in rcA and rcB, seconds in took.
# The launchers' --rdzv-timeout is $rdzv_timeout, 20 s unless set.
job() {
  local label=$1 port=$2 envA=$3 envB=$4 start=$SECONDS
  shift 4
  local node=(--nnodes 2 --nproc-per-node 2 --master-addr 10.213.9.1 --master-port "$port"
              --rdzv-timeout "${rdzv_timeout:-20}" --run-id "$label")
  # shellcheck disable=SC2086  # ENV_A and ENV_B are lists of words
  on_host hostA "$nsA" "$tmp/$label.A" env $envA "$spmdrun" "${node[@]}" --node-rank 0 "$@" &
  pids+=($!)
  local a=$!
  # shellcheck disable=SC2086
  on_host hostB "$nsB" "$tmp/$label.B" env $envB "$spmdrun" "${node[@]}" --node-rank 1 "$@" &
  pids+=($!)
  local b=$!
  wait $a
  rcA=$?
  wait $b
  rcB=$?
  took=$((SECONDS - start))
}
show() { cat "$tmp/$1.A" "$tmp/$1.B"; }

# --- a. every collective across the hosts, checked ---------------------------------------
job bench 29611 "" "" "$bench" all -b 0 -e 1K -f 1 -i 212 -d all -o all -n 1 -w 0 -c 1
[ $rcA -eq 0 ] && [ $rcB -eq 0 ] || { show bench; fail "bench: spmd-bench exited with $rcA, $rcB"; }
out=$(sed -n 's/^\[rank0\]: //p' "$tmp/bench.A")
rows=$(grep -E '^ +[0-9]' <<<"$out")
[ -n "$rows" ] || { show bench; fail "bench: no rows"; }
# #wrong: the 9th field, and the 13th where the in-place set was measured.
wrong=$(awk '$9 != "0" || (NF >= 13 && $13 != "0")' <<<"$rows")
[ -z "$wrong" ] || fail "bench: rows with wrong values:"$'\n'"$wrong"
grep -qx "# Out of bounds values : 0 OK" <<<"$out" || fail "bench: $(grep Out <<<"$out")"
odd=$(awk '$2 % 2 == 1' <<<"$rows" | wc -l)  # counts that divide unevenly: 53 floats...
[ "$odd" -gt 0 ] || fail "bench: no row of an odd element count"
for op in all_reduce broadcast reduce all_gather reduce_scatter gather scatter all_to_all \
  all_to_allv sendrecv; do
  grep -qx "# $op" <<<"$out" || fail "bench: no rows of $op"
done
for want in "0 hostA links shm:1 tcp:2,3" "1 hostA links shm:0 tcp:2,3" \
  "2 hostB links tcp:0,1 shm:3" "3 hostB links tcp:0,1 shm:2"; do
  read -r r h l <<<"$want"
  grep -Eq "^#  Rank +$r Group +0 Pid +[0-9]+ on +$h device cpu $l\$" <<<"$out" ||
    fail "bench: rank $r's line is not '... on $h device cpu $l':"$'\n'"$(grep Rank <<<"$out")"
done
grep -qx "# Algorithm hierarchical (2 hosts x 2 ranks) for all_reduce above 65536 bytes, all_gather, reduce_scatter: within each host, then across" <<<"$out" ||
  fail "bench: the header does not say the group is hierarchical: $(grep Algorithm <<<"$out")"
echo "a. spmd-bench: $(wc -l <<<"$rows") rows ($odd of an odd count) across two hosts, no wrong" \
  "value; links:"
grep -E "Rank|Algorithm" <<<"$out"

# a2. all_reduce, all_gather and reduce_scatter forced hierarchical at every
# size (SPMD_HIERARCHICAL=1), in pieces of 64 KiB (16 ticks at 1 MB), then
# forced flat (0), every dtype and reduction, sizes of odd element counts
# up to 1 MB; -J's results say which algorithm ran each row.
# check_algorithms LABEL PYTHON-DICT: every row of $tmp/LABEL.json ran the
# algorithm the dict gives for its op ("small" for an all_reduce of up to 64 KiB).
check_algorithms() {
  /usr/bin/python3 - "$tmp/$1.json" "$2" <<'PY'
import ast, json, sys
doc, want = json.load(open(sys.argv[1])), ast.literal_eval(sys.argv[2])
assert doc["out_of_bounds"]["count"] == 0, "wrong values"
for r in doc["results"]:
    key = "small" if r["op"] == "all_reduce" and r["size"] <= 65536 and "small" in want else r["op"]
    assert r["algorithm"] == want[key], f'{r["op"]} of {r["size"]} B ran {r["algorithm"]}, not {want[key]}'
    assert r["out_of_place"]["nwrong"] == 0 and r["in_place"]["nwrong"] == 0, f"wrong values: {r}"
print(len(doc["results"]), "rows:", ", ".join(sorted({f'{r["op"]} {r["algorithm"]}' for r in doc["results"]})))
PY
}
three=("$bench" all_reduce,all_gather,reduce_scatter -b 212 -e 1000212 -i 500000 -d all -o all -n 1
       -w 0 -c 1)
forced="SPMD_HIERARCHICAL=1 SPMD_TCP_HIERARCHICAL_PIECE_BYTES=65536"
job hier 29613 "$forced" "$forced" "${three[@]}" -J "$tmp/hier.json"
[ $rcA -eq 0 ] && [ $rcB -eq 0 ] || { show hier; fail "hierarchical: spmd-bench exited with $rcA, $rcB"; }
grep -q "^\[rank0\]: # Algorithm hierarchical (2 hosts x 2 ranks) for all_reduce, all_gather" \
  "$tmp/hier.A" || fail "hierarchical: the header does not say so"
ran=$(check_algorithms hier "{'all_reduce': 'hierarchical', 'all_gather': 'hierarchical',
                              'reduce_scatter': 'hierarchical'}") || fail "hierarchical: $ran"
echo "a2. SPMD_HIERARCHICAL=1: $ran; no wrong value"
job flat 29615 "SPMD_HIERARCHICAL=0" "SPMD_HIERARCHICAL=0" "${three[@]}" -J "$tmp/flat.json"
[ $rcA -eq 0 ] && [ $rcB -eq 0 ] || { show flat; fail "flat: spmd-bench exited with $rcA, $rcB"; }
grep -qx "\[rank0\]: # Algorithm flat (2 hosts x 2 ranks, SPMD_HIERARCHICAL=0)" "$tmp/flat.A" ||
  fail "flat: the header does not say so"
ran=$(check_algorithms flat "{'small': 'recursive_doubling', 'all_reduce': 'ring',
                              'all_gather': 'ring', 'reduce_scatter': 'ring'}") || fail "flat: $ran"
echo "    SPMD_HIERARCHICAL=0: $ran; no wrong value"

# --- b. HSDP across the hosts = one process ----------------------------------------------
model=(--model.preset=custom --model.vocab_size=256 --model.seq_len=16 --model.n_layers=2
       --model.n_heads=4 --model.d_model=32 --training.steps=4 --training.global_batch=4
       --training.seed=7 --optimizer.lr=0.01 --optimizer.eps=1 --checkpoint.interval=4)
job train 29621 "" "" "$train" "${model[@]}" --parallel.dp_replicate=2 --parallel.dp_shard=2 \
  --metrics.run_folder="$tmp/hsdp" --checkpoint.folder="$tmp/hsdp_ck"
[ $rcA -eq 0 ] && [ $rcB -eq 0 ] || { show train; fail "train: HSDP exited with $rcA, $rcB"; }
timeout 60 "$train" "${model[@]}" --metrics.run_folder="$tmp/one" \
  --checkpoint.folder="$tmp/one_ck" >"$tmp/one.log" 2>&1 || fail "train: one process: $(tail -5 "$tmp/one.log")"
for run in hsdp one; do
  timeout 60 "$train" export "${model[@]}" --checkpoint.folder="$tmp/${run}_ck" \
    --out "$tmp/$run.safetensors" >"$tmp/export_$run.log" 2>&1 ||
    fail "train: export of $run: $(cat "$tmp/export_$run.log")"
done
timeout 60 /usr/bin/python3 "$here/same_training.py" 4 "$tmp/one" "$tmp/one.safetensors" "$tmp/hsdp" \
  "$tmp/hsdp.safetensors" || fail "train: HSDP across two hosts differs from one process"
echo "b. spmd-train HSDP across two hosts = one process"

# --- c. SPMD_SOCKET_IFNAME and GLOO_SOCKET_IFNAME -----------------------------------------
small=("$bench" all_reduce -b 8 -e 1K -f 4 -n 1 -w 0 -c 1)
# The store from alt0: host B's launcher sends from 10.213.11.1, to which
# host A has no route, so no answer ever comes back.
rdzv_timeout=4 job storealt 29635 "" "SPMD_SOCKET_IFNAME=alt0" "${small[@]}"
[ $rcA -ne 0 ] && [ $rcB -ne 0 ] || { show storealt; fail "store alt0: the job did not fail ($rcA, $rcB)"; }
[ $took -le 10 ] || fail "store alt0: failing took $took s with a 4 s rendezvous timeout"
grep -q "cannot reach the store at 10.213.9.1:29635 within 4 s (.*connect to 10.213.9.1:29635 from 10.213.11.1: .*this launcher connects from SPMD_SOCKET_IFNAME=alt0 (10.213.11.1): can that address reach 10.213.9.1?" \
  "$tmp/storealt.B" || { show storealt; fail "store alt0: host B's error does not name the store, the source and the variable"; }
echo "c. SPMD_SOCKET_IFNAME=alt0 on host B: failed at the store in $took s, saying:"
grep -ho "cannot reach the store .*" "$tmp/storealt.B" | head -1
rdzv_timeout=4 job storealt2 29637 "SPMD_SOCKET_IFNAME=alt0" "SPMD_SOCKET_IFNAME=alt0" "${small[@]}"
[ $rcA -ne 0 ] && [ $rcB -ne 0 ] || { show storealt2; fail "store alt0 x2: the job did not fail ($rcA, $rcB)"; }
[ $took -le 10 ] || fail "store alt0 x2: failing took $took s with a 4 s rendezvous timeout"
grep -q "cannot host the store: SPMD_SOCKET_IFNAME=alt0 (10.213.10.1) puts it on 10.213.10.1, but the other nodes look for it at 10.213.9.1" \
  "$tmp/storealt2.A" || { show storealt2; fail "store alt0 x2: host A does not refuse to host on alt0"; }
grep -q "from 10.213.11.1: .*SPMD_SOCKET_IFNAME=alt0 (10.213.11.1)" "$tmp/storealt2.B" ||
  { show storealt2; fail "store alt0 x2: host B's error does not name the source and the variable"; }
echo "   SPMD_SOCKET_IFNAME=alt0 on both: host A refused at once, saying:"
grep -ho "cannot host the store: .*" "$tmp/storealt2.A" | head -1
# The links from alt0, the store as usual: ranks 2,3 cannot connect to
# ranks 0,1. Host B's group timeout is the shorter, so its ranks, which try
# to connect, are the first to fail (host A's, which wait for them, would
# say less).
job alt 29631 "GLOO_SOCKET_IFNAME=alt0 SPMD_PG_TIMEOUT_S=10" \
  "GLOO_SOCKET_IFNAME=alt0 SPMD_PG_TIMEOUT_S=3" "${small[@]}"
[ $rcA -ne 0 ] && [ $rcB -ne 0 ] || { show alt; fail "alt0: the job did not fail ($rcA, $rcB)"; }
[ $took -le 8 ] || fail "alt0: failing took $took s with a 3 s timeout"
grep -q "rank 2 (at 10.213.11.1) cannot connect to rank 0 at 10.213.10.1:" "$tmp/alt.B" ||
  { show alt; fail "alt0: rank 2's error does not name rank 0 and the address it tried"; }
echo "   GLOO_SOCKET_IFNAME=alt0: the links failed in $took s, saying:"
grep -ho "rank 2 (at .*" "$tmp/alt.B" | head -1
# The veth for everything: host A's store listens on 10.213.9.1 alone.
# Each worker lists its host's listening sockets on the store's port before
# it starts the collectives; the store lives as long as its launcher, so
# rank 0's list is taken while it listens (no watcher racing a short job).
ss_first=(/bin/bash -c 'ss -Htln "sport = :29641" >"$0.$RANK" && exec "$@"' "$tmp/veth.listen")
job veth 29641 "SPMD_SOCKET_IFNAME=$vethA" "SPMD_SOCKET_IFNAME=$vethB" "${ss_first[@]}" "${small[@]}"
[ $rcA -eq 0 ] && [ $rcB -eq 0 ] || { show veth; fail "veth: exited with $rcA, $rcB"; }
grep -q "^\[rank0\]: # Out of bounds values : 0 OK" "$tmp/veth.A" || { show veth; fail "veth: wrong values"; }
grep -q " 10.213.9.1:29641 " "$tmp/veth.listen.0" 2>/dev/null ||
  fail "veth: the store did not listen on 10.213.9.1 alone: $(cat "$tmp/veth.listen.0" 2>/dev/null)"
echo "   SPMD_SOCKET_IFNAME=$vethA/$vethB: the collectives ran; the store listened at" \
  "$(awk '{print $4}' "$tmp/veth.listen.0")"
rdzv_timeout=4 job nosuch 29651 "SPMD_SOCKET_IFNAME=nosuch0" "" "${small[@]}"  # host A fails at once
[ $rcA -ne 0 ] && [ $rcB -ne 0 ] || { show nosuch; fail "nosuch0: the job did not fail"; }
for listed in "lo (127.0.0.1)" "$vethA (10.213.9.1)" "alt0 (10.213.10.1)"; do
  grep -qF "SPMD_SOCKET_IFNAME=nosuch0: no interface of that name has an IPv4 address; those that have one: " \
    "$tmp/nosuch.A" && grep -qF "$listed" "$tmp/nosuch.A" ||
    { show nosuch; fail "nosuch0: the error does not list $listed"; }
done
echo "   SPMD_SOCKET_IFNAME=nosuch0: refused, listing host A's interfaces"

# --- d. the link goes down mid-collective -------------------------------------------------
# A loop of 8 MiB all_reduces runs across the hosts; once it runs, host B's
# end of the veth goes down. No RST comes (the packets just stop), so only
# timeouts can end it: the group's (SPMD_PG_TIMEOUT_S=2) for the workers,
# read_timeout for the launchers' store operations (host B's launcher
# reaches the store on host A over the same link).
loop=("$bench" all_reduce -b 8M -e 8M -n 100000 -w 0 -c 0)
(
  for _ in $(seq 100); do  # until rank 0 prints the table's header: the loop has begun
    grep -q "(elements)" "$tmp/down.A" 2>/dev/null && break
    sleep 0.1
  done
  sleep 0.5
  ip -n "$nsB" link set "$vethB" down
) &
cutter=$!
job down 29661 "SPMD_PG_TIMEOUT_S=2" "SPMD_PG_TIMEOUT_S=2" --rdzv-conf read_timeout=7 "${loop[@]}"
wait $cutter
[ $rcA -ne 0 ] && [ $rcB -ne 0 ] || { show down; fail "link down: the job did not fail ($rcA, $rcB)"; }
[ $took -le 15 ] || { show down; fail "link down: the launchers took $took s to end"; }
# Each side's ranks name the other host's ranks, with its name and address,
# the op and its sequence number. (Which ranks each names varies: in a ring
# some ranks may be one all_reduce ahead when the link goes down.)
grep -Eq '^\[rank[01]\]: .*all_reduce #[0-9]+ .* failed: timed out after 2000 ms.*ranks that never arrived at all_reduce #[0-9]+: \[[0-9, ]+\] \((on|ranks? [0-9, ]+ on) hostB at 10\.213\.9\.2\)' \
  "$tmp/down.A" || { show down; fail "link down: host A's error does not name host B's ranks"; }
grep -Eq '^\[rank[23]\]: .*all_reduce #[0-9]+ .* failed: timed out after 2000 ms.*ranks not heard from at all_reduce #[0-9]+: \[[0-9, ]+\] \((on|ranks? [0-9, ]+ on) hostA at 10\.213\.9\.1\); the store could not be reached' \
  "$tmp/down.B" || { show down; fail "link down: host B's error does not name host A's ranks"; }
grep -q "^spmdrun: lost the store (TCPStore .* on 10.213.9.1:29661: .*); stopping the workers" \
  "$tmp/down.B" || { show down; fail "link down: host B's launcher does not say it lost the store"; }
grep -q "first to fail : rank [01] " "$tmp/down.A" ||
  { show down; fail "link down: host A's launcher has no failure report"; }
echo "d. link down mid-collective: both launchers ended in $took s (exit codes $rcA, $rcB); host A:"
grep -ho "ranks that never arrived at all_reduce #[^;]*" "$tmp/down.A" | head -1
echo "   host B:"
grep -ho "ranks not heard from at all_reduce #[0-9]*: [^;]*" "$tmp/down.B" | head -1

# Nothing may be left running on either host.
for ns in "$nsA" "$nsB"; do
  left=$(ip netns pids "$ns")
  [ -z "$left" ] || fail "processes left in $ns: $left"
done
echo "PASSED"
