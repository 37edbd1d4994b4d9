//! The fabric conformance suite on every backend that runs without
//! hardware: `local` (one fabric shared by all nodes), `shm` (one
//! `ShmFabric` per node, opened from threads of this process, each as its
//! own node, in a fresh directory) and `tcp` (one `TcpFabric` per node,
//! each serving on its own 127.0.0.1 port).

use nessie::fabric::{Fabric, LocalFabric, ShmFabric, ShmOptions, TcpFabric, TcpOptions};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use nessie_check::conformance::{self, ClusterSpec, Factory};

fn local(check: impl FnOnce(Factory<'_>)) {
    let make = |spec: &ClusterSpec| {
        let fabric: Arc<dyn Fabric> = Arc::new(LocalFabric::new(spec.nodes, &spec.regions));
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
                    cluster_id,
                    node,
                    nodes: spec.nodes,
                    regions: spec.regions.clone(),
                    attach_timeout: Duration::from_secs(10),
                };
                s.spawn(move || ShmFabric::open(&options))
            })
            .collect();
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
    })
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
                    node,
                    nodes: spec.nodes,
                    cluster_id,
                    regions: spec.regions.clone(),
                    peers: peers.clone(),
                    secret: "conformance-secret-0123456789".into(),
                    threads: 2,
                    attach_timeout: Duration::from_secs(20),
                    handshake_timeout: Duration::from_secs(5),
                    io_timeout: Duration::from_secs(20),
                    frame_limit: 1 << 20,
                };
                s.spawn(move || TcpFabric::with_listener(&options, listener))
            })
            .collect();
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

macro_rules! suite {
    ($backend:ident) => {
        mod $backend {
            use super::*;

            #[test]
            fn every_view_reports_the_cluster_shape() {
                $backend(conformance::check_shape);
            }

            #[test]
            fn writes_are_read_back_through_every_view() {
                $backend(conformance::check_read_write);
            }

            #[test]
            fn cas_swaps_only_on_a_match_and_returns_the_old_value() {
                $backend(conformance::check_cas);
            }

            #[test]
            fn batches_execute_every_verb_and_write_results_back() {
                $backend(conformance::check_batches);
            }

            #[test]
            fn bad_verbs_fail_with_their_own_error_and_change_nothing() {
                $backend(conformance::check_errors);
            }

            #[test]
            fn concurrent_cas_increments_lose_nothing() {
                $backend(|make| conformance::check_concurrent_cas(make, 4, 5_000));
            }

            #[test]
            fn concurrent_writes_never_tear_a_word() {
                $backend(|make| conformance::check_word_atomicity(make, 5_000));
            }

            #[test]
            fn endpoints_count_verbs_bytes_and_round_trips() {
                $backend(conformance::check_endpoint_counts);
            }

            #[test]
            fn whole_suite_passes_on_one_factory() {
                $backend(conformance::run_all);
            }
        }
    };
}

suite!(local);
suite!(shm);
suite!(tcp);
