#!/usr/bin/env bash
# Mutation testing of the store's protocol, data tables and cache
# (nessie/src/{protocol,data,cache}) with cargo-mutants, judged by the
# simulation, the replayed schedules and the store's own tests.
#
# usage: scripts/mutants.sh [all|core K/N|rest K/N|list] [extra cargo-mutants args]
#   all       every mutant (about 1.5 h on 2 cores)
#   core K/N  every mutant of help.rs, migrate.rs and the recycler (data/
#             reclaim.rs, data/recycler.rs), then shard K of N of the others
#   rest K/N  shard K of N of the others only
#   list      list the mutants and exit
# Results land in target/mutants/<mode>/mutants.out (caught.txt, missed.txt,
# timeout.txt, unviable.txt). Survivors judged equivalent are explained in
# scripts/mutants-survivors.md.
#
# The simulation runs NESSIE_SIM_SEEDS seeds per scenario (default 100 here,
# 300-600 in CI) and NESSIE_SIM_SHORT_SEEDS short schedules (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || cargo install --locked cargo-mutants
export NESSIE_SIM_SEEDS=${NESSIE_SIM_SEEDS:-100}
export NESSIE_SIM_SHORT_SEEDS=${NESSIE_SIM_SHORT_SEEDS:-3}
mode=${1:-all}
[ $# -gt 0 ] && shift
tests=(--lib --test simulation --test replays --test store_basics --test verb_counts
  --test background_recycler --test refused_link)
core_files=(-f nessie/src/protocol/help.rs -f nessie/src/protocol/migrate.rs
  -f nessie/src/data/reclaim.rs -f nessie/src/data/recycler.rs)
all_files=(-f 'nessie/src/protocol/**' -f 'nessie/src/data/**' -f 'nessie/src/cache/**')
# cargo-mutants runs its own baseline with the mutated package's tests only,
# where the simulation's test targets do not exist; so the baseline runs
# here, and cargo-mutants skips its own (with fixed timeouts instead). The
# tests take about 15 s per mutant on 2 cores; a mutant that keeps deadlines
# from passing loops until the 240 s timeout (counted as caught).
baseline() {
  echo "baseline: cargo test -p nessie -p nessie-check ${tests[*]}"
  cargo test -q -p nessie -p nessie-check "${tests[@]}" >/dev/null
}
# cargo-mutants exits 2 when mutants were missed and 3 on timeouts: results
# to read, not failures of this script.
run() {
  local out=$1
  shift
  mkdir -p "target/mutants/$out"
  local status=0
  cargo mutants -p nessie --test-package nessie --test-package nessie-check \
    --baseline skip --timeout 240 --build-timeout 2400 \
    -o "target/mutants/$out" "$@" -- "${tests[@]}" || status=$?
  case $status in
    0 | 2 | 3) ;;
    *) return "$status" ;;
  esac
}
rest() {
  local shard=$1
  shift
  run "rest-${shard/\//-of-}" "${all_files[@]}" \
    -e nessie/src/protocol/help.rs -e nessie/src/protocol/migrate.rs \
    -e nessie/src/data/reclaim.rs -e nessie/src/data/recycler.rs \
    --shard "$shard" "$@"
}
case $mode in
  list) cargo mutants -p nessie "${all_files[@]}" --list "$@" ;;
  all) baseline && run all "${all_files[@]}" "$@" ;;
  core)
    shard=${1:?usage: scripts/mutants.sh core K/N}
    shift
    baseline
    run core "${core_files[@]}" "$@"
    rest "$shard" "$@"
    ;;
  rest)
    shard=${1:?usage: scripts/mutants.sh rest K/N}
    shift
    baseline
    rest "$shard" "$@"
    ;;
  *) echo "usage: $0 [all|core K/N|rest K/N|list]" >&2; exit 2 ;;
esac
