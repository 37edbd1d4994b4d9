//! # Nessie
//!
//! A distributed key-value store built only from one-sided remote memory
//! verbs — READ, WRITE and 64-bit compare-and-swap — after the Nessie design
//! (Szepesi et al., TPDS 2017). Every process of a compute job is at once a
//! storage node and a client: it owns an index table and data tables, and its
//! threads run GET, PUT and DELETE against the whole cluster without any
//! remote CPU taking part.
//!
//! (The rest of the crate documentation is filled in with the protocol.)

#![deny(missing_docs)]

pub mod cache;
mod client;
pub mod clock;
mod cluster;
mod config;
pub mod data;
mod error;
pub mod fabric;
pub mod index;
mod kv;
pub mod layout;
mod node;
mod protocol;
mod stats;
mod store;

pub use client::Client;
pub use clock::{Clock, WallClock};
pub use cluster::{Cluster, ClusterBuilder};
pub use config::{Config, FabricConfig, Optimizations, MAX_VALUE_SIZE, MIN_CLASS_BYTES};
pub use error::Error;
pub use kv::KvClient;
pub use node::Node;
pub use stats::{OpKind, OpStats, RetryCounts, Stats};
pub use store::store_regions;
