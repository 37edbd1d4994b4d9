//! The tail tables of the summary (`compare`, `peers`): where the slowest
//! 1 % and 0.1 % of GETs and PUTs spend their time, and how much of the tail
//! is operations the kernel preempted.

use super::Done;
use crate::measure::{KindSummary, RunFigures};
use crate::report::{num, share, Table};
use crate::tail::{TailSlice, RESOLUTION};
use crate::workload::OpKind;
use nessie_examples::StoreKind;

/// The summary of one kind of a run.
fn kind(f: &RunFigures, kind: OpKind) -> &KindSummary {
    match kind {
        OpKind::Get => &f.get,
        OpKind::Put => &f.put,
    }
}

/// The two slices, with their row labels.
fn slices(k: &KindSummary) -> [(&'static str, &TailSlice); 2] {
    [
        ("slowest 1 %", &k.slowest_1pct),
        ("slowest 0.1 %", &k.slowest_0_1pct),
    ]
}

/// The measured runs with their names ([`Done::name`]).
fn measured(done: &[Done]) -> impl Iterator<Item = (String, &RunFigures)> {
    done.iter()
        .filter_map(|d| d.figures().map(|f| (d.name(), f)))
}

/// Where the slowest operations spend their time: per system, kind and
/// slice, the means of latency, back-off, scan time, retries, migrations and
/// round trips, and the share preempted.
pub(crate) fn tail_table(done: &[Done]) -> Table {
    let mut t = Table::new(
        "tail",
        &format!(
            "Where the slowest operations spend their time (means per operation; read off latency buckets at most {} wide, the resolution of these figures)",
            share(RESOLUTION)
        ),
        &[
            "system",
            "op",
            "slice",
            "ops",
            "from µs",
            "mean µs",
            "preempted",
            "back-off µs",
            "scan µs",
            "retries",
            "top retry cause",
            "migrations",
            "round trips",
            "blocked",
            "page faults",
            "remainder µs",
        ],
    );
    for (system, f) in measured(done) {
        for op in OpKind::ALL {
            for (label, s) in slices(kind(f, op)) {
                if s.ops == 0 {
                    continue;
                }
                let cause = s.top_cause.as_ref().map_or_else(
                    || "-".to_owned(),
                    |c| format!("{c} ({})", share(s.top_cause_share)),
                );
                t.row(vec![
                    system.clone(),
                    op.name().to_owned(),
                    label.to_owned(),
                    s.ops.to_string(),
                    num(s.from_us),
                    num(s.mean_us),
                    percent(s.preempted_share),
                    num(s.backoff_us),
                    num(s.scan_us),
                    num(s.retries),
                    cause,
                    num(s.migrations),
                    num(s.round_trips),
                    num(s.blocked),
                    num(s.faults),
                    num(s.remainder_us),
                ]);
            }
        }
    }
    t.notes.push(
        "An operation is preempted if its worker thread's involuntary context switches (getrusage RUSAGE_THREAD) grew while it ran. Blocked and page faults are the thread's voluntary context switches (a contended lock, a sleep, a socket) and page faults (a first touch of memory among them) during the operation, from the same readings. Remainder = latency − back-off − scan: verbs, waiting and computing. Back-off, scan, retries and migrations are the store's own counters; SD, HY, Redis and memcached keep fewer of them (zeros)."
            .into(),
    );
    t
}

/// Per system and kind: p50, p99.9, p99.9 of the operations not preempted
/// and its ratio to p50, the shares preempted; with one sentence each on
/// how much of the p99.9 tail is preempted operations.
pub(crate) fn preemption_table(done: &[Done]) -> Table {
    let mut t = Table::new(
        "tail-preemption",
        "Latency tails with and without the operations the kernel preempted",
        &[
            "system",
            "op",
            "p50 µs",
            "p99.9 µs",
            "not-preempted p99.9 µs",
            "not-preempted p99.9 / p50",
            "not-preempted ops",
            "preempted, all ops",
            "preempted, slowest 0.1 %",
        ],
    );
    let mut yielders = false;
    for (system, f) in measured(done) {
        yielders |= system == StoreKind::Sd.label() || system == StoreKind::Hy.label();
        for op in OpKind::ALL {
            let k = kind(f, op);
            if k.ok == 0 {
                continue;
            }
            let s = &k.slowest_0_1pct;
            t.row(vec![
                system.clone(),
                op.name().to_owned(),
                num(k.p50_us),
                num(k.p999_us),
                num(k.unpreempted_p999_us),
                num(ratio(k.unpreempted_p999_us, k.p50_us)),
                (k.ok - k.preempted).to_string(),
                percent(k.preempted_share),
                percent(s.preempted_share),
            ]);
            t.notes.push(sentence(&system, op, k));
        }
    }
    if yielders {
        t.notes.push(
            "SD's and HY's clients wait for replies by yielding the CPU, and Linux counts a yield that lets another thread run as an involuntary switch: their preempted operations include those waits, not only the kernel taking the core away."
                .into(),
        );
    }
    t
}

/// A share in percent with three significant digits: preemption shares of
/// all operations are often well under 1 %, which whole percent would show
/// as 0 %.
fn percent(ratio: f64) -> String {
    if ratio.is_finite() {
        format!("{}%", num(ratio * 100.0))
    } else {
        "-".into()
    }
}

/// `a / b`, or NaN (shown as `-`) without a `b`.
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

/// Below this many operations not preempted, their p99.9 is about their
/// slowest one and says little.
const FEW: u64 = 1_000;

/// How much of one kind's p99.9 tail is preempted operations, in words.
fn sentence(system: &str, op: OpKind, k: &KindSummary) -> String {
    let s = &k.slowest_0_1pct;
    let unpreempted = k.ok - k.preempted;
    let caveat = if unpreempted < FEW {
        format!(" (only {unpreempted} operations were not preempted: their p99.9 is about their slowest)")
    } else {
        String::new()
    };
    format!(
        "{system} {}: {} of the slowest 0.1 % ({} ops from {} µs) were preempted, against {} of all; without the preempted operations p99.9 is {} µs instead of {} µs ({}× p50 instead of {}×){caveat}.",
        op.name(),
        percent(s.preempted_share),
        s.ops,
        num(s.from_us),
        percent(k.preempted_share),
        num(k.unpreempted_p999_us),
        num(k.p999_us),
        num(ratio(k.unpreempted_p999_us, k.p50_us)),
        num(ratio(k.p999_us, k.p50_us)),
    )
}

/// The tail columns appended to the summary CSV, per kind.
pub(crate) fn summary_columns() -> Vec<String> {
    let mut c = Vec::new();
    for op in OpKind::ALL {
        let o = op.name();
        c.push(format!("{o} preempted %"));
        c.push(format!("{o} not-preempted p99.9 µs"));
        c.push(format!("{o} not-preempted p99.9/p50"));
        for slice in ["slowest 1 %", "slowest 0.1 %"] {
            for what in [
                "µs",
                "preempted %",
                "back-off µs",
                "scan µs",
                "retries",
                "round trips",
            ] {
                c.push(format!("{o} {slice} {what}"));
            }
        }
    }
    c
}

/// The cells of [`summary_columns`] of one run.
pub(crate) fn summary_cells(f: &RunFigures) -> Vec<String> {
    let mut c = Vec::new();
    for op in OpKind::ALL {
        let k = kind(f, op);
        c.push(num(k.preempted_share * 100.0));
        c.push(num(k.unpreempted_p999_us));
        c.push(num(ratio(k.unpreempted_p999_us, k.p50_us)));
        for (_, s) in slices(k) {
            c.extend([
                num(s.mean_us),
                num(s.preempted_share * 100.0),
                num(s.backoff_us),
                num(s.scan_us),
                num(s.retries),
                num(s.round_trips),
            ]);
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::{summarize, NodeReport, OpCounters, PreloadReport, Recorder};
    use crate::report::{RunRecord, RunStatus};
    use crate::spec::RunSpec;
    use crate::workload::WorkloadSpec;
    use std::time::Duration;

    /// A measured run of `system`: 1,000 GETs and PUTs each, the slowest
    /// ten of each preempted.
    fn run(system: StoreKind) -> Done {
        let mut r = Recorder::default();
        let op = OpCounters {
            ops: 1,
            ..OpCounters::default()
        };
        for i in 0..1_000u64 {
            for kind in OpKind::ALL {
                let slow = i < 10;
                let us = if slow { 1_000 } else { 10 + i % 5 };
                let usage = crate::tail::OpUsage {
                    preempted: slow,
                    ..crate::tail::OpUsage::default()
                };
                r.ok(kind, Duration::from_micros(us), true, usage, &op);
            }
        }
        let report = NodeReport::new(0, r, 1.0, 1.0, PreloadReport::default());
        let (figures, merged) = summarize(&[report], 16, 0.0, 0.0).unwrap();
        Done {
            record: RunRecord {
                label: system.label().into(),
                system,
                status: RunStatus::Ok,
                reason: None,
                spec: RunSpec::new("t", system, WorkloadSpec::default()),
                figures: Some(figures),
                dir: "runs/t".into(),
            },
            merged: Some(merged),
        }
    }

    #[test]
    fn tables_cover_every_system_kind_and_slice() {
        let done = [run(StoreKind::Cd), run(StoreKind::Sd)];
        let t = tail_table(&done);
        assert_eq!(t.rows.len(), 2 * 2 * 2);
        assert!(t.rows.iter().all(|r| r.len() == t.columns.len()));
        // The slowest 1 % are exactly the ten slow, preempted operations.
        assert_eq!(t.rows[0][..4], ["CD", "GET", "slowest 1 %", "10"]);
        assert_eq!(t.rows[0][6], "100%");
        let p = preemption_table(&done);
        assert_eq!(p.rows.len(), 4);
        assert_eq!(p.rows[0][6..], ["990", "1.00%", "100%"]);
        assert!(
            p.notes[0].starts_with("CD GET: 100% of the slowest 0.1 %"),
            "{}",
            p.notes[0]
        );
        assert!(p.notes[0].contains("only 990 operations were not preempted"));
        assert!(p.notes.iter().any(|n| n.contains("yielding")), "SD yields");
        assert!(!preemption_table(&done[..1])
            .notes
            .iter()
            .any(|n| n.contains("yielding")));
        let s = super::super::summary_table("summary", "Summary", &done);
        assert!(s.rows.iter().all(|r| r.len() == s.columns.len()));
        assert_eq!(s.csv_only, summary_columns().len());
        assert_eq!(s.columns[17], "GET preempted %");
        assert_eq!(s.rows[0][17], "1.00");
    }
}
