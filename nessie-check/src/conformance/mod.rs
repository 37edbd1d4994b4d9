//! Conformance suites: [`kv`] for every store behind [`nessie::KvClient`].
//!
//! The fabric's suites (every backend, and the bootstrap of the backends
//! whose nodes meet through the authenticated rendezvous) live with the
//! fabric, as `nessie_fabric::conformance` under that crate's cargo
//! feature `conformance`; this crate's tests enable it.

pub mod kv;
