#!/usr/bin/env bash
# Runs a command under Open MPI's mpirun with one rank per network
# namespace, each namespace standing for one host.
#
#   scripts/mpirun-netns.sh [-n NODES] [-s A.B.C] [-t SECONDS] [--hub]
#                           [--link RATE] [--delay DELAY] -- COMMAND [ARGS...]
#
# runs `mpirun -np NODES COMMAND [ARGS...]` (NODES defaults to 3) and exits
# with its status.
#
# --hub runs COMMAND [ARGS...] itself, once, in the hub namespace, instead
# of through mpirun: a program that calls mpirun itself, such as
# `nessie-bench --launcher mpirun`, runs there as on a cluster's login
# node. Its PATH then starts with a directory holding an `mpirun` wrapper
# that adds everything below (hostfile, rsh agent, --mca settings,
# --allow-run-as-root) to the caller's arguments, so `mpirun -np NODES
# PROGRAM` places one rank per namespace. COMMAND also sees:
#   NETNS_HUB_ADDR        the hub's address on the /24 (A.B.C.254), where
#                         servers the ranks must reach can listen
#   NESSIE_RENDEZVOUS     A.B.C.1:20000 (the first namespace, where rank 0
#                         runs), unless already set: Open MPI names no
#                         host for the tcp fabric's rendezvous
#   NESSIE_BENCH_NETWORK  one line describing the hosts and the link
#                         shaping, which nessie-bench puts in its reports
#                         (unless already set)
#
# Layout (names carry this script's pid, so runs never collide; the
# namespaces come from scripts/lib/netns.sh):
#
#   netns nessie<pid>-hub   bridge br0 = A.B.C.254/24; mpirun itself
#   netns nessie<pid>-<i>   eth0 = A.B.C.<i+1>/24; one orted, rank i
#
# mpirun reads a hostfile naming the node namespaces (`nessie<pid>-<i>
# slots=1`) and starts its daemons with Open MPI's rsh launcher pointed at
# scripts/lib/netns-rsh (`--mca plm_rsh_agent`, no tree spawn), which runs
# the daemon's command in the namespace named by the "host" instead of
# over ssh. The daemons call back to mpirun on A.B.C.254, and Open MPI's
# out-of-band and tcp traffic is kept on the /24 (oob_tcp_if_include,
# btl_tcp_if_include). Nothing listens outside the namespaces.
#
# Two settings make this reliable with several daemons on one machine:
#   --leave-session-attached   the daemons do not daemonize: each stays the
#                              launcher's child (as it would behind ssh), so
#                              a daemon that dies is noticed by mpirun;
#   --mca rtc_hwloc_vmhole none  no hwloc topology in shared memory: with it,
#                              Open MPI 4.1's orted crashed (SIGSEGV in
#                              hwloc_shmem_topology_write) in about 1 start
#                              in 20, and a daemonized one left mpirun
#                              waiting forever.
#
# Each rank sees OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
# OMPI_COMM_WORLD_LOCAL_RANK (0: one rank per "host"), ... and the caller's
# environment (the daemons inherit it through the launcher). As root,
# --allow-run-as-root is passed. -t bounds the whole run (mpirun is killed
# after SECONDS). --link / --delay shape the links as in
# scripts/netns-cluster.sh.
#
# On exit, failure or signal: mpirun, its daemons and anything else left in
# the namespaces are killed, the namespaces deleted, the temp dir (the
# hostfile) removed.
#
# Packages (Debian): openmpi-bin iproute2; installed with apt-get when
# missing, unless SKIP_APT=1.
# Exit status 77: this machine cannot run it (not root, packages missing
# and not installable, namespaces not permitted); callers may treat that as
# a skip.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/netns.sh
. "$here/lib/netns.sh"
netns_subreaper "$0" "$@"

skip() { netns_skip mpirun-netns "$@"; }

netns_options with-hub "$@"
shift "$NETNS_SHIFT"

[ "$(id -u)" = 0 ] || skip "needs root (network namespaces)"

netns_install mpirun-netns ip:iproute2 mpirun:openmpi-bin orted:openmpi-bin
if ! mpirun --version 2>/dev/null | grep -q 'Open MPI'; then
  skip "mpirun is not Open MPI's ($(command -v mpirun))"
fi
netns_require mpirun-netns

started=$(date +%s)
dir=

cleanup() {
  local status=$?
  trap - EXIT INT TERM HUP
  netns_teardown mpirun-netns
  [ -n "$dir" ] && rm -rf "$dir"
  echo "mpirun-netns: torn down after $(($(date +%s) - started)) s, status $status" >&2
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

dir=$(mktemp -d /tmp/mpirun-netns.XXXXXX)
netns_up "nessie$$" "$nodes" "$subnet" "$subnet.254"
netns_shape "$link" "$delay"

for i in $(seq 0 $((nodes - 1))); do echo "$NETNS_TAG-$i slots=1"; done >"$dir/hostfile"
export NETNS_RSH_TAG=$NETNS_TAG NETNS_RSH_TMP=$dir/ompi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "mpirun-netns: $nodes namespaces $NETNS_TAG-* (${NETNS_ADDRS[*]}), mpirun in $NETNS_HUB ($subnet.254)" >&2

mpirun_options=(--allow-run-as-root
  --hostfile "$dir/hostfile" --map-by node --leave-session-attached
  --mca plm rsh --mca plm_rsh_agent "$here/lib/netns-rsh" --mca plm_rsh_no_tree_spawn 1
  --mca oob_tcp_if_include "$subnet.0/24" --mca btl_tcp_if_include "$subnet.0/24"
  --mca rtc_hwloc_vmhole none)

if [ "$hub_mode" = 1 ]; then
  mkdir "$dir/bin"
  {
    echo '#!/usr/bin/env bash'
    echo "# mpirun with the settings of scripts/mpirun-netns.sh (run $NETNS_TAG)"
    printf 'exec %q' "$(command -v mpirun)"
    printf ' %q' "${mpirun_options[@]}"
    echo ' "$@"'
  } >"$dir/bin/mpirun"
  chmod 755 "$dir/bin/mpirun"
  export PATH="$dir/bin:$PATH" NETNS_HUB_ADDR="$subnet.254"
  export NESSIE_RENDEZVOUS=${NESSIE_RENDEZVOUS:-$subnet.1:20000}
  NESSIE_BENCH_NETWORK=${NESSIE_BENCH_NETWORK:-$(netns_describe "$link" "$delay")}
  export NESSIE_BENCH_NETWORK
  netns_lead mpirun-netns "$1" "$NETNS_HUB" "$@"
else
  netns_lead mpirun-netns mpirun "$NETNS_HUB" mpirun "${mpirun_options[@]}" -np "$nodes" "$@"
fi
