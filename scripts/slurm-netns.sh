#!/usr/bin/env bash
# Brings up a throw-away Slurm cluster on this machine whose compute nodes
# are network namespaces, runs one job step on it with srun, and tears the
# cluster down again.
#
#   scripts/slurm-netns.sh [-n NODES] [-s A.B.C] [-t SECONDS] [--hub]
#                          [--link RATE] [--delay DELAY] -- COMMAND [ARGS...]
#
# runs `srun -N NODES -n NODES COMMAND [ARGS...]` (NODES defaults to 3: one
# task per node) and exits with its status (srun's: the highest of the
# tasks'). srun's input variables pass through, e.g. SLURM_KILL_BAD_EXIT=1
# to end all tasks when one fails.
#
# --hub runs COMMAND [ARGS...] itself, once, in the hub namespace with the
# cluster up, instead of through srun: a program that calls srun (or sinfo,
# squeue) itself, such as `nessie-bench --launcher srun`, runs there as on
# a cluster's login node. COMMAND then sees, besides SLURM_CONF:
#   NETNS_HUB_ADDR        the hub's address on the /24 (A.B.C.254), where
#                         servers the tasks must reach can listen
#   NESSIE_BENCH_NETWORK  one line describing the hosts and the link
#                         shaping, which nessie-bench puts in its reports
#                         (unless already set)
#
# Layout (names carry this script's pid, so runs never collide; the
# namespaces come from scripts/lib/netns.sh):
#
#   netns nessie<pid>-hub   bridge br0 = A.B.C.254/24; munged (on a unix
#                           socket in the temp dir only), slurmctld (port
#                           6817), and srun/sinfo themselves
#   netns nessie<pid>-<i>   eth0 = A.B.C.<i+1>/24; `slurmd -N n<i>` (port
#                           6818), so node n<i>'s tasks run in this namespace
#
# The /24 (default 10.213.0) exists only inside these namespaces; nothing
# listens anywhere else. One fresh munge key, slurm.conf, state, spool
# (SlurmdSpoolDir per node), pid and log files all live in one temp dir
# (mktemp -d). Slurm runs without cgroups: ProctrackType=proctrack/linuxproc,
# TaskPlugin=task/none, SelectType=select/cons_tres, MpiDefault=none.
# (slurmd 22.05 still loads a cgroup plugin at start; cgroup.conf names
# cgroup/v1 so that it does not autodetect, which fails under
# `ip netns exec` because that mounts the namespace's own /sys.)
# The script is a child subreaper (scripts/lib/netns.sh), so the
# slurmstepd processes slurmd detaches are reaped by it, not left behind.
#
# Each task sees Slurm's usual variables (SLURM_PROCID, SLURM_NTASKS,
# SLURM_LOCALID, SLURM_NODEID, SLURM_JOB_ID, SLURM_STEP_NODELIST, ...) and
# the caller's environment (srun's --export=ALL). -t bounds the whole job
# step (srun is killed after SECONDS); bringing the cluster up is bounded
# separately (60 s until every node is idle). --link / --delay shape the
# links as in scripts/netns-cluster.sh.
#
# On exit, failure or signal: srun, the daemons and anything else left in
# the namespaces are killed, the namespaces deleted, the temp dir removed
# (kept, with its logs, when SLURM_NETNS_KEEP=1).
#
# Packages (Debian): slurmctld slurmd slurm-client munge iproute2; installed
# with apt-get when missing, unless SKIP_APT=1.
# Exit status 77: this machine cannot run it (not root, packages missing
# and not installable, namespaces not permitted); callers may treat that as
# a skip.
set -euo pipefail

# shellcheck source=lib/netns.sh
. "$(dirname "$0")/lib/netns.sh"
netns_subreaper "$0" "$@"

up_limit=60

skip() { netns_skip slurm-netns "$@"; }

netns_options with-hub "$@"
shift "$NETNS_SHIFT"

[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, daemons running as root)"

# The packages: installed when missing (root and apt-get), else a skip.
netns_install slurm-netns ip:iproute2 munged:munge slurmctld:slurmctld slurmd:slurmd \
  srun:slurm-client
netns_require slurm-netns

started=$(date +%s)
dir=
daemons=()

