//! Three node processes on the `shm` fabric run a mixed workload on shared
//! keys; one is killed with SIGKILL mid-run. The survivors keep working,
//! recover the dead process's in-flight entries, and the merged history of
//! all three is linearizable.

use nessie::{Config, FabricConfig, Node};
use nessie_check::history::Call;
use nessie_check::process::history::{read_logs, stop_mid_operation, ProcLog};
use nessie_check::process::stress::stress_key;
use nessie_check::process::workload::{
    child_test, client_id, logged_call, mark_started, run_node_workers, spawned_node, test_name,
    wait_until_started, ChildGuard, NodeWork,
};
use nix::unistd::Pid;
use std::path::Path;
use std::process::Child;
use std::time::Duration;

const NODES: usize = 3;
const KEYS: usize = 12;
const THREADS: usize = 2;
const CHILD_ENV: &str = "NESSIE_PROC_TEST_CHILD";

fn config(dir: &Path) -> Config {
    Config {
        cluster: format!("proc-{}", std::process::id()),
        nodes: NODES,
        index_slots_per_node: 1024,
        data_bytes_per_node: 32 << 20,
        value_size_max: 4096,
        fabric: FabricConfig::Shm {
            dir: Some(dir.join("regions")),
        },
        attach_timeout: Duration::from_secs(20),
        ..Config::default()
    }
}

fn spawn_child(dir: &Path, node: usize, cluster: &str) -> Child {
    child_test(&test_name(module_path!(), "child_node"))
        .env(CHILD_ENV, format!("{node}"))
        .env("NESSIE_PROC_DIR", dir)
        .env("NESSIE_PROC_CLUSTER", cluster)
        .spawn()
        .expect("spawn a node process")
}

#[test]
fn three_processes_one_killed_stay_linearizable() {
    let _cluster = super::one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap().keep();
    let cfg = config(&dir);
    let mut guard = ChildGuard::new(dir.clone());
    for node in 0..NODES {
        guard.children.push(spawn_child(&dir, node, &cfg.cluster));
    }
    // Let everyone start and work, then kill node 2 mid-operation.
    assert!(
        wait_until_started(&dir, NODES, Duration::from_secs(60)),
        "nodes did not start"
    );
    std::thread::sleep(Duration::from_millis(300));
    // Kill node 2 inside an operation: stop it, look whether one of its
    // threads has logged an invocation without its response, and resume
    // it briefly if not (a thread spends a good part of its time writing
    // its log between operations).
    let pid = Pid::from_raw(guard.children[2].id() as i32);
    let logs: Vec<_> = (0..THREADS)
        .map(|t| dir.join(format!("hist-{}", client_id(2, THREADS, t))))
        .collect();
    let caught = stop_mid_operation(pid, &logs, 200, Duration::from_millis(2)).unwrap();
    assert!(caught, "node 2 was never stopped inside an operation");
    guard.children[2].kill().unwrap();
    let _ = guard.children[2].wait();
    // Survivors meet the dead process's entries after op_timeout + 2·skew.
    std::thread::sleep(cfg.op_timeout + cfg.max_clock_skew * 2 + Duration::from_millis(300));
    std::fs::write(dir.join("stop"), b"").unwrap();
    for node in 0..2 {
        let status = guard.children[node].wait().unwrap();
        assert!(status.success(), "node {node} failed: {status}");
    }
    let history = read_logs(&dir).unwrap();
    let unknown = history.unknown_outcomes();
    assert!(history.len() > 100, "only {} operations ran", history.len());
    assert!(
        unknown >= 1,
        "the killed process left no operation in flight"
    );
    nessie_check::linearizability::check(&history).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "{} operations, {unknown} with unknown outcome",
        history.len()
    );
}

/// The body of a node process (run only when spawned by the test above).
#[test]
#[ignore = "run as a child process by three_processes_one_killed_stay_linearizable"]
fn child_node() {
    let Some((node, dir)) = spawned_node(CHILD_ENV, "NESSIE_PROC_DIR") else {
        return;
    };
    let mut cfg = config(&dir);
    cfg.cluster = std::env::var("NESSIE_PROC_CLUSTER").unwrap();
    let n = Node::start(cfg, node).unwrap();
    mark_started(&dir, node).unwrap();
    // Everyone starts working together, so that node 2 is still at work
    // when it is killed 300 ms later.
    assert!(
        wait_until_started(&dir, NODES, Duration::from_secs(60)),
        "the other nodes did not start"
    );
    // Node 2 is killed mid-run: it works without pauses, so the kill
    // usually catches it inside an operation.
    let pause = if node == 2 {
        Duration::ZERO
    } else {
        Duration::from_micros(200)
    };
    let work = NodeWork {
        node,
        nodes: NODES,
        threads: THREADS,
        // Node 2 works until it is killed; the others until told to stop.
        ops_per_thread: if node == 2 { 10_000_000 } else { 20_000 },
        keys: KEYS,
        max_value: 4000,
        pause,
        salt: 0,
    };
    run_node_workers(&n, &dir, work);
    // Audit: every key answers once dead owners can be helped.
    if node == 0 {
        let mut client = n.client().unwrap();
        let mut log = ProcLog::create(&dir.join("hist-audit"), 1000).unwrap();
        for k in 0..KEYS {
            let call = Call::get(stress_key(k));
            let mut tries = 0;
            while !logged_call(&mut client, &mut log, &call).expect("audit GET") {
                tries += 1;
                assert!(tries < 10, "key {k} stayed wedged");
            }
        }
    }
}
