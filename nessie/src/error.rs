//! The error type of the store.

use crate::fabric::FabricError;

/// Why an operation failed. Every variant leaves the store unchanged unless
/// it says otherwise.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key is empty.
    #[error("key is empty")]
    EmptyKey,
    /// The key is longer than `key_size_max`.
    #[error("key is longer than key_size_max")]
    KeyTooLarge,
    /// The value is longer than `value_size_max`.
    #[error("value is longer than value_size_max")]
    ValueTooLarge,
    /// No candidate slot of the key could be freed within
    /// `max_migrate_depth` recursive MIGRATEs.
    #[error("index full: no candidate slot of the key could be freed within max_migrate_depth")]
    IndexFull,
    /// The caller's buffer is shorter than the value found
    /// ([`crate::Client::get_into_slice`]); nothing was copied. Retry with
    /// a buffer of `needed` bytes (the value may change meanwhile).
    #[error("buffer too small: the value has {needed} bytes, the buffer {capacity}")]
    BufferTooSmall {
        /// The value's length, bytes.
        needed: usize,
        /// The buffer's length, bytes.
        capacity: usize,
    },
    /// The node's data table of the value's size class had no free slot
    /// before the operation's deadline.
    /// [`crate::Client::last_data_table_full`] gives the table's figures;
    /// [`crate::Config::data_bytes_for`] sizes the tables for a load.
    #[error(
        "data table full: no free slot of the value's size class before the deadline \
         (figures: Client::last_data_table_full; sizing: Config::data_bytes_for)"
    )]
    DataTableFull,
    /// The operation's deadline (`op_timeout`) passed. Its outcome is
    /// unknown: it may or may not have taken effect.
    #[error("operation timed out after op_timeout; its outcome is unknown")]
    Timeout,
    /// A peer's clock differs from this node's by more than
    /// `max_clock_skew`: expiry and dead-owner decisions would be unsafe, so
    /// the node refuses operations until the clocks agree again.
    #[error(
        "clock skew beyond max_clock_skew: node {node} is {skew_us} µs off; refusing operations"
    )]
    ClockSkew {
        /// The peer whose clock disagrees.
        node: usize,
        /// Measured difference, µs (lower bound).
        skew_us: u64,
    },
    /// The cluster is changing its view (a node was lost or is joining):
    /// operations wait for the old view's to drain before the new one is
    /// active (docs/replication.md#rp0). Nothing was done; retry once the
    /// new view is active.
    #[error("the cluster is changing to view {epoch}; nothing was done, retry shortly")]
    ViewChanging {
        /// The view being activated.
        epoch: u64,
    },
    /// This node holds no lease on the current view: it cannot reach a
    /// majority of the members, or is no longer one of them. It serves
    /// neither writes nor reads, which could be stale
    /// (docs/replication.md#views-leases-and-the-drain). Nothing was done.
    #[error(
        "no quorum: this node cannot reach a majority of view {epoch}'s members; nothing was done"
    )]
    NoQuorum {
        /// The view the node last served in.
        epoch: u64,
    },
    /// Every copy of share `share` is lost: the current view has no active
    /// replica of it, since more than r − 1 of its nodes were lost
    /// together (docs/replication.md#questions-the-design-must-answer). A
    /// key whose candidate slots or entry are there can no longer be read
    /// (it is never reported absent); a write that returns this may have
    /// taken effect elsewhere, as after a fabric error.
    #[error("every copy of share {share} is lost (more than replicas - 1 of its nodes are gone)")]
    DataLost {
        /// The share (the node id that held its first copy).
        share: usize,
    },
    /// A replacement node could not join: the cluster keeps one copy of
    /// each share (nothing to restore from, so joining empty would lose
    /// the node's share), its id is still a member, or the copy failed
    /// (docs/replication.md#restore).
    #[error("rejoin refused: {reason}")]
    RejoinRefused {
        /// Why.
        reason: String,
    },
    /// The configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The nodes this process would host need more memory than this host
    /// has or grants: the index and the data tables' bookkeeping (touched
    /// throughout) beyond its RAM and swap, or a region or table the
    /// allocator refuses. Nothing was started; lower
    /// `index_slots_per_node` or `data_bytes_per_node`, or host fewer
    /// nodes per process.
    #[error(
        "cannot reserve {bytes} bytes for {what}{}",
        available.map(|a| format!(" (this host has {a} bytes of RAM and swap)")).unwrap_or_default()
    )]
    OutOfMemory {
        /// What the memory was for, with the figures behind `bytes`.
        what: String,
        /// Bytes requested.
        bytes: u64,
        /// The host's RAM plus swap in bytes, when that was the limit.
        available: Option<u64>,
    },
    /// A verb failed.
    #[error("fabric: {0}")]
    Fabric(#[from] FabricError),
    /// An entry failed its checksum or sanity checks on every retry, a
    /// reference pointed outside the tables, or (baselines) a message was
    /// malformed.
    #[error("corrupt {}: {what}", entry_name(.entry.as_ref()))]
    Corrupt {
        /// The entry it is about, when there is one.
        entry: Option<crate::layout::SlotRef>,
        /// What was wrong.
        what: String,
    },
    /// The store cannot run here (e.g. a background thread failed to start).
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// How an error message names the entry it is about.
fn entry_name(entry: Option<&crate::layout::SlotRef>) -> String {
    entry.map_or_else(|| "data".to_owned(), |e| format!("entry at {e}"))
}

impl Error {
    /// [`Error::Corrupt`] about no particular entry.
    #[must_use]
    pub fn corrupt(what: impl Into<String>) -> Error {
        Error::Corrupt {
            entry: None,
            what: what.into(),
        }
    }
}
