#!/usr/bin/env bash
# sample.sh — sample node power around one command and log it as CSV.
#
#   sample.sh [options] -- COMMAND [ARGS...]
#
# Takes a reading, starts a background loop that reads every INTERVAL
# seconds, runs COMMAND, stops the loop and takes a last reading. Logs go to
# DIR (one set per node; `power-merge DIR...` integrates and merges them):
#
#   NODE.ipmi.csv  timestamp,watts                 BMC power readings
#   NODE.rapl.csv  timestamp,zone,name,energy_uj,max_energy_range_uj
#                                                  raw RAPL counters (deltas,
#                                                  wrap-around: power-merge)
#   NODE.cpu.csv   node,start,end,elapsed_s,user_s,system_s,exit_status,command
#                                                  CPU time of COMMAND and
#                                                  its waited-for children
#
# Timestamps are Unix seconds; an IPMI reading is stamped with the middle of
# its ipmitool call. Nothing is estimated: a source that cannot be read is
# left out with a warning on stderr. Exits with COMMAND's status.
#
# Options:
#   -n NODE      node name in file names and rows (default: hostname -s)
#   -o DIR       log directory, created if needed (default: ./power-logs)
#   -i SECONDS   sampling interval (default: 1)
#   -m MODE      IPMI source: auto (DCMI, else the sensors given with -s, else
#                the one sensor reading in Watts), dcmi, sensor, off
#                (default: auto)
#   -s SENSOR    power sensor name (repeat to sum several, e.g. each PSU)
#   -H HOST      remote BMC (ipmitool -I lanplus); the password is read from
#                $IPMI_PASSWORD (ipmitool -E), never from the command line
#   -p PORT      BMC UDP port (default 623)
#   -U USER      BMC user
#   -C SUITE     cipher suite (ipmitool -C)
#   -r MODE      RAPL: auto, off (default: auto; needs read access to
#                energy_uj, root on Linux >= 5.10). Root of the powercap tree:
#                $POWERCAP_ROOT (default /sys/class/powercap)
#   -h           this help
set -uo pipefail

node=$(hostname -s 2>/dev/null || hostname)
dir=./power-logs
interval=1
ipmi_mode=auto
rapl_mode=auto
sensors=()
ipmi=(ipmitool)
powercap=${POWERCAP_ROOT:-/sys/class/powercap}

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "sample.sh: $*" >&2; exit 2; }
warn() { echo "sample.sh: $*" >&2; }

host= port=623 user= suite=
while getopts "n:o:i:m:s:H:p:U:C:r:h" opt; do
  case $opt in
    n) node=$OPTARG ;;
    o) dir=$OPTARG ;;
    i) interval=$OPTARG ;;
    m) ipmi_mode=$OPTARG ;;
    s) sensors+=("$OPTARG") ;;
    H) host=$OPTARG ;;
    p) port=$OPTARG ;;
    U) user=$OPTARG ;;
    C) suite=$OPTARG ;;
    r) rapl_mode=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || die "no command given (usage: sample.sh [options] -- COMMAND [ARGS...])"
case $ipmi_mode in auto|dcmi|sensor|off) ;; *) die "-m must be auto, dcmi, sensor or off" ;; esac
case $rapl_mode in auto|off) ;; *) die "-r must be auto or off" ;; esac
awk -v i="$interval" 'BEGIN { exit !(i + 0 > 0) }' || die "-i must be a positive number of seconds"
if [ -n "$host" ]; then
  ipmi+=(-I lanplus -H "$host" -p "$port" -E)
  [ -n "$user" ] && ipmi+=(-U "$user")
fi
[ -n "$suite" ] && ipmi+=(-C "$suite")

mkdir -p "$dir" || die "cannot create $dir"
ipmi_log=$dir/$node.ipmi.csv
rapl_log=$dir/$node.rapl.csv
cpu_log=$dir/$node.cpu.csv

# stamp VAR: Unix time with microseconds into VAR, without forking when
# bash has $EPOCHREALTIME (5.0+).
if [ -n "${EPOCHREALTIME:-}" ]; then
  stamp() { printf -v "$1" '%s' "${EPOCHREALTIME/,/.}"; }
else
  stamp() { printf -v "$1" '%s' "$(date +%s.%N)"; }
fi

# --- IPMI -------------------------------------------------------------------

