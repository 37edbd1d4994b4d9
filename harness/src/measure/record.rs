//! The node side: what each worker thread records per operation and the
//! report a node sends to the harness.

use crate::tail::{Bucket, OpUsage, TailBuckets};
use crate::workload::OpKind;
use hdrhistogram::serialization::{Deserializer, Serializer as _, V2Serializer};
use hdrhistogram::Histogram;
use nessie::fabric::VerbCounts;
use nessie::{OpStats, RetryCounts};
use serde::{Deserialize, Serialize, Serializer};
use std::collections::BTreeMap;
use std::time::Duration;

/// Largest latency the histograms track (longer ones saturate): 60 s.
const MAX_LATENCY_NS: u64 = 60_000_000_000;
/// Largest per-operation verb or byte count tracked: 1 Ti.
const MAX_COUNT: u64 = 1 << 40;
/// Distinct error messages kept per node (the rest are counted as "other").
const MAX_ERROR_KINDS: usize = 16;

/// A histogram that serialises as hex of its `HdrHistogram` V2 encoding.
#[derive(Clone, Debug)]
pub struct Hist(pub Histogram<u64>);

impl Hist {
    fn new(max: u64) -> Self {
        Self::with_digits(max, 3)
    }

    fn with_digits(max: u64, digits: u8) -> Self {
        Hist(Histogram::new_with_bounds(1, max, digits).expect("static histogram bounds are valid"))
    }

    /// An empty latency histogram for one bucket of a time series (1 ns
    /// … 60 s, 2 significant digits: a series holds hundreds of them).
    #[must_use]
    pub fn series_latency() -> Self {
        Self::with_digits(MAX_LATENCY_NS, 2)
    }

    /// An empty latency histogram (1 ns … 60 s, 3 significant digits).
    #[must_use]
    pub fn latency() -> Self {
        Self::new(MAX_LATENCY_NS)
    }

    /// An empty count histogram (0 … 2^40, 3 significant digits).
    #[must_use]
    pub fn count() -> Self {
        Self::new(MAX_COUNT)
    }

    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &Hist) {
        // Both sides come from the constructors above, so ranges always fit.
        let _ = self.0.add(&other.0);
    }

    /// The empirical CDF: `(value, fraction of samples ≤ value)` at every
    /// recorded value.
    #[must_use]
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        self.0
            .iter_recorded()
            .map(|v| (v.value_iterated_to() as f64, v.quantile_iterated_to()))
            .collect()
    }
}

impl Serialize for Hist {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut bytes = Vec::new();
        V2Serializer::new()
            .serialize(&self.0, &mut bytes)
            .map_err(|e| serde::ser::Error::custom(format!("histogram: {e:?}")))?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        s.serialize_str(&hex)
    }
}

impl<'de> Deserialize<'de> for Hist {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let hex = String::deserialize(d)?;
        let err = |m: String| serde::de::Error::custom(m);
        if hex.len() % 2 != 0 || !hex.is_ascii() {
            return Err(err("histogram hex has an odd length".into()));
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
            .collect::<std::result::Result<Vec<u8>, _>>()
            .map_err(|e| err(format!("histogram hex: {e}")))?;
        let h: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|e| err(format!("histogram: {e:?}")))?;
        Ok(Hist(h))
    }
}

/// Counters of one kind of operation taken from the store's own
/// [`nessie::Stats`] (the difference over the measured phase).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OpCounters {
    /// Operations the store counted.
    pub ops: u64,
    /// Of which failed.
    pub errors: u64,
    /// Verbs, bytes and round trips.
    pub verbs: VerbCounts,
    /// Retries of all causes.
    pub retries: u64,
    /// DTEs served from the cache.
    pub cache_hits: u64,
    /// Operations that used the entry their location hint named.
    #[serde(default)]
    pub hint_hits: u64,
    /// Operations whose hinted entry was read and not used.
    #[serde(default)]
    pub hint_misses: u64,
    /// MIGRATEs.
    pub migrations: u64,
    /// Recoveries of dead or aborted entries.
    pub recoveries: u64,
    /// Retries by cause (`retries` is their total).
    #[serde(default)]
    pub retry_causes: RetryCounts,
    /// Time slept backing off between retries, µs.
    #[serde(default)]
    pub backoff_us: u64,
    /// Time spent scanning for a reusable slot, ns.
    #[serde(default)]
    pub scan_ns: u64,
}

