# Sourced by scripts/netns-cluster.sh, scripts/slurm-netns.sh and
# scripts/mpirun-netns.sh: builds (and tears down) a set of network
# namespaces joined by veth pairs to a bridge in a hub namespace.
#
#   netns_require WHO          exit 77 unless root with `ip` (and `tc`)
#   netns_up TAG NODES SUBNET [HUB_ADDR]
#                              netns TAG-hub: bridge br0 (with HUB_ADDR/24
#                              when given), one veth end h<i> per node;
#                              netns TAG-<i>: lo, eth0 = SUBNET.<i+1>/24
#   netns_shape RATE DELAY     a qdisc on both ends of every veth (either
#                              argument may be empty: not shaped)
#   netns_down                 kill every process left in the namespaces,
#                              wait until they are gone, delete the
#                              namespaces (and with them veths and bridge)
#   netns_pids                 the pids of every process in the namespaces
#   netns_wait_gone TENTHS PID...
#                              wait until none of PIDS exists any more
#
# The /24 exists only inside these namespaces: none of them has a default
# route or any other interface, and the bridge sits in a namespace of its
# own, so no packet reaches the host's network stack.
#
# Shaping: each veth is a node's link to the switch (the bridge). Its node
# end (eth0, egress = node to switch) and its hub end (h<i>, egress = switch
# to node) each get the qdisc, so a packet from node a to node b crosses two
# shaped hops: a's uplink and b's downlink. One-way latency node to node is
# therefore 2 x DELAY, and each node sends and receives at most RATE.
#   RATE only   tbf (token bucket; burst = 10 ms at RATE, at least 64 KiB)
#   DELAY       netem delay DELAY [rate RATE]; needs the kernel's sch_netem,
#               without which the caller exits 77 (cannot run here)
# RATE is a tc rate (10gbit, 800mbit, 1gbps, ...), DELAY a tc time (5us,
# 1ms, ...).
#
# Globals set: NETNS_TAG, NETNS_HUB, NETNS_NODES, NETNS_SUBNET,
# NETNS_NAMESPACES (array, hub first), NETNS_ADDRS (array, by node id).

NETNS_NAMESPACES=()
NETNS_ADDRS=()

# Re-executes the calling script (same pid, same arguments) as a child
# subreaper (prctl PR_SET_CHILD_SUBREAPER, through perl): processes that
# daemons detach (slurmstepd, orted's children) are then reparented to the
# script, which reaps them, instead of to init, which may leave them as
# zombies for a while after the script is gone. Call it first thing, as
#   netns_subreaper "$0" "$@"
# Without perl or on an unknown architecture, it does nothing.
netns_subreaper() {
  local nr
  [ "${NETNS_SUBREAPER:-}" = "$$" ] && return 0
  command -v perl >/dev/null 2>&1 || return 0
  case "$(uname -m)" in
    x86_64) nr=157 ;; aarch64) nr=167 ;; *) return 0 ;;
  esac
  NETNS_SUBREAPER=$$ exec perl -e 'syscall(shift, 36, 1); exec { $ARGV[0] } @ARGV or die "exec: $!\n"' \
    "$nr" bash "$@"
}

# The shared options' defaults (see netns_options).
nodes=3
subnet=10.213.0
limit=0
link=
delay=
hub_mode=0

# Prints the calling script's header comment and exits 2.
usage() {
  sed -n '2,/^set -euo/{/^#/p}' "$0" >&2
  exit 2
}

