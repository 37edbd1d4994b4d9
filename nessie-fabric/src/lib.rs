//! One-sided verbs on other nodes' memory: the only way any store touches a
//! remote node.
//!
//! A node registers named regions ([`RegionId`]); a remote location is a
//! [`RemoteAddr`] `(node, region, offset)`. A [`Fabric`] executes READ, WRITE
//! and 64-bit CAS on them, one at a time or as a batch posted at once
//! ([`Fabric::post`]). Verbs move whole 8-byte words: offsets and lengths are
//! multiples of 8 ([`wire::WORD`]).
//!
//! **Atomicity rule.** A CAS is atomic only against other CAS (as on a real
//! NIC). A word that is ever CAS'd is therefore modified only through
//! [`Fabric::cas`], even by its own node, and no WRITE ever targets it. A READ
//! of several words is not atomic; readers verify checksums.
//!
//! Backends: [`LocalFabric`] (all nodes in one process), [`ShmFabric`]
//! (one process per node, regions in shared files) and [`TcpFabric`] (one
//! process per node on any hosts, a software NIC serving verbs over TCP).
//! An [`Endpoint`] wraps a fabric for one client and counts every verb it
//! issues.
//!
//! With the cargo feature `verbs`, `VerbsFabric` runs the verbs on RDMA
//! NICs (one process per node, RC queue pairs, regions registered with the
//! NIC; local CAS through a loopback queue pair).
//!
//! Every backend opened for a node of a multi-process cluster takes the
//! node's [`Membership`] (cluster, format version, node, regions) and makes
//! the same check of each peer before any verb reaches it. Instead of a
//! hand-written peer list, the nodes may find each other through an
//! authenticated [`rendezvous`] that one of them serves: each registers an
//! opaque blob (a [`TcpFabric`] its listening address) and receives every
//! node's, and the server checks each registration's membership. The
//! crate's own byte layouts are in [`wire`]; [`clock`] is the time source
//! the `tcp` backend judges late CASes by, and that stores build on. This crate knows
//! nothing of any store: what the regions hold is the caller's business.
//! All of the project's `unsafe` code lives here (region memory and verbs).
//!
//! With the cargo feature `conformance` (for tests only; the crate's own
//! tests switch it on), `conformance` holds the suites every backend must
//! pass and the entry points tests and fuzzing need into private parts.

#![deny(missing_docs)]

mod admission;
pub mod clock;
#[cfg(feature = "conformance")]
pub mod conformance;
mod endpoint;
mod error;
mod local;
mod membership;
mod memory;
mod rc_budget;
mod rendezvous;
mod shm;
mod tcp;
#[cfg(feature = "verbs")]
mod verbs;
mod wait_bound;
pub mod wire;

use std::fmt;

pub use endpoint::{Endpoint, VerbCounts};
pub use error::{FabricError, HandshakeFailure, RendezvousFailure, VerbsFailure};
pub use local::LocalFabric;
pub use membership::Membership;
pub use rc_budget::{RcTimeouts, MAX_ACK_TIMEOUT, MIN_ACK_TIMEOUT, RC_RETRY_COUNT};
pub use rendezvous::{
    join, rendezvous, rendezvous_connected, rendezvous_with, serve_rendezvous, JoinService, Joins,
    RendezvousOptions, RendezvousOutcome, BIND_RETRY,
};
pub use shm::{ShmFabric, ShmOptions};
pub use tcp::{TcpFabric, TcpOptions, TcpStats};
#[cfg(feature = "verbs")]
pub use verbs::{VerbsFabric, VerbsOptions, DEFAULT_LANES, MAX_LANES};
pub use wait_bound::WaitBound;

/// Names one registered region of a node. Which ids mean what is the
/// business of the store that registers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionId(pub u16);

impl fmt::Display for RegionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "region {}", self.0)
    }
}

/// The result of a verb.
pub type Result<T, E = FabricError> = std::result::Result<T, E>;

/// Index of a node in the cluster (0-based).
pub type NodeId = usize;

/// A location in some node's registered region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteAddr {
    /// Node that owns the memory.
    pub node: NodeId,
    /// Region of that node.
    pub region: RegionId,
    /// Byte offset within the region (a multiple of 8).
    pub offset: u64,
}

impl RemoteAddr {
    /// A new address.
    #[must_use]
    pub const fn new(node: NodeId, region: RegionId, offset: u64) -> RemoteAddr {
        RemoteAddr {
            node,
            region,
            offset,
        }
    }