impl OpCounters {
    /// `after - before` (counters only grow).
    #[must_use]
    pub fn delta(after: &OpStats, before: &OpStats) -> Self {
        let retry_causes = after.retries.since(&before.retries);
        OpCounters {
            ops: after.ops.saturating_sub(before.ops),
            errors: after.errors.saturating_sub(before.errors),
            verbs: after.verbs - before.verbs,
            retries: retry_causes.total(),
            cache_hits: after.cache_hits.saturating_sub(before.cache_hits),
            hint_hits: after.hint_hits.saturating_sub(before.hint_hits),
            hint_misses: after.hint_misses.saturating_sub(before.hint_misses),
            migrations: after.migrations.saturating_sub(before.migrations),
            recoveries: after.recoveries.saturating_sub(before.recoveries),
            retry_causes,
            backoff_us: after.backoff_us.saturating_sub(before.backoff_us),
            scan_ns: after.scan_ns.saturating_sub(before.scan_ns),
        }
    }

    /// Adds `o`.
    pub fn add(&mut self, o: &OpCounters) {
        self.ops += o.ops;
        self.errors += o.errors;
        self.verbs += o.verbs;
        self.retries += o.retries;
        self.cache_hits += o.cache_hits;
        self.hint_hits += o.hint_hits;
        self.hint_misses += o.hint_misses;
        self.migrations += o.migrations;
        self.recoveries += o.recoveries;
        self.retry_causes += o.retry_causes;
        self.backoff_us += o.backoff_us;
        self.scan_ns += o.scan_ns;
    }
}

/// Everything measured about one kind of operation.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KindReport {
    /// Operations that succeeded.
    pub ok: u64,
    /// Operations that returned an error.
    pub errors: u64,
    /// GETs that found no value (should be 0 after the preload).
    pub misses: u64,
    /// Latency of successful operations, ns.
    pub latency_ns: Hist,
    /// Verbs per successful operation (all targets).
    pub verbs: Hist,
    /// Verbs per successful operation that went to another node.
    pub remote_verbs: Hist,
    /// Bytes moved per successful operation (all targets).
    pub bytes: Hist,
    /// Bytes moved per successful operation to or from other nodes.
    pub remote_bytes: Hist,
    /// The store's counters over the measured phase.
    pub counters: OpCounters,
    /// Successful operations the kernel preempted (involuntary context
    /// switches of the worker thread grew while they ran).
    #[serde(default)]
    pub preempted: u64,
    /// Latency of successful operations that were not preempted, ns.
    #[serde(default = "Hist::latency")]
    pub unpreempted_latency_ns: Hist,
    /// What successful operations cost, summed per latency bucket.
    #[serde(default)]
    pub tail: TailBuckets,
}

impl Default for KindReport {
    fn default() -> Self {
        KindReport {
            ok: 0,
            errors: 0,
            misses: 0,
            latency_ns: Hist::latency(),
            verbs: Hist::count(),
            remote_verbs: Hist::count(),
            bytes: Hist::count(),
            remote_bytes: Hist::count(),
            counters: OpCounters::default(),
            preempted: 0,
            unpreempted_latency_ns: Hist::latency(),
            tail: TailBuckets::default(),
        }
    }
}

impl KindReport {
    /// Adds `o`.
    pub fn add(&mut self, o: &KindReport) {
        self.ok += o.ok;
        self.errors += o.errors;
        self.misses += o.misses;
        self.latency_ns.add(&o.latency_ns);
        self.verbs.add(&o.verbs);
        self.remote_verbs.add(&o.remote_verbs);
        self.bytes.add(&o.bytes);
        self.remote_bytes.add(&o.remote_bytes);
        self.counters.add(&o.counters);
        self.preempted += o.preempted;
        self.unpreempted_latency_ns.add(&o.unpreempted_latency_ns);
        self.tail.add(&o.tail);
    }
}

/// One worker's measurements.
#[derive(Debug, Default)]
pub struct Recorder {
    /// Per kind, indexed by [`OpKind::index`].
    pub kinds: [KindReport; 2],
    /// Error messages and how often each occurred.
    pub errors: BTreeMap<String, u64>,
    /// Open loop: operations that started more than 1 ms after their arrival.
    pub late: u64,
}

