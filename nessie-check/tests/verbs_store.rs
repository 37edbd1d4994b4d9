//! The store on the `verbs` backend: the same operations issue the same
//! verbs as on `shm`.
//!
//! The test needs an RDMA device, so it is `#[ignore]`d: run it with
//! `--ignored` and the device's name in `NESSIE_VERBS_DEVICE` (optionally a
//! GID index in `NESSIE_VERBS_GID`), e.g. Soft-RoCE's `rxe0` inside the VM
//! of `scripts/rxe-vm.sh`. The verbs cluster comes from
//! `nessie_fabric::conformance::verbs` (three `VerbsFabric`s opened in this
//! process, meeting through the authenticated rendezvous on 127.0.0.1);
//! the fabric's own suites on `verbs` are `nessie-fabric/tests/verbs_fabric.rs`.

#![cfg(feature = "verbs")]

use nessie::fabric::{Membership, ShmFabric, ShmOptions, VerbCounts};
use nessie::layout::FORMAT_VERSION;
use nessie::{store_regions, Config, Node, Stats};
use nessie_fabric::conformance::verbs::open_cluster;
use nessie_fabric::conformance::ClusterSpec;
use std::sync::Arc;
use std::time::Duration;

fn store_config(cluster: &str) -> Config {
    Config {
        cluster: cluster.into(),
        nodes: 3,
        index_slots_per_node: 1024,
        data_bytes_per_node: 8 << 20,
        value_size_max: 16 << 10,
        ..Config::default()
    }
}

/// What [`scripted_ops`] measured: each client's statistics, and the verbs
/// of one PUT of a new key (node 0) and one GET of it (node 1, remote).
struct Measured {
    a: Stats,
    b: Stats,
    one_put: VerbCounts,
    one_get: VerbCounts,
}

/// Runs the same operations on a three-node cluster: node 0 writes and
/// reads, node 1 reads.
fn scripted_ops(nodes: &[Node]) -> Measured {
    let mut a = nodes[0].client().unwrap();
    let mut b = nodes[1].client().unwrap();
    let before = a.stats().put.verbs;
    a.put(b"verbs-count-first", &[7u8; 1000]).unwrap();
    let one_put = a.stats().put.verbs - before;
    let before = b.stats().get.verbs;
    assert_eq!(b.get(b"verbs-count-first").unwrap(), Some(vec![7u8; 1000]));
    let one_get = b.stats().get.verbs - before;
    for i in 0..8 {
        let key = format!("verbs-count-{i}");
        a.put(key.as_bytes(), &vec![i as u8; 100 + 1000 * i])
            .unwrap();
        assert_eq!(
            a.get(key.as_bytes()).unwrap().map(|v| v.len()),
            Some(100 + 1000 * i)
        );
        assert!(b.get(key.as_bytes()).unwrap().is_some());
        a.put(key.as_bytes(), b"second").unwrap();
        assert_eq!(
            b.get(key.as_bytes()).unwrap().as_deref(),
            Some(&b"second"[..])
        );
    }
    assert!(a.delete(b"verbs-count-3").unwrap());
    assert_eq!(b.get(b"verbs-count-3").unwrap(), None);
    Measured {
        a: a.stats(),
        b: b.stats(),
        one_put,
        one_get,
    }
}

fn show(c: &VerbCounts) -> String {
    format!(
        "{} READ, {} WRITE, {} CAS, {} B, {} round trips ({} local, {} remote verbs)",
        c.reads,
        c.writes,
        c.cas,
        c.bytes(),
        c.round_trips,
        c.local,
        c.remote
    )
}

#[test]
#[ignore = "needs an RDMA device: set NESSIE_VERBS_DEVICE and run with --ignored"]
fn store_on_verbs_issues_the_same_verbs_as_on_shm() {
    let config = store_config("verbs-counts");
    let regions = store_regions(&config);
    let spec = ClusterSpec {
        nodes: 3,
        regions: regions.clone(),
    };
    let verbs_nodes: Vec<Node> = open_cluster(&spec)
        .into_iter()
        .enumerate()
        .map(|(n, f)| Node::with_fabric(config.clone(), n, Arc::new(f)).unwrap())
        .collect();
    let on_verbs = scripted_ops(&verbs_nodes);
    drop(verbs_nodes);

    let dir = tempfile::tempdir().unwrap();
    let shm: Vec<ShmFabric> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|node| {
                let o = ShmOptions {
                    dir: dir.path().to_path_buf(),
                    membership: Membership {
                        cluster_id: config.cluster_id(),
                        format_version: FORMAT_VERSION,
                        node,
                        nodes: 3,
                        regions: regions.clone(),
                    },
                    attach_timeout: Duration::from_secs(10),
                    replace: false,
                };
                s.spawn(move || ShmFabric::open(&o).unwrap())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let shm_nodes: Vec<Node> = shm
        .into_iter()
        .enumerate()
        .map(|(n, f)| Node::with_fabric(config.clone(), n, Arc::new(f)).unwrap())
        .collect();
    let on_shm = scripted_ops(&shm_nodes);

    assert_eq!(on_verbs.one_put, on_shm.one_put, "one PUT");
    assert_eq!(on_verbs.one_get, on_shm.one_get, "one GET");
    for (who, v, s) in [
        ("node 0", on_verbs.a, on_shm.a),
        ("node 1", on_verbs.b, on_shm.b),
    ] {
        assert_eq!(v.get.verbs, s.get.verbs, "{who}: GET verbs");
        assert_eq!(v.put.verbs, s.put.verbs, "{who}: PUT verbs");
        assert_eq!(v.delete.verbs, s.delete.verbs, "{who}: DELETE verbs");
    }
    println!(
        "VERB-COUNTS one PUT of a new 1000 B value from node 0, on verbs and on shm: {}",
        show(&on_verbs.one_put)
    );
    println!(
        "VERB-COUNTS one GET of it from node 1, on verbs and on shm: {}",
        show(&on_verbs.one_get)
    );
}
