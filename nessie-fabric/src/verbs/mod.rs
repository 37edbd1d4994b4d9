//! The RDMA backend: one process per node, verbs executed by the NICs over
//! reliable-connected (RC) queue pairs, through the `sideway` crate
//! (`libibverbs`'s extended work-request API). Compiled with the cargo
//! feature `verbs`.
//!
//! **Memory.** Each node allocates its regions as anonymous, page-aligned,
//! zeroed mappings and registers each one with local write, remote READ,
//! remote WRITE and remote atomic access. Registration pins the pages, so
//! a node needs `RLIMIT_MEMLOCK` for all of its regions.
//!
//! **Lanes.** A fabric opens `lanes` lanes (default [`DEFAULT_LANES`]). A
//! lane is a completion queue, one initiating RC queue pair to every node
//! and a registered staging buffer, behind a mutex; a verb or batch holds
//! one lane for its whole round trip. A thread first tries the lane its
//! thread number picks, then any free one, then waits for its own, so with
//! at least as many lanes as client threads every thread has queue pairs of
//! its own. Queue pairs per (fabric, lane, peer) rather than per thread
//! keep connection setup in [`VerbsFabric::open`]: a new thread never
//! needs to meet every peer again.
//!
//! **Local verbs and the atomicity rule.** A NIC's CAS is atomic only
//! against other CAS of the same NIC, so a node must not CAS its own words
//! with the CPU. Every verb on the node's own memory — CAS, READ and WRITE
//! alike — therefore goes through a loopback queue pair (a lane's queue
//! pair to this node is connected to a responder queue pair of the same
//! device). The CPU never touches region memory.
//!
//! **Connection setup.** Queue-pair numbers, port addresses and the
//! address, length and rkey of every region travel only through the
//! authenticated rendezvous ([`crate::rendezvous_connected`]), as each
//! node's *card* (see the `card` module): every message is sealed with the
//! cluster secret and fresh nonces, so a party without the secret learns no
//! rkey and cannot pass off a queue pair of its own, and a replayed or
//! tampered message is refused. The rendezvous checks each node's
//! [`Membership`] (cluster, format version, node count and id, region
//! sizes) and refuses mismatches on both sides; its barrier holds every
//! node until all have connected their queue pairs, so no request reaches
//! a queue pair that is not ready for it. Nodes may start in any order
//! within the rendezvous's timeout.
//!
//! **Checks.** Every verb is checked against the target's region table
//! before anything is posted (unknown node or region, misalignment, out of
//! bounds), with the same [`FabricError`] variants as the other backends; a
//! remote access error would otherwise break the queue pair.
//!
//! **Failures.** A work request that completes with an error (for example
//! a peer that died: retries exhausted within the worst case of
//! [`VerbsOptions::retransmission`], 268 ms at the defaults) leaves its queue
//! pair in the error state: verbs from that lane to that node then fail
//! with [`VerbsFailure::Broken`] until the fabric is reopened, or until the
//! node is replaced (below).
//!
//! **Fencing.** [`Fabric::fence_node`] moves every queue pair this node
//! holds to the fenced node to the error state: each lane's initiator (a
//! lane busy with a round trip is fenced once it is done) and the
//! responders that serve the node's requests. A zombie of the node (a
//! stalled process whose memory is still registered) then reaches none of
//! this node's memory: its requests meet a queue pair in the error state,
//! which drops them, and its verbs fail once their retries run out. This
//! node's verbs to it are refused at once with [`FabricError::Lost`],
//! before anything is posted. The queue pairs stay in the error state for
//! good.
//!
//! **Replacements.** With [`Joins::Serve`] every node also answers, for
//! the fabric's lifetime, a replacement of a fenced node that asks to
//! reconnect (see the `rejoin` module): it connects fresh queue pairs to
//! the replacement's, takes its new region table, and refuses verbs to it
//! until [`Fabric::readmit_node`]. [`Joins::Replace`] opens such a
//! replacement.

