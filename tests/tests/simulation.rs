//! Seeded simulation runs: every scenario, many seeds, each history checked
//! for linearizability and every key audited for wedges.
//!
//! `NESSIE_SIM_SEEDS=N` runs N seeds per scenario (CI runs the defaults
//! below, 2,400 seeds in all); `NESSIE_SIM_SEED=S` replays seed S of every
//! scenario.

use tests::simulation::{run, seeds, Scenario, SimOutcome};

fn run_all(scenario: &Scenario, default_seeds: u64) -> SimOutcome {
    let mut total = SimOutcome::default();
    for seed in seeds(default_seeds) {
        match run(scenario, seed) {
            Ok(o) => {
                total.ops += o.ops;
                total.unknown += o.unknown;
                total.migrations += o.migrations;
                total.recoveries += o.recoveries;
                total.scheduler.steps += o.scheduler.steps;
                total.scheduler.crashes += o.scheduler.crashes;
                total.scheduler.stalls += o.scheduler.stalls;
            }
            Err(e) => panic!("scenario {}: {e}\nreplay: NESSIE_SIM_SEED={seed} cargo test -p tests --test simulation {}", scenario.name, scenario.name),
        }
    }
    eprintln!("{}: {total:?}", scenario.name);
    total
}

#[test]
fn contended() {
    let t = run_all(&Scenario::contended(), 400);
    assert!(t.ops > 0);
}

#[test]
fn crowded_index_migrates() {
    let t = run_all(&Scenario::crowded(), 400);
    assert!(t.migrations > 0, "the crowded scenario never migrated");
}

#[test]
fn recycling() {
    run_all(&Scenario::recycling(), 400);
}

#[test]
fn contended_with_crashes_zombies_and_skew() {
    let t = run_all(&Scenario::faulty(Scenario::contended()), 400);
    assert!(t.scheduler.crashes > 0 && t.scheduler.stalls > 0);
    assert!(
        t.recoveries > 0,
        "no client ever recovered a dead owner's entry"
    );
}

#[test]
fn crowded_with_crashes_zombies_and_skew() {
    let t = run_all(&Scenario::faulty(Scenario::crowded()), 400);
    assert!(t.scheduler.crashes > 0 && t.scheduler.stalls > 0);
}

#[test]
fn recycling_with_crashes_zombies_and_skew() {
    let t = run_all(&Scenario::faulty(Scenario::recycling()), 400);
    assert!(t.scheduler.crashes > 0 && t.scheduler.stalls > 0);
}
