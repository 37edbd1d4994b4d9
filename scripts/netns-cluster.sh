#!/usr/bin/env bash
# Runs a command once in each of N fresh network namespaces, one per node of
# a tcp-fabric cluster, joined by veth pairs to a bridge.
#
#   scripts/netns-cluster.sh [-n NODES] [-s A.B.C] [-p PORT] [-t SECONDS] -- COMMAND [ARGS...]
#
# Layout (all names carry this script's pid, so runs never collide):
#
#   netns nessie<pid>-hub   bridge br0, and one veth end h<i> per node
#   netns nessie<pid>-<i>   lo, and the other end eth0 = A.B.C.<i+1>/24
#
# The /24 (default 10.213.0) exists only inside these namespaces: none of
# them has a default route or any other interface, and the bridge sits in a
# namespace of its own, so no packet reaches the host's network stack.
#
# Each node's COMMAND runs in its namespace with
#   NESSIE_NETNS_NODE   its node id (0-based)
#   NESSIE_NETNS_NODES  the number of nodes
#   NESSIE_NETNS_PEERS  every node's host:port, comma separated, by node id
# and the rest of the caller's environment. The script waits for all of
# them (at most -t SECONDS each when given) and exits 0 only if all exited
# 0. Whatever happens (failure, signal), the commands are killed and the
# namespaces, veths and bridge deleted on exit.
#
# Exit status 77: this machine cannot run it (not root, no `ip` from
# iproute2, or namespaces not permitted); callers may treat that as a skip.
set -euo pipefail

nodes=3
subnet=10.213.0
port=7700
limit=0

usage() {
  sed -n '2,30p' "$0" >&2
  exit 2
}

while getopts "n:s:p:t:h" opt; do
  case "$opt" in
    n) nodes=$OPTARG ;;
    s) subnet=$OPTARG ;;
    p) port=$OPTARG ;;
    t) limit=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
[ $# -ge 1 ] || usage
[[ "$nodes" =~ ^[0-9]+$ ]] && [ "$nodes" -ge 1 ] && [ "$nodes" -le 250 ] || usage

if ! command -v ip >/dev/null 2>&1; then
  echo "netns-cluster: 'ip' not found (Debian package iproute2)" >&2
  exit 77
fi
if [ "$(id -u)" != 0 ]; then
  echo "netns-cluster: network namespaces need root" >&2
  exit 77
fi

tag="nessie$$"
hub="$tag-hub"
namespaces=()
pids=()

cleanup() {
  local status=$?
  trap - EXIT INT TERM HUP
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  # Deleting a namespace deletes its interfaces (veth pairs, the bridge).
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

if ! ip netns add "$hub" 2>/dev/null; then
  echo "netns-cluster: cannot create network namespaces here" >&2
  exit 77
fi
namespaces+=("$hub")
ip -n "$hub" link add br0 type bridge
ip -n "$hub" link set br0 up

peers=""
for i in $(seq 0 $((nodes - 1))); do
  ns="$tag-$i"
  ip netns add "$ns"
  namespaces+=("$ns")
  ip -n "$hub" link add "h$i" type veth peer name eth0 netns "$ns"
  ip -n "$hub" link set "h$i" master br0
  ip -n "$hub" link set "h$i" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  peers+="${peers:+,}$subnet.$((i + 1)):$port"
done
echo "netns-cluster: $nodes namespaces $tag-*, peers $peers" >&2

for i in $(seq 0 $((nodes - 1))); do
  runner=()
  [ "$limit" != 0 ] && runner=(timeout --kill-after=5 "$limit")
  NESSIE_NETNS_NODE=$i NESSIE_NETNS_NODES=$nodes NESSIE_NETNS_PEERS=$peers \
    ip netns exec "$tag-$i" "${runner[@]}" "$@" &
  pids+=($!)
done

status=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "netns-cluster: node $i failed" >&2
    status=1
  fi
done
pids=()
exit "$status"