cleanup() {
  local status=$?
  trap - EXIT INT TERM HUP
  # srun cancels the step and waits for its tasks; slurmstepd, which slurmd
  # detaches, may outlive it as a zombie for a moment: all reaped here.
  netns_teardown slurm-netns "${daemons[@]}"
  if [ -n "$dir" ]; then
    if [ "${SLURM_NETNS_KEEP:-0}" = 1 ]; then
      echo "slurm-netns: kept $dir" >&2
    else
      rm -rf "$dir"
    fi
  fi
  echo "slurm-netns: torn down after $(($(date +%s) - started)) s, status $status" >&2
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

dir=$(mktemp -d /tmp/slurm-netns.XXXXXX)
chmod 755 "$dir"
netns_up "nessie$$" "$nodes" "$subnet" "$subnet.254"
netns_hosts n
netns_shape "$link" "$delay"
hub=$NETNS_HUB
ctl="$subnet.254"

# Dumps the logs to stderr (on a failure to come up).
show_logs() {
  local f
  for f in "$dir"/log/*; do
    [ -f "$f" ] || continue
    echo "---- $f (last lines)" >&2
    tail -n 15 "$f" >&2
  done
}

# munge: one fresh key; munged in the hub, reachable through its unix
# socket (a file, so every namespace reaches it).
mkdir -p "$dir/munge" "$dir/log" "$dir/state"
if command -v mungekey >/dev/null 2>&1; then
  mungekey --create --keyfile="$dir/munge/munge.key"
else
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
fi
chmod 700 "$dir/munge"
chmod 400 "$dir/munge/munge.key"
socket="$dir/munge/munge.socket"
ip netns exec "$hub" munged --foreground --force \
  --key-file="$dir/munge/munge.key" --socket="$socket" \
  --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed" \
  --log-file="$dir/log/munged.log" >"$dir/log/munged.out" 2>&1 &
daemons+=($!)
for _ in $(seq 1 100); do [ -S "$socket" ] && break; sleep 0.1; done
[ -S "$socket" ] || { show_logs; echo "slurm-netns: munged did not start" >&2; exit 1; }

# slurm.conf: the controller is this host's name (slurmctld checks it) at
# the hub's address; node n<i> at namespace i's address.
conf="$dir/slurm.conf"
host=$(hostname -s)
{
  echo "ClusterName=nessie$$"
  echo "SlurmctldHost=$host($ctl)"
  echo "SlurmUser=root"
  echo "SlurmdUser=root"
  echo "SlurmctldPort=6817"
  echo "SlurmdPort=6818"
  echo "AuthType=auth/munge"
  echo "CredType=cred/munge"
  echo "AuthInfo=socket=$socket"
  echo "StateSaveLocation=$dir/state"
  echo "SlurmdSpoolDir=$dir/spool-%n"
  echo "SlurmctldPidFile=$dir/slurmctld.pid"
  echo "SlurmdPidFile=$dir/slurmd-%n.pid"
  echo "SlurmctldLogFile=$dir/log/slurmctld.log"
  echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
  echo "SlurmctldDebug=info"
  echo "SlurmdDebug=info"
  echo "ProctrackType=proctrack/linuxproc"
  echo "TaskPlugin=task/none"
  echo "JobAcctGatherType=jobacct_gather/none"
  echo "AccountingStorageType=accounting_storage/none"
  echo "JobCompType=jobcomp/none"
  echo "MpiDefault=none"
  echo "MailProg=/bin/true"
  echo "SchedulerType=sched/builtin"
  echo "SelectType=select/cons_tres"
  echo "SelectTypeParameters=CR_CPU"
  echo "ReturnToService=2"
  echo "SlurmdTimeout=30"
  echo "InactiveLimit=0"
  echo "KillWait=5"
  echo "MessageTimeout=10"
  echo "NodeName=DEFAULT CPUs=1 RealMemory=64 State=UNKNOWN"
  for i in $(seq 0 $((nodes - 1))); do
    echo "NodeName=n$i NodeAddr=${NETNS_ADDRS[$i]} NodeHostname=n$i"
  done
  echo "PartitionName=nessie Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
} >"$conf"
# No cgroups are used (see above), but slurmd 22.05 loads a cgroup plugin
# regardless; left to autodetect, it looks at /sys/fs/cgroup, which
# `ip netns exec` hides behind the namespace's own sysfs, and gives up.
{
  echo "CgroupPlugin=cgroup/v1"
  echo "CgroupAutomount=no"
} >"$dir/cgroup.conf"
export SLURM_CONF=$conf

ip netns exec "$hub" slurmctld -D -i -f "$conf" >"$dir/log/slurmctld.out" 2>&1 &
daemons+=($!)
for i in $(seq 0 $((nodes - 1))); do
  mkdir -p "$dir/spool-n$i"
  ip netns exec "$NETNS_TAG-$i" slurmd -D -N "n$i" -f "$conf" >"$dir/log/slurmd-n$i.out" 2>&1 &
  daemons+=($!)
done

# Up when sinfo (from the hub) lists every node idle.
idle=0
for _ in $(seq 1 $((up_limit * 2))); do
  for pid in "${daemons[@]}"; do
    kill -0 "$pid" 2>/dev/null || { show_logs; echo "slurm-netns: a daemon exited (pid $pid)" >&2; exit 1; }
  done
  idle=$(ip netns exec "$hub" sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle$' || true)
  [ "$idle" = "$nodes" ] && break
  sleep 0.5
done
if [ "$idle" != "$nodes" ]; then
  show_logs
  ip netns exec "$hub" sinfo -N >&2 || true
  echo "slurm-netns: only $idle of $nodes nodes idle after ${up_limit} s" >&2
  exit 1
fi
echo "slurm-netns: $nodes nodes idle after $(($(date +%s) - started)) s (controller $ctl in $hub, nodes ${NETNS_ADDRS[*]})" >&2

if [ "$hub_mode" = 1 ]; then
  export NETNS_HUB_ADDR=$ctl
  NESSIE_BENCH_NETWORK=${NESSIE_BENCH_NETWORK:-$(netns_describe "$link" "$delay")}
  export NESSIE_BENCH_NETWORK
  netns_lead slurm-netns "$1" "$hub" "$@"
else
  netns_lead slurm-netns srun "$hub" srun -N "$nodes" -n "$nodes" "$@"
fi