    /// The address `bytes` further into the same region.
    #[must_use]
    pub const fn add(self, bytes: u64) -> RemoteAddr {
        RemoteAddr {
            offset: self.offset + bytes,
            ..self
        }
    }
}

impl fmt::Display for RemoteAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} {} +{:#x}", self.node, self.region, self.offset)
    }
}

/// A region a node registers: its id and size in bytes (a multiple of 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionSpec {
    /// Region id.
    pub id: RegionId,
    /// Bytes of memory.
    pub len: u64,
}

/// One verb of a batch. Results are written back into the verb: the bytes
/// into `buf` for a READ, the old value into `old` for a CAS.
#[derive(Debug)]
pub enum Verb<'a> {
    /// Copy remote memory into `buf`.
    Read {
        /// Source.
        addr: RemoteAddr,
        /// Destination, a whole number of words.
        buf: &'a mut [u8],
    },
    /// Copy remote memory into two buffers: the first `head.len()` bytes
    /// at `addr` into `head`, the `tail.len()` bytes after them into
    /// `tail`. One READ with a scatter list of two, as an RDMA work
    /// request may have: a GET reads an entry's header and key into its
    /// own buffer and the value straight into the caller's
    /// (docs/design.md#one-copy-gets).
    ReadScatter {
        /// Source.
        addr: RemoteAddr,
        /// Destination of the first bytes, a whole number of words.
        head: &'a mut [u8],
        /// Destination of the rest, a whole number of words.
        tail: &'a mut [u8],
    },
    /// Copy `data` into remote memory.
    Write {
        /// Destination.
        addr: RemoteAddr,
        /// Source, a whole number of words.
        data: &'a [u8],
    },
    /// Compare-and-swap one 8-byte aligned word.
    Cas {
        /// The word.
        addr: RemoteAddr,
        /// Value it must hold for the swap to happen.
        expected: u64,
        /// Value to store.
        new: u64,
        /// Out: the value the word held before (equals `expected` on success).
        old: u64,
    },
}

impl Verb<'_> {
    /// Executes the verb alone on `fabric`, writing its result back into
    /// it.
    ///
    /// # Errors
    /// As the fabric's [`Fabric::read`], [`Fabric::write`] or
    /// [`Fabric::cas`].
    pub fn execute_on<F: Fabric + ?Sized>(&mut self, fabric: &F) -> Result<(), FabricError> {
        self.execute_with_cas(fabric, |addr, expected, new| {
            fabric.cas(addr, expected, new)
        })
    }

    /// [`Verb::execute_on`] whose CAS, if it is one, runs as `cas(addr,
    /// expected, new)` (a fabric's CAS with a land-by time, say).
    ///
    /// # Errors
    /// As [`Verb::execute_on`], and as `cas`.
    pub fn execute_with_cas<F: Fabric + ?Sized>(
        &mut self,
        fabric: &F,
        cas: impl FnOnce(RemoteAddr, u64, u64) -> Result<u64, FabricError>,
    ) -> Result<(), FabricError> {
        match self {
            Verb::Read { addr, buf } => fabric.read(*addr, buf),
            Verb::ReadScatter { addr, head, tail } => fabric.read_scatter(*addr, head, tail),
            Verb::Write { addr, data } => fabric.write(*addr, data),
            Verb::Cas {
                addr,
                expected,
                new,
                old,
            } => {
                *old = cas(*addr, *expected, *new)?;
                Ok(())
            }
        }
    }

    /// Bytes the verb moves: a READ's or WRITE's length, a CAS's word.
    #[must_use]
    pub fn bytes_moved(&self) -> usize {
        match self {
            Verb::Read { buf, .. } => buf.len(),
            Verb::ReadScatter { head, tail, .. } => head.len() + tail.len(),
            Verb::Write { data, .. } => data.len(),
            Verb::Cas { .. } => wire::WORD,
        }
    }

    /// Where the verb goes.
    #[must_use]
    pub fn addr(&self) -> RemoteAddr {
        match self {
            Verb::Read { addr, .. }
            | Verb::ReadScatter { addr, .. }
            | Verb::Write { addr, .. }
            | Verb::Cas { addr, .. } => *addr,
        }
    }
}