mod card;
mod device;
mod lane;
mod rejoin;
mod setup;

use self::card::Card;
use self::device::{Device, QpInfo};
use self::lane::{Lane, CHUNK};
use self::setup::{open_lanes, peer_cards, region_table, register_regions, OwnRegion, RegionTable};
use super::{
    check_bounds, Fabric, FabricError, NodeId, RcTimeouts, RegionId, RegionSpec, RemoteAddr, Verb,
    VerbsFailure,
};
use crate::rendezvous::{JoinService, Joins, RendezvousOptions};
use crate::wire::WORD;
use crate::Membership;
use sideway::ibverbs::completion::ExtendedCompletionQueue;
use sideway::ibverbs::queue_pair::ExtendedQueuePair;
use std::cell::Cell;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, TryLockError};

pub use self::card::MAX_LANES;

/// Lanes a fabric opens unless told otherwise.
pub const DEFAULT_LANES: usize = 4;

/// How to open a node's view of a cluster on RDMA NICs.
#[derive(Clone, Debug)]
pub struct VerbsOptions {
    /// RDMA device to use (`None`: the first one found).
    pub device: Option<String>,
    /// GID index of port 1 to use (`None`: a RoCE v2 IPv4 entry if there
    /// is one; see the device module).
    pub gid_index: Option<u32>,
    /// The exchange of every node's queue pairs and regions: this node, its
    /// cluster and the regions every node registers (checked), the cluster
    /// secret, where the rendezvous is served and whether this node serves
    /// it, and how long to wait for every peer.
    pub rendezvous: RendezvousOptions,
    /// Lanes to open (clamped to `1..=`[`MAX_LANES`]).
    pub lanes: usize,
    /// ACK timeout and retry count of every queue pair: a verb still in
    /// flight after their worst case fails, so that a CAS lands within the
    /// landing bound or not at all ([`RcTimeouts::within`]).
    pub retransmission: RcTimeouts,
    /// Replacements of lost nodes: [`Joins::Off`] (none), [`Joins::Serve`]
    /// (this node answers them for the fabric's lifetime) or
    /// [`Joins::Replace`] (this node is one: it reconnects to the members
    /// instead of meeting them at the rendezvous).
    pub joins: Joins,
}

/// Where a region of some node lives for the NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RemoteRegion {
    /// Bytes.
    pub(crate) len: u64,
    /// Virtual address of its first byte in the owner's address space.
    pub(crate) addr: u64,
    /// Remote key of its registration.
    pub(crate) rkey: u32,
}

/// A checked verb's target: the node, the absolute remote address and key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target {
    pub(crate) node: NodeId,
    pub(crate) addr: u64,
    pub(crate) rkey: u32,
}

/// Maps a libibverbs error to [`FabricError::Verbs`].
fn call<E: std::error::Error + Send + Sync + 'static>(
    node: NodeId,
    op: &'static str,
) -> impl FnOnce(E) -> FabricError {
    move |e| FabricError::Verbs {
        node,
        op,
        reason: VerbsFailure::Call(Box::new(e)),
    }
}

/// A node's view of a cluster whose nodes are reached through RDMA NICs.
pub struct VerbsFabric {
    // Field order is drop order: the services (whose threads hold the
    // core) stop first.
    services: Vec<JoinService>,
    core: Arc<Core>,
}

/// Responder queue pairs by lane and node, before they are kept (`None`
/// at this node, whose lanes have loopback responders).
type Responders = Vec<Vec<Option<ExtendedQueuePair>>>;

