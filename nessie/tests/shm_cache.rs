//! On `shm` every node's memory is mapped into the process, so a READ of
//! another node's entry costs what one of the own node's does: the DTE
//! cache keeps nothing there, and a GET of another node's entry reads it
//! again, whole, into the caller's buffer (docs/design.md#cache). The
//! `local` fabric, which stands in for a cluster, caches it.

use nessie::{Cluster, Config, FabricConfig, Node, Placement};

fn config() -> Config {
    Config {
        nodes: 2,
        index_slots_per_node: 1024,
        data_bytes_per_node: 4 << 20,
        value_size_max: 16 << 10,
        // Every candidate of a key on one node, so that a key of node 1
        // is read by node 0 from node 1 alone.
        placement: Placement::OneNode,
        ..Config::default()
    }
}

/// A key all of whose candidates are on node 1.
fn key_on_node_1(config: &Config) -> Vec<u8> {
    let h = nessie::index::KeyHasher::new(config);
    (0..)
        .map(|i| format!("key-{i}").into_bytes())
        .find(|k| h.candidates(k).iter().all(|c| c.node == 1))
        .unwrap()
}

/// Node 0 GETs a key of node 1 three times; returns the cache hits, the
/// values landed and the bytes each GET read.
fn gets_from_node_0(reader: &mut nessie::Client, key: &[u8]) -> (u64, u64, Vec<u64>) {
    let mut read = Vec::new();
    let mut out = Vec::new();
    for _ in 0..3 {
        let before = reader.stats().get.verbs.read_bytes;
        assert!(reader.get_into(key, &mut out).unwrap());
        assert_eq!(out, vec![5u8; 10 << 10]);
        read.push(reader.stats().get.verbs.read_bytes - before);
    }
    let get = reader.stats().get;
    (get.cache_hits, get.values_landed, read)
}

#[test]
fn shm_caches_nothing_and_local_caches_other_nodes_entries() {
    let dir = tempfile::tempdir().unwrap();
    let shm = Config {
        cluster: format!("shm-cache-{}", std::process::id()),
        fabric: FabricConfig::Shm {
            dir: Some(dir.path().to_path_buf()),
        },
        ..config()
    };
    let key = key_on_node_1(&shm);
    let nodes: Vec<Node> = std::thread::scope(|s| {
        let started: Vec<_> = (0..2)
            .map(|n| {
                let c = shm.clone();
                s.spawn(move || Node::start(c, n).unwrap())
            })
            .collect();
        started.into_iter().map(|h| h.join().unwrap()).collect()
    });
    nodes[1]
        .client()
        .unwrap()
        .put(&key, &[5; 10 << 10])
        .unwrap();
    let (hits, landed, read) = gets_from_node_0(&mut nodes[0].client().unwrap(), &key);
    assert_eq!(
        (hits, landed),
        (0, 3),
        "shm caches nothing: every value lands"
    );
    assert!(read[0] > 10 << 10, "the whole entry: {read:?}");
    assert!(
        read.iter().all(|&r| r == read[0]),
        "each GET the same: {read:?}"
    );
    drop(nodes);

    let cluster = Cluster::local(config()).unwrap();
    cluster
        .client(1)
        .unwrap()
        .put(&key, &[5; 10 << 10])
        .unwrap();
    let (hits, landed, read) = gets_from_node_0(&mut cluster.client(0).unwrap(), &key);
    assert_eq!(
        (hits, landed),
        (2, 0),
        "local caches node 1's entry after its first GET, which it copies"
    );
    assert!(
        read[1] < 64 && read[2] < 64,
        "cached GETs read ITEs only: {read:?}"
    );
}
