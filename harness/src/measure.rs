//! What a node process measures and how the harness adds it up.
//!
//! Each worker thread keeps a [`Recorder`]: per operation kind, a latency
//! histogram (ns) and histograms of the verbs and bytes each operation cost
//! (from the store's [`nessie::Stats`] before and after it), plus counts of
//! successes, errors and misses. A node merges its workers' recorders into a
//! [`NodeReport`], which travels to the harness as one JSON line with the
//! histograms in `HdrHistogram` V2 encoding (hex). The harness merges the
//! nodes' reports into a [`RunFigures`]: throughput, goodput, latency
//! percentiles, verbs and bytes per operation and CPU time per operation.
//!
//! Each kind also keeps a second latency histogram of only the operations
//! the kernel did not preempt, and latency-bucketed sums of what the
//! operations cost ([`crate::tail`]), from which the summary reads what the
//! slowest 1 % and 0.1 % spent their time on.

use crate::error::{HarnessError, Result};
use crate::tail::{Bucket, OpUsage, TailBuckets, TailSlice};
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
        Hist(Histogram::new_with_bounds(1, max, 3).expect("static histogram bounds are valid"))
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

/// Summary of one kind of operation (or all) over a run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct KindSummary {
    /// Successful operations.
    pub ok: u64,
    /// Failed operations.
    pub errors: u64,
    /// GETs that found nothing.
    pub misses: u64,
    /// Mean latency, µs.
    pub mean_us: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// 99.9th percentile latency, µs.
    pub p999_us: f64,
    /// Largest latency, µs.
    pub max_us: f64,
    /// Verbs per operation (all targets).
    pub verbs_per_op: f64,
    /// Verbs per operation to other nodes.
    pub remote_verbs_per_op: f64,
    /// Round trips (single verbs and batches) per operation.
    pub round_trips_per_op: f64,
    /// Bytes moved per operation (all targets).
    pub bytes_per_op: f64,
    /// Bytes moved per operation to or from other nodes.
    pub remote_bytes_per_op: f64,
    /// Retries per operation.
    pub retries_per_op: f64,
    /// Cache hits per operation.
    pub cache_hits_per_op: f64,
    /// Bytes moved to or from other nodes, in total.
    pub remote_bytes_total: u64,
    /// Retries by cause, in total (the store's counters).
    #[serde(default)]
    pub retries_by_cause: RetryCounts,
    /// Time slept backing off per operation, µs.
    #[serde(default)]
    pub backoff_us_per_op: f64,
    /// Time spent scanning for a free slot per operation, µs.
    #[serde(default)]
    pub scan_us_per_op: f64,
    /// Successful operations the kernel preempted.
    #[serde(default)]
    pub preempted: u64,
    /// Their share of the successful operations.
    #[serde(default)]
    pub preempted_share: f64,
    /// 99.9th percentile latency of the operations not preempted, µs.
    #[serde(default)]
    pub unpreempted_p999_us: f64,
    /// The slowest 1 % of the operations.
    #[serde(default)]
    pub slowest_1pct: TailSlice,
    /// The slowest 0.1 % of the operations.
    #[serde(default)]
    pub slowest_0_1pct: TailSlice,
}

impl KindSummary {
    fn from_report(k: &KindReport) -> Self {
        let h = &k.latency_ns.0;
        let us = |ns: f64| ns / 1000.0;
        let c = &k.counters;
        let per = |n: u64| {
            if c.ops == 0 {
                0.0
            } else {
                n as f64 / c.ops as f64
            }
        };
        let empty = h.is_empty();
        let quantile = |h: &Histogram<u64>, q: f64| {
            if h.is_empty() {
                0.0
            } else {
                us(h.value_at_quantile(q) as f64)
            }
        };
        let q = |q: f64| quantile(h, q);
        KindSummary {
            ok: k.ok,
            errors: k.errors,
            misses: k.misses,
            mean_us: if empty { 0.0 } else { us(h.mean()) },
            p50_us: q(0.5),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: if empty { 0.0 } else { us(h.max() as f64) },
            verbs_per_op: per(c.verbs.verbs()),
            remote_verbs_per_op: per(c.verbs.remote),
            round_trips_per_op: per(c.verbs.round_trips),
            bytes_per_op: per(c.verbs.bytes()),
            remote_bytes_per_op: per(c.verbs.remote_bytes),
            retries_per_op: per(c.retries),
            cache_hits_per_op: per(c.cache_hits),
            remote_bytes_total: c.verbs.remote_bytes,
            retries_by_cause: c.retry_causes,
            backoff_us_per_op: per(c.backoff_us),
            scan_us_per_op: per(c.scan_ns) / 1e3,
            preempted: k.preempted,
            preempted_share: if k.ok == 0 {
                0.0
            } else {
                k.preempted as f64 / k.ok as f64
            },
            unpreempted_p999_us: quantile(&k.unpreempted_latency_ns.0, 0.999),
            slowest_1pct: k.tail.slowest(1_000),
            slowest_0_1pct: k.tail.slowest(100),
        }
    }
}

