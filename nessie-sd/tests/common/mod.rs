//! Scenarios shared by the tests of both baselines (`nessie-hy` includes
//! this file too): each takes a way to make clients and checks behaviour
//! through `nessie::KvClient` only.

#![expect(
    dead_code,
    unreachable_pub,
    reason = "each test file uses some of these shared scenarios"
)]

use nessie::{Config, Error, FabricConfig, KvClient};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A cluster under test.
pub trait Store: Sync {
    /// Its client type.
    type C: KvClient;
    /// A client on `node`.
    fn client(&self, node: usize) -> Result<Self::C, Error>;
}

/// The small tables the linearizability checker will use.
pub fn small_config() -> Config {
    Config {
        index_slots_per_node: 1024,
        data_bytes_per_node: 8 << 20,
        ..Config::default()
    }
}

/// A value of `len` bytes that names its writer.
pub fn value(tag: &str, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = tag.bytes().cycle().take(len).collect();
    if len >= tag.len() {
        v[..tag.len()].copy_from_slice(tag.as_bytes());
    }
    v
}

pub fn put_get_delete_overwrite<S: Store>(s: &S) {
    let mut a = s.client(0).unwrap();
    let mut b = s.client(2).unwrap();
    assert_eq!(a.get(b"alpha").unwrap(), None);
    a.put(b"alpha", b"one").unwrap();
    assert_eq!(b.get(b"alpha").unwrap(), Some(b"one".to_vec()));
    b.put(b"alpha", b"two, longer than the first").unwrap();
    assert_eq!(
        a.get(b"alpha").unwrap(),
        Some(b"two, longer than the first".to_vec())
    );
    let mut out = vec![9; 3];
    assert!(a.get_into(b"alpha", &mut out).unwrap());
    assert_eq!(out, b"two, longer than the first");
    assert!(a.delete(b"alpha").unwrap());
    assert!(!b.delete(b"alpha").unwrap());
    assert!(!a.get_into(b"alpha", &mut out).unwrap());
    assert!(out.is_empty(), "get_into clears the buffer");
    a.put(b"alpha", b"").unwrap();
    assert_eq!(b.get(b"alpha").unwrap(), Some(Vec::new()));
}

pub fn many_keys<S: Store>(s: &S, count: usize) {
    let mut clients: Vec<_> = (0..3).map(|n| s.client(n).unwrap()).collect();
    for i in 0..count {
        let key = format!("key-{i}");
        if let Err(e) = clients[i % 3].put(key.as_bytes(), &value(&key, 20 + i % 300)) {
            panic!("put {key}: {e}");
        }
    }
    for i in 0..count {
        let key = format!("key-{i}");
        assert_eq!(
            clients[(i + 1) % 3].get(key.as_bytes()).unwrap(),
            Some(value(&key, 20 + i % 300)),
            "{key}"
        );
    }
    for i in (0..count).step_by(2) {
        assert!(clients[i % 3]
            .delete(format!("key-{i}").as_bytes())
            .unwrap());
    }
    for i in 0..count {
        let key = format!("key-{i}");
        let expect = (i % 2 == 1).then(|| value(&key, 20 + i % 300));
        assert_eq!(clients[2].get(key.as_bytes()).unwrap(), expect, "{key}");
    }
}

pub fn every_size_class<S: Store>(s: &S, value_size_max: usize) {
    let mut a = s.client(1).unwrap();
    let mut b = s.client(0).unwrap();
    let mut sizes = vec![0, 1, 7, 8, 255, 256, 257, 4095, 16 << 10, value_size_max];
    sizes.push(value_size_max / 3);
    for (i, &len) in sizes.iter().enumerate() {
        let key = format!("size-{i}");
        a.put(key.as_bytes(), &value(&key, len)).unwrap();
    }
    for (i, &len) in sizes.iter().enumerate() {
        let key = format!("size-{i}");
        assert_eq!(
            b.get(key.as_bytes()).unwrap(),
            Some(value(&key, len)),
            "{len}"
        );
        // Overwrite with a value of another size class.
        let other = sizes[(i + 3) % sizes.len()];
        b.put(key.as_bytes(), &value("x", other)).unwrap();
        assert_eq!(a.get(key.as_bytes()).unwrap(), Some(value("x", other)));
    }
}

