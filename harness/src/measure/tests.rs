use super::*;
use crate::tail::OpUsage;
use crate::workload::OpKind;
use nessie::fabric::VerbCounts;
use nessie::RetryCounts;
use std::time::Duration;

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
    let back: NodeReport = serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
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
