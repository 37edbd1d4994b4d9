//! What one run, or many, did.

use crate::sim::SimCounts;
use nessie::data::RecycleCounts;
use nessie::Stats;

/// The result of one seed (or, summed, of many).
#[derive(Debug, Clone, Default)]
pub struct SimOutcome {
    /// Runs summed.
    pub runs: u64,
    /// Operations in the history.
    pub ops: usize,
    /// Operations with an unknown outcome.
    pub unknown: usize,
    /// Operations that failed without effect (`IndexFull`, `DataTableFull`).
    pub failed: usize,
    /// The clients' counters (the auditor's excluded).
    pub stats: Stats,
    /// Every node's recycling counters (audit churn included).
    pub recycling: RecycleCounts,
    /// Slots neither reusable nor reachable from the index after the audit
    /// churn.
    pub leaked: u64,
    /// What the scheduler and fabric did.
    pub sim: SimCounts,
    /// Yield points each client passed (of the last run only).
    pub points: Vec<u64>,
}

impl SimOutcome {
    /// Adds another outcome to this one.
    pub fn add(&mut self, o: &SimOutcome) {
        self.runs += o.runs;
        self.ops += o.ops;
        self.unknown += o.unknown;
        self.failed += o.failed;
        self.stats += o.stats;
        let (r, s) = (&mut self.recycling, &o.recycling);
        r.scans += s.scans;
        r.reclaimed += s.reclaimed;
        r.markers_cleared += s.markers_cleared;
        r.markers_restored += s.markers_restored;
        r.in_doubt_freed += s.in_doubt_freed;
        r.kept_after_error += s.kept_after_error;
        self.leaked += o.leaked;
        self.sim += o.sim;
    }

    /// A one-paragraph summary of what the runs exercised.
    #[must_use]
    pub fn summary(&self) -> String {
        let t = self.stats.total();
        let r = &self.recycling;
        let s = &self.sim;
        format!(
            "{} runs, {} ops ({} unknown, {} failed without effect); migrations {}, \
             recoveries {}, Z1 marker restores {}, CV markers left {}, cache hits {}, \
             torn retries {}, late CAS {}; slots reclaimed {}, markers cleared/restored by \
             the recycler {}/{}, in-doubt slots freed {}, leaked {}; sim: {} steps, {} crashes, \
             {} stalls ({} before CAS), {} split verbs, {} torn reads, {} transport errors, \
             {} clock steps, {} late CASes refused, {} zombie stalls at critical CASes",
            self.runs,
            self.ops,
            self.unknown,
            self.failed,
            t.migrations,
            t.recoveries,
            t.marker_restores,
            t.markers_left,
            t.cache_hits,
            t.retries.torn,
            t.late_cas,
            r.reclaimed,
            r.markers_cleared,
            r.markers_restored,
            r.in_doubt_freed,
            self.leaked,
            s.steps,
            s.crashes,
            s.stalls,
            s.cas_stalls,
            s.split_verbs,
            s.torn_reads,
            s.transport_errors,
            s.clock_steps,
            s.late_cas_refused,
            s.critical_stalls,
        )
    }
}
