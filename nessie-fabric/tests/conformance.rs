//! The fabric conformance suite on every backend that runs without
//! hardware: `local` (one fabric shared by all nodes), `shm` (one
//! `ShmFabric` per node, opened from threads of this process, each as its
//! own node, in a fresh directory) and `tcp` (one `TcpFabric` per node,
//! each serving on its own 127.0.0.1 port).

use nessie_fabric::conformance::{ClusterSpec, Factory, FORMAT_VERSION};
use nessie_fabric::{
    Fabric, FabricError, LocalFabric, Membership, ShmFabric, ShmOptions, TcpFabric, TcpOptions,
};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::ScopedJoinHandle;
use std::time::Duration;

/// Node `node` of a cluster of `spec`'s shape.
fn membership(spec: &ClusterSpec, cluster_id: u64, node: usize) -> Membership {
    Membership {
        cluster_id,
        format_version: FORMAT_VERSION,
        node,
        nodes: spec.nodes,
        regions: spec.regions.clone(),
    }
}

fn local(check: impl FnOnce(Factory<'_>)) {
    let make = |spec: &ClusterSpec| {
        let fabric: Arc<dyn Fabric> =
            Arc::new(LocalFabric::new(spec.nodes, &spec.regions).unwrap());
        vec![fabric; spec.nodes]
    };
    check(&make);
}

/// A scratch directory on tmpfs when there is one (as in production), else
/// in the default temporary directory.
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::Builder::new()
            .prefix("nessie-conformance-")
            .tempdir_in(shm)
            .expect("tempdir in /dev/shm")
    } else {
        tempfile::tempdir().expect("tempdir")
    }
}

/// Opens one `ShmFabric` per node concurrently (each waits for its peers'
/// files), in a directory of its own.
fn open_shm_cluster(dir: PathBuf, cluster_id: u64, spec: &ClusterSpec) -> Vec<Arc<dyn Fabric>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..spec.nodes)
            .map(|node| {
                let options = ShmOptions {
                    dir: dir.clone(),
                    membership: membership(spec, cluster_id, node),
                    attach_timeout: Duration::from_secs(10),
                    replace: false,
                };
                s.spawn(move || ShmFabric::open(&options))
            })
            .collect();
        join_views(handles)
    })
}

/// The fabrics the opening threads return, one view per node in order.
fn join_views<F: Fabric + 'static>(
    handles: Vec<ScopedJoinHandle<'_, Result<F, FabricError>>>,
) -> Vec<Arc<dyn Fabric>> {
    handles
        .into_iter()
        .enumerate()
        .map(|(node, h)| {
            let fabric = h
                .join()
                .expect("opening thread")
                .unwrap_or_else(|e| panic!("node {node}: {e}"));
            Arc::new(fabric) as Arc<dyn Fabric>
        })
        .collect()
}

fn shm(check: impl FnOnce(Factory<'_>)) {
    let dir = scratch();
    let clusters = AtomicU64::new(0);
    let make = |spec: &ClusterSpec| {
        let n = clusters.fetch_add(1, Ordering::Relaxed);
        open_shm_cluster(dir.path().join(format!("c{n}")), 0xc0f0_0000 + n, spec)
    };
    check(&make);
}

/// Opens one `TcpFabric` per node concurrently (each connects to the
/// others), every node on a port of its own.
fn open_tcp_cluster(cluster_id: u64, spec: &ClusterSpec) -> Vec<Arc<dyn Fabric>> {
    let listeners: Vec<TcpListener> = (0..spec.nodes)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a loopback port"))
        .collect();
    let peers: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().expect("local address").to_string())
        .collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = listeners
            .into_iter()
            .enumerate()
            .map(|(node, listener)| {
                let options = TcpOptions {
                    closed: false,
                    membership: membership(spec, cluster_id, node),
                    peers: peers.clone(),
                    secret: "conformance-secret-0123456789".into(),
                    threads: 2,
                    attach_timeout: Duration::from_secs(20),
                    handshake_timeout: Duration::from_secs(5),
                    io_timeout: Duration::from_secs(20),
                    frame_limit: 1 << 20,
                    rendezvous: None,
                    joins: nessie_fabric::Joins::Off,
                };
                s.spawn(move || TcpFabric::with_listener(&options, listener))
            })
            .collect();
        join_views(handles)
    })
}

fn tcp(check: impl FnOnce(Factory<'_>)) {
    let clusters = AtomicU64::new(0);
    let make = |spec: &ClusterSpec| {
        let n = clusters.fetch_add(1, Ordering::Relaxed);
        open_tcp_cluster(0x7c90_0000 + n, spec)
    };
    check(&make);
}

mod local {
    use super::local;
    nessie_fabric::fabric_conformance_tests!(local, threads: 4, per_thread: 5_000, rounds: 5_000);
}

mod shm {
    use super::shm;
    nessie_fabric::fabric_conformance_tests!(shm, threads: 4, per_thread: 5_000, rounds: 5_000);
}

mod tcp {
    use super::tcp;
    nessie_fabric::fabric_conformance_tests!(tcp, threads: 4, per_thread: 5_000, rounds: 5_000);
}

/// The in-process backends and `tcp` promise a node's verbs in batch order:
/// the store's PUT relies on it to save a round trip, and the suite's
/// `check_batch_order` holds them to it.
#[test]
fn which_backends_keep_a_nodes_batch_order() {
    type Backend = fn(&dyn Fn(Factory<'_>));
    let promises = |backend: Backend| {
        let kept = std::cell::Cell::new(None);
        backend(&|make: Factory<'_>| {
            let views = make(&nessie_fabric::conformance::suite_spec());
            kept.set(Some(views.iter().all(|v| v.keeps_batch_order())));
        });
        kept.get()
    };
    assert_eq!(promises(|c| local(c)), Some(true), "local");
    assert_eq!(promises(|c| shm(c)), Some(true), "shm");
    assert_eq!(promises(|c| tcp(c)), Some(true), "tcp");
}
