//! # Nessie
//!
//! A distributed key-value store built only from one-sided remote memory
//! verbs — READ, WRITE and 64-bit compare-and-swap — after the Nessie design
//! (Szepesi et al., TPDS 2017). Every process of a compute job is at once a
//! storage node and a client: it owns an index table and data tables, and its
//! threads run GET, PUT and DELETE against the whole cluster without any
//! remote CPU taking part.
//!
//! ```
//! use nessie::{Cluster, Config};
//!
//! let config = Config {
//!     index_slots_per_node: 1024,
//!     data_bytes_per_node: 16 << 20,
//!     ..Config::default()
//! };
//! let cluster = Cluster::local(config)?;   // three nodes in this process
//! let mut a = cluster.client(0)?;
//! let mut b = cluster.client(2)?;
//! a.put(b"job/map/0/reduce/1", b"partition")?;
//! assert_eq!(b.get(b"job/map/0/reduce/1")?.as_deref(), Some(&b"partition"[..]));
//! assert!(b.delete(b"job/map/0/reduce/1")?);
//! assert_eq!(a.get(b"job/map/0/reduce/1")?, None);
//! # Ok::<(), nessie::Error>(())
//! ```
//!
//! ## Architecture
//!
//! * [`fabric`] — the `nessie-fabric` crate, the only way to touch another
//!   node's memory: a [`fabric::Fabric`] executes READ, WRITE and CAS on
//!   registered regions, singly or as a batch; an [`fabric::Endpoint`] counts
//!   what one client issues. Backends: [`fabric::LocalFabric`] (all nodes in
//!   one process), [`fabric::ShmFabric`] (one process per node, regions in
//!   shared files), [`fabric::TcpFabric`] (one process per node on any hosts:
//!   a software NIC serving verbs over authenticated TCP connections) and,
//!   with the `verbs` feature, RDMA NICs. It knows nothing of the store.
//! * [`layout`] — every byte layout the store keeps in remote memory: index
//!   entries ([`layout::Ite`]), data entries ([`layout::DteHeader`]) and the
//!   ids of the store's regions ([`layout::region`]), little-endian, field
//!   widths checked at compile time.
//! * [`bootstrap`] — a process's place in its job (node id, node count,
//!   hosts, rendezvous address) from Slurm, MPI or torchrun variables or
//!   explicit settings, and the cluster secret from outside the command line.
//! * [`runtime`] — the node runtime: how a process starts the nodes it
//!   hosts, for every store of the project (configuration checks, fabric,
//!   clocks, data tables and the background recycler), the state they share,
//!   the clock watch and the periodic threads, and [`Cluster`] and [`Node`]
//!   on top of them. Everything else at the crate root is the store's base:
//!   configuration, errors, statistics, clocks and the client.
//! * [`index`] — where a key may live: `H` candidate slots over all nodes'
//!   index tables, and filter bits.
//! * [`data`] — size classes, per-node slot allocation, expiry-gated reuse and
//!   the background recycler.
//! * [`cache`] — each client's LRU of committed entries keyed by ITE value.
//! * `protocol` (private) — GET, PUT, DELETE, MIGRATE and helping; its module
//!   documentation states the invariants it keeps.
//! * `metrics` (private) — each node's opt-in Prometheus endpoint
//!   ([`MetricsConfig`], `Config::metrics`): per-client cells the node
//!   sums at each scrape, served by a small HTTP loop on its own thread;
//!   nothing runs and nothing is counted when it is off.
//! * [`Cluster`] (in-process) and [`Node`] (one process of a multi-process
//!   cluster) hand out [`Client`]s; every store of the project implements
//!   [`KvClient`].
//!
//! ## Thread safety
//!
//! `Cluster` and `Node` are `Send + Sync`; a [`Client`] is `Send` but not
//! `Sync`: use one per thread. Clients of one process share the node's
//! allocator and fabric.
//!
//! ## Failure model
//!
//! An operation that returns `Ok` has taken effect exactly once. One that
//! returns [`Error::Timeout`] (or whose process dies) may or may not have;
//! its half-done entries are finished or undone by whichever client meets
//! them once its owner is past `op_timeout + 2·max_clock_skew`. With
//! `Config::replicas` = 1 (the default) data lives in the memory of the node
//! that wrote it, and losing a host loses its entries; with r ≥ 2 every
//! entry and index slot is on r nodes, the survivors of a lost host agree on
//! a view without it and serve its shares, and [`Node::rejoin`] restores a
//! replacement (docs/replication.md).

#![deny(missing_docs)]

pub mod bootstrap;
pub mod cache;
mod client;
pub mod clock;
mod config;
pub mod data;
mod error;
pub mod index;
mod kv;
pub mod layout;
mod membership;
mod metrics;
mod protocol;
mod replica;
pub mod runtime;
mod stats;

pub use client::Client;
pub use clock::{Clock, WallClock};
pub use config::{
    ChecksumPolicy, Config, FabricConfig, MetricsConfig, Optimizations, MAX_DURATION,
    MAX_VALUE_SIZE, MIN_CLASS_BYTES,
};
pub use error::Error;
pub use index::Placement;
pub use kv::KvClient;
/// One-sided verbs on other nodes' memory: the `nessie-fabric` crate.
pub use nessie_fabric as fabric;
pub use replica::{RestoreFigures, View, Views};
pub use runtime::cluster::{Cluster, ClusterBuilder};
pub use runtime::node::Node;
pub use runtime::store::store_regions;
pub use stats::{OpKind, OpStats, RetryCause, RetryCounts, Stats};

/// Whether this build has the `verbs` fabric backend (cargo feature
/// `verbs`). Without it a node refuses `fabric = verbs` when it opens the
/// fabric; callers that start many processes can refuse earlier.
pub const VERBS_BUILT: bool = cfg!(feature = "verbs");