# Prints the node's power in Watts, or nothing (and fails).
read_dcmi() {
  "${ipmi[@]}" dcmi power reading 2>/dev/null | awk -F: '
    /Instantaneous power reading/ { v = $2; sub(/^[ \t]+/, "", v); if (v ~ /^[0-9.]+ +Watts/) { split(v, a, " "); w = a[1] } }
    /Power reading state is/ && $2 ~ /deactivated/ { off = 1 }
    END { if (w != "" && !off) print w; else exit 1 }'
}
read_sensors() {
  "${ipmi[@]}" sdr get "${sensors[@]}" 2>/dev/null | awk -F: -v want=${#sensors[@]} '
    /^ *Sensor Reading/ { split($2, a, " "); if (a[1] ~ /^[0-9.]+$/ && $2 ~ /Watts/) { sum += a[1]; n++ } }
    END { if (n == want && n > 0) print sum; else exit 1 }'
}
ipmi_source=off
if [ "$ipmi_mode" != off ]; then
  if ! command -v "${ipmi[0]}" >/dev/null 2>&1; then
    warn "ipmitool not found; IPMI not sampled"
  elif [ "$ipmi_mode" != sensor ] && w=$(read_dcmi) && awk -v w="$w" 'BEGIN { exit !(w > 0) }'; then
    ipmi_source=dcmi
  elif [ "$ipmi_mode" = dcmi ]; then
    warn "the BMC gives no DCMI power reading; IPMI not sampled"
  else
    if [ ${#sensors[@]} -eq 0 ]; then
      mapfile -t sensors < <("${ipmi[@]}" sdr list full 2>/dev/null | awk -F'|' '
        { r = $2; sub(/^ +/, "", r); split(r, a, " "); if (a[2] == "Watts") { n = $1; sub(/ +$/, "", n); print n } }')
      [ ${#sensors[@]} -gt 1 ] && { warn "several sensors read in Watts (${sensors[*]}); name them with -s"; sensors=(); }
    fi
    if [ ${#sensors[@]} -gt 0 ] && read_sensors >/dev/null; then
      ipmi_source=sensor
    else
      warn "no DCMI power reading and no readable power sensor; IPMI not sampled"
    fi
  fi
fi
sample_ipmi() {
  local t0 t1 w
  stamp t0
  if [ "$ipmi_source" = dcmi ]; then w=$(read_dcmi); else w=$(read_sensors); fi || return 0
  stamp t1
  awk -v a="$t0" -v b="$t1" -v w="$w" 'BEGIN { printf "%.6f,%s\n", (a + b) / 2, w }' >> "$ipmi_log"
}

# --- RAPL -------------------------------------------------------------------

declare -A seen=()
rapl_zones=()
if [ "$rapl_mode" = auto ]; then
  for z in "$powercap"/intel-rapl*:* "$powercap"/intel-rapl*/intel-rapl*:* "$powercap"/intel-rapl*:*/intel-rapl*:*; do
    [ -f "$z/energy_uj" ] || continue
    id=${z##*/}
    [ -n "${seen[$id]:-}" ] && continue
    seen[$id]=1
    if [ -r "$z/energy_uj" ] && cat "$z/energy_uj" >/dev/null 2>&1; then
      rapl_zones+=("$z")
    else
      warn "cannot read $z/energy_uj (root only since Linux 5.10); RAPL not sampled"
      rapl_zones=()
      break
    fi
  done
fi
sample_rapl() {
  local t z
  [ ${#rapl_zones[@]} -gt 0 ] || return 0
  stamp t
  for z in "${rapl_zones[@]}"; do
    printf '%s,%s,%s,%s,%s\n' "$t" "${z##*/}" "$(cat "$z/name")" "$(cat "$z/energy_uj")" \
      "$(cat "$z/max_energy_range_uj" 2>/dev/null || echo 0)"
  done >> "$rapl_log"
}

# --- the run ----------------------------------------------------------------

[ "$ipmi_source" != off ] && echo "timestamp,watts" > "$ipmi_log"
[ ${#rapl_zones[@]} -gt 0 ] && echo "timestamp,zone,name,energy_uj,max_energy_range_uj" > "$rapl_log"

sample_all() { sample_ipmi; sample_rapl; }

# CPU time of COMMAND: the shell's children's user and system time
# (`times`, second line, e.g. "0m1.234s 0m0.050s") before and after it.
# `times` must run in this shell, not in a $(...) subshell (a fork starts
# with zero children's time), and nothing between the two readings may
# fork, so its output goes through a file and timestamps come from
# $EPOCHREALTIME.
times_file=$(mktemp) || die "mktemp failed"
children_cpu() {
  times > "$times_file"
  { read -r _; read -r "$1" "$2"; } < "$times_file"
}

sample_all
loop_pid=
# The sampling loop stops when this file exists (checked every interval), so
# that a stop does not depend on a signal alone: a TERM sent to the loop
# was once lost, and the sampler never ended.
stop_file="$times_file.stop"
if [ "$ipmi_source" != off ] || [ ${#rapl_zones[@]} -gt 0 ]; then
  (
    trap 'exit 0' TERM
    stamp start
    k=1
    while [ ! -e "$stop_file" ]; do
      # Sleep to the next slot of a fixed schedule (no drift).
      stamp t
      pause=$(awk -v s="$start" -v k="$k" -v i="$interval" -v n="$t" 'BEGIN { p = s + k * i - n; print (p > 0 ? p : 0) }')
      sleep "$pause" & wait $!
      sample_all
      stamp t
      k=$(awk -v s="$start" -v i="$interval" -v n="$t" 'BEGIN { print int((n - s) / i) + 1 }')
    done
  ) &
  loop_pid=$!
fi
trap '[ -n "$loop_pid" ] && kill "$loop_pid" 2>/dev/null; rm -f "$times_file" "$stop_file"' EXIT

children_cpu u0 s0
stamp t_start
"$@"
status=$?
stamp t_end
children_cpu u1 s1

if [ -n "$loop_pid" ]; then
  : > "$stop_file"
  kill "$loop_pid" 2>/dev/null
  wait "$loop_pid" 2>/dev/null
  loop_pid=
fi
sample_all

cmd=$(printf '%s ' "$@")
cmd=${cmd% }
{
  echo "node,start,end,elapsed_s,user_s,system_s,exit_status,command"
  # The command goes through the environment: `awk -v` would eat backslashes.
  CMD=$cmd awk -v n="$node" -v a="$t_start" -v b="$t_end" -v u0="$u0" -v s0="$s0" -v u1="$u1" -v s1="$s1" -v st="$status" '
    function secs(x, p) { split(x, p, "m"); sub(/s$/, "", p[2]); sub(/,/, ".", p[2]); return p[1] * 60 + p[2] }
    BEGIN { c = ENVIRON["CMD"]; gsub(/"/, "\"\"", c)
            printf "%s,%.6f,%.6f,%.6f,%.3f,%.3f,%d,\"%s\"\n", n, a, b, b - a, secs(u1) - secs(u0), secs(s1) - secs(s0), st, c }'
} > "$cpu_log"
exit "$status"
