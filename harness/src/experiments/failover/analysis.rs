//! What a `failover` run's buckets say: the time series as rows, the
//! three times the experiment reports, and figures per phase of the run.
//!
//! Time zero is the start of the bucket in which the harness said `run`
//! (buckets are numbered by the wall clock, [`crate::measure::timeline`]).
//!
//! * **detect**: from the loss to the first `ViewChanging` any survivor
//!   saw.
//! * **serve again**: from the loss to the start of the first bucket, from
//!   the detection on and before the replacement started, in which no
//!   operation was refused and the successful operations per second were
//!   back above [`SERVED`] of the median before the loss. (The other
//!   reading the brief allowed, the first success of an operation that
//!   needs the lost node's share, is not measured: the workers do not know
//!   which share a key's slots are in.)
//! * **restore**: from the start of the replacement process to the return
//!   of its `Node::rejoin` (every copy restored, the node active again).

use super::driver::Outcome;
use crate::measure::timeline::Slice;
use crate::workload::OpKind;
use std::collections::BTreeMap;

/// The share of the median throughput before the loss that counts as
/// served again.
pub(super) const SERVED: f64 = 0.5;

/// One bucket of the merged time series.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Row {
    /// Its start, s since time zero.
    pub(super) t_s: f64,
    /// Successful operations per second in it.
    pub(super) ok_per_s: f64,
    /// The bucket's figures, all nodes added up.
    pub(super) slice: SliceFigures,
}

/// A bucket's (or a phase's) counts and percentiles.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct SliceFigures {
    /// Successful GETs.
    pub(super) get_ok: u64,
    /// Successful PUTs.
    pub(super) put_ok: u64,
    /// GET latency p50 and p99 of the successful GETs, µs.
    pub(super) get_us: Option<(f64, f64)>,
    /// PUT latency p50 and p99 of the successful PUTs, µs.
    pub(super) put_us: Option<(f64, f64)>,
    /// Refused with `ViewChanging`.
    pub(super) view_changing: u64,
    /// Refused with `NoQuorum`.
    pub(super) no_quorum: u64,
    /// Failed otherwise.
    pub(super) failed: u64,
}

impl SliceFigures {
    fn of(s: &Slice) -> Self {
        let q = |kind| Some((s.quantile_us(kind, 0.5)?, s.quantile_us(kind, 0.99)?));
        SliceFigures {
            get_ok: s.get_ok,
            put_ok: s.put_ok,
            get_us: q(OpKind::Get),
            put_us: q(OpKind::Put),
            view_changing: s.view_changing,
            no_quorum: s.no_quorum,
            failed: s.failed,
        }
    }

    /// Refused operations.
    #[must_use]
    pub(super) fn refused(&self) -> u64 {
        self.view_changing + self.no_quorum
    }
}

/// The run's events and the three times, in s since time zero (durations
/// by the methods).
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Marks {
    /// Width of a bucket, s.
    pub(super) bucket_s: f64,
    /// The loss.
    pub(super) kill_s: f64,
    /// Median successful operations per second of the whole buckets before
    /// the loss.
    pub(super) baseline_ops_s: f64,
    /// The first `ViewChanging` a survivor saw after the loss.
    pub(super) detect_s: Option<f64>,
    /// The start of the first bucket served again (see the module).
    pub(super) serve_s: Option<f64>,
    /// The start of the replacement process.
    pub(super) spawn_s: Option<f64>,
    /// The return of its `Node::rejoin`.
    pub(super) restored_s: Option<f64>,
    /// The harness said `stop`.
    pub(super) stop_s: f64,
    /// Successful operations that ended after the restore.
    pub(super) ok_after_restore: u64,
}

impl Marks {
    /// Loss → first `ViewChanging`, s.
    #[must_use]
    pub(super) fn detect(&self) -> Option<f64> {
        self.detect_s.map(|t| t - self.kill_s)
    }

    /// Loss → served again, s.
    #[must_use]
    pub(super) fn serve_again(&self) -> Option<f64> {
        self.serve_s.map(|t| t - self.kill_s)
    }

    /// Replacement started → restored, s.
    #[must_use]
    pub(super) fn restore(&self) -> Option<f64> {
        Some(self.restored_s? - self.spawn_s?)
    }
}

/// The run's time zero and bucket width, µs.
#[derive(Clone, Copy, Debug)]
pub(super) struct Clock {
    /// The start of the bucket of `run`, µs since the Unix epoch.
    pub(super) origin_us: u64,
    /// Width of a bucket, µs.
    pub(super) bucket_us: u64,
}

