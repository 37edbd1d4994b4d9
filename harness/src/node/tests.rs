//! Tests of the node process: its measured phase, preemption counts and
//! the open loop.

use super::*;
use crate::workload::WorkloadSpec;
use nessie_examples::StoreKind;

/// A one-node run of the `null` store over 100 keys of 64 bytes, and
/// two clients of its node.
fn null_run(warmup_ms: u64, duration_ms: u64) -> (RunSpec, Vec<Box<dyn KvClient>>) {
    let w = WorkloadSpec {
        keys: 100,
        value_size: 64,
        ..WorkloadSpec::default()
    };
    let mut spec = RunSpec::new("t", StoreKind::Null, w);
    spec.nodes = 1;
    spec.warmup_ms = warmup_ms;
    spec.duration_ms = duration_ms;
    let node = system::start_node(StoreKind::Null, &Config::default(), 0, None).unwrap();
    let clients = (0..2).map(|_| node.client().unwrap()).collect();
    (spec, clients)
}

#[test]
fn a_null_node_measures_its_workers() {
    let (spec, mut clients) = null_run(20, 100);
    let pre = preload(&spec, 0, &mut clients);
    assert_eq!((pre.keys, pre.errors), (100, 0));
    let report = measure(&spec, 0, &mut clients, &Commands::new(false), pre).unwrap();
    assert!(report.get.ok > 0 && report.put.ok > 0);
    assert_eq!(report.get.misses, 0, "every key was preloaded");
    // At least the measured phase; the upper bound only catches a run
    // that never ended its phase (a loaded machine stretches it).
    assert!(
        report.elapsed_s >= 0.09 && report.elapsed_s < 30.0,
        "{}",
        report.elapsed_s
    );
    assert_eq!(report.get.counters.ops, report.get.ok);
}

thread_local! {
    static READINGS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A scripted switch count for a closed loop, which reads once before
/// its first measured operation and once after each: reading `k + 1`
/// ends operation `k`, which is preempted when `k % 3 == 0`; the count
/// of such operations so far.
fn every_third_preempted() -> u64 {
    match READINGS.with(|r| r.replace(r.get() + 1)) {
        0 => 0,
        n => (n - 1) / 3 + 1,
    }
}

#[test]
fn preemption_is_counted_per_operation() {
    let (spec, mut clients) = null_run(0, 50);
    let one = &mut clients[..1];
    let report = measure_with(
        &spec,
        0,
        one,
        &Commands::new(false),
        PreloadReport::default(),
        || {
            Some(tail::ThreadUsage {
                involuntary: every_third_preempted(),
                ..tail::ThreadUsage::default()
            })
        },
    )
    .unwrap();
    let ops = report.get.ok + report.put.ok;
    assert!(ops > 10);
    assert_eq!(report.get.preempted + report.put.preempted, ops.div_ceil(3));
    for k in [&report.get, &report.put] {
        assert_eq!(k.unpreempted_latency_ns.0.len() + k.preempted, k.ok);
        assert_eq!(k.tail.ops(), k.ok);
        let tail_preempted: u64 = k.tail.buckets().iter().map(|b| b.preempted).sum();
        assert_eq!(tail_preempted, k.preempted);
    }
    // A reader that cannot tell counts nothing as preempted.
    let report = measure_with(
        &spec,
        0,
        one,
        &Commands::new(false),
        PreloadReport::default(),
        || None,
    )
    .unwrap();
    assert_eq!(report.get.preempted + report.put.preempted, 0);
    assert_eq!(report.put.unpreempted_latency_ns.0.len(), report.put.ok);
}

#[test]
fn open_loop_holds_the_rate() {
    let (mut spec, mut clients) = null_run(0, 500);
    spec.load = Load::Open {
        ops_per_sec: 2000.0,
    };
    let report = measure(
        &spec,
        0,
        &mut clients,
        &Commands::new(false),
        PreloadReport::default(),
    )
    .unwrap();
    let ops = report.get.ok + report.put.ok;
    assert!((700..=1300).contains(&ops), "{ops} ops at 2000/s for 0.5 s");
}
