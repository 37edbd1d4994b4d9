//! Seeded simulation runs: every scenario, many seeds, each history checked
//! for linearizability and every key audited for wedges after every slot
//! that may be reused was reused.
//!
//! `NESSIE_SIM_SEEDS=N` runs N seeds per randomized scenario (CI runs the
//! defaults below), from `NESSIE_SIM_FIRST_SEED`;
//! `NESSIE_SIM_SHORT_SEEDS=N` sets how many short schedules have every crash
//! and zombie point enumerated; `NESSIE_SIM_SEED=S` replays seed S of every
//! test. Each test prints what its runs exercised.

use nessie_check::sim::{enumerate_faults, run, seeds, seeds_from, Scenario, SimOutcome};

/// The running test's name (the test harness names each test's thread
/// after it), for the replay command a failure prints.
fn this_test() -> String {
    std::thread::current()
        .name()
        .unwrap_or("<test name>")
        .to_owned()
}

fn run_all(scenario: &Scenario, default_seeds: u64) -> SimOutcome {
    let mut total = SimOutcome::default();
    for seed in seeds(default_seeds) {
        match run(scenario, seed) {
            Ok(o) => total.add(&o),
            Err(e) => panic!(
                "scenario {}: {e}\nreplay: NESSIE_SIM_SEED={seed} cargo test -p nessie-check \
                 --test simulation {} -- --exact --nocapture",
                scenario.name,
                this_test()
            ),
        }
    }
    eprintln!("{}: {}", scenario.name, total.summary());
    total
}

#[test]
fn contended() {
    let t = run_all(&Scenario::contended(), 300);
    assert!(t.ops > 0);
    assert!(t.stats.total().cache_hits > 0, "the cache was never used");
    let s = t.stats.total();
    assert!(
        s.hint_hits > 0 && s.hint_misses > 0,
        "location hints never answered ({}) or never went stale ({})",
        s.hint_hits,
        s.hint_misses
    );
}

#[test]
fn crowded_index_migrates() {
    let t = run_all(&Scenario::crowded(), 300);
    assert!(t.stats.total().migrations > 0, "never migrated");
}

#[test]
fn recycling() {
    let t = run_all(&Scenario::recycling(), 300);
    assert!(t.recycling.reclaimed > 0, "never reclaimed a slot");
}

#[test]
fn combined_migration_and_recycling() {
    let t = run_all(&Scenario::combined(), 600);
    let s = t.stats.total();
    assert!(s.migrations > 0 && t.recycling.reclaimed > 0);
}

#[test]
fn contended_with_faults() {
    let t = run_all(&Scenario::faulty(Scenario::contended()), 600);
    let s = t.stats.total();
    assert!(t.sim.crashes > 0 && t.sim.stalls > 0 && t.sim.torn_reads > 0);
    assert!(
        s.recoveries > 0,
        "no client ever recovered a dead owner's entry"
    );
}

#[test]
fn crowded_with_faults() {
    let t = run_all(&Scenario::faulty(Scenario::crowded()), 1500);
    assert!(t.sim.crashes > 0 && t.sim.cas_stalls > 0);
}

#[test]
fn recycling_with_faults() {
    let t = run_all(&Scenario::faulty(Scenario::recycling()), 600);
    assert!(t.sim.transport_errors > 0 && t.sim.clock_steps > 0);
}

#[test]
fn combined_with_faults() {
    let t = run_all(&Scenario::faulty(Scenario::combined()), 2000);
    let s = t.stats.total();
    assert!(s.migrations > 0 && t.recycling.reclaimed > 0);
    assert!(t.sim.crashes > 0 && t.sim.torn_reads > 0 && t.sim.transport_errors > 0);
}

#[test]
fn layout_a_races() {
    let t = run_all(&Scenario::layout_a_races(), 4000);
    assert!(t.stats.total().marker_restores + t.recycling.markers_restored > 0);
}

#[test]
fn layout_f2_races() {
    let t = run_all(&Scenario::layout_f2_races(), 4000);
    assert!(
        t.recycling.markers_cleared > 0,
        "no marker of a committed copy was left"
    );
}

/// Two PUTs of an absent key that choose different candidates, because a
/// DELETE of another key vacated one between their forward passes (`M2a`):
/// the reverse pass must keep all but one from committing.
#[test]
fn vacated_candidates() {
    let t = run_all(&Scenario::vacated_candidates(), 2000);
    assert!(
        t.stats.put.retries.changed > 0,
        "no PUT's reverse pass ever saw a change"
    );
}

/// A DELETE of a present key while a PUT of another key migrates it between
/// the DELETE's candidate reads (`M3a`): the confirming re-read of a DELETE
/// that finds its key absent must catch the move.
#[test]
fn migrating_under_delete() {
    let t = run_all(&Scenario::migrating_under_delete(), 2000);
    let s = &t.stats;
    assert!(s.total().migrations > 0);
    assert!(
        s.delete.retries.changed > 0,
        "no DELETE's confirming re-read ever saw a change"
    );
}

