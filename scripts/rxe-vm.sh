#!/usr/bin/env bash
# Runs Nessie's `verbs` tests on Linux Soft-RoCE (rdma_rxe) inside a
# throw-away QEMU VM, for machines without an RDMA NIC (or without the
# rights to load kernel modules).
#
# On the host: installs what is missing (apt-get), downloads Debian's kernel
# package (apt-get download), builds the test binaries with
# `--features verbs`, and packs an initramfs holding busybox, kmod, the RDMA
# kernel modules, libibverbs with the rxe provider, and the tests. Inside the
# VM, /init loads the modules, creates the Soft-RoCE device
# (`rdma link add rxe0 type rxe netdev lo`, a dummy interface if lo is
# refused), runs
#   (a) nessie-fabric/tests/verbs_fabric.rs: the fabric conformance suite,
#       the bootstrap suite (other secret, replayed and tampered rendezvous
#       messages, duplicate node id, other node count: typed errors), other
#       cluster or region sizes refused, batching, a fenced node refused
#       both ways (its zombie reaches no member's memory), and a latency
#       report,
#   (b) nessie-check/tests/verbs_store.rs: the store's verb counts vs shm,
#   (c) nessie-check/tests/verbs_linearizable_processes.rs: three node processes on
#       verbs meeting through the authenticated rendezvous, their merged
#       history checked for linearizability, and
#   (d) the same file: a node process killed with SIGKILL; the survivors'
#       operations all return, typed errors for those needing its memory,
#   (e) the same file, with two replicas (verbs-replicated-kill): a node
#       process killed with SIGKILL mid-operation; the survivors agree on a
#       view without it, serve every key again, and the merged history
#       (their reads of every key included) is linearizable,
#   (f) the same file (verbs-rejoin): as (e), then a replacement process
#       with the killed node's id rejoins (Node::rejoin: its fresh queue
#       pairs and regions reconnected to the survivors, its copies
#       restored), and every node reads every key, linearizably; then
#       node 1 is killed too, and node 0 and the replacement read every
#       key again,
#   (g) the same file (verbs-double-loss): three replicas on five node
#       processes, two neighbours killed together; the other three read
#       every key's last value back,
# prints one `RESULT <check>: ok|FAIL` line per check and powers off. The
# host reads the serial console log and exits 0 only if the VM finished and
# every check passed.
#
# Environment:
#   RXE_VM_DIR       work directory (default: <cargo target dir>/rxe-vm)
#   RXE_VM_TIMEOUT   hard limit of the VM run, seconds (default 1500)
#   RXE_VM_ACCEL     tcg (default) or kvm
#   RXE_VM_MEM       VM memory, MiB (default 2048)
#   RXE_VM_OPS       operations per client thread in (c) (default 150)
#   SKIP_APT=1       do not install packages
#   SKIP_BUILD=1     reuse the test binaries built last time
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
W=${RXE_VM_DIR:-$TARGET_DIR/rxe-vm}
VM_TIMEOUT=${RXE_VM_TIMEOUT:-1500}
ACCEL=${RXE_VM_ACCEL:-tcg}
VM_MEM=${RXE_VM_MEM:-2048}
OPS=${RXE_VM_OPS:-150}
T0=$(date +%s)
log() { printf '[rxe-vm %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
die() { log "FAILED: $*"; exit 1; }
mkdir -p "$W"

# ------------------------------------------------------------- host packages
PKGS="qemu-system-x86 busybox-static kmod iproute2 rdma-core ibverbs-providers
  libibverbs1 ibverbs-utils cpio gzip file binutils cmake make clang libclang-dev"
missing=()
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "${SKIP_APT:-0}" = 1 ] || [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    die "missing packages (${missing[*]}) and cannot install them"
  fi
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found"

# ------------------------------------------------------------ kernel package
KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
if [ -z "$KPKG" ]; then
  [ "${SKIP_APT:-0}" = 1 ] || apt-get update -qq || true
  KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
fi
[ -n "$KPKG" ] || die "cannot find Debian's kernel package (linux-image-amd64)"
KV=${KPKG#linux-image-}
mkdir -p "$W/pkgs"
DEB=$(ls "$W/pkgs/${KPKG}"_*_amd64.deb 2>/dev/null | head -1 || true)
if [ -z "$DEB" ]; then
  log "apt-get download $KPKG"
  (cd "$W/pkgs" && apt-get download "$KPKG" >/dev/null 2>&1) || die "apt-get download $KPKG"
  DEB=$(ls "$W/pkgs/${KPKG}"_*_amd64.deb | head -1)
fi
if [ ! -f "$W/kernel/boot/vmlinuz-$KV" ]; then
  rm -rf "$W/kernel"
  dpkg -x "$DEB" "$W/kernel"
fi
VMLINUZ=$W/kernel/boot/vmlinuz-$KV
MODSRC=$W/kernel/lib/modules/$KV
log "kernel $KPKG"

# --------------------------------------------------------------- test binaries
if [ "${SKIP_BUILD:-0}" != 1 ] || [ ! -s "$W/binaries" ]; then
  log "cargo build (tests, --features verbs)"
  # The fabric's tests (nessie-fabric) and the store's (nessie-check).
  (cd "$ROOT" && cargo test -p nessie-fabric -p nessie-check \
      --features nessie-fabric/verbs,nessie-check/verbs --no-run \
      --test verbs_fabric --test verbs_store --test verbs_linearizable_processes \
      --message-format=json) > "$W/build.json" || die "cargo build of the verbs tests"
  : > "$W/binaries"
  for t in verbs_fabric verbs_store verbs_linearizable_processes; do
    exe=$(grep "\"name\":\"$t\"" "$W/build.json" | grep -o '"executable":"[^"]*"' | tail -1 | cut -d'"' -f4)
    [ -x "$exe" ] || die "no executable for test $t"
    echo "$t $exe" >> "$W/binaries"
  done
fi

# ------------------------------------------------------------------ initramfs
R=$W/root
rm -rf "$R"
mkdir -p "$R"/usr/{bin,sbin,lib,lib64} "$R"/{etc,proc,sys,dev,tmp,run,root,tests}
for d in bin sbin lib lib64; do ln -s "usr/$d" "$R/$d"; done

copy() {  # copy a file (following links) to the same path in the image
  mkdir -p "$R$(dirname "$1")"
  cp -L "$1" "$R$1"
}
copy_elf() {  # an ELF and its shared-library closure; $2: path in the image
  local src=$1 dst=${2:-$1}
  mkdir -p "$R$(dirname "$dst")"
  cp -L "$src" "$R$dst"
  ldd "$src" 2>/dev/null | awk '/=> \// {print $3} /^\t\/[^ ]*ld-linux/ {print $1}' |
    while read -r lib; do
      [ -e "$R$lib" ] || copy "$lib"
    done
}

cp /bin/busybox "$R/usr/bin/busybox"
for a in $(/bin/busybox --list); do
  [ -e "$R/usr/bin/$a" ] || ln -s busybox "$R/usr/bin/$a"
done
KMOD=$(readlink -f "$(command -v kmod)")
copy_elf "$KMOD" /usr/bin/kmod
for t in insmod modprobe lsmod; do rm -f "$R/usr/bin/$t"; ln -s kmod "$R/usr/bin/$t"; done
for b in ip rdma ibv_devinfo; do
  p=$(command -v "$b" || true)
  [ -n "$p" ] || continue
  rm -f "$R/usr/bin/$b"
  copy_elf "$(readlink -f "$p")" "/usr/bin/$b"
done
# libibverbs is dlopen()ed by the tests (sideway), so ldd does not list it.
MA=/usr/lib/x86_64-linux-gnu
copy_elf "$(readlink -f "$MA/libibverbs.so.1")" "$MA/libibverbs.so.1"
for p in "$MA"/libibverbs/librxe-*.so; do copy_elf "$p"; done
copy /etc/libibverbs.d/rxe.driver
printf '127.0.0.1 localhost\n' > "$R/etc/hosts"
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$R/etc/passwd"

# Kernel modules: rdma_rxe and what it needs, dependencies first.
declare -A SEEN=()
ORDER=()
add_mod() {
  local n=${1//-/_} p d
  [ -n "${SEEN[$n]:-}" ] && return 0
  SEEN[$n]=1
  p=$(find "$MODSRC/kernel" \( -name "$n.ko*" -o -name "${n//_/-}.ko*" \) | head -1)
  [ -n "$p" ] || return 0   # built in
  for d in $(modinfo -F depends "$p" | tr ',' ' '); do add_mod "$d"; done
  mkdir -p "$R/lib/modules/$KV/$(dirname "${p#"$MODSRC"/}")"
  cp "$p" "$R/lib/modules/$KV/${p#"$MODSRC"/}"
  ORDER+=("${p#"$MODSRC"/}")
}
for m in crc32_generic rdma_rxe ib_uverbs dummy; do add_mod "$m"; done
printf '%s\n' "${ORDER[@]}" > "$R/etc/modules.order"

while read -r name exe; do
  if command -v strip >/dev/null; then
    strip --strip-debug -o "$R/tests/$name" "$exe"
  else
    cp "$exe" "$R/tests/$name"
  fi
  ldd "$exe" | awk '/=> \// {print $3} /^\t\/[^ ]*ld-linux/ {print $1}' |
    while read -r lib; do [ -e "$R$lib" ] || copy "$lib"; done
done < "$W/binaries"

cat > "$R/init" <<EOF
#!/bin/sh
export PATH=/usr/bin:/usr/sbin HOME=/root TMPDIR=/tmp RUST_BACKTRACE=1
export NESSIE_VERBS_DEVICE=rxe0 NESSIE_VERBS_OPS=$OPS
EOF
cat >> "$R/init" <<'EOF'
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/shm /dev/pts && mount -t tmpfs tmpfs /dev/shm
up() { cut -d' ' -f1 /proc/uptime; }
RESULTS=""
result() { RESULTS="$RESULTS
RESULT $1: $2"; }
echo "=== RXE-VM init, kernel $(uname -r), uptime $(up) s"

for m in $(cat /etc/modules.order); do
  insmod "/lib/modules/$(uname -r)/$m" || echo "insmod $m failed"
done
if grep -q '^rdma_rxe ' /proc/modules; then result modules ok; else result modules FAIL; fi

ip link set lo up
if rdma link add rxe0 type rxe netdev lo; then NETDEV=lo; else
  echo "rxe on lo refused; using a dummy interface"
  ip link add nessie0 type dummy && ip addr add 10.231.0.1/24 dev nessie0 && ip link set nessie0 up
  rdma link add rxe0 type rxe netdev nessie0 && NETDEV=nessie0
fi
for i in $(seq 1 50); do
  grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null && break
  sleep 0.1
done
if grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null; then
  result rxe-device "ok (netdev ${NETDEV:-?})"
else
  result rxe-device FAIL
fi
ibv_devinfo -d rxe0 2>&1 | grep -E 'hca_id|atomic_cap|state|active_mtu' || true

# run NAME LIMIT BINARY ARGS...: runs a test binary, one RESULT per test it
# reports, and one for the binary as a whole.
run() {
  name=$1 limit=$2; shift 2
  t=$(up)
  echo "=== RUN $name: $*"
  timeout "$limit" "$@" > /tmp/out.log 2>&1; rc=$?
  cat /tmp/out.log
  took=$(awk "BEGIN {printf \"%.1f\", $(up) - $t}")
  # (node processes spawned by a test print their own `test child_node` lines)
  for line in $(grep -E '^test [^ ]+ \.\.\. (ok|FAILED)' /tmp/out.log | grep -vE ' (child_node|peer_death_node|replicated_kill_node|replicated_rejoin_node|double_loss_node) ' | awk '{print $2 "=" $4}'); do
    test_name=${line%%=*} verdict=${line#*=}
    [ "$verdict" = ok ] && result "$name/$test_name" ok || result "$name/$test_name" FAIL
  done
  if [ $rc = 0 ]; then result "$name" "ok (${took} s)"; else result "$name" "FAIL (rc=$rc, ${took} s)"; fi
}
run verbs-fabric 420 /tests/verbs_fabric --include-ignored --test-threads=1 --show-output
run verbs-store 180 /tests/verbs_store --include-ignored --test-threads=1 --show-output
run verbs-linearizability 300 /tests/verbs_linearizable_processes --exact \
  three_processes_on_verbs_stay_linearizable --ignored --test-threads=1 --show-output
run verbs-peer-death 300 /tests/verbs_linearizable_processes --exact \
  a_killed_peer_fails_only_what_needs_it --ignored --test-threads=1 --show-output
run verbs-replicated-kill 600 /tests/verbs_linearizable_processes --exact \
  a_killed_node_with_two_replicas_is_served_again --ignored --test-threads=1 --show-output
run verbs-rejoin 600 /tests/verbs_linearizable_processes --exact \
  a_replacement_rejoins_on_verbs --ignored --test-threads=1 --show-output
run verbs-double-loss 600 /tests/verbs_linearizable_processes --exact \
  with_three_replicas_two_of_five_nodes_lost_together_lose_nothing --ignored --test-threads=1 --show-output

echo "$RESULTS"
dmesg | grep -iE 'rxe|rdma' | tail -20
echo "=== RXE-VM-DONE uptime $(up) s"
sync
poweroff -f
EOF
chmod +x "$R/init"
(cd "$R" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) > "$W/initramfs.gz"
log "initramfs $(du -h "$W/initramfs.gz" | cut -f1)"

# ---------------------------------------------------------------------- boot
LOG=$W/console.log
# Soft-RoCE copies payloads with the kernel's memcpy. With ERMS/FSRM that is
# `rep movsb`, which TCG emulates one byte at a time, so a READ racing a
# WRITE or CAS would see torn 8-byte words, which no RDMA NIC produces (it
# moves aligned words whole). Without them memcpy is `rep movsq`: word by
# word, as on a NIC.
CPU=max,erms=off,fsrm=off
[ "$ACCEL" = kvm ] && CPU=host,erms=off,fsrm=off
log "booting $KPKG under QEMU ($ACCEL), limit ${VM_TIMEOUT} s, console log $LOG"
: > "$LOG"
set +e
timeout "$VM_TIMEOUT" qemu-system-x86_64 -accel "$ACCEL" -cpu "$CPU" -m "$VM_MEM" -smp 2 \
  -nodefaults -no-user-config -display none -no-reboot -serial "file:$LOG" \
  -kernel "$VMLINUZ" -initrd "$W/initramfs.gz" \
  -append "console=ttyS0 panic=-1 loglevel=3 rdinit=/init" < /dev/null &
QEMU=$!
tail -n +1 -f "$LOG" --pid=$QEMU &
TAIL=$!
wait $QEMU
QRC=$?
sleep 0.5
kill $TAIL 2>/dev/null
wait $TAIL 2>/dev/null
set -e
log "qemu exited rc=$QRC"

# -------------------------------------------------------------------- verdict
echo "=== summary"
tr -d '\r' < "$LOG" | grep '^RESULT ' || true
FAIL=0
grep -q 'RXE-VM-DONE' "$LOG" || { log "the VM did not finish (timeout ${VM_TIMEOUT} s or crash)"; FAIL=1; }
for check in modules rxe-device verbs-fabric verbs-store verbs-linearizability verbs-peer-death \
    verbs-replicated-kill verbs-rejoin verbs-double-loss; do
  tr -d '\r' < "$LOG" | grep -q "^RESULT $check: ok" || { log "check $check did not pass"; FAIL=1; }
done
if tr -d '\r' < "$LOG" | grep '^RESULT ' | grep -q ': FAIL'; then FAIL=1; fi
log "total $(( $(date +%s) - T0 )) s; $([ $FAIL = 0 ] && echo 'all checks passed' || echo 'FAILED')"
exit $FAIL
