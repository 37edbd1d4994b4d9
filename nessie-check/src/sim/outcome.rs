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
    /// Replicated runs whose mirrors were audited against their primaries.
    pub mirror_audits: u64,
    /// Entries those audits compared on every replica.
    pub mirrored_entries: u64,
    /// Replicated runs audited through the survivors of a lost host.
    pub promotions: u64,
    /// Of those, runs whose host was lost only after the clients were done.
    pub end_losses: u64,
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
        self.mirror_audits += o.mirror_audits;
        self.mirrored_entries += o.mirrored_entries;
        self.promotions += o.promotions;
        self.end_losses += o.end_losses;
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
             hint hits/misses {}/{}, torn retries {}, late CAS {}; slots reclaimed {}, markers cleared/restored by \
             the recycler {}/{}, in-doubt slots freed {}, leaked {}; sim: {} steps, {} crashes, \
             {} stalls ({} before CAS), {} split verbs, {} batches reordered, \
             {} torn reads, {} transport errors, \
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
            t.hint_hits,
            t.hint_misses,
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
            s.reordered_batches,
            s.torn_reads,
            s.transport_errors,
            s.clock_steps,
            s.late_cas_refused,
            s.critical_stalls,
        ) + &self.replication()
    }

    /// The replication figures of the summary (empty for runs without
    /// replicas).
    fn replication(&self) -> String {
        let s = &self.sim;
        if self.mirror_audits + self.promotions == 0 {
            return String::new();
        }
        format!(
            "; replicas: {} mirror audits ({} entries compared), {} promotions of a lost \
             host's mirrors ({} of them after the clients, {} during the run), {} threads \
             crashed with their host, {} verbs refused by it, {} ops refused while the view \
             changed, {} old-view ops still stalled at the activation, {} recycler CASes \
             landing in the next view, mirrors behind {}",
            self.mirror_audits,
            self.mirrored_entries,
            self.promotions,
            self.end_losses,
            self.promotions - self.end_losses,
            s.host_crashes,
            s.refused_lost,
            s.view_changing,
            s.stale_ops_at_activation,
            s.late_background_cas,
            self.stats.total().mirrors_behind,
        ) + &self.restores()
    }

    /// The figures of hosts that returned empty (empty for runs without).
    fn restores(&self) -> String {
        let s = &self.sim;
        if s.returns == 0 {
            return String::new();
        }
        format!(
            "; returns: {} replacements started, {} restores done, {} slots copied ({} chunks \
             copied again, {} entries adopted), {} copies begun again after a verb failed, {} \
             ops begun during a copy, {} commits caught up after the switch back",
            s.returns,
            s.restores,
            s.slots_copied,
            s.recopies,
            s.entries_adopted,
            s.restore_retries,
            s.ops_during_copy,
            s.caught_up,
        )
    }
}
