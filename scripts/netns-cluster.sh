#!/usr/bin/env bash
# Runs a command once in each of N fresh network namespaces, one per node of
# a tcp-fabric cluster, joined by veth pairs to a bridge.
#
#   scripts/netns-cluster.sh [-n NODES] [-s A.B.C] [-p PORT] [-t SECONDS]
#                            [--link RATE] [--delay DELAY] -- COMMAND [ARGS...]
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
# --link RATE / --delay DELAY shape every veth (tc, both ends): each node's
# link to the bridge carries at most RATE each way (e.g. 10gbit, 800mbit)
# and adds DELAY each way (e.g. 5us), so node to node one way is 2 x DELAY.
# RATE alone uses tbf; DELAY uses netem, which some kernels lack (exit 77).
# See scripts/lib/netns.sh.
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
# iproute2, namespaces not permitted, or shaping asked for a qdisc the
# kernel lacks); callers may treat that as a skip.
set -euo pipefail

# shellcheck source=lib/netns.sh
. "$(dirname "$0")/lib/netns.sh"

port=7700

netns_options with-port "$@"
shift "$NETNS_SHIFT"

netns_require netns-cluster

pids=()

cleanup() {
  local status=$?
  trap - EXIT INT TERM HUP
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  netns_down
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

netns_up "nessie$$" "$nodes" "$subnet"
netns_shape "$link" "$delay"

peers=""
for addr in "${NETNS_ADDRS[@]}"; do peers+="${peers:+,}$addr:$port"; done
echo "netns-cluster: $nodes namespaces $NETNS_TAG-*, peers $peers" >&2

for i in $(seq 0 $((nodes - 1))); do
  runner=()
  [ "$limit" != 0 ] && runner=(timeout --kill-after=5 "$limit")
  NESSIE_NETNS_NODE=$i NESSIE_NETNS_NODES=$nodes NESSIE_NETNS_PEERS=$peers \
    ip netns exec "$NETNS_TAG-$i" "${runner[@]}" "$@" &
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
