//! Conformance suites: [`fabric`] for every [`nessie::fabric::Fabric`]
//! backend, [`bootstrap`] for every backend whose nodes meet through the
//! authenticated rendezvous, [`kv`] for every store behind
//! [`nessie::KvClient`].
//!
//! The fabric suite's items are re-exported here, where its callers have
//! always found them.

pub mod bootstrap;
pub mod fabric;
pub mod kv;

pub use fabric::{
    check_batches, check_cas, check_concurrent_cas, check_endpoint_counts, check_errors,
    check_read_write, check_shape, check_word_atomicity, run_all, suite_spec, ClusterSpec, Factory,
    LARGE, LARGE_LEN, SMALL, SMALL_LEN,
};
