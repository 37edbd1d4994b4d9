//! # nessie-sd: the server-driven baseline
//!
//! The HERD-like store the Nessie paper calls `NessieSD` (§5): each key has a
//! **home node** (hash mod nodes) holding its index entry and its data;
//! clients WRITE requests into request rings polled by the home node's
//! server worker threads, which execute GET, PUT and DELETE with local
//! memory operations and WRITE the reply into the client's response ring.
//! A remote operation costs the client exactly two WRITEs (request and
//! reply) and no READ. It shares `nessie`'s fabric, layouts, hashing and
//! data-slot allocator, takes the same [`nessie::Config`] and implements
//! [`nessie::KvClient`], so the harness drives it like Nessie.
//!
//! ```
//! use nessie::{Config, KvClient};
//!
//! let config = Config {
//!     index_slots_per_node: 1024,
//!     data_bytes_per_node: 8 << 20,
//!     ..Config::default()
//! };
//! let cluster = nessie_sd::Cluster::local(config)?;
//! let mut client = cluster.client(0)?;
//! client.put(b"key", b"value")?;
//! assert_eq!(client.get(b"key")?, Some(b"value".to_vec()));
//! assert!(client.delete(b"key")?);
//! # Ok::<(), nessie::Error>(())
//! ```
//!
//! ## Modules
//!
//! * [`table`] — placement (home node, cuckoo candidates within the home
//!   node's index table) and the lock-free read path [`table::lookup`],
//!   used by server workers for GET and by `nessie-hy`'s clients one-sided.
//! * `messaging` — FaRM-style rings: frames written with one WRITE,
//!   detected by header and trailer, zeroed after use; request-ring heads
//!   published lazily by WRITE into the sender's memory; frame layouts in
//!   [`ring`].
//! * [`ring`] — the byte layouts of ring frames, requests and replies, and
//!   the regions that hold the rings.
//! * `server` — worker threads: polling, lock striping per key, PUT /
//!   DELETE with CAS on ITEs, cuckoo displacement, staging of replaced
//!   entries for expiry-gated reuse.
//! * `client` — [`Client`]: validates input, sends one request per
//!   operation, maps the reply to a typed [`nessie::Error`], and counts
//!   verbs in [`nessie::Stats`] (its own WRITE through its endpoint, plus
//!   the reply WRITE the server issued for it).
//! * `cluster` — [`Cluster::local`] (all nodes in this process on
//!   [`nessie::fabric::LocalFabric`]) and [`Node::start`] (one process per
//!   node on [`nessie::fabric::ShmFabric`] or
//!   [`nessie::fabric::TcpFabric`]).
//!
//! ## Counting
//!
//! Client statistics count verbs an operation moved over the fabric on the
//! client's behalf: the request WRITE (issued by the client) and the reply
//! WRITE (issued by the server, counted by the client when it arrives, with
//! no extra round trip). Same-node operations take the same path through
//! the node's own memory and are counted as local verbs
//! ([`nessie::fabric::VerbCounts::local`]). Polling one's own memory is not
//! a verb. Server-side work — table accesses in local memory and the
//! occasional request-ring head update — is counted per node by
//! [`Cluster::server_verbs`] / [`Node::server_verbs`].
//!
//! ## Threads
//!
//! Each node runs `config.server_workers` polling threads; they spin (the
//! design being measured) but yield the CPU when idle polls pile up, and
//! stop when their [`Cluster`] or [`Node`] drops. A [`Client`] is `Send`;
//! each thread makes its own, at most [`CLIENT_SLOTS`] per node at a time.

#![deny(missing_docs)]

mod client;
mod cluster;
mod messaging;
mod poll;
pub mod ring;
mod server;
pub mod table;

pub use client::{Client, OneSided};
pub use cluster::{Cluster, Node, CLIENT_SLOTS};
