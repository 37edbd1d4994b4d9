//! A replicated cluster (r = 2) of three node processes on `tcp` (meeting
//! through the rendezvous on 127.0.0.1); node 2 is killed with SIGKILL in
//! the middle of an operation while concurrent workers run on shared keys.
//! The scenario (the survivors' view change, their audit of every key, the
//! linearizability check) is [`nessie_check::process::replicated_kill`];
//! the same runs on `verbs` in `tests/verbs_linearizable_processes.rs`. The test
//! prints how long the survivors served nothing at all.
//!
//! (r = 1, where the dead node's share is gone and its keys fail with typed
//! errors, is `peer_death.rs`.)

use nessie::{Config, FabricConfig};
use nessie_check::process::replicated_kill::{self, Pace, NODES};
use nessie_check::process::workload::test_name;
use std::time::Duration;

const PACE: Pace = Pace {
    after_kill: 120,
    warm_up: Duration::from_millis(700),
    start_within: Duration::from_secs(60),
    survivors_within: Duration::from_secs(45),
    worker_limit: Duration::from_secs(40),
    audit_limit: Duration::from_secs(10),
    rejoin_within: None,
};

/// Short bounds, so that a view change takes a few seconds: the lease must
/// exceed `op_timeout` plus the landing bound (here 552 ms, from the
/// default `expiry`), and the drain lasts lease + landing bound + skew.
fn config(cluster: &str, rendezvous: &str) -> Config {
    Config {
        cluster: cluster.into(),
        nodes: NODES,
        replicas: 2,
        index_slots_per_node: 1024,
        data_bytes_per_node: 16 << 20,
        value_size_max: 4096,
        op_timeout: Duration::from_millis(300),
        lease: Duration::from_millis(1500),
        failure_timeout: Duration::from_millis(400),
        fabric: FabricConfig::Tcp {
            peers: Vec::new(),
            rendezvous: Some(rendezvous.into()),
            join: Vec::new(),
            secret: "replicated-kill-test-secret-0123456789".into(),
            threads: 2,
        },
        attach_timeout: Duration::from_secs(30),
        ..Config::default()
    }
}

#[test]
fn a_killed_node_of_a_replicated_cluster_leaves_a_linearizable_history() {
    let _cluster = super::one_cluster_at_a_time();
    let rendezvous = nessie_fabric::conformance::bootstrap::free_address();
    let cfg = config("x", &rendezvous);
    let report = replicated_kill::run(
        &test_name(module_path!(), "child_node"),
        config,
        &rendezvous,
        &PACE,
    );
    for line in report.lines("REPLICATED-KILL") {
        println!("{line}");
    }
    report.check(&PACE);
    // A hang detector, not a latency claim: every call is bounded by its
    // deadline, and the view changes within failure_timeout plus the drain.
    for t in &report.tallies {
        let bound = (cfg.op_timeout + cfg.landing_bound() + Duration::from_secs(1)).as_secs_f64();
        assert!(
            t.slowest_ms <= bound * 1e3,
            "a call took {:.0} ms",
            t.slowest_ms
        );
    }
    assert!(report.gap_ms.1 < 15_000.0, "not served again within 15 s");
}

/// One node process (run only when spawned by the test above).
#[test]
#[ignore = "run as a child process by a_killed_node_of_a_replicated_cluster_leaves_a_linearizable_history"]
fn child_node() {
    replicated_kill::child(config, &PACE);
}