pub fn bad_input_changes_nothing<S: Store>(s: &S, config: &Config) {
    let mut c = s.client(0).unwrap();
    c.put(b"k", b"v").unwrap();
    let long_key = vec![1u8; config.key_size_max + 1];
    let big = vec![2u8; config.value_size_max + 1];
    assert!(matches!(c.get(b""), Err(Error::EmptyKey)));
    assert!(matches!(c.put(b"", b"v"), Err(Error::EmptyKey)));
    assert!(matches!(c.delete(b""), Err(Error::EmptyKey)));
    assert!(matches!(c.get(&long_key), Err(Error::KeyTooLarge)));
    assert!(matches!(c.put(&long_key, b"v"), Err(Error::KeyTooLarge)));
    assert!(matches!(c.delete(&long_key), Err(Error::KeyTooLarge)));
    assert!(matches!(c.put(b"k", &big), Err(Error::ValueTooLarge)));
    let mut out = vec![1];
    assert!(matches!(c.get_into(b"", &mut out), Err(Error::EmptyKey)));
    assert!(out.is_empty());
    assert_eq!(c.get(b"k").unwrap(), Some(b"v".to_vec()));
    let max_key = vec![3u8; config.key_size_max];
    c.put(&max_key, b"edge").unwrap();
    assert_eq!(c.get(&max_key).unwrap(), Some(b"edge".to_vec()));
    let stats = c.stats();
    assert_eq!(stats.get.errors, 3);
    assert_eq!(stats.put.errors, 3);
    assert_eq!(stats.delete.errors, 2);
}