# Parses the options the netns scripts share (-n NODES, -s A.B.C,
# -t SECONDS, --link RATE, --delay DELAY; -p PORT when the first argument
# is "with-port", --hub when it is "with-hub") from the rest of the
# arguments into the caller's variables nodes, subnet, limit, link, delay,
# port and hub_mode (1 with --hub). Sets NETNS_SHIFT to the number of words
# they took: the caller shifts them off and finds COMMAND. A bad option
# calls the caller's `usage`.
netns_options() {
  local kind=$1 total
  shift
  total=$#
  while [ $# -gt 0 ]; do
    case "$1" in
      -p | -p?*) [ "$kind" = with-port ] || usage ;;
      --hub) [ "$kind" = with-hub ] || usage; hub_mode=1; shift; continue ;;
    esac
    case "$1" in
      -n | -s | -p | -t | --link | --delay)
        [ $# -ge 2 ] || usage
        case "$1" in
          -n) nodes=$2 ;; -s) subnet=$2 ;; -p) port=$2 ;; -t) limit=$2 ;;
          --link) link=$2 ;; --delay) delay=$2 ;;
        esac
        shift 2 ;;
      -n?*) nodes=${1#-n}; shift ;;
      -s?*) subnet=${1#-s}; shift ;;
      -p?*) port=${1#-p}; shift ;;
      -t?*) limit=${1#-t}; shift ;;
      --link=*) link=${1#--link=}; shift ;;
      --delay=*) delay=${1#--delay=}; shift ;;
      --) shift; break ;;
      -*) usage ;;
      *) break ;;
    esac
  done
  [ $# -ge 1 ] || usage
  netns_valid_nodes "$nodes" || usage
  netns_valid_subnet "$subnet" || usage
  [[ "$limit" =~ ^[0-9]+$ ]] || usage
  NETNS_SHIFT=$((total - $#))
}

# Prints a loud SKIPPED banner for script WHO and exits 77 ("cannot run
# here"; callers treat it as a skip).
netns_skip() {
  local who=$1
  shift
  {
    echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
    echo "!!! SKIPPED $who: $*"
    echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
  } >&2
  exit 77
}

# Installs what script WHO needs, given as COMMAND:PACKAGE pairs: the
# Debian packages whose commands are missing (as root with apt-get, unless
# SKIP_APT=1), or skips.
netns_install() {
  local who=$1 pair missing=()
  shift
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 && continue
    [[ " ${missing[*]} " == *" ${pair#*:} "* ]] || missing+=("${pair#*:}")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  if [ "${SKIP_APT:-0}" != 1 ] && command -v apt-get >/dev/null 2>&1; then
    echo "$who: installing ${missing[*]}" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null) >&2 ||
      netns_skip "$who" "could not install ${missing[*]} (apt-get failed)"
  else
    netns_skip "$who" "missing ${missing[*]} and no way to install them (SKIP_APT=1 or no apt-get)"
  fi
}

netns_require() {
  local who=$1
  if ! command -v ip >/dev/null 2>&1; then
    echo "$who: 'ip' not found (Debian package iproute2)" >&2
    exit 77
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "$who: network namespaces need root" >&2
    exit 77
  fi
}

# Validates a node count (1..250); returns 1 when it is not one.
netns_valid_nodes() {
  [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le 250 ]
}

# Validates A.B.C; returns 1 when it is not one.
netns_valid_subnet() {
  [[ "$1" =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]]
}

netns_up() {
  NETNS_TAG=$1
  NETNS_NODES=$2
  NETNS_SUBNET=$3
  local hub_addr=${4:-} i ns
  NETNS_HUB="$NETNS_TAG-hub"
  if ! ip netns add "$NETNS_HUB" 2>/dev/null; then
    echo "netns: cannot create network namespaces here" >&2
    exit 77
  fi
  NETNS_NAMESPACES+=("$NETNS_HUB")
  ip -n "$NETNS_HUB" link set lo up
  ip -n "$NETNS_HUB" link add br0 type bridge
  ip -n "$NETNS_HUB" link set br0 up
  [ -n "$hub_addr" ] && ip -n "$NETNS_HUB" addr add "$hub_addr/24" dev br0
  for i in $(seq 0 $((NETNS_NODES - 1))); do
    ns="$NETNS_TAG-$i"
    ip netns add "$ns"
    NETNS_NAMESPACES+=("$ns")
    ip -n "$NETNS_HUB" link add "h$i" type veth peer name eth0 netns "$ns"
    ip -n "$NETNS_HUB" link set "h$i" master br0
    ip -n "$NETNS_HUB" link set "h$i" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$NETNS_SUBNET.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    NETNS_ADDRS+=("$NETNS_SUBNET.$((i + 1))")
  done
}

# Prints RATE in bytes per second (decimal tc units: bit, kbit, mbit, gbit,
# tbit, bps, kbps, mbps, gbps, tbps); returns 1 when it is not one.
netns_rate_bytes() {
  local m=1
  [[ "$1" =~ ^([0-9]+(\.[0-9]+)?)([kKmMgGtT]?)(bit|bps)$ ]] || return 1
  case "${BASH_REMATCH[3]}" in
    k | K) m=1e3 ;; m | M) m=1e6 ;; g | G) m=1e9 ;; t | T) m=1e12 ;;
  esac
  [ "${BASH_REMATCH[4]}" = bit ] && m="$m/8"
  awk "BEGIN { printf \"%d\\n\", ${BASH_REMATCH[1]} * $m }"
}

netns_shape() {
  local rate=$1 delay=$2 qdisc=() i out bytes burst
  [ -z "$rate" ] && [ -z "$delay" ] && return 0
  if ! command -v tc >/dev/null 2>&1; then
    echo "netns: 'tc' not found (Debian package iproute2)" >&2
    exit 77
  fi
  if [ -n "$rate" ] && ! bytes=$(netns_rate_bytes "$rate"); then
    echo "netns: --link $rate is not a rate such as 10gbit, 800mbit, 1gbps" >&2
    exit 2
  fi
  if [ -n "$delay" ] && ! [[ "$delay" =~ ^[0-9]+(\.[0-9]+)?(ns|us|ms|s)$ ]]; then
    echo "netns: --delay $delay is not a time such as 5us, 1ms" >&2
    exit 2
  fi
  if [ -n "$delay" ]; then
    qdisc=(netem limit 100000 delay "$delay")
    [ -n "$rate" ] && qdisc+=(rate "$rate")
  else
    burst=$((bytes / 100))
    [ "$burst" -lt 65536 ] && burst=65536
    qdisc=(tbf rate "$rate" burst "$burst" latency 50ms)
  fi
  for i in $(seq 0 $((NETNS_NODES - 1))); do
    if ! out=$(tc -n "$NETNS_TAG-$i" qdisc add dev eth0 root "${qdisc[@]}" 2>&1) ||
      ! out=$(tc -n "$NETNS_HUB" qdisc add dev "h$i" root "${qdisc[@]}" 2>&1); then
      if [[ "$out" == *"qdisc kind is unknown"* ]]; then
        echo "netns: this kernel has no '${qdisc[0]}' qdisc (sch_${qdisc[0]}): cannot shape links here" >&2
        exit 77
      fi
      echo "netns: tc qdisc add ... ${qdisc[*]}: $out" >&2
      exit 2
    fi
  done
  echo "netns: every veth end shaped with: ${qdisc[*]}" >&2
}