/// Everything of a fabric but its services.
struct Core {
    // Field order is drop order: queue pairs first, then the memory they
    // reach, then the device.
    lanes: Vec<Mutex<Lane>>,
    /// Every responder queue pair, with the node whose requests it serves.
    responders: Mutex<Vec<(NodeId, ExtendedQueuePair)>>,
    /// Responder queue pairs a reconnection replaced, in the error state.
    replaced: Mutex<Vec<ExtendedQueuePair>>,
    /// Held by a reconnection, a fence and a readmission: one at a time.
    reconnecting: Mutex<()>,
    idle_cq: Arc<ExtendedCompletionQueue>,
    /// Per node, its regions (a replacement's replace its predecessor's).
    table: Vec<RwLock<Vec<Option<RemoteRegion>>>>,
    /// Per node: fenced ([`Fabric::fence_node`]), so its verbs are refused.
    fenced: Vec<AtomicBool>,
    /// This node's regions as its peers reach them.
    own_table: RegionTable,
    membership: Membership,
    _own: Vec<OwnRegion>,
    device: Device,
    node: NodeId,
}

impl std::fmt::Debug for VerbsFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsFabric")
            .field("core", &self.core)
            .field("services", &self.services.len())
            .finish()
    }
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fenced: Vec<NodeId> = (0..self.fenced.len())
            .filter(|&n| self.fenced[n].load(Ordering::Acquire))
            .collect();
        f.debug_struct("Core")
            .field("node", &self.node)
            .field("nodes", &self.table.len())
            .field("device", &self.device)
            .field("lanes", &self.lanes.len())
            .field("fenced", &fenced)
            .finish_non_exhaustive()
    }
}

/// Numbers threads in the order they first issue a verb.
static THREADS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD: Cell<Option<usize>> = const { Cell::new(None) };
}

fn thread_number() -> usize {
    THREAD.with(|t| {
        t.get().unwrap_or_else(|| {
            let n = THREADS.fetch_add(1, Ordering::Relaxed);
            t.set(Some(n));
            n
        })
    })
}

/// Longest READ or WRITE posted as one work request; longer ones are split
/// (NICs limit a message to 1 or 2 GiB, and the staging buffer stays small).
const PIECE: usize = 1 << 20;

/// Pushes a READ of `buf` at `addr` as READs of at most [`PIECE`] bytes.
fn read_pieces<'v>(pieces: &mut Vec<Verb<'v>>, addr: RemoteAddr, buf: &'v mut [u8]) {
    for (k, part) in buf.chunks_mut(PIECE).enumerate() {
        pieces.push(Verb::Read {
            addr: addr.add((k * PIECE) as u64),
            buf: part,
        });
    }
}

/// Bytes one chunk of a batch stages at most (unless one piece is larger).
const STAGING_CAP: usize = 4 << 20;

/// The word CAS'd by the byte-order self-test at open.
const SELF_TEST: u64 = 0x0123_4567_89ab_cdef;

impl VerbsFabric {
    /// Opens the device, registers this node's regions, opens the queue
    /// pairs and connects them to every peer's through the rendezvous of
    /// `options.rendezvous` (binding its address if this node serves it).
    ///
    /// # Errors
    /// As [`VerbsFabric::open_serving`], and [`FabricError::Bind`] if the
    /// serving node cannot bind the rendezvous address.
    pub fn open(options: &VerbsOptions) -> Result<VerbsFabric, FabricError> {
        Self::open_on(options, None)
    }

    /// As [`VerbsFabric::open`], for the node that serves the rendezvous,
    /// on a listener the caller bound (for example to port 0, whose address
    /// the other nodes are then given).
    ///
    /// # Errors
    /// [`FabricError::UnknownNode`] if `node` is not one of the cluster's;
    /// [`FabricError::Options`] for a region whose length is not whole
    /// words; [`FabricError::NoDevice`] without a (matching) RDMA device;
    /// [`FabricError::Verbs`] if the device cannot be set up (or returns
    /// atomic results in another byte order); [`FabricError::Rendezvous`]
    /// for every failure of the exchange (no server, other secret, replayed
    /// or tampered messages, another cluster, version, node count or region
    /// sizes, a duplicate node id, peers missing or not connected in time);
    /// [`FabricError::Handshake`] for a peer whose card disagrees with its
    /// membership.
    pub fn open_serving(
        options: &VerbsOptions,
        listener: TcpListener,
    ) -> Result<VerbsFabric, FabricError> {
        Self::open_on(options, Some(listener))
    }