/// The first seeds at which the randomized runs caught the mutants of
/// `scripts/fix-reverts/` M1 (no reverse pass: a divergent duplicate), M2
/// (DELETE-absent without its re-read) and M3 (a scan's verdict trusting
/// the stamp read without the lock), replayed: the fixed protocol passes
/// them. (The scripted forms are in `reverse_pass_schedules.rs` and
/// `scan_window.rs`.)
#[test]
fn seeds_that_caught_the_mutants() {
    for (scenario, seed) in [
        (Scenario::vacated_candidates(), 5),
        (Scenario::migrating_under_delete(), 42),
        (Scenario::faulty(Scenario::recycling()), 96),
    ] {
        if let Err(e) = run(&scenario, seed) {
            panic!("scenario {}: {e}", scenario.name);
        }
    }
}

#[test]
fn migrating_zombies() {
    let t = run_all(&Scenario::migrating_zombies(), 2000);
    let s = t.stats.total();
    assert!(s.migrations > 0 && s.recoveries > 0 && t.sim.cas_stalls > 0);
}

/// Every crash point and every zombie point of a short schedule in which a
/// PUT migrates an entry while others read and write the keys involved.
#[test]
fn every_crash_and_zombie_point_of_a_short_schedule() {
    let scenario = Scenario {
        name: "short",
        clients: 3,
        ops_per_client: 2,
        ..Scenario::combined()
    };
    let mut runs = 0;
    for seed in seeds_from("NESSIE_SIM_SHORT_SEEDS", 3) {
        runs += enumerate_faults(&scenario, seed).unwrap_or_else(|e| {
            panic!(
                "{e}\nreplay: NESSIE_SIM_SEED={seed} cargo test -p nessie-check --test simulation \
                 {} -- --exact --nocapture",
                this_test()
            )
        });
    }
    eprintln!("short schedules: {runs} runs, one crash or zombie each");
    assert!(runs > 100);
}

/// The negative control of the clock assumption: with wall clocks stepping
/// twice `expiry` away from each other (far beyond `max_clock_skew`, which
/// the clock watch would refuse), a node reuses slots it thinks expired
/// while others still use them, and the simulation must catch the damage.
#[test]
fn clock_steps_beyond_the_skew_bound_are_caught() {
    let mut scenario = Scenario::migrating_zombies();
    scenario.faults.clock_offset_max_us = 2 * scenario.expiry_us;
    scenario.faults.clock_step = 0.05;
    let caught = (0..1500).find_map(|seed| run(&scenario, seed).err());
    let caught = caught.expect("1500 seeds of clocks 2 x expiry apart and no violation");
    eprintln!("beyond the skew bound: {caught:.200}");
}

/// One node's wall clock steps far ahead (twice the expiry) and back, with
/// the clock watch running, `multi_read` off and checksums verified only
/// after a stall: the node reuses no staged slot on its fast clock's word,
/// so no read returns another entry's bytes (the history stays
/// linearizable and the audit clean). Undoing the clock gate on reuse
/// (`scripts/fix-reverts/A1.patch`) makes it fail.
#[test]
fn clock_step_ahead_with_the_watch() {
    let t = run_all(&Scenario::clock_step_watched(), 1000);
    assert!(t.sim.clock_steps > 0 && t.recycling.reclaimed > 0);
    assert!(t.failed > 0, "the watch never refused an operation");
}

/// Every share kept twice on three nodes, under every fault but crashes and
/// transport errors: most runs end with the mirror audit (every mirror
/// equals its primary); those where a deadline cut a sync short promote a
/// lost host's mirrors instead.
#[test]
fn mirrored_zombies() {
    let t = run_all(&Scenario::mirrored_zombies(), 300);
    assert!(t.mirror_audits > 0 && t.mirrored_entries > 0);
    assert!(t.stats.total().migrations > 0 && t.recycling.reclaimed > 0);
}

/// The faulty scenarios with every share kept twice on three nodes: a run
/// whose syncs may have been cut short (a crash, a transport error, a
/// deadline) loses a host after its clients are done and is audited
/// through the survivors; the others end with the mirror audit.
fn replicated_with_faults(base: Scenario, seeds: u64) -> SimOutcome {
    let t = run_all(&Scenario::replicated(base), seeds);
    assert!(t.promotions > 0 && t.sim.crashes > 0 && t.sim.transport_errors > 0);
    t
}

#[test]
fn replicated_contended_with_faults() {
    replicated_with_faults(Scenario::contended(), 150);
}

#[test]
fn replicated_crowded_with_faults() {
    let t = replicated_with_faults(Scenario::crowded(), 150);
    assert!(t.stats.total().migrations > 0);
}

#[test]
fn replicated_recycling_with_faults() {
    let t = replicated_with_faults(Scenario::recycling(), 150);
    assert!(t.recycling.reclaimed > 0);
}

