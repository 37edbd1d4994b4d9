//! Three node processes on the `verbs` fabric, each with its own device
//! context and queue pairs, meeting through the authenticated rendezvous:
//! a mixed workload on shared keys whose merged history is linearizable,
//! and a peer killed with SIGKILL whose survivors' operations all return
//! (typed errors for those that need its memory, within about
//! `op_timeout`), and with two replicas, a node killed mid-operation whose
//! survivors agree on a view without it and serve every key again, with a
//! linearizable history, and then a replacement with the killed node's id
//! that rejoins (its fresh queue pairs and regions reconnected to the
//! survivors), after which every node serves every acknowledged key, and
//! then another node is lost; and with three replicas on five nodes, two
//! neighbours killed together, after which the others read every key.
//!
//! Needs an RDMA device: `#[ignore]`d, run with `--ignored` and the device
//! in `NESSIE_VERBS_DEVICE` (optionally a GID index in `NESSIE_VERBS_GID`;
//! operations per thread in `NESSIE_VERBS_OPS`, default 150, sized for
//! Soft-RoCE under an emulated CPU, where one verb takes about 0.1 ms).

#![cfg(feature = "verbs")]

use nessie::{Config, FabricConfig, Node};
use nessie_check::process::double_loss;
use nessie_check::process::history::read_logs;
use nessie_check::process::peer_death;
use nessie_check::process::replicated_kill::{self, Pace};
use nessie_check::process::workload::{
    child_test, finish_together, run_node_workers, spawned_node, ChildGuard, NodeWork,
};
use nessie_fabric::conformance::bootstrap::free_address;
use std::time::{Duration, Instant};

const NODES: usize = 3;
const KEYS: usize = 8;
const THREADS: usize = 2;
const CHILD_ENV: &str = "NESSIE_VERBS_PROC_CHILD";