    fn open_on(
        options: &VerbsOptions,
        listener: Option<TcpListener>,
    ) -> Result<VerbsFabric, FabricError> {
        let membership = &options.rendezvous.membership;
        membership.validate()?;
        let (me, nodes) = (membership.node, membership.nodes);
        let device = Device::open(
            options.device.as_deref(),
            options.gid_index,
            me,
            options.retransmission,
        )?;
        let (own, own_table) = register_regions(&device, membership)?;
        let lanes = open_lanes(&device, me, nodes, options.lanes)?;
        let mut table: Vec<RwLock<Vec<Option<RemoteRegion>>>> =
            (0..nodes).map(|_| RwLock::new(Vec::new())).collect();
        table[me] = RwLock::new(region_table(&own_table));
        let mut core = Core {
            lanes: lanes.lanes,
            responders: Mutex::new(lanes.responders),
            replaced: Mutex::new(Vec::new()),
            reconnecting: Mutex::new(()),
            idle_cq: lanes.idle_cq,
            table,
            fenced: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            own_table,
            membership: membership.clone(),
            _own: own,
            device,
            node: me,
        };
        core.self_test(&membership.regions)?;
        let serving = match &options.joins {
            Joins::Off => {
                core.connect_peers(options, listener, lanes.infos, None)?;
                None
            }
            Joins::Serve => {
                let answering = rejoin::listener(&options.rendezvous)?;
                let table = core.connect_peers(options, listener, lanes.infos, Some(&answering))?;
                Some((table, answering))
            }
            Joins::Replace { also } => Some(core.replace(options, also, lanes.infos)?),
        };
        let core = Arc::new(core);
        let services = match serving {
            Some((table, answering)) => {
                rejoin::serve(&core, &options.rendezvous, table, answering)?
            }
            None => Vec::new(),
        };
        Ok(VerbsFabric { services, core })
    }

    /// The name of the RDMA device in use.
    #[must_use]
    pub fn device_name(&self) -> &str {
        &self.core.device.name
    }

    /// Lanes (sets of queue pairs) this fabric opened.
    #[must_use]
    pub fn lanes(&self) -> usize {
        self.core.lanes.len()
    }

    /// This node.
    #[must_use]
    pub fn node(&self) -> NodeId {
        self.core.node
    }

    /// The nodes this fabric has fenced (and not readmitted), in order.
    #[must_use]
    pub fn fenced_nodes(&self) -> Vec<NodeId> {
        let fenced = &self.core.fenced;
        (0..fenced.len())
            .filter(|&n| fenced[n].load(Ordering::Acquire))
            .collect()
    }
}

impl Core {
    /// This node's card for its peers: its initiators, a fresh responder
    /// queue pair for every (lane, peer), and its regions; with the
    /// responders, by lane and node (`None` at this node).
    fn card(&self, initiators: Vec<Vec<QpInfo>>) -> Result<(Card, Responders), FabricError> {
        let me = self.node;
        let mut responders = Vec::with_capacity(initiators.len());
        let mut responder_infos = Vec::with_capacity(initiators.len());
        for lane in &initiators {
            let (mut qps, mut infos) = (Vec::with_capacity(lane.len()), Vec::new());
            for (peer, own) in lane.iter().enumerate() {
                if peer == me {
                    // The loopback responder is the lane's own.
                    qps.push(None);
                    infos.push(*own);
                } else {
                    let (qp, info) = self.device.qp(&self.idle_cq, 1)?;
                    qps.push(Some(qp));
                    infos.push(info);
                }
            }
            responders.push(qps);
            responder_infos.push(infos);
        }
        let card = Card {
            address: self.device.address,
            initiators,
            responders: responder_infos,
            regions: self.own_table.clone(),
            rejoin: Vec::new(),
        };
        Ok((card, responders))
    }

