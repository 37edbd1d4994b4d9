//! Clusters of [`VerbsFabric`]s for tests, on the RDMA device named by
//! `NESSIE_VERBS_DEVICE` (optionally with the GID index in
//! `NESSIE_VERBS_GID`), e.g. Soft-RoCE's `rxe0` inside the VM of
//! `scripts/rxe-vm.sh`. Each cluster's nodes are opened in this process,
//! every one with its own device context and queue pairs, meeting through
//! the authenticated rendezvous on 127.0.0.1, so every verb (even node 0's
//! to node 1) goes through the NIC.

use super::{ClusterSpec, FORMAT_VERSION};
use crate::{
    FabricError, Membership, RcTimeouts, RegionSpec, RendezvousOptions, VerbsFabric, VerbsOptions,
    DEFAULT_LANES,
};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The variable naming the RDMA device the tests use.
pub const DEVICE_ENV: &str = "NESSIE_VERBS_DEVICE";
/// The variable giving the GID index the tests use (optional).
pub const GID_ENV: &str = "NESSIE_VERBS_GID";
/// The secret of the suites' verbs clusters.
pub const SECRET: &str = "verbs-fabric-test-secret-0123456789";

/// The RDMA device the tests use.
///
/// # Panics
/// If [`DEVICE_ENV`] is not set (the test cannot run).
#[must_use]
pub fn device() -> String {
    std::env::var(DEVICE_ENV).unwrap_or_else(|_| {
        panic!("set {DEVICE_ENV} to an RDMA device (e.g. rxe0) to run the verbs tests")
    })
}

/// The GID index the tests use, if [`GID_ENV`] gives one.
#[must_use]
pub fn gid_index() -> Option<u32> {
    std::env::var(GID_ENV)
        .ok()
        .and_then(|v| v.trim().parse().ok())
}

/// A fresh cluster id per cluster, so no two clusters of a run can talk.
#[must_use]
pub fn next_cluster() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    0x7665_7262_0000_0000
        | u64::from(std::process::id()) << 16
        | NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Node `node`'s options in a cluster of `nodes` meeting at `address`,
/// with [`DEFAULT_LANES`] lanes, [`SECRET`] and a rendezvous timeout of a
/// minute.
///
/// # Panics
/// If [`DEVICE_ENV`] is not set.
#[must_use]
pub fn options(
    node: usize,
    nodes: usize,
    address: &str,
    cluster_id: u64,
    regions: &[RegionSpec],
) -> VerbsOptions {
    VerbsOptions {
        device: Some(device()),
        gid_index: gid_index(),
        rendezvous: RendezvousOptions {
            membership: Membership {
                cluster_id,
                format_version: FORMAT_VERSION,
                node,
                nodes,
                regions: regions.to_vec(),
            },
            secret: SECRET.into(),
            address: address.into(),
            serve: node == 0,
            timeout: Duration::from_secs(60),
        },
        lanes: DEFAULT_LANES,
        retransmission: RcTimeouts::default(),
        joins: crate::Joins::Off,
    }
}

/// Opens one fabric per option set concurrently (each waits for the
/// others through the rendezvous), the serving node on `listener`.
///
/// # Panics
/// If an opening thread panics.
#[must_use]
pub fn open_all(
    all: Vec<VerbsOptions>,
    listener: TcpListener,
) -> Vec<Result<VerbsFabric, FabricError>> {
    let mut listener = Some(listener);
    std::thread::scope(|s| {
        let handles: Vec<_> = all
            .into_iter()
            .map(|o| {
                let serving = listener.take().filter(|_| o.rendezvous.serve);
                s.spawn(move || match serving {
                    Some(l) => VerbsFabric::open_serving(&o, l),
                    None => VerbsFabric::open(&o),
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("opening thread"))
            .collect()
    })
}

/// A listener for the serving node on 127.0.0.1 and its address.
///
/// # Panics
/// If no port on 127.0.0.1 can be bound.
#[must_use]
pub fn rendezvous_listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind the rendezvous");
    let addr = l.local_addr().expect("bound address").to_string();
    (l, addr)
}

/// A fresh cluster of `spec`'s shape ([`options`] for every node, a fresh
/// cluster id), one fabric per node in node order.
///
/// # Panics
/// If [`DEVICE_ENV`] is not set or a node does not open.
#[must_use]
pub fn open_cluster(spec: &ClusterSpec) -> Vec<VerbsFabric> {
    let (listener, addr) = rendezvous_listener();
    let id = next_cluster();
    let all: Vec<_> = (0..spec.nodes)
        .map(|n| options(n, spec.nodes, &addr, id, &spec.regions))
        .collect();
    open_all(all, listener)
        .into_iter()
        .enumerate()
        .map(|(n, f)| f.unwrap_or_else(|e| panic!("node {n}: {e}")))
        .collect()
}
