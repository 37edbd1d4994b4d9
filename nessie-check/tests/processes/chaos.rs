//! The bounded chaos runs: four node processes with at least 20 faults
//! (kills, stalls longer than expiry, full data tables, a crowded index);
//! and three replicated node processes (r = 2) whose faults include
//! kill-and-wipes, each followed by a replacement's rejoin. Zero violations.

use nessie_check::process::chaos::{child_main, run, ChaosPlan, CHILD_ENV};
use nessie_check::process::workload::{child_test, test_name};

#[test]
fn chaos_quick_has_no_violations() {
    let _cluster = super::one_cluster_at_a_time();
    let report = run(ChaosPlan::quick(7), || {
        child_test(&test_name(module_path!(), "chaos_node"))
    })
    .unwrap();
    eprintln!("{}", report.summary());
    assert!(
        report.violations.is_empty(),
        "{}\n{:#?}",
        report.summary(),
        report.violations
    );
    assert!(report.faults() >= 20, "{}", report.summary());
    assert!(
        report.kills >= 1 && report.stalls >= 1,
        "{}",
        report.summary()
    );
    assert!(report.fills + report.crowds >= 1, "{}", report.summary());
    // Node 0 read the 16 hot keys and the 8 fillers at the end.
    assert_eq!(report.audited, 24, "{}", report.summary());
    assert!(
        report.migrations > 0 && report.reclaimed > 0,
        "no migrate or recycle pressure: {}",
        report.summary()
    );
}

/// Three node processes with two copies of everything: stalls, fills and
/// crowds, and kill-and-wipes (SIGKILL mid-operation, the host declared
/// lost on `shm`, a replacement that rejoins under the same id and works
/// on). The merged history of every process, the replacements' and each
/// node's final reads of every key included, is linearizable.
#[test]
fn chaos_replicated_kill_and_wipe_has_no_violations() {
    let _cluster = super::one_cluster_at_a_time();
    let began = std::time::Instant::now();
    let report = run(ChaosPlan::replicated(11), || {
        child_test(&test_name(module_path!(), "chaos_node"))
    })
    .unwrap();
    eprintln!(
        "{} ({:.1} s in all)",
        report.summary(),
        began.elapsed().as_secs_f64()
    );
    assert!(
        report.violations.is_empty(),
        "{}\n{:#?}",
        report.summary(),
        report.violations
    );
    assert!(
        report.wipes >= 2 && report.rejoins == report.wipes,
        "{}",
        report.summary()
    );
    assert!(
        report.restored_slots > 0 && report.replacement_operations > 0,
        "{}",
        report.summary()
    );
    // Every node read the 12 hot keys and the 6 fillers after the last
    // rejoin.
    assert_eq!(report.audited, 3 * 18, "{}", report.summary());
    assert!(report.stalls >= 1, "{}", report.summary());
    assert!(report.fills + report.crowds >= 1, "{}", report.summary());
    assert!(
        report.refused > 0,
        "no call met a view change: {}",
        report.summary()
    );
}

/// A chaos node process (run only when spawned by the tests above).
#[test]
#[ignore = "run as a child process by the chaos tests"]
fn chaos_node() {
    if std::env::var(CHILD_ENV).is_ok() {
        child_main();
    }
}