# Prints one line saying what the namespaces stand for, for reports: the
# hosts, the subnet, and how the links are shaped (RATE, DELAY as given to
# netns_shape).
netns_describe() {
  local rate=$1 delay=$2 shaping
  if [ -n "$delay" ]; then
    shaping="netem delay $delay per node-switch hop${rate:+, rate $rate}"
  elif [ -n "$rate" ]; then
    shaping="tbf rate $rate on both ends of every node's link (an emulated $rate network)"
  else
    shaping="not shaped (veth pairs run at memory speed)"
  fi
  echo "$NETNS_NODES network-namespace hosts on one machine (${NETNS_ADDRS[*]}, $NETNS_SUBNET.0/24, bridged in $NETNS_HUB); links: $shaping"
}

# Waits (at most TENTHS tenths of a second) until none of PIDS exists any
# more, zombies included; returns 1 if some still do.
netns_wait_gone() {
  local tenths=$1 pid left
  shift
  for _ in $(seq 1 "$tenths"); do
    left=0
    for pid in "$@"; do [ -e "/proc/$pid" ] && left=1; done
    [ "$left" = 0 ] && return 0
    sleep 0.1
  done
  return 1
}

# Prints the pids of every process in the namespaces, one a line.
netns_pids() {
  local ns
  for ns in "${NETNS_NAMESPACES[@]}"; do ip netns pids "$ns" 2>/dev/null || true; done
}

# Names the nodes PREFIX0, PREFIX1, … in every namespace's /etc/hosts, as
# a cluster's DNS would (`ip netns exec` mounts /etc/netns/NS/hosts over
# /etc/hosts); netns_down removes them.
netns_hosts() {
  local prefix=$1 ns i
  for ns in "${NETNS_NAMESPACES[@]}"; do
    mkdir -p "/etc/netns/$ns"
    {
      echo "127.0.0.1 localhost"
      for i in "${!NETNS_ADDRS[@]}"; do echo "${NETNS_ADDRS[$i]} $prefix$i"; done
    } >"/etc/netns/$ns/hosts"
  done
}

# Runs COMMAND... (srun, mpirun: WHAT) in namespace NS as the run's
# leader, bounded by $limit seconds when not 0; waits for it and exits with
# its status, reported when it fails. netns_teardown stops a leader still
# running (NETNS_LEADER) first.
NETNS_LEADER=
netns_lead() {
  local who=$1 what=$2 ns=$3 status=0 runner=()
  shift 3
  [ "$limit" != 0 ] && runner=(timeout --kill-after=5 "$limit")
  ip netns exec "$ns" "${runner[@]}" "$@" &
  NETNS_LEADER=$!
  wait "$NETNS_LEADER" || status=$?
  NETNS_LEADER=
  [ "$status" = 0 ] || echo "$who: $what exited $status" >&2
  exit "$status"
}

# Ends a run of script WHO: the leader (see netns_lead), if still running,
# first, politely, since it stops its own daemons and tasks; then the pids
# DAEMONS..., politely; then whatever is left in the namespaces, by force
# (netns_down); and reaps them all, so that nothing is left on return.
netns_teardown() {
  local who=$1 leader=$NETNS_LEADER all pid
  shift
  mapfile -t all < <(netns_pids)
  if [ -n "$leader" ]; then
    kill "$leader" 2>/dev/null || true
    netns_wait_gone 150 "$leader" || true
  fi
  for pid in "$@"; do kill "$pid" 2>/dev/null || true; done
  [ $# -eq 0 ] || netns_wait_gone 100 "$@" || true
  netns_down
  for pid in "$@" $leader; do wait "$pid" 2>/dev/null || true; done
  [ ${#all[@]} -eq 0 ] || netns_wait_gone 100 "${all[@]}" ||
    echo "$who: some processes still not reaped after 10 s" >&2
}

netns_down() {
  local ns pid killed=()
  # Whatever still runs in these namespaces (daemons' children, tasks) is
  # ours: killed by pid, namespace by namespace.
  for ns in "${NETNS_NAMESPACES[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      kill -KILL "$pid" 2>/dev/null && killed+=("$pid")
    done
  done
  # Until they are reaped, so that nothing of them is left on return.
  [ ${#killed[@]} -eq 0 ] || netns_wait_gone 100 "${killed[@]}" || true
  # Deleting a namespace deletes its interfaces (veth pairs, the bridge).
  for ns in "${NETNS_NAMESPACES[@]}"; do
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  NETNS_NAMESPACES=()
}