impl Clock {
    /// The clock of a run that said `run` at `run_us`.
    #[must_use]
    pub(super) fn new(run_us: u64, bucket_us: u64) -> Self {
        let bucket_us = bucket_us.max(1);
        Clock {
            origin_us: run_us / bucket_us * bucket_us,
            bucket_us,
        }
    }

    /// `us` (since the Unix epoch) in s since time zero.
    #[must_use]
    pub(super) fn s(&self, us: u64) -> f64 {
        (us as f64 - self.origin_us as f64) / 1e6
    }

    fn first(&self) -> u64 {
        self.origin_us / self.bucket_us
    }
}

/// Every bucket from time zero up to the last whole one before `stop_us`
/// (a bucket nothing ended in is a row of zeros).
#[must_use]
pub(super) fn rows(slices: &BTreeMap<u64, Slice>, clock: Clock, stop_us: u64) -> Vec<Row> {
    let per_s = 1e6 / clock.bucket_us as f64;
    let empty = Slice::default();
    (clock.first()..stop_us / clock.bucket_us)
        .map(|k| {
            let s = slices.get(&k).unwrap_or(&empty);
            Row {
                t_s: clock.s(k * clock.bucket_us),
                ok_per_s: s.ok() as f64 * per_s,
                slice: SliceFigures::of(s),
            }
        })
        .collect()
}

/// The marks of a run whose buckets are `rows` (see the module for what
/// each means).
#[must_use]
pub(super) fn marks(
    rows: &[Row],
    slices: &BTreeMap<u64, Slice>,
    clock: Clock,
    o: &Outcome,
) -> Marks {
    let bucket_s = clock.bucket_us as f64 / 1e6;
    let kill_s = clock.s(o.kill_us);
    let spawn_s = o.spawned_us.map(|us| clock.s(us));
    // Whole buckets before the loss, but the first (the run began in it).
    let before: Vec<f64> = rows
        .iter()
        .skip(1)
        .filter(|r| r.t_s + bucket_s <= kill_s)
        .map(|r| r.ok_per_s)
        .collect();
    let baseline_ops_s = super::super::summary::median(before);
    let detect_s = slices
        .range(o.kill_us / clock.bucket_us..)
        .filter_map(|(_, s)| s.first_view_changing_us)
        .find(|&us| us >= o.kill_us)
        .map(|us| clock.s(us));
    let serve_s = detect_s.and_then(|d| {
        rows.iter()
            .filter(|r| r.t_s >= d && spawn_s.is_none_or(|sp| r.t_s + bucket_s <= sp))
            .find(|r| r.slice.refused() == 0 && r.ok_per_s >= SERVED * baseline_ops_s)
            .map(|r| r.t_s)
    });
    let restored_s = o.restore.as_ref().map(|r| clock.s(r.returned_us));
    let ok_after_restore = restored_s.map_or(0, |t| {
        rows.iter()
            .filter(|r| r.t_s >= t)
            .map(|r| r.slice.get_ok + r.slice.put_ok)
            .sum()
    });
    Marks {
        bucket_s,
        kill_s,
        baseline_ops_s,
        detect_s,
        serve_s,
        spawn_s,
        restored_s,
        stop_s: clock.s(o.stop_us),
        ok_after_restore,
    }
}

/// One stretch of the run between two of its events.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Phase {
    /// What the cluster was doing.
    pub(super) name: &'static str,
    /// From, s since time zero.
    pub(super) from_s: f64,
    /// To.
    pub(super) to_s: f64,
    /// Median successful operations per second of its buckets.
    pub(super) median_ops_s: f64,
    /// Its buckets added up.
    pub(super) figures: SliceFigures,
}

