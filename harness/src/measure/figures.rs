//! The harness side: the nodes' reports merged into a run's figures.

use super::record::{of_kind, KindReport, NodeReport};
use crate::error::{HarnessError, Result};
use crate::tail::TailSlice;
use crate::workload::OpKind;
use hdrhistogram::Histogram;
use nessie::RetryCounts;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
    /// Location-hint hits per operation (docs/design.md#location-hints).
    #[serde(default)]
    pub hint_hits_per_op: f64,
    /// Location-hint misses (a hinted entry read in vain) per operation.
    #[serde(default)]
    pub hint_misses_per_op: f64,
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
    /// Page faults of the worker thread per operation, over all of them
    /// (first touches of memory among them).
    #[serde(default)]
    pub faults_per_op: f64,
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
            hint_hits_per_op: per(c.hint_hits),
            hint_misses_per_op: per(c.hint_misses),
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
            faults_per_op: per(k.tail.buckets().iter().map(|b| b.faults).sum()),
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