/// Checks a verb of `len` bytes at `addr` against a region of `region_len`
/// bytes: offset and length whole words, and the whole range inside the
/// region. Every backend checks each verb this way before executing it (a
/// NIC would otherwise break the connection on a bad access).
///
/// # Errors
/// [`FabricError::Misaligned`] or [`FabricError::OutOfBounds`].
pub(crate) fn check_bounds(addr: RemoteAddr, len: u64, region_len: u64) -> Result<(), FabricError> {
    if addr.offset % wire::WORD as u64 != 0 || len % wire::WORD as u64 != 0 {
        return Err(FabricError::Misaligned {
            node: addr.node,
            region: addr.region,
            offset: addr.offset,
            len,
        });
    }
    if addr
        .offset
        .checked_add(len)
        .is_none_or(|end| end > region_len)
    {
        return Err(FabricError::OutOfBounds {
            node: addr.node,
            region: addr.region,
            offset: addr.offset,
            len,
            region_len,
        });
    }
    Ok(())
}

/// One-sided verbs on the memory of every node of a cluster.
///
/// Implementations are shared by all clients of a process (`Send + Sync`).
/// Every method may fail with a [`FabricError`] for an address outside a
/// registered region, a misaligned offset or length, or a transport failure;
/// a failed verb changes nothing.
pub trait Fabric: Send + Sync + fmt::Debug {
    /// Number of nodes reachable through this fabric.
    fn nodes(&self) -> usize;

    /// Bytes of `region` on `node`, if that region is registered.
    fn region_len(&self, node: NodeId, region: RegionId) -> Option<u64>;

    /// READ: copies `buf.len()` bytes at `addr` into `buf`.
    ///
    /// # Errors
    /// Bounds, alignment or transport errors.
    fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError>;

    /// A scatter READ ([`Verb::ReadScatter`]): the bytes at `addr` into
    /// `head`, the ones after them into `tail`, the range checked whole.
    /// Backends that can make it one READ do (one round trip); the default
    /// checks the range, then makes it two [`Fabric::read`]s.
    ///
    /// # Errors
    /// As [`Fabric::read`].
    fn read_scatter(
        &self,
        addr: RemoteAddr,
        head: &mut [u8],
        tail: &mut [u8],
    ) -> Result<(), FabricError> {
        if let Some(region_len) = self.region_len(addr.node, addr.region) {
            check_bounds(addr, (head.len() + tail.len()) as u64, region_len)?;
        }
        self.read(addr, head)?;
        self.read(addr.add(head.len() as u64), tail)
    }

    /// WRITE: copies `data` to `addr`.
    ///
    /// # Errors
    /// Bounds, alignment or transport errors.
    fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError>;

    /// WRITE of the concatenation of `parts` (each a whole number of words)
    /// whose parts after the first `cached` no one on this host is expected
    /// to read soon: a backend that executes it with the CPU may write those
    /// past the cache (a recycled data-table slot has been idle for at least
    /// `expiry`, so caching its old lines only costs a read of each before
    /// it is overwritten). The first `cached` parts (an entry's header and
    /// key, touched again at once) go through the cache. The default
    /// gathers the parts and issues [`Fabric::write`].
    ///
    /// # Errors
    /// As [`Fabric::write`].
    fn write_streaming(
        &self,
        addr: RemoteAddr,
        parts: &[&[u8]],
        cached: usize,
    ) -> Result<(), FabricError> {
        let _ = cached;
        match parts {
            [one] => self.write(addr, one),
            _ => self.write(addr, &parts.concat()),
        }
    }

    /// Brings the pages of the `len` bytes at `addr`, memory this process
    /// holds, into memory ahead of their first write, changing no byte: a
    /// store's allocator faults in the slots it hands out next in the
    /// background, so that a write does not pay the page faults of a first
    /// touch. The default does nothing (memory registered with a NIC is
    /// pinned already, and a peer's memory is the peer's own business).
    ///
    /// # Errors
    /// A backend that faults pages in refuses a range outside a region as
    /// [`Fabric::write`] does.
    fn prefault(&self, addr: RemoteAddr, len: u64) -> Result<(), FabricError> {
        let _ = (addr, len);
        Ok(())
    }

    /// A point where a node's own bookkeeping (a scan of its data tables)
    /// holds no lock between two steps: a fabric that schedules the threads
    /// using it, as the deterministic simulator's does, may run others
    /// here. It issues no verb; the default does nothing.
    fn yield_point(&self) {}

    /// CAS: if the word at `addr` holds `expected`, stores `new`. Returns the
    /// old value either way.
    ///
    /// # Errors
    /// Bounds, alignment or transport errors.
    fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError>;