    /// Connects, on every lane, this node's initiator to `peer` to the
    /// peer's responder for this node, and this node's responder for the
    /// peer to the peer's initiator, and takes the peer's regions.
    fn connect_peer(
        &mut self,
        peer: NodeId,
        mine: &Card,
        theirs: &Card,
        responders: &mut Responders,
    ) -> Result<(), FabricError> {
        let me = self.node;
        for (l, lane) in self.lanes.iter_mut().enumerate() {
            let lane = lane.get_mut().unwrap_or_else(PoisonError::into_inner);
            let (own, remote) = (mine.initiator(l, peer), theirs.responder(l, me));
            self.device
                .connect(lane.qp_mut(peer), own, remote, &theirs.address, peer)?;
            if let Some(qp) = responders[l][peer].as_mut() {
                let (own, remote) = (mine.responder(l, peer), theirs.initiator(l, me));
                self.device
                    .connect(qp, own, remote, &theirs.address, peer)?;
            }
        }
        *self.table[peer]
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner) = region_table(&theirs.regions);
        Ok(())
    }

    /// Keeps the responders [`Core::card`] opened.
    fn keep_responders(&mut self, responders: Responders) {
        let own = self
            .responders
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        for lane in responders {
            own.extend(
                lane.into_iter()
                    .enumerate()
                    .filter_map(|(peer, qp)| Some((peer, qp?))),
            );
        }
    }

    /// Opens a responder queue pair for every (lane, peer), publishes this
    /// node's card through the rendezvous, and connects every queue pair
    /// to its peer's; returns once every node has connected. With an
    /// `answering` listener, the card names its port, and the call returns
    /// every node's reconnection address (see the `rejoin` module).
    fn connect_peers(
        &mut self,
        options: &VerbsOptions,
        listener: Option<TcpListener>,
        initiators: Vec<Vec<QpInfo>>,
        answering: Option<&TcpListener>,
    ) -> Result<Vec<String>, FabricError> {
        let rv = &options.rendezvous;
        let port = answering
            .map(|l| l.local_addr().map(|a| a.port()))
            .transpose()
            .map_err(|source| FabricError::Bind {
                addr: rv.address.clone(),
                source,
            })?;
        let (card, mut responders) = self.card(initiators)?;
        let lanes = card.lanes();
        let mine = |route| {
            let mut card = card.clone();
            if let Some(port) = port {
                card.rejoin = crate::rendezvous::advertised(route, &rv.address, port).into_bytes();
            }
            card.encode()
        };
        let (_, table) = crate::rendezvous_connected(rv, listener, mine, |outcome| {
            let cards = peer_cards(&outcome.blobs, rv, lanes)?;
            for (peer, theirs) in cards.iter().enumerate() {
                let Some(theirs) = theirs else { continue };
                self.connect_peer(peer, &card, theirs, &mut responders)?;
            }
            match port {
                Some(_) => rejoin::addresses(outcome, rv),
                None => Ok(Vec::new()),
            }
        })?;
        self.keep_responders(responders);
        Ok(table)
    }

    /// CASes the first word of this node's first region there and back
    /// through the loopback queue pair, before any peer can reach it: the
    /// device must return the old value in host byte order (some early
    /// NICs returned it big-endian).
    fn self_test(&self, regions: &[RegionSpec]) -> Result<(), FabricError> {
        let Some(first) = regions.iter().find(|r| r.len >= WORD as u64) else {
            return Ok(());
        };
        let word = RemoteAddr::new(self.node, first.id, 0);
        let there = self.cas(word, 0, SELF_TEST)?;
        let back = self.cas(word, SELF_TEST, 0)?;
        if there != 0 || back != SELF_TEST {
            return Err(FabricError::Verbs {
                node: self.node,
                op: "CAS self-test",
                reason: VerbsFailure::Unsupported(
                    "the device does not return atomic results in host byte order",
                ),
            });
        }
        Ok(())
    }

    /// A lane for this thread: its own if free, else any free one, else
    /// its own once free.
    fn lane(&self) -> MutexGuard<'_, Lane> {
        let n = self.lanes.len();
        let first = thread_number() % n;
        for i in 0..n {
            match self.lanes[(first + i) % n].try_lock() {
                Ok(guard) => return guard,
                Err(TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(TryLockError::WouldBlock) => {}
            }
        }
        self.lanes[first]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Checks a verb of `len` bytes at `addr` against the target's region
    /// table.
    fn resolve(&self, addr: RemoteAddr, len: usize) -> Result<Target, FabricError> {
        if self
            .fenced
            .get(addr.node)
            .is_some_and(|f| f.load(Ordering::Acquire))
        {
            return Err(FabricError::Lost { node: addr.node });
        }
        let regions = self
            .table
            .get(addr.node)
            .ok_or_else(|| FabricError::UnknownNode {
                node: addr.node,
                nodes: self.table.len(),
            })?
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let region = *regions
            .get(usize::from(addr.region.0))
            .and_then(Option::as_ref)
            .ok_or_else(|| FabricError::UnknownRegion {
                node: addr.node,
                region: addr.region,
            })?;
        check_bounds(addr, len as u64, region.len)?;
        Ok(Target {
            node: addr.node,
            addr: region.addr + addr.offset,
            rkey: region.rkey,
        })
    }

    /// Checks every verb of `batch`, then runs it on one lane: READs and
    /// WRITEs longer than [`PIECE`] as several work requests (a READ of
    /// many words is not atomic anyway), in chunks of at most [`CHUNK`]
    /// work requests and [`STAGING_CAP`] bytes (or one larger piece).
    fn execute(&self, batch: &mut [Verb<'_>]) -> Result<(), FabricError> {
        for verb in batch.iter() {
            self.resolve(verb.addr(), verb.bytes_moved())?;
        }
        if batch.is_empty() {
            return Ok(());
        }
        if batch.iter().all(|v| v.bytes_moved() <= PIECE) {
            return self.run_checked(batch);
        }
        let mut pieces: Vec<Verb<'_>> = Vec::new();
        for verb in batch.iter_mut() {
            match verb {
                Verb::Read { addr, buf } => read_pieces(&mut pieces, *addr, buf),
                Verb::ReadScatter { addr, head, tail } => {
                    let tail_at = addr.add(head.len() as u64);
                    read_pieces(&mut pieces, *addr, head);
                    read_pieces(&mut pieces, tail_at, tail);
                }
                Verb::Write { addr, data } => {
                    for (k, part) in data.chunks(PIECE).enumerate() {
                        pieces.push(Verb::Write {
                            addr: addr.add((k * PIECE) as u64),
                            data: part,
                        });
                    }
                }
                Verb::Cas {
                    addr,
                    expected,
                    new,
                    ..
                } => pieces.push(Verb::Cas {
                    addr: *addr,
                    expected: *expected,
                    new: *new,
                    old: 0,
                }),
            }
        }
        self.run_checked(&mut pieces)?;
        let olds: Vec<u64> = pieces
            .iter()
            .filter_map(|v| match v {
                Verb::Cas { old, .. } => Some(*old),
                _ => None,
            })
            .collect();
        drop(pieces);
        let cases = batch.iter_mut().filter_map(|v| match v {
            Verb::Cas { old, .. } => Some(old),
            _ => None,
        });
        for (old, value) in cases.zip(olds) {
            *old = value;
        }
        Ok(())
    }

    /// Runs checked verbs of at most [`PIECE`] bytes on one lane, chunk by
    /// chunk.
    fn run_checked(&self, batch: &mut [Verb<'_>]) -> Result<(), FabricError> {
        let targets = batch
            .iter()
            .map(|verb| self.resolve(verb.addr(), verb.bytes_moved()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut lane = self.lane();
        let (mut rest, mut rest_targets) = (batch, &targets[..]);
        while !rest.is_empty() {
            let (mut n, mut bytes) = (0, 0);
            while n < rest.len() && n < CHUNK {
                let len = rest[n].bytes_moved();
                if n > 0 && bytes + len > STAGING_CAP {
                    break;
                }
                bytes += len;
                n += 1;
            }
            let (chunk, tail) = std::mem::take(&mut rest).split_at_mut(n);
            lane.run(&self.device, chunk, &rest_targets[..n])?;
            rest = tail;
            rest_targets = &rest_targets[n..];
        }
        Ok(())
    }
}

impl Fabric for Core {
    fn nodes(&self) -> usize {
        self.table.len()
    }

    fn region_len(&self, node: NodeId, region: RegionId) -> Option<u64> {
        self.table
            .get(node)?
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(usize::from(region.0))?
            .as_ref()
            .map(|r| r.len)
    }

    fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
        self.execute(&mut [Verb::Read { addr, buf }])
    }

    fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
        self.execute(&mut [Verb::Write { addr, data }])
    }

    fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
        let mut verb = [Verb::Cas {
            addr,
            expected,
            new,
            old: 0,
        }];
        self.execute(&mut verb)?;
        match verb {
            [Verb::Cas { old, .. }] => Ok(old),
            _ => unreachable!("the verb stays a CAS"),
        }
    }

    fn post(&self, batch: &mut [Verb<'_>]) -> Result<(), FabricError> {
        self.execute(batch)
    }

    fn fence_node(&self, node: NodeId) {
        let Some(flag) = self.fenced.get(node) else {
            return;
        };
        let _one = self
            .reconnecting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if node == self.node || flag.swap(true, Ordering::AcqRel) {
            return;
        }
        // New verbs to the node are refused from here on; each lane's
        // initiator is failed once the round trip holding the lane ends.
        let mut refused = 0;
        for lane in &self.lanes {
            let mut lane = lane.lock().unwrap_or_else(PoisonError::into_inner);
            refused += usize::from(!lane.fence(node));
        }
        let mut responders = self
            .responders
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (_, qp) in responders.iter_mut().filter(|(peer, _)| *peer == node) {
            refused += usize::from(!Device::fail(qp));
        }
        if refused > 0 {
            tracing::error!(
                node = self.node,
                fenced = node,
                refused,
                "queue pairs to a fenced node refused the error state"
            );
        } else {
            tracing::warn!(
                node = self.node,
                fenced = node,
                "queue pairs to a lost node fenced"
            );
        }
    }

    fn readmit_node(&self, node: NodeId) {
        self.readmit(node);
    }
}

impl Fabric for VerbsFabric {
    fn nodes(&self) -> usize {
        self.core.nodes()
    }

    fn region_len(&self, node: NodeId, region: RegionId) -> Option<u64> {
        self.core.region_len(node, region)
    }

    fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
        self.core.read(addr, buf)
    }

    fn read_scatter(
        &self,
        addr: RemoteAddr,
        head: &mut [u8],
        tail: &mut [u8],
    ) -> Result<(), FabricError> {
        // One work request with two scatter entries.
        self.core
            .post(&mut [Verb::ReadScatter { addr, head, tail }])
    }

    fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
        self.core.write(addr, data)
    }

    fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
        self.core.cas(addr, expected, new)
    }

    fn post(&self, batch: &mut [Verb<'_>]) -> Result<(), FabricError> {
        self.core.post(batch)
    }

    fn fence_node(&self, node: NodeId) {
        self.core.fence_node(node);
    }

    fn readmit_node(&self, node: NodeId) {
        self.core.readmit(node);
    }
}
