//! Three node processes on the `tcp` fabric, each in its own network
//! namespace (`scripts/netns-cluster.sh`: veth pairs to a bridge, a private
//! /24 that exists only inside the namespaces), run a mixed workload on
//! shared keys; the merged history of all of them is linearizable. Every
//! verb between nodes crosses a real (virtual) network, not loopback.
//!
//! Needs root and `ip` (iproute2); elsewhere it prints a SKIPPED banner
//! and passes (fails under `NESSIE_REQUIRE_TOOLS=1`).

use nessie::{Config, FabricConfig, Node};
use nessie_check::process::history::read_logs;
use nessie_check::process::workload::{
    child_test_args, finish_together, run_node_workers, test_name, NodeWork,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const NODES: usize = 3;
const KEYS: usize = 12;
const THREADS: usize = 2;
const OPS_PER_THREAD: usize = 500;
const CHILD_ENV: &str = "NESSIE_NETNS_TEST_CHILD";
/// The script's exit status for "cannot run here".
pub(crate) const SKIP_STATUS: i32 = 77;

fn config(peers: Vec<String>, cluster: &str) -> Config {
    Config {
        cluster: cluster.to_owned(),
        nodes: NODES,
        index_slots_per_node: 1024,
        data_bytes_per_node: 32 << 20,
        value_size_max: 4096,
        fabric: FabricConfig::Tcp {
            peers,
            rendezvous: None,
            join: Vec::new(),
            secret: format!("{cluster}-secret-0123456789"),
            threads: THREADS,
        },
        attach_timeout: Duration::from_secs(30),
        ..Config::default()
    }
}

fn skip(why: &str) {
    optional_tools::skip(
        "netns_cluster",
        why,
        "root and iproute2's `ip` with network namespaces (apt-get install iproute2)",
    );
}

/// Whether the effective uid is 0 (from `/proc/self/status`: "Uid: real effective ...").
pub(crate) fn runs_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|uids| uids.split_whitespace().nth(1).map(|e| e == "0"))
            .unwrap_or(false)
    })
}

#[test]
fn three_nodes_in_network_namespaces_stay_linearizable() {
    let _cluster = super::one_cluster_at_a_time();
    if !runs_as_root() {
        return skip("not running as root");
    }
    if optional_tools::find("ip").is_none() {
        return skip("`ip` is not on PATH");
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/netns-cluster.sh");
    let dir = tempfile::tempdir().unwrap();
    let cluster = format!("netns-{}", std::process::id());
    let started = Instant::now();
    let child = test_name(module_path!(), "child_netns_node");
    let output = Command::new("bash")
        .arg(&script)
        .args(["-n", &NODES.to_string(), "-t", "120", "--"])
        .arg(std::env::current_exe().unwrap())
        .args(child_test_args(&child))
        .env(CHILD_ENV, "1")
        .env("NESSIE_NETNS_DIR", dir.path())
        .env("NESSIE_NETNS_CLUSTER", &cluster)
        .output()
        .expect("run scripts/netns-cluster.sh");
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() == Some(SKIP_STATUS) {
        return skip(stderr.trim());
    }
    assert!(
        output.status.success(),
        "node processes failed ({}):\n{stderr}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
    let history = read_logs(dir.path()).unwrap();
    let expected = NODES * THREADS * OPS_PER_THREAD;
    assert!(
        history.len() >= expected,
        "only {} of {expected} operations were logged",
        history.len()
    );
    nessie_check::linearizability::check(&history).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "{} operations from {NODES} namespaces are linearizable ({:.1} s)",
        history.len(),
        started.elapsed().as_secs_f64()
    );
}

/// The body of a node process (run only inside a namespace by the test
/// above, through the script).
#[test]
#[ignore = "run as a child process by three_nodes_in_network_namespaces_stay_linearizable"]
fn child_netns_node() {
    if std::env::var(CHILD_ENV).is_err() {
        return;
    }
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let node: usize = env("NESSIE_NETNS_NODE").parse().unwrap();
    let peers: Vec<String> = env("NESSIE_NETNS_PEERS")
        .split(',')
        .map(str::to_owned)
        .collect();
    assert!(
        peers.iter().all(|p| !p.starts_with("127.")),
        "peers must be namespace addresses, not loopback: {peers:?}"
    );
    let dir = PathBuf::from(env("NESSIE_NETNS_DIR"));
    let n = Node::start(config(peers, &env("NESSIE_NETNS_CLUSTER")), node).unwrap();
    let work = NodeWork {
        node,
        nodes: NODES,
        threads: THREADS,
        ops_per_thread: OPS_PER_THREAD,
        keys: KEYS,
        max_value: 4000,
        pause: Duration::ZERO,
        salt: 0x6e65_7473,
    };
    run_node_workers(&n, &dir, work);
    // Keep this node's memory reachable until every node is done.
    assert!(
        finish_together(&dir, node, NODES, Duration::from_secs(90)),
        "peers did not finish"
    );
}