#[test]
fn replicated_combined_with_faults() {
    let t = replicated_with_faults(Scenario::combined(), 150);
    assert!(t.stats.total().migrations > 0 && t.recycling.reclaimed > 0);
}

/// A host lost at a point the scheduler draws, under every other fault:
/// its clients crash, its memory is wiped, the survivors refuse operations
/// while the view changes and go on in the view without it once the drain
/// has passed; every key is then audited through the survivors.
fn host_lost(base: Scenario, seeds: u64) -> SimOutcome {
    let t = run_all(&Scenario::host_lost(base), seeds);
    assert!(t.promotions > t.end_losses, "no host was lost during a run");
    assert!(t.sim.host_crashes > 0 && t.sim.view_changing > 0);
    t
}

#[test]
fn host_lost_contended() {
    host_lost(Scenario::contended(), 150);
}

#[test]
fn host_lost_crowded() {
    let t = host_lost(Scenario::crowded(), 200);
    assert!(t.stats.total().migrations > 0);
}

#[test]
fn host_lost_recycling() {
    let t = host_lost(Scenario::recycling(), 150);
    assert!(t.recycling.reclaimed > 0);
}

#[test]
fn host_lost_combined() {
    let t = host_lost(Scenario::combined(), 250);
    assert!(t.stats.total().migrations > 0 && t.recycling.reclaimed > 0);
}

/// Each key's candidates on one node (`Placement::OneNode`), with every
/// fault, MIGRATE and recycling together; and a host lost under the same.
#[test]
fn one_node_placement_combined_with_faults() {
    let t = run_all(
        &Scenario::one_node(Scenario::faulty(Scenario::combined())),
        1000,
    );
    assert!(t.stats.total().migrations > 0 && t.recycling.reclaimed > 0);
}

#[test]
fn one_node_placement_crowded_with_faults() {
    let t = run_all(
        &Scenario::one_node(Scenario::faulty(Scenario::crowded())),
        600,
    );
    assert!(t.stats.total().migrations > 0);
}

#[test]
fn one_node_placement_host_lost_combined() {
    let t = run_all(
        &Scenario::one_node(Scenario::host_lost(Scenario::combined())),
        200,
    );
    assert!(t.promotions > t.end_losses, "no host was lost during a run");
    assert!(t.stats.total().migrations > 0 && t.recycling.reclaimed > 0);
}

/// A host lost at a point the scheduler draws, and a replacement with
/// empty memory that restores its replicas while the clients go on under
/// every fault (docs/replication.md#restore), at a point drawn once the
/// view without the host is active: every key is audited after the
/// restore, and every mirror against its primary where no sync was cut
/// short (the others lose a host after the restore and are audited
/// through the survivors).
fn host_returns(scenario: Scenario, seeds: u64) -> SimOutcome {
    let t = run_all(&scenario, seeds);
    let s = &t.sim;
    assert!(s.returns > 0 && s.restores == s.returns, "{}", t.summary());
    assert!(s.slots_copied > 0 && s.entries_adopted > 0);
    assert!(s.ops_during_copy > 0, "no operation ran during a copy");
    assert!(s.activations >= 3 * s.restores);
    t
}

#[test]
fn host_returns_contended() {
    host_returns(Scenario::host_returns(Scenario::contended()), 150);
}

/// Without crashes or transport errors, most runs end with the mirror
/// audit after the restore: every mirror equals its primary, the restored
/// node's replicas included.
#[test]
fn host_returns_mirrored() {
    let t = host_returns(Scenario::host_returns_mirrored(), 150);
    assert!(t.mirror_audits > 0 && t.mirrored_entries > 0);
}

#[test]
fn host_returns_recycling() {
    let t = host_returns(Scenario::host_returns(Scenario::recycling()), 150);
    assert!(t.recycling.reclaimed > 0);
}

#[test]
fn host_returns_combined() {
    let t = host_returns(Scenario::host_returns(Scenario::combined()), 150);
    assert!(t.stats.total().migrations > 0 && t.recycling.reclaimed > 0);
}

/// Two hosts lost one after the other on three nodes, each restored before
/// the next loss: the second may take the node just restored, or promote
/// the mirrors the first restore copied.
#[test]
fn host_returns_twice() {
    let t = host_returns(Scenario::host_returns_twice(Scenario::combined()), 100);
    assert!(t.sim.hosts_lost > t.runs, "no run lost two hosts");
}

/// The negative control of the drain (RP0): the view without a lost host
/// activated half an `op_timeout` after the decision, while operations of
/// the old view may still land their CASes, must produce a violation.
#[test]
fn an_activation_before_the_drain_is_caught() {
    let mut scenario = Scenario::host_lost(Scenario::contended());
    if let Some(loss) = scenario.faults.host_loss.as_mut() {
        loss.drain_us = loss.op_timeout_us / 2;
    }
    let caught = (0..300).find_map(|seed| run(&scenario, seed).err());
    let caught = caught.expect("300 seeds of an early activation and no violation");
    eprintln!("activation before the drain: {caught:.200}");
}