/// The run's phases: before the loss, until served again, served by the
/// survivors, the rejoin, after the restore; each over the buckets that
/// start in it. A phase whose events did not happen is left out.
#[must_use]
pub(super) fn phases(
    rows: &[Row],
    slices: &BTreeMap<u64, Slice>,
    clock: Clock,
    m: &Marks,
) -> Vec<Phase> {
    let bounds = [
        ("before the loss", Some(0.0), Some(m.kill_s)),
        ("loss until served again", Some(m.kill_s), m.serve_s),
        ("served by the survivors", m.serve_s, m.spawn_s),
        ("replacement rejoining", m.spawn_s, m.restored_s),
        ("after the restore", m.restored_s, Some(m.stop_s)),
    ];
    bounds
        .into_iter()
        .filter_map(|(name, from, to)| {
            let (from_s, to_s) = (from?, to?);
            let inside = |t: f64| t >= from_s && t < to_s;
            let mut sum = Slice::default();
            for (k, s) in slices {
                if inside(clock.s(k * clock.bucket_us)) {
                    sum.add(s);
                }
            }
            let ops: Vec<f64> = rows
                .iter()
                .filter(|r| inside(r.t_s))
                .map(|r| r.ok_per_s)
                .collect();
            Some(Phase {
                name,
                from_s,
                to_s,
                median_ops_s: super::super::summary::median(ops),
                figures: SliceFigures::of(&sum),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::timeline::{Ended, RestoreReport, SliceRecorder};
    use std::time::Duration;

    const T0: u64 = 1_700_000_000_000_000;

    /// A run in 100 ms buckets: 1,000 ops/s, the loss at 1.05 s, failures
    /// until the decision at 1.6 s, refusals until 3.0 s, 700 ops/s after,
    /// the replacement from 5.0 s, restored at 7.2 s, stopped at 9 s.
    fn scripted() -> (BTreeMap<u64, Slice>, Outcome) {
        let mut rec = SliceRecorder::new(Duration::from_millis(100));
        let timeout = nessie::Error::Timeout;
        for ms in 0..9_000u64 {
            let at = T0 + 20_000 + ms * 1000;
            let ended = match ms {
                1_050..1_600 => Ended::Failed(OpKind::Get, &timeout),
                1_600..3_000 => Ended::ViewChanging,
                3_000.. if ms % 10 < 3 => continue,
                _ => Ended::Ok(OpKind::Get, Duration::from_micros(20)),
            };
            rec.record(at, ended);
        }
        let o = Outcome {
            run_us: T0 + 20_000,
            kill_us: T0 + 1_050_000,
            spawned_us: Some(T0 + 5_000_000),
            restore: Some(RestoreReport {
                returned_us: T0 + 7_200_000,
                ..RestoreReport::default()
            }),
            stop_us: T0 + 9_000_000,
            ..Outcome::default()
        };
        let t = rec.into_timeline(0, false);
        (t.slices, o)
    }

    #[test]
    fn the_three_times_come_from_the_buckets() {
        let (slices, o) = scripted();
        let clock = Clock::new(o.run_us, 100_000);
        assert_eq!(clock.origin_us, T0);
        let rows = rows(&slices, clock, o.stop_us);
        assert_eq!(rows.len(), 90);
        assert!((rows[5].ok_per_s - 1_000.0).abs() < 1e-9);
        let m = marks(&rows, &slices, clock, &o);
        assert!((m.baseline_ops_s - 1_000.0).abs() < 1e-9);
        assert!((m.kill_s - 1.05).abs() < 1e-9);
        // The first refusal ends at 1.62 s (time zero is 20 ms earlier
        // than `run`).
        assert!((m.detect().unwrap() - 0.57).abs() < 1e-6, "{m:?}");
        // Refusals end at 3.02 s: the bucket from 3.1 s is the first
        // without one, at about 700 ops/s (≥ half of 1,000).
        assert!((m.serve_s.unwrap() - 3.1).abs() < 1e-9, "{m:?}");
        assert!((m.serve_again().unwrap() - 2.05).abs() < 1e-9);
        assert!((m.restore().unwrap() - 2.2).abs() < 1e-9);
        assert!(m.detect() < m.serve_again());
        assert!(m.ok_after_restore > 0);
        let p = phases(&rows, &slices, clock, &m);
        let names: Vec<_> = p.iter().map(|p| p.name).collect();
        assert_eq!(names.len(), 5, "{names:?}");
        assert!(p[1].figures.refused() > 0 && p[1].figures.failed > 0);
        assert_eq!(p[4].figures.refused() + p[4].figures.failed, 0);
    }

    #[test]
    fn a_run_without_a_refusal_has_no_detection_and_no_serve_again() {
        let (mut slices, o) = scripted();
        for s in slices.values_mut() {
            s.view_changing = 0;
            s.first_view_changing_us = None;
        }
        let clock = Clock::new(o.run_us, 100_000);
        let rows = rows(&slices, clock, o.stop_us);
        let m = marks(&rows, &slices, clock, &o);
        assert_eq!((m.detect(), m.serve_again()), (None, None));
        let without = Outcome { restore: None, ..o };
        let m = marks(&rows, &slices, clock, &without);
        assert_eq!((m.restore(), m.ok_after_restore), (None, 0));
        assert_eq!(phases(&rows, &slices, clock, &m).len(), 1);
    }
}