/// `threads` threads on all nodes run mixed operations on `keys` keys;
/// every value read and every final value must be one somebody wrote.
pub fn concurrent_mixed<S: Store>(s: &S, threads: usize, keys: usize, ops: usize) {
    let written: Vec<HashMap<String, Vec<Vec<u8>>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut c = s.client(t % 3).unwrap();
                    let mut mine: HashMap<String, Vec<Vec<u8>>> = HashMap::new();
                    let mut x = t as u64 * 7919 + 1;
                    for i in 0..ops {
                        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                        let key = format!("hot-{}", (x >> 33) as usize % keys);
                        match (x >> 40) % 4 {
                            0 | 1 => {
                                let len = [3, 100, 300, 2000][((x >> 50) % 4) as usize];
                                let v = value(&format!("t{t}-{i}-"), len);
                                c.put(key.as_bytes(), &v).unwrap();
                                mine.entry(key).or_default().push(v);
                            }
                            2 => {
                                if let Some(v) = c.get(key.as_bytes()).unwrap() {
                                    assert!(
                                        v.starts_with(b"t") && v.contains(&b'-'),
                                        "read a value nobody wrote: {:?}",
                                        String::from_utf8_lossy(&v[..v.len().min(40)])
                                    );
                                }
                            }
                            _ => {
                                c.delete(key.as_bytes()).unwrap();
                            }
                        }
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut c = s.client(0).unwrap();
    for k in 0..keys {
        let key = format!("hot-{k}");
        if let Some(v) = c.get(key.as_bytes()).unwrap() {
            assert!(
                written
                    .iter()
                    .any(|m| m.get(&key).is_some_and(|vs| vs.contains(&v))),
                "{key} holds a value nobody wrote"
            );
        }
        // Every node agrees.
        for n in 1..3 {
            let mut other = s.client(n).unwrap();
            let v2 = other.get(key.as_bytes()).unwrap();
            assert_eq!(c.get(key.as_bytes()).unwrap(), v2, "{key}");
        }
    }
}

/// Same-key writers from many threads: the last write of every thread is
/// ordered, so after all threads finish, the key holds the last value of
/// one of them.
pub fn last_writer_wins<S: Store>(s: &S, threads: usize, rounds: usize) {
    std::thread::scope(|scope| {
        for t in 0..threads {
            scope.spawn(move || {
                let mut c = s.client(t % 3).unwrap();
                for r in 0..rounds {
                    c.put(b"contended", format!("t{t}-r{r}").as_bytes())
                        .unwrap();
                }
            });
        }
    });
    let v = s.client(1).unwrap().get(b"contended").unwrap().unwrap();
    let last: Vec<String> = (0..threads)
        .map(|t| format!("t{t}-r{}", rounds - 1))
        .collect();
    assert!(
        last.iter().any(|l| l.as_bytes() == v.as_slice()),
        "{:?}",
        String::from_utf8_lossy(&v)
    );
}

// ---------------------------------------------------------------------------
// Multi-process clusters on shared memory.

const ENV_NODE: &str = "NESSIE_BASELINE_TEST_NODE";
const ENV_CLUSTER: &str = "NESSIE_BASELINE_TEST_CLUSTER";
const ENV_SYNC: &str = "NESSIE_BASELINE_TEST_SYNC";
const NODES: usize = 3;
const KEYS_PER_NODE: usize = 40;

/// The configuration every node process of a test cluster uses.
pub fn shm_config(cluster: &str) -> Config {
    Config {
        cluster: cluster.to_owned(),
        fabric: FabricConfig::Shm { dir: None },
        attach_timeout: Duration::from_secs(60),
        value_size_max: 16 << 10,
        ..small_config()
    }
}

/// Runs `child_test` of the current test binary as `NODES` processes, one
/// per node, and checks that all of them succeed.
pub fn run_node_processes(child_test: &str) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let cluster = format!("bt{}-{nanos}", std::process::id());
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
    for node in 0..NODES {
        for i in 0..KEYS_PER_NODE {
            let k = key(node, i);
            let got = c.get(k.as_bytes()).unwrap();
            assert!(
                got.as_ref() == Some(&value(&k, 10 + i * 97)),
                "node {id} read {k}: {:?} bytes",
                got.map(|v| v.len())
            );
        }
    }
    barrier(&sync, "read", id);
    for i in (0..KEYS_PER_NODE).step_by(3) {
        assert!(c.delete(key(id, i).as_bytes()).unwrap());
    }
    barrier(&sync, "deleted", id);
    for node in 0..NODES {
        for i in 0..KEYS_PER_NODE {
            let k = key(node, i);
            let expect = (i % 3 != 0).then(|| value(&k, 10 + i * 97));
            let got = c.get(k.as_bytes()).unwrap();
            assert!(
                got == expect,
                "node {id} read {k}: {:?} bytes",
                got.map(|v| v.len())
            );
        }
    }
    // Nobody stops serving before everybody is done.
    barrier(&sync, "done", id);
    drop(c);
    drop(n);
}

// ---------------------------------------------------------------------------
// Clusters of nodes on the tcp fabric, started in this process.

/// A configuration for `nodes` nodes on 127.0.0.1 ports the OS just picked.
fn tcp_config(nodes: usize) -> Config {
    let listeners: Vec<_> = (0..nodes)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    Config {
        cluster: "baseline-tcp".into(),
        nodes,
        value_size_max: 16 << 10,
        attach_timeout: Duration::from_secs(20),
        fabric: FabricConfig::Tcp {
            peers: listeners
                .iter()
                .map(|l| l.local_addr().unwrap().to_string())
                .collect(),
            secret: "baseline-tcp-test-secret".into(),
            threads: 2,
        },
        ..small_config()
    }
}

/// Starts three nodes on the tcp fabric concurrently (as separate
/// processes would), retrying with other ports if one was taken meanwhile.
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

/// Every node writes keys, every node reads and deletes them; a remote
/// PUT costs its client two WRITEs, as on the other fabrics.
pub fn across_nodes<C: KvClient>(clients: &mut [C]) {
    let n = clients.len();
    for (id, c) in clients.iter_mut().enumerate() {
        for i in 0..20 {
            let k = format!("t{id}-{i}");
            let before = c.stats().put.verbs;
            c.put(k.as_bytes(), &value(&k, 50 + i * 300)).unwrap();
            let d = c.stats().put.verbs - before;
            assert_eq!((d.writes, d.reads, d.cas), (2, 0, 0), "{d:?}");
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