    /// CAS that must take effect before `land_by_us` (wall-clock µs, on the
    /// target node's clock) or not at all: a fabric that can refuse a late
    /// CAS at its target does so with [`FabricError::LateCas`] (see
    /// [`Fabric::enforces_land_by`]); the others execute it as
    /// [`Fabric::cas`], which is the default.
    ///
    /// # Errors
    /// As [`Fabric::cas`], and [`FabricError::LateCas`].
    fn cas_by(&self, addr: RemoteAddr, expected: u64, new: u64, land_by_us: u64) -> Result<u64> {
        let _ = land_by_us;
        self.cas(addr, expected, new)
    }

    /// Whether [`Fabric::cas_by`] refuses CASes that arrive after their
    /// land-by time (so callers need to read the wall clock for it).
    fn enforces_land_by(&self) -> bool {
        false
    }

    /// Whether a READ of another node's memory costs more than one of this
    /// node's own, as a network crossing does: the DTE cache keeps only
    /// entries whose READ does (docs/design.md#cache). `shm` maps every
    /// node's memory into the process and says no; `local`, which stands
    /// in for a cluster in tests, answers as a network would.
    fn remote_reads_cost_more(&self) -> bool {
        true
    }

    /// Whether the verbs of one batch bound for one node take effect there
    /// in batch order, so that a READ placed after a CAS in a batch sees
    /// that CAS's effect (a PUT's reverse pass then rides in its link's
    /// batch: docs/design.md#put). Verbs bound for different nodes stay
    /// unordered. The default says no: a backend whose `post` issues a
    /// node's verbs together (RDMA queue pairs, without fences) must.
    fn keeps_batch_order(&self) -> bool {
        false
    }

    /// Closes (or opens) this node's own memory: while closed, every verb
    /// to it, a peer's or this process's, is refused with
    /// [`FabricError::Lost`] (over `tcp`, a peer sees a refusal). A
    /// replacement of a lost node keeps its empty memory closed until the
    /// members have agreed the node is lost. The default does nothing: a
    /// fabric whose nodes cannot outlive their memory.
    fn close_own_memory(&self, closed: bool) {
        let _ = closed;
    }

    /// Fences `node`, which the active view of a replicated store names
    /// lost (docs/replication.md, "fencing a zombie of the lost node"):
    /// from now on this process exchanges nothing with it, either way. A
    /// zombie of the node (a stalled process whose memory is still
    /// registered) can then neither read nor write this node's memory, and
    /// this process's verbs to it fail at once with [`FabricError::Lost`]
    /// instead of waiting out a transport's timeouts. The fence holds until
    /// [`Fabric::readmit_node`]; what it closed stays closed for good (on
    /// `verbs`, a replacement of the node reconnects over new queue pairs).
    /// Fencing this node itself, or a node the fabric does not know, does
    /// nothing. The default does nothing: a fabric whose lost nodes are
    /// fenced elsewhere (by the lease alone, or by the emulated loss on
    /// `shm`).
    fn fence_node(&self, node: NodeId) {
        let _ = node;
    }

    /// Lifts the fence of `node`, which a decided view names a member again
    /// (its replacement restoring: docs/replication.md#joining-after-start-up):
    /// this process's verbs to it go again, over what its replacement
    /// connected since the fence; without such a reconnection they fail as
    /// the fence left them. Readmitting a node not fenced does nothing. The
    /// default does nothing, as for [`Fabric::fence_node`].
    fn readmit_node(&self, node: NodeId) {
        let _ = node;
    }

    /// Posts every verb of `batch` at once and waits for all completions.
    /// Verbs of one batch may complete in any order; do not batch verbs that
    /// depend on each other, except a node's verbs where
    /// [`Fabric::keeps_batch_order`] says they keep their order.
    ///
    /// # Errors
    /// The first verb that failed; the others may or may not have executed.
    fn post(&self, batch: &mut [Verb<'_>]) -> Result<(), FabricError> {
        batch.iter_mut().try_for_each(|verb| verb.execute_on(self))
    }

    /// [`Fabric::post`] whose CASes must land before `land_by_us`, as
    /// [`Fabric::cas_by`]. The default runs the verbs one by one, each CAS
    /// through [`Fabric::cas_by`], where the fabric enforces land-by times,
    /// and is [`Fabric::post`] elsewhere.
    ///
    /// # Errors
    /// As [`Fabric::post`], and [`FabricError::LateCas`].
    fn post_by(&self, batch: &mut [Verb<'_>], land_by_us: u64) -> Result<(), FabricError> {
        if !self.enforces_land_by() {
            return self.post(batch);
        }
        batch.iter_mut().try_for_each(|verb| {
            verb.execute_with_cas(self, |addr, expected, new| {
                self.cas_by(addr, expected, new, land_by_us)
            })
        })
    }
}