fn ops_per_thread() -> usize {
    std::env::var("NESSIE_VERBS_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150)
}

fn config(cluster: &str, rendezvous: &str) -> Config {
    let device = std::env::var("NESSIE_VERBS_DEVICE")
        .expect("set NESSIE_VERBS_DEVICE to an RDMA device (e.g. rxe0)");
    Config {
        cluster: cluster.into(),
        nodes: NODES,
        index_slots_per_node: 1024,
        data_bytes_per_node: 8 << 20,
        value_size_max: 4096,
        // Generous deadlines: an emulated CPU makes every verb slow.
        expiry: Duration::from_secs(4),
        op_timeout: Duration::from_secs(2),
        fabric: FabricConfig::Verbs {
            device: Some(device),
            peers: Vec::new(),
            rendezvous: Some(rendezvous.into()),
            join: Vec::new(),
            secret: "verbs-processes-test-secret-0123456789".into(),
            gid_index: std::env::var("NESSIE_VERBS_GID")
                .ok()
                .and_then(|v| v.trim().parse().ok()),
        },
        attach_timeout: Duration::from_secs(60),
        ..Config::default()
    }
}

#[test]
#[ignore = "needs an RDMA device: set NESSIE_VERBS_DEVICE and run with --ignored"]
fn three_processes_on_verbs_stay_linearizable() {
    let dir = tempfile::tempdir().unwrap().keep();
    // A free port for the rendezvous node 0 serves.
    let rendezvous = free_address();
    let cluster = format!("verbs-proc-{}", std::process::id());
    let started = Instant::now();
    let mut guard = ChildGuard::new(dir.clone());
    for node in 0..NODES {
        guard.children.push(
            child_test("child_node")
                .env(CHILD_ENV, node.to_string())
                .env("NESSIE_VERBS_PROC_DIR", &dir)
                .env("NESSIE_VERBS_PROC_CLUSTER", &cluster)
                .env("NESSIE_VERBS_PROC_RENDEZVOUS", &rendezvous)
                .spawn()
                .expect("spawn a node process"),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(400);
    for (node, child) in guard.children.iter_mut().enumerate() {
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "node {node} failed: {status}");
                break;
            }
            assert!(Instant::now() < deadline, "node {node} did not finish");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let history = read_logs(&dir).unwrap();
    let unknown = history.unknown_outcomes();
    assert!(
        history.len() >= NODES * THREADS * ops_per_thread() / 2,
        "only {} operations ran",
        history.len()
    );
    let checked = Instant::now();
    nessie_check::linearizability::check(&history).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "VERBS-LINEARIZABLE {} operations from {} processes, {unknown} with unknown outcome, linearizable; workload {:.1} s, check {:.1} s",
        history.len(),
        NODES,
        checked.duration_since(started).as_secs_f64(),
        checked.elapsed().as_secs_f64()
    );
}

/// The body of a node process (run only when spawned by the test above).
#[test]
#[ignore = "run as a child process by three_processes_on_verbs_stay_linearizable"]
fn child_node() {
    let Some((node, dir)) = spawned_node(CHILD_ENV, "NESSIE_VERBS_PROC_DIR") else {
        return;
    };
    let cfg = config(
        &std::env::var("NESSIE_VERBS_PROC_CLUSTER").unwrap(),
        &std::env::var("NESSIE_VERBS_PROC_RENDEZVOUS").unwrap(),
    );
    let n = Node::start(cfg, node).unwrap_or_else(|e| panic!("node {node}: {e}"));
    let ops = ops_per_thread();
    let work = NodeWork {
        node,
        nodes: NODES,
        threads: THREADS,
        ops_per_thread: ops,
        keys: KEYS,
        max_value: 3000,
        pause: Duration::ZERO,
        salt: 0x7665_7262,
    };
    run_node_workers(&n, &dir, work);
    // Keep this node's memory reachable until every node is done.
    assert!(
        finish_together(&dir, node, NODES, Duration::from_secs(300)),
        "peers did not finish"
    );
}

#[test]
#[ignore = "needs an RDMA device: set NESSIE_VERBS_DEVICE and run with --ignored"]
fn a_killed_peer_fails_only_what_needs_it() {
    let rendezvous = free_address();
    let survivors = peer_death::run("peer_death_node", &rendezvous);
    let op_timeout = config("x", &rendezvous).op_timeout;
    for (node, s) in survivors.iter().enumerate() {
        println!(
            "VERBS-PEER-DEATH survivor {node}: {} ok, {} failed, slowest failure {:.1} ms, slowest op {:.1} ms (op_timeout {op_timeout:?}); errors: {:?}",
            s.ok, s.failed, s.slowest_failure_ms, s.slowest_ms, s.errors
        );
    }
    // Slack for the emulated CPU of the VM.
    peer_death::check(&survivors, op_timeout, Duration::from_secs(2));
}

/// One node process (run only when spawned by the test above).
#[test]
#[ignore = "run as a child process by a_killed_peer_fails_only_what_needs_it"]
fn peer_death_node() {
    peer_death::child(|cluster, rendezvous| Config {
        nodes: peer_death::NODES,
        ..config(cluster, rendezvous)
    });
}

/// Under an emulated CPU every verb is slow and three processes share two
/// CPUs: generous bounds (hang detectors only).
const KILL_PACE: Pace = Pace {
    after_kill: 40,
    warm_up: Duration::from_secs(2),
    start_within: Duration::from_secs(120),
    survivors_within: Duration::from_secs(240),
    worker_limit: Duration::from_secs(180),
    audit_limit: Duration::from_secs(60),
    rejoin_within: None,
    second_loss: false,
};

/// As [`KILL_PACE`], and then a replacement of the killed node rejoins
/// (restoring its copies under an emulated CPU: a hang detector only), and
/// then another node is lost.
const REJOIN_PACE: Pace = Pace {
    rejoin_within: Some(Duration::from_secs(300)),
    second_loss: true,
    ..KILL_PACE
};

/// Two replicas: bounds long enough that a stall of the emulated CPU is
/// not taken for a loss (`failure_timeout`), and a lease above `op_timeout`
/// plus the landing bound (here 2.39 s, from `expiry`), which also bounds
/// the queue pairs' retransmissions.
fn replicated_config(cluster: &str, rendezvous: &str) -> Config {
    Config {
        nodes: replicated_kill::NODES,
        replicas: 2,
        op_timeout: Duration::from_secs(1),
        lease: Duration::from_secs(4),
        failure_timeout: Duration::from_secs(2),
        ..config(cluster, rendezvous)
    }
}

#[test]
#[ignore = "needs an RDMA device: set NESSIE_VERBS_DEVICE and run with --ignored"]
fn a_killed_node_with_two_replicas_is_served_again() {
    let rendezvous = free_address();
    let report = replicated_kill::run(
        "replicated_kill_node",
        replicated_config,
        &rendezvous,
        &KILL_PACE,
    );
    for line in report.lines("VERBS-REPLICATED-KILL") {
        println!("{line}");
    }
    report.check(&KILL_PACE);
}

/// One node process (run only when spawned by the test above).
#[test]
#[ignore = "run as a child process by a_killed_node_with_two_replicas_is_served_again"]
fn replicated_kill_node() {
    // The node's warnings on stderr: its suspicion, the views it learns
    // and activates, the node it fences.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .try_init();
    replicated_kill::child(replicated_config, &KILL_PACE);
}

#[test]
#[ignore = "needs an RDMA device: set NESSIE_VERBS_DEVICE and run with --ignored"]
fn a_replacement_rejoins_on_verbs() {
    let rendezvous = free_address();
    let report = replicated_kill::run(
        "replicated_rejoin_node",
        replicated_config,
        &rendezvous,
        &REJOIN_PACE,
    );
    for line in report.lines("VERBS-REJOIN") {
        println!("{line}");
    }
    report.check(&REJOIN_PACE);
}

/// One node process, the replacement too (run only when spawned by the
/// test above).
#[test]
#[ignore = "run as a child process by a_replacement_rejoins_on_verbs"]
fn replicated_rejoin_node() {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .try_init();
    replicated_kill::child(replicated_config, &REJOIN_PACE);
}

/// Three replicas on five nodes, with the bounds of [`replicated_config`]
/// and less memory per node (five processes share the VM).
fn five_nodes(cluster: &str, rendezvous: &str) -> Config {
    Config {
        nodes: double_loss::NODES,
        replicas: double_loss::REPLICAS,
        data_bytes_per_node: 4 << 20,
        ..replicated_config(cluster, rendezvous)
    }
}

/// Hang detectors under an emulated CPU.
const DOUBLE_LOSS_PACE: double_loss::Pace = double_loss::Pace {
    start_within: Duration::from_secs(240),
    serve_within: Duration::from_secs(180),
};

#[test]
#[ignore = "needs an RDMA device: set NESSIE_VERBS_DEVICE and run with --ignored"]
fn with_three_replicas_two_of_five_nodes_lost_together_lose_nothing() {
    let rendezvous = free_address();
    let report = double_loss::run(
        "double_loss_node",
        five_nodes,
        &rendezvous,
        &DOUBLE_LOSS_PACE,
    );
    for line in report.lines("VERBS-DOUBLE-LOSS") {
        println!("{line}");
    }
}

/// One node process (run only when spawned by the test above).
#[test]
#[ignore = "run as a child process by with_three_replicas_two_of_five_nodes_lost_together_lose_nothing"]
fn double_loss_node() {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .try_init();
    double_loss::child(five_nodes, &DOUBLE_LOSS_PACE);
}
