//! # nessie-hy: the hybrid baseline
//!
//! The FaRM-like store the Nessie paper calls `NessieHY` (§5): **GETs are
//! client-driven** — the client reads the key's home node's index and data
//! tables itself with one-sided READs — while **PUT and DELETE are
//! server-driven**, sent as requests to the home node's server workers
//! exactly as in [`nessie_sd`]. Everything but the GET is `nessie-sd`'s:
//! the same tables, placement, rings, server workers and write path, the
//! same [`nessie::Config`], and the same [`nessie::KvClient`] interface.
//!
//! ```
//! use nessie::{Config, KvClient};
//!
//! let config = Config {
//!     index_slots_per_node: 1024,
//!     data_bytes_per_node: 8 << 20,
//!     ..Config::default()
//! };
//! let cluster = nessie_hy::Cluster::local(config)?;
//! let mut client = cluster.client(1)?;
//! client.put(b"key", b"value")?; // two WRITEs: request and reply
//! assert_eq!(client.get(b"key")?, Some(b"value".to_vec())); // READs only
//! # Ok::<(), nessie::Error>(())
//! ```
//!
//! ## The GET
//!
//! [`nessie_sd::table::lookup`], issued through the client's endpoint: one
//! batch READ of the key's candidate ITEs on its home node, then for each
//! occupied candidate in order one READ of the DTE header and key, and on a
//! key match one READ of the value. As in the paper it has no filter bits
//! (a candidate occupied by another key costs a header READ), no cache, no
//! previous versions and no multi-read (header and value are separate
//! READs). Same-node GETs read the node's own memory through the same
//! endpoint and are counted as local verbs.
//!
//! **Consistency with concurrent server-side PUTs: checksum and
//! generation, no ITE re-read.** A server never modifies a DTE that an ITE
//! points at; it writes a new DTE into a fresh slot, then CASes the ITE,
//! and an unlinked DTE stays intact for `expiry` before its slot can be
//! reused. So the value a GET reads is the key's value at the moment it
//! read the ITE, unless the reader stalled for longer than `expiry` and the
//! slot was recycled: that is caught by comparing the DTE's generation
//! with the ITE's (every reuse bumps it) and by the checksum over header,
//! key and value (a slot rewritten under the reader). Either mismatch
//! retries the GET. Re-reading the ITE after the value would cost every GET
//! a fourth round trip and detect nothing the checks do not. A miss is
//! confirmed by re-reading the candidate ITEs (nothing changed → the key
//! was absent), because a concurrent cuckoo move could otherwise hide the
//! key between two of the reader's ITE reads. The full argument is in
//! [`nessie_sd::table`].
//!
//! ## Threads
//!
//! As `nessie-sd`: `config.server_workers` polling workers per node, which
//! here serve only PUTs and DELETEs; a [`Client`] is one thread's.

#![deny(missing_docs)]

use nessie::fabric::{Fabric, NodeId, RegionSpec, VerbCounts};
use nessie::{Config, Error, KvClient, OpKind, Stats};
use nessie_sd::table::{lookup, Table};
use std::sync::Arc;

/// An in-process cluster on the local fabric (see
/// [`nessie_sd::Cluster`], whose nodes, rings and servers it runs).
#[derive(Debug)]
pub struct Cluster {
    inner: nessie_sd::Cluster,
}

impl Cluster {
    /// Starts a cluster of `config.nodes` nodes in this process.
    ///
    /// # Errors
    /// As [`nessie_sd::Cluster::local`].
    pub fn local(config: Config) -> Result<Cluster, Error> {
        Ok(Cluster {
            inner: nessie_sd::Cluster::local(config)?,
        })
    }

    /// A new client on `node`.
    ///
    /// # Errors
    /// As [`nessie_sd::Cluster::client`].
    pub fn client(&self, node: NodeId) -> Result<Client, Error> {
        Ok(Client {
            inner: self.inner.client(node)?,
        })
    }

    /// The configuration the cluster runs with.
    #[must_use]
    pub fn config(&self) -> &Config {
        self.inner.config()
    }

    /// The fabric every node and client uses.
    #[must_use]
    pub fn fabric(&self) -> Arc<dyn Fabric> {
        self.inner.fabric()
    }

    /// Verbs the server workers issued (PUTs, DELETEs, replies, ring head
    /// updates).
    #[must_use]
    pub fn server_verbs(&self) -> VerbCounts {
        self.inner.server_verbs()
    }
}

/// One node of a cluster of processes on the shm or tcp fabric (see
/// [`nessie_sd::Node`]).
#[derive(Debug)]
pub struct Node {
    inner: nessie_sd::Node,
}

impl Node {
    /// Creates this node's regions, waits for every peer's and starts the
    /// node's server workers.
    ///
    /// # Errors
    /// As [`nessie_sd::Node::start`].
    pub fn start(config: Config, node_id: NodeId) -> Result<Node, Error> {
        Ok(Node {
            inner: nessie_sd::Node::start(config, node_id)?,
        })
    }

    /// A new client on this node.
    ///
    /// # Errors
    /// As [`nessie_sd::Node::client`].
    pub fn client(&self) -> Result<Client, Error> {
        Ok(Client {
            inner: self.inner.client()?,
        })
    }

    /// Runs node `node_id` on a fabric opened by the caller (see
    /// [`nessie_sd::Node::with_fabric`]).
    ///
    /// # Errors
    /// As [`nessie_sd::Node::with_fabric`].
    pub fn with_fabric(
        config: Config,
        node_id: NodeId,
        fabric: Arc<dyn Fabric>,
    ) -> Result<Node, Error> {
        Ok(Node {
            inner: nessie_sd::Node::with_fabric(config, node_id, fabric)?,
        })
    }

    /// The regions every node registers (the same as `nessie-sd`'s).
    ///
    /// # Errors
    /// As [`nessie_sd::Node::regions`].
    pub fn regions(config: &Config) -> Result<Vec<RegionSpec>, Error> {
        nessie_sd::Node::regions(config)
    }

    /// This node's id.
    #[must_use]
    pub fn id(&self) -> NodeId {
        self.inner.id()
    }

    /// The configuration the node runs with.
    #[must_use]
    pub fn config(&self) -> &Config {
        self.inner.config()
    }

    /// Verbs this node's server workers issued.
    #[must_use]
    pub fn server_verbs(&self) -> VerbCounts {
        self.inner.server_verbs()
    }
}

/// A client of the hybrid store, for one thread (`Send`, not `Sync`):
/// one-sided GETs, PUT and DELETE through a `nessie-sd` client.
#[derive(Debug)]
pub struct Client {
    inner: nessie_sd::Client,
}

impl Client {
    /// The node this client runs on.
    #[must_use]
    pub fn node(&self) -> NodeId {
        self.inner.node()
    }

    /// The cluster's tables (placement of keys).
    #[must_use]
    pub fn table(&self) -> &Table {
        self.inner.table()
    }
}

impl KvClient for Client {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, Error> {
        out.clear();
        let found = self.inner.one_sided(OpKind::Get, |op| {
            op.table.check_key(key)?;
            lookup(
                op.endpoint,
                op.table,
                op.clock,
                op.deadline_us,
                key,
                out,
                op.retries,
            )
        });
        if !matches!(found, Ok(true)) {
            out.clear();
        }
        found
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        self.inner.put(key, value)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, Error> {
        self.inner.delete(key)
    }

    fn stats(&self) -> Stats {
        self.inner.stats()
    }
}
