//! The bounded chaos run of the test suite: four node processes, at least
//! 20 faults (kills, stalls longer than expiry, full data tables, a crowded
//! index), zero violations.

use nessie_check::process::chaos::{child_main, run, ChaosPlan, CHILD_ENV};
use nessie_check::process::workload::{child_test, test_name};

#[test]
fn chaos_quick_has_no_violations() {
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
    assert!(
        report.migrations > 0 && report.reclaimed > 0,
        "no migrate or recycle pressure: {}",
        report.summary()
    );
}

/// A chaos node process (run only when spawned by the test above).
#[test]
#[ignore = "run as a child process by chaos_quick_has_no_violations"]
fn chaos_node() {
    if std::env::var(CHILD_ENV).is_ok() {
        child_main();
    }
}