/// The merged histograms of a run, kept in memory for experiments that plot
/// distributions (not written to results.json).
#[derive(Clone, Debug, Default)]
pub struct Merged {
    /// GETs of all nodes.
    pub get: KindReport,
    /// PUTs of all nodes.
    pub put: KindReport,
}

impl Merged {
    /// The merged report of one kind.
    #[must_use]
    pub fn kind(&self, kind: OpKind) -> &KindReport {
        of_kind(kind, &self.get, &self.put)
    }
}

/// `get` or `put`, by `kind`.
fn of_kind<'a>(kind: OpKind, get: &'a KindReport, put: &'a KindReport) -> &'a KindReport {
    match kind {
        OpKind::Get => get,
        OpKind::Put => put,
    }
}

/// One node's share of a run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NodeFigures {
    /// Node id.
    pub node: usize,
    /// Successful operations per second issued by this node's workers.
    pub throughput_ops_s: f64,
    /// Failed operations.
    pub errors: u64,
    /// CPU seconds of the node process over the measured phase.
    pub cpu_s: f64,
    /// CPU µs of this process per operation its workers completed.
    pub cpu_us_per_op: f64,
    /// Median GET latency of its workers, µs.
    pub get_p50_us: f64,
    /// 99th percentile GET latency of its workers, µs.
    pub get_p99_us: f64,
    /// Seconds its preload took.
    pub preload_s: f64,
    /// Successful PUTs per second issued by this node's workers.
    #[serde(default)]
    pub put_ops_s: f64,
    /// CD: the node's data tables that were ever used (see
    /// [`NodeReport::tables`]).
    #[serde(default)]
    pub tables: Vec<nessie::data::DataTableFigures>,
}

impl NodeFigures {
    fn of(r: &NodeReport) -> Self {
        let ok = r.get.ok + r.put.ok;
        let h = &r.get.latency_ns.0;
        let q = |q: f64| {
            if h.is_empty() {
                0.0
            } else {
                h.value_at_quantile(q) as f64 / 1e3
            }
        };
        NodeFigures {
            node: r.node,
            throughput_ops_s: if r.elapsed_s > 0.0 {
                ok as f64 / r.elapsed_s
            } else {
                0.0
            },
            errors: r.get.errors + r.put.errors,
            cpu_s: r.cpu_s,
            cpu_us_per_op: if ok == 0 {
                0.0
            } else {
                r.cpu_s * 1e6 / ok as f64
            },
            get_p50_us: q(0.5),
            get_p99_us: q(0.99),
            preload_s: r.preload.secs,
            put_ops_s: if r.elapsed_s > 0.0 {
                r.put.ok as f64 / r.elapsed_s
            } else {
                0.0
            },
            tables: r.tables.clone(),
        }
    }
}

/// What one power meter measured over a run's measured phase (the whole
/// host: RAPL counters or the BMC's wall power).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PowerFigures {
    /// The meter (`rapl`, `ipmi`).
    pub sampler: String,
    /// Joules over the phase, when measured.
    pub joules: Option<f64>,
    /// Mean Watts over the phase, when measured.
    pub watts: Option<f64>,
    /// Joules per successful operation, when measured.
    pub joules_per_op: Option<f64>,
    /// Mean Watts above the idle baseline (IPMI with a baseline only).
    pub above_idle_watts: Option<f64>,
    /// Why the meter could not measure here.
    pub unavailable: Option<String>,
}

/// The figures of one run, as written to results.json.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunFigures {
    /// Measured phase, seconds (the longest node's).
    pub elapsed_s: f64,
    /// Successful operations per second, all nodes.
    pub throughput_ops_s: f64,
    /// Successful operations × value size per second, MB/s (10^6 bytes).
    pub goodput_mb_s: f64,
    /// Open loop: the offered rate, operations per second (0 = closed loop).
    pub offered_ops_s: f64,
    /// GETs.
    pub get: KindSummary,
    /// PUTs.
    pub put: KindSummary,
    /// Both kinds together.
    pub all: KindSummary,
    /// CPU seconds of each node process over the measured phase.
    pub cpu_s_per_node: Vec<f64>,
    /// CPU seconds of helper processes (e.g. a Redis server), if any.
    pub cpu_s_external: f64,
    /// CPU µs per successful operation, all processes of the system.
    pub cpu_us_per_op: f64,
    /// Mean CPU utilisation of a node process (1.0 = one core busy).
    pub cpu_util_per_node: f64,
    /// Seconds the preload took (the slowest node).
    pub preload_s: f64,
    /// Preload PUTs that failed.
    pub preload_errors: u64,
    /// Open loop: operations that started late.
    pub late_ops: u64,
    /// Error messages and counts, all nodes.
    pub errors: BTreeMap<String, u64>,
    /// Each node's share.
    pub nodes: Vec<NodeFigures>,
    /// Power meters, when the run asked for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub power: Vec<PowerFigures>,
}

