//! Stores whose nodes run apart: one process per node on shared memory,
//! or nodes on the `tcp` fabric.
//!
//! A store's nodes are started with its `Node::start(config, id)` and serve
//! clients from `node.client()`; the scenarios take both as functions.

use super::{small_config, value};
use nessie::{Config, Error, FabricConfig, KvClient};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const ENV_NODE: &str = "NESSIE_KV_SUITE_NODE";
const ENV_CLUSTER: &str = "NESSIE_KV_SUITE_CLUSTER";
const ENV_SYNC: &str = "NESSIE_KV_SUITE_SYNC";
const NODES: usize = 3;
const KEYS_PER_NODE: usize = 40;

/// The configuration every node process of a test cluster uses.
#[must_use]
pub fn shm_config(cluster: &str) -> Config {
    Config {
        cluster: cluster.to_owned(),
        fabric: FabricConfig::Shm { dir: None },
        attach_timeout: Duration::from_secs(60),
        value_size_max: 16 << 10,
        ..small_config()
    }
}

/// Runs `child_test` of the current test binary (its full name, run with
/// `--exact --ignored`) as three processes, one per node, and checks that
/// all of them succeed. The child test calls [`node_process`].
///
/// # Panics
/// When a process cannot be started or fails.
pub fn run_node_processes(child_test: &str) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let cluster = format!("kv{}-{nanos}", std::process::id());
    let sync = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..NODES)
        .map(|node| {
            Command::new(&exe)
                .args([child_test, "--exact", "--ignored", "--nocapture"])
                .env(ENV_NODE, node.to_string())
                .env(ENV_CLUSTER, &cluster)
                .env(ENV_SYNC, sync.path())
                .spawn()
                .unwrap()
        })
        .collect();
    let statuses: Vec<_> = children
        .into_iter()
        .map(|mut c| c.wait().unwrap())
        .collect();
    let _ = std::fs::remove_dir_all(shm_config(&cluster).shm_dir());
    for (node, status) in statuses.iter().enumerate() {
        assert!(status.success(), "node process {node} failed: {status}");
    }
}

fn barrier(dir: &Path, phase: &str, node: usize) {
    std::fs::write(dir.join(format!("{phase}-{node}")), b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(0..NODES).all(|n| dir.join(format!("{phase}-{n}")).exists()) {
        assert!(Instant::now() < deadline, "peers never reached {phase}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The body of one node process: start the node, write this node's keys,
/// read every node's keys, delete some, check again. Returns without doing
/// anything when not started by [`run_node_processes`].
///
/// # Panics
/// On any deviation.
pub fn node_process<N, C: KvClient>(
    start: impl FnOnce(Config, usize) -> Result<N, Error>,
    client: impl Fn(&N) -> Result<C, Error>,
) {
    let (Ok(node), Ok(cluster), Ok(sync)) = (
        std::env::var(ENV_NODE),
        std::env::var(ENV_CLUSTER),
        std::env::var(ENV_SYNC),
    ) else {
        return;
    };
    let id: usize = node.parse().unwrap();
    let sync = PathBuf::from(sync);
    let n = start(shm_config(&cluster), id).unwrap();
    let mut c = client(&n).unwrap();
    let key = |node: usize, i: usize| format!("n{node}-k{i}");
    for i in 0..KEYS_PER_NODE {
        let k = key(id, i);
        c.put(k.as_bytes(), &value(&k, 10 + i * 97)).unwrap();
    }
    barrier(&sync, "written", id);
    let check_all = |c: &mut C, deleted: bool| {
        for node in 0..NODES {
            for i in 0..KEYS_PER_NODE {
                let k = key(node, i);
                let expect = (!deleted || i % 3 != 0).then(|| value(&k, 10 + i * 97));
                let got = c.get(k.as_bytes()).unwrap();
                assert!(
                    got == expect,
                    "node {id} read {k}: {:?} bytes",
                    got.map(|v| v.len())
                );
            }
        }
    };
    check_all(&mut c, false);
    barrier(&sync, "read", id);
    for i in (0..KEYS_PER_NODE).step_by(3) {
        assert!(c.delete(key(id, i).as_bytes()).unwrap());
    }
    barrier(&sync, "deleted", id);
    check_all(&mut c, true);
    // Nobody stops serving before everybody is done.
    barrier(&sync, "done", id);
    drop(c);
    drop(n);
}

/// A configuration for `nodes` nodes on 127.0.0.1 ports the OS just picked.
fn tcp_config(nodes: usize) -> Config {
    let listeners: Vec<_> = (0..nodes)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    Config {
        cluster: "kv-suite-tcp".into(),
        nodes,
        value_size_max: 16 << 10,
        attach_timeout: Duration::from_secs(20),
        fabric: FabricConfig::Tcp {
            peers: listeners
                .iter()
                .map(|l| l.local_addr().unwrap().to_string())
                .collect(),
            rendezvous: None,
            join: Vec::new(),
            secret: "kv-suite-tcp-test-secret".into(),
            threads: 2,
        },
        ..small_config()
    }
}

/// Starts three nodes on the tcp fabric concurrently (as separate
/// processes would), retrying with other ports if one was taken meanwhile.
///
/// # Panics
/// When five attempts fail.
pub fn tcp_nodes<N: Send>(start: fn(Config, usize) -> Result<N, Error>) -> Vec<N> {
    for _ in 0..5 {
        let config = tcp_config(NODES);
        let started: Result<Vec<N>, Error> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..NODES)
                .map(|n| {
                    let c = config.clone();
                    s.spawn(move || start(c, n))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        match started {
            Ok(nodes) => return nodes,
            Err(e) => eprintln!("retrying with other ports: {e}"),
        }
    }
    panic!("could not start a tcp cluster");
}

/// Every node writes keys, every node reads and deletes them. Where the
/// store promises what a PUT costs its client, `put_verbs` gives it as
/// (WRITEs, READs, CASes), on every fabric alike.
///
/// # Panics
/// On any deviation.
pub fn across_nodes<C: KvClient>(clients: &mut [C], put_verbs: Option<(u64, u64, u64)>) {
    let n = clients.len();
    for (id, c) in clients.iter_mut().enumerate() {
        for i in 0..20 {
            let k = format!("t{id}-{i}");
            let before = c.stats().put.verbs;
            c.put(k.as_bytes(), &value(&k, 50 + i * 300)).unwrap();
            let d = c.stats().put.verbs - before;
            if let Some(expect) = put_verbs {
                assert_eq!((d.writes, d.reads, d.cas), expect, "{d:?}");
            }
        }
    }
    for (reader, c) in clients.iter_mut().enumerate() {
        for id in 0..n {
            for i in 0..20 {
                let k = format!("t{id}-{i}");
                assert_eq!(
                    c.get(k.as_bytes()).unwrap().map(|v| v.len()),
                    Some(50 + i * 300),
                    "node {reader} reads {k}"
                );
            }
        }
    }
    for id in 0..n {
        let k = format!("t{id}-0");
        assert!(clients[(id + 1) % n].delete(k.as_bytes()).unwrap());
        assert_eq!(clients[(id + 2) % n].get(k.as_bytes()).unwrap(), None);
    }
}