impl Recorder {
    /// Records a successful operation: its latency, whether the kernel
    /// preempted it, and what it cost (the store's counters over it).
    pub fn ok(
        &mut self,
        kind: OpKind,
        latency: Duration,
        found: bool,
        usage: OpUsage,
        op: &OpCounters,
    ) {
        let preempted = usage.preempted;
        let k = &mut self.kinds[kind.index()];
        k.ok += 1;
        if !found {
            k.misses += 1;
        }
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        k.latency_ns.0.saturating_record(ns);
        if preempted {
            k.preempted += 1;
        } else {
            k.unpreempted_latency_ns.0.saturating_record(ns);
        }
        k.tail.record(&Bucket {
            ops: 1,
            preempted: u64::from(preempted),
            latency_ns: ns,
            backoff_us: op.backoff_us,
            scan_ns: op.scan_ns,
            retries: op.retry_causes,
            migrations: op.migrations,
            round_trips: op.verbs.round_trips,
            blocked: usage.blocked,
            faults: usage.faults,
        });
        let cost = &op.verbs;
        k.verbs.0.saturating_record(cost.verbs());
        k.remote_verbs.0.saturating_record(cost.remote);
        k.bytes.0.saturating_record(cost.bytes());
        k.remote_bytes.0.saturating_record(cost.remote_bytes);
    }

    /// Records a failed operation.
    pub fn error(&mut self, kind: OpKind, error: &dyn std::fmt::Display) {
        self.kinds[kind.index()].errors += 1;
        let msg = format!("{} {error}", kind.name());
        if self.errors.len() < MAX_ERROR_KINDS || self.errors.contains_key(&msg) {
            *self.errors.entry(msg).or_default() += 1;
        } else {
            *self.errors.entry("other errors".to_owned()).or_default() += 1;
        }
    }

    /// Adds `o`.
    pub fn add(&mut self, o: &Recorder) {
        for (a, b) in self.kinds.iter_mut().zip(&o.kinds) {
            a.add(b);
        }
        for (m, n) in &o.errors {
            *self.errors.entry(m.clone()).or_default() += n;
        }
        self.late += o.late;
    }
}

/// The preload phase of one node.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PreloadReport {
    /// Keys this node wrote.
    pub keys: u64,
    /// PUTs that failed (after one retry).
    pub errors: u64,
    /// Seconds it took.
    pub secs: f64,
}

/// What one node process reports at the end of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeReport {
    /// Node id.
    pub node: usize,
    /// Length of the measured phase on this node, seconds.
    pub elapsed_s: f64,
    /// CPU seconds (user + system) the process used in the measured phase.
    pub cpu_s: f64,
    /// The preload.
    pub preload: PreloadReport,
    /// GETs.
    pub get: KindReport,
    /// PUTs.
    pub put: KindReport,
    /// Error messages and counts.
    pub errors: BTreeMap<String, u64>,
    /// Open loop: operations that started late (the node could not keep up).
    pub late: u64,
    /// CD: the node's data tables that were ever used, at the end of the
    /// run (the most slots in use at once beside their size).
    #[serde(default)]
    pub tables: Vec<nessie::data::DataTableFigures>,
}

impl NodeReport {
    /// A report from a node's merged recorder.
    #[must_use]
    pub fn new(
        node: usize,
        rec: Recorder,
        elapsed_s: f64,
        cpu_s: f64,
        preload: PreloadReport,
    ) -> Self {
        let [get, put] = rec.kinds;
        NodeReport {
            node,
            elapsed_s,
            cpu_s,
            preload,
            get,
            put,
            errors: rec.errors,
            late: rec.late,
            tables: Vec::new(),
        }
    }

    /// The report of one kind.
    #[must_use]
    pub fn kind(&self, kind: OpKind) -> &KindReport {
        of_kind(kind, &self.get, &self.put)
    }
}

/// `get` or `put`, by `kind`.
pub(super) fn of_kind<'a>(
    kind: OpKind,
    get: &'a KindReport,
    put: &'a KindReport,
) -> &'a KindReport {
    match kind {
        OpKind::Get => get,
        OpKind::Put => put,
    }
}