/// Merges node reports into a run's figures.
///
/// # Errors
/// [`HarnessError::Protocol`] if there are no reports.
pub fn summarize(
    reports: &[NodeReport],
    value_size: usize,
    offered_ops_s: f64,
    cpu_s_external: f64,
) -> Result<(RunFigures, Merged)> {
    if reports.is_empty() {
        return Err(HarnessError::Protocol("no node reported".into()));
    }
    let mut merged = Merged::default();
    let mut errors = BTreeMap::new();
    for r in reports {
        merged.get.add(&r.get);
        merged.put.add(&r.put);
        for (m, n) in &r.errors {
            *errors.entry(m.clone()).or_default() += n;
        }
    }
    let mut all = merged.get.clone();
    all.add(&merged.put);
    let elapsed_s = reports.iter().map(|r| r.elapsed_s).fold(0.0, f64::max);
    // Each node's rate over its own measured phase, summed: nodes start
    // within milliseconds of each other but end at slightly different times.
    let throughput: f64 = reports
        .iter()
        .filter(|r| r.elapsed_s > 0.0)
        .map(|r| (r.get.ok + r.put.ok) as f64 / r.elapsed_s)
        .sum();
    let cpu_s_per_node: Vec<f64> = reports.iter().map(|r| r.cpu_s).collect();
    let cpu_total: f64 = cpu_s_per_node.iter().sum::<f64>() + cpu_s_external;
    let ok = all.ok;
    let figures = RunFigures {
        elapsed_s,
        throughput_ops_s: throughput,
        goodput_mb_s: throughput * value_size as f64 / 1e6,
        offered_ops_s,
        get: KindSummary::from_report(&merged.get),
        put: KindSummary::from_report(&merged.put),
        all: KindSummary::from_report(&all),
        cpu_util_per_node: reports
            .iter()
            .filter(|r| r.elapsed_s > 0.0)
            .map(|r| r.cpu_s / r.elapsed_s)
            .sum::<f64>()
            / reports.len() as f64,
        cpu_s_per_node,
        cpu_s_external,
        cpu_us_per_op: if ok == 0 {
            0.0
        } else {
            cpu_total * 1e6 / ok as f64
        },
        preload_s: reports.iter().map(|r| r.preload.secs).fold(0.0, f64::max),
        preload_errors: reports.iter().map(|r| r.preload.errors).sum(),
        late_ops: reports.iter().map(|r| r.late).sum(),
        errors,
        nodes: reports.iter().map(NodeFigures::of).collect(),
        power: Vec::new(),
    };
    Ok((figures, merged))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(verbs: u64, bytes: u64) -> VerbCounts {
        VerbCounts {
            reads: verbs,
            read_bytes: bytes,
            remote: verbs,
            remote_bytes: bytes,
            round_trips: 1,
            ..VerbCounts::default()
        }
    }

    /// The store's counters of one operation that cost `verbs` verbs.
    fn op(verbs: u64, bytes: u64) -> OpCounters {
        OpCounters {
            ops: 1,
            verbs: cost(verbs, bytes),
            ..OpCounters::default()
        }
    }

    #[test]
    fn histograms_round_trip_through_json() {
        let mut r = Recorder::default();
        for i in 1..=1000u64 {
            r.ok(
                OpKind::Get,
                Duration::from_micros(i),
                true,
                OpUsage::default(),
                &op(2, 16_384),
            );
        }
        r.error(OpKind::Put, &"timeout");
        let report = NodeReport::new(0, r, 1.0, 0.5, PreloadReport::default());
        let json = serde_json::to_string(&report).unwrap();
        let back: NodeReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back.get.ok, 1000);
        assert_eq!(back.put.errors, 1);
        assert_eq!(back.get.latency_ns.0.len(), 1000);
        let p50 = back.get.latency_ns.0.value_at_quantile(0.5);
        assert!((499_000..=501_000).contains(&p50), "{p50}");
        assert_eq!(back.errors["PUT timeout"], 1);
    }

    #[test]
    fn summary_adds_nodes_up() {
        let mut reports = Vec::new();
        for node in 0..3 {
            let mut r = Recorder::default();
            for _ in 0..100 {
                r.ok(
                    OpKind::Get,
                    Duration::from_micros(10),
                    true,
                    OpUsage::default(),
                    &op(2, 1000),
                );
            }
            r.kinds[0].counters = OpCounters {
                ops: 100,
                verbs: cost(200, 100_000),
                ..OpCounters::default()
            };
            reports.push(NodeReport::new(node, r, 2.0, 1.0, PreloadReport::default()));
        }
        let (f, merged) = summarize(&reports, 1000, 0.0, 0.0).unwrap();
        assert!((f.throughput_ops_s - 150.0).abs() < 1e-9);
        assert!((f.goodput_mb_s - 0.15).abs() < 1e-9);
        assert!((f.get.verbs_per_op - 2.0).abs() < 1e-9);
        assert!((f.get.remote_bytes_per_op - 1000.0).abs() < 1e-9);
        assert!((f.cpu_util_per_node - 0.5).abs() < 1e-9);
        assert!((f.cpu_us_per_op - 10_000.0).abs() < 1e-6);
        assert_eq!(merged.get.verbs.cdf(), vec![(2.0, 1.0)]);
        assert!((f.get.p50_us - 10.0).abs() < 0.1);
        assert_eq!(f.nodes.len(), 3);
        assert!((f.nodes[2].throughput_ops_s - 50.0).abs() < 1e-9);
        assert!((f.nodes[2].cpu_us_per_op - 10_000.0).abs() < 1e-6);
    }

    #[test]
    fn preemption_and_tail_survive_json_and_merging() {
        let mut r = Recorder::default();
        let retried = OpCounters {
            retry_causes: RetryCounts {
                cas_failed: 1,
                helped: 2,
                ..RetryCounts::default()
            },
            backoff_us: 40,
            scan_ns: 3_000,
            migrations: 1,
            ..op(4, 100)
        };
        for i in 0..1_000u64 {
            // Every tenth operation is preempted and takes 1 ms; the 1 %
            // slowest are the ten that also retried and took 5 ms.
            let (latency, preempted, cost) = match (i % 100, i % 10) {
                (0, _) => (5_000, true, retried),
                (_, 0) => (1_000, true, op(2, 10)),
                _ => (10, false, op(2, 10)),
            };
            r.ok(
                OpKind::Put,
                Duration::from_micros(latency),
                true,
                OpUsage {
                    preempted,
                    blocked: u64::from(preempted),
                    faults: 2,
                },
                &cost,
            );
        }
        let report = NodeReport::new(1, r, 1.0, 0.5, PreloadReport::default());
        let back: NodeReport =
            serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
        assert_eq!(back.put.preempted, 100);
        assert_eq!(back.put.unpreempted_latency_ns.0.len(), 900);
        assert_eq!(back.put.tail, report.put.tail);
        let (f, merged) = summarize(&[report, back], 1, 0.0, 0.0).unwrap();
        assert_eq!(merged.put.tail.ops(), 2_000);
        assert_eq!(f.put.preempted, 200);
        assert!((f.put.preempted_share - 0.1).abs() < 1e-9);
        assert!(
            f.put.p999_us > 4_000.0 && f.put.unpreempted_p999_us < 11.0,
            "{:?}",
            f.put
        );
        let s = &f.put.slowest_1pct;
        assert_eq!(s.ops, 20);
        assert!((s.preempted_share - 1.0).abs() < 1e-9);
        assert!((s.retries - 3.0).abs() < 1e-9 && (s.backoff_us - 40.0).abs() < 1e-9);
        assert!((s.scan_us - 3.0).abs() < 1e-9 && (s.migrations - 1.0).abs() < 1e-9);
        assert_eq!(s.top_cause.as_deref(), Some("helped"));
        assert!((s.blocked - 1.0).abs() < 1e-9 && (s.faults - 2.0).abs() < 1e-9);
        assert!((s.mean_us - 5_000.0).abs() <= 5_000.0 * crate::tail::RESOLUTION);
        // The whole summary survives results.json too.
        let json = serde_json::to_string(&f).unwrap();
        let again: RunFigures = serde_json::from_str(&json).unwrap();
        assert_eq!(again.put.slowest_1pct, f.put.slowest_1pct);
    }

    #[test]
    fn garbage_histograms_are_refused() {
        assert!(serde_json::from_str::<Hist>("\"abc\"").is_err());
        assert!(serde_json::from_str::<Hist>("\"zz\"").is_err());
    }
}
