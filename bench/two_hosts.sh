# Two "hosts" on one machine joined by a shaped link, for the benches that
# cross it (bench/slow_link.sh, bench/hierarchical.sh); sourced, not run.
#
#   two_hosts_up NAME SUBNET RATE BURST
#
# makes network namespaces $nsA and $nsB (NAME and $$ in their names), a veth
# pair between them ($vethA in A at SUBNET.1, $vethB in B at SUBNET.2, /24),
# each end shaped by tc's token bucket (tbf) to RATE out with a bucket of
# BURST, a temporary folder $tmp, and an EXIT trap that kills what runs in
# the namespaces and removes them and $tmp.
#
#   on_host SECONDS NS HOSTNAME SHM_SIZE CMD...
#
# runs CMD in NS for at most SECONDS with its own hostname and a /dev/shm of
# its own (UTS and mount namespaces), as a second machine would have them.
# tx prints the bytes both ends have sent so far. Needs root, iproute2 (ip,
# tc) and util-linux's unshare.

two_hosts_up() {
  local name=$1 subnet=$2 rate=$3 burst=$4
  nsA=spmd$name$$a nsB=spmd$name$$b vethA=${name:0:4}$$a vethB=${name:0:4}$$b
  tmp=$(mktemp -d)
  trap two_hosts_down EXIT
  ip netns add "$nsA" && ip netns add "$nsB"
  ip link add "$vethA" type veth peer name "$vethB"
  ip link set "$vethA" netns "$nsA" && ip link set "$vethB" netns "$nsB"
  ip -n "$nsA" addr add "$subnet.1/24" dev "$vethA" && ip -n "$nsB" addr add "$subnet.2/24" dev "$vethB"
  local n v
  for pair in "$nsA $vethA" "$nsB $vethB"; do
    read -r n v <<<"$pair"
    ip -n "$n" link set lo up && ip -n "$n" link set "$v" up
    ip netns exec "$n" tc qdisc add dev "$v" root tbf rate "$rate" burst "$burst" latency 50ms
  done
}

two_hosts_down() {
  for ns in "$nsA" "$nsB"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$tmp"
}

on_host() {
  local seconds=$1 ns=$2 host=$3 shm=$4
  shift 4
  timeout -k 5 "$seconds" ip netns exec "$ns" unshare --uts --mount --propagation private \
    sh -c 'hostname "$0" && mount -t tmpfs -o size="$1" spmd-shm /dev/shm && shift && exec "$@"' \
    "$host" "$shm" "$@"
}

tx() {
  echo $(($(ip netns exec "$nsA" cat "/sys/class/net/$vethA/statistics/tx_bytes") +
    $(ip netns exec "$nsB" cat "/sys/class/net/$vethB/statistics/tx_bytes")))
}
