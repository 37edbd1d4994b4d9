#!/usr/bin/env bash
# How many seeds the randomized simulation needs to find each review bug
# once its fix is undone, and each hand-made mutant (M1 … M3) once applied.
# For each name (F1 … F5, A1, M1 … M3, default all; or RP2b RP3 RP3b RP4 RP4b
# RP5o, the replication rules, or RS1 RS2 RS3, the restore's, or H1, the
# location hints' ITE check, or R1, the reverse pass riding its link,
# docs/testing-reverts.md#reverted-replication-rules), applies
# scripts/fix-reverts/<name>.patch to a scratch worktree of HEAD, builds the
# simulation in release mode, and runs every randomized scenario from seed
# 0 until one fails (at most SEEDS seeds each, default 3000). Prints, per
# bug and scenario, the first failing seed and the violation it reported.
#
# usage: scripts/seeds-to-failure.sh [F1 A1 M1 …]
#   SEEDS=N        seeds per scenario at most (default 3000)
#   SCENARIOS="…"  test names of nessie-check/tests/simulation.rs to run (default:
#                  every randomized scenario with faults or a prescribed layout,
#                  and `combined`; for names that all start with RP, the
#                  replication reverts, the replicated scenarios; for RS, the
#                  host-returns scenarios)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
seeds=${SEEDS:-3000}
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(F1 F2 F3 F4 F5 A1 M1 M2 M3)
default="combined_migration_and_recycling contended_with_faults \
crowded_with_faults recycling_with_faults combined_with_faults migrating_zombies \
layout_a_races layout_f2_races clock_step_ahead_with_the_watch vacated_candidates \
migrating_under_delete"
if [ ${#names[@]} -gt 0 ] && ! printf '%s\n' "${names[@]}" | grep -qv '^RP'; then
  default="mirrored_zombies replicated_contended_with_faults replicated_crowded_with_faults \
replicated_recycling_with_faults replicated_combined_with_faults host_lost_contended \
host_lost_crowded host_lost_recycling host_lost_combined"
fi
if [ ${#names[@]} -gt 0 ] && ! printf '%s\n' "${names[@]}" | grep -qv '^RS'; then
  default="host_returns_contended host_returns_recycling host_returns_combined \
host_returns_mirrored host_returns_twice"
fi
read -r -a scenarios <<<"${SCENARIOS:-$default}"
work=$(mktemp -d /tmp/nessie-reverts.XXXXXX)
trap 'git -C "$root" worktree remove --force "$work/tree" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add --detach "$work/tree" HEAD >/dev/null
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/reverts}"
for name in "${names[@]}"; do
  patch="$root/scripts/fix-reverts/$name.patch"
  git -C "$work/tree" checkout -q -- .
  if ! git -C "$work/tree" apply "$patch"; then
    echo "$name: the patch no longer applies to HEAD"; continue
  fi
  echo "== $name: $(head -1 "$patch" | sed 's/^# //')"
  (cd "$work/tree" && cargo test --release -q -p nessie-check --test simulation --no-run 2>/dev/null)
  for s in "${scenarios[@]}"; do
    out=$(cd "$work/tree" && NESSIE_SIM_SEEDS=$seeds cargo test --release -q -p nessie-check \
      --test simulation "$s" -- --exact 2>&1 || true)
    seed=$(grep -oE 'seed [0-9]+:' <<<"$out" | head -1 | grep -oE '[0-9]+' || true)
    if [ -n "$seed" ]; then
      why=$(grep -oE 'seed [0-9]+: .*' <<<"$out" | head -1 | cut -c1-150)
      printf '  %-36s fails at seed %5s (%d seeds): %s\n' "$s" "$seed" $((seed + 1)) "$why"
    else
      printf '  %-36s clean for %d seeds\n' "$s" "$seeds"
    fi
  done
done
