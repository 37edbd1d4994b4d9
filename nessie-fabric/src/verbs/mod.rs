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
//! needs a handshake with every peer.
//!
//! **Local verbs and the atomicity rule.** A NIC's CAS is atomic only
//! against other CAS of the same NIC, so a node must not CAS its own words
//! with the CPU. Every verb on the node's own memory — CAS, READ and WRITE
//! alike — therefore goes through a loopback queue pair (a lane's queue
//! pair to this node is connected to a responder queue pair of the same
//! device). The CPU never touches region memory.
//!
//! **Connection setup.** Queue-pair numbers, port addresses and the
//! address, length and rkey of every region are exchanged over TCP with
//! each peer (see the `handshake` module); the handshake carries the
//! [`Membership`] of each side, and a mismatch (cluster, format version,
//! nodes or region sizes) fails with [`FabricError::Handshake`] on both sides. A node
//! listens on its own entry of `peers` and connects to every other entry;
//! nodes may start in any order within `attach_timeout`.
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
//! with [`VerbsFailure::Broken`] until the fabric is reopened; there is no
//! reconnection.

mod device;
mod handshake;
mod lane;

use self::device::{Device, QpInfo};
use self::handshake::Hello;
use self::lane::{verb_len, Lane, CHUNK};
use super::{
    check_bounds, Fabric, FabricError, HandshakeFailure, NodeId, RcTimeouts, RegionId, RegionSpec,
    RemoteAddr, Verb, VerbsFailure,
};
use crate::wire::WORD;
use crate::Membership;
use memmap2::{MmapMut, MmapRaw};
use sideway::ibverbs::completion::ExtendedCompletionQueue;
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::queue_pair::ExtendedQueuePair;
use std::cell::Cell;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

pub use self::handshake::MAX_LANES;

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
    /// `host:port` of every node's handshake listener, indexed by node id.
    pub peers: Vec<String>,
    /// This node, its cluster and the regions every node registers (the
    /// handshake checks them).
    pub membership: Membership,
    /// How long to wait for every peer's handshake.
    pub attach_timeout: Duration,
    /// Lanes to open (clamped to `1..=`[`MAX_LANES`]).
    pub lanes: usize,
    /// ACK timeout and retry count of every queue pair: a verb still in
    /// flight after their worst case fails, so that a CAS lands within the
    /// landing bound or not at all ([`RcTimeouts::within`]).
    pub retransmission: RcTimeouts,
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

/// A registered region of this node.
struct OwnRegion {
    // Field order is drop order: deregister before unmapping.
    _mr: Arc<MemoryRegion>,
    _map: MmapRaw,
}

/// Where each of a node's regions lives for the NIC, by id.
type RegionTable = Vec<(RegionId, RemoteRegion)>;

/// Allocates and registers this node's regions with the NIC.
fn register_regions(
    device: &Device,
    membership: &Membership,
) -> Result<(Vec<OwnRegion>, RegionTable), FabricError> {
    let me = membership.node;
    let mut own = Vec::new();
    let mut own_table = Vec::new();
    for spec in &membership.regions {
        let bytes = usize::try_from(spec.len)
            .ok()
            .filter(|&b| isize::try_from(b).is_ok())
            .ok_or(FabricError::OutOfBounds {
                node: me,
                region: spec.id,
                offset: 0,
                len: spec.len,
                region_len: isize::MAX as u64,
            })?
            .max(WORD);
        let map: MmapRaw = MmapMut::map_anon(bytes)
            .map_err(call(me, "allocate a region"))?
            .into();
        // SAFETY: `map` is a live anonymous mapping of `bytes` bytes
        // that the fabric owns (in `own`) and unmaps only after the
        // registration is dropped and every queue pair that could reach
        // it is destroyed (`VerbsFabric`'s field order).
        let mr = unsafe { device.register(map.as_mut_ptr(), bytes, "register a region") }?;
        own_table.push((spec.id, Device::remote(&mr, spec.len)));
        own.push(OwnRegion { _mr: mr, _map: map });
    }
    Ok((own, own_table))
}

/// A node's lanes before its peers are connected.
struct OpenLanes {
    lanes: Vec<Mutex<Lane>>,
    /// Each lane's queue pair info, one per node.
    infos: Vec<Vec<QpInfo>>,
    /// The loopback responders (and later the peers' responders).
    responders: Vec<ExtendedQueuePair>,
    idle_cq: Arc<ExtendedCompletionQueue>,
}

/// Opens `lanes` lanes (clamped to `1..=`[`MAX_LANES`]), each with one
/// queue pair per node, and connects each lane's own queue pair to a
/// loopback responder.
fn open_lanes(
    device: &Device,
    me: NodeId,
    nodes: usize,
    lanes: usize,
) -> Result<OpenLanes, FabricError> {
    let lanes = lanes.clamp(1, MAX_LANES);
    let idle_cq = device.cq(1)?;
    let mut lane_list = Vec::with_capacity(lanes);
    let mut infos: Vec<Vec<QpInfo>> = Vec::with_capacity(lanes);
    let mut responders = Vec::new();
    for _ in 0..lanes {
        let cq = device.cq(4 * CHUNK as u32)?;
        let mut qps = Vec::with_capacity(nodes);
        let mut lane_infos = Vec::with_capacity(nodes);
        for _ in 0..nodes {
            let (qp, info) = device.qp(&cq, CHUNK as u32)?;
            qps.push(qp);
            lane_infos.push(info);
        }
        let (mut responder, back) = device.qp(&idle_cq, 1)?;
        device.connect(&mut qps[me], lane_infos[me], back, &device.address, me)?;
        device.connect(&mut responder, back, lane_infos[me], &device.address, me)?;
        responders.push(responder);
        lane_list.push(Mutex::new(Lane::new(cq, qps)));
        infos.push(lane_infos);
    }
    Ok(OpenLanes {
        lanes: lane_list,
        infos,
        responders,
        idle_cq,
    })
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
    // Field order is drop order: queue pairs first, then the memory they
    // reach, then the device.
    lanes: Vec<Mutex<Lane>>,
    responders: Vec<ExtendedQueuePair>,
    idle_cq: Arc<ExtendedCompletionQueue>,
    table: Vec<Vec<Option<RemoteRegion>>>,
    _own: Vec<OwnRegion>,
    device: Device,
    node: NodeId,
}

impl std::fmt::Debug for VerbsFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsFabric")
            .field("node", &self.node)
            .field("nodes", &self.table.len())
            .field("device", &self.device)
            .field("lanes", &self.lanes.len())
            .field("responders", &self.responders.len())
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
/// Bytes one chunk of a batch stages at most (unless one piece is larger).
const STAGING_CAP: usize = 4 << 20;

/// The word CAS'd by the byte-order self-test at open.
const SELF_TEST: u64 = 0x0123_4567_89ab_cdef;

impl VerbsFabric {
    /// Opens the device, registers this node's regions, binds
    /// `peers[node]` and connects to every peer.
    ///
    /// # Errors
    /// As [`VerbsFabric::open_with_listener`], and [`FabricError::Bind`] if
    /// the address cannot be bound.
    pub fn open(options: &VerbsOptions) -> Result<VerbsFabric, FabricError> {
        let me = &options.membership;
        let addr = options.peers.get(me.node).ok_or(FabricError::UnknownNode {
            node: me.node,
            nodes: options.peers.len(),
        })?;
        let listener = TcpListener::bind(addr).map_err(|source| FabricError::Bind {
            addr: addr.clone(),
            source,
        })?;
        Self::open_with_listener(options, &listener)
    }

    /// As [`VerbsFabric::open`], with this node's handshake listener bound
    /// by the caller (for example to port 0, before the peers' addresses are
    /// known). The listener is used only while opening.
    ///
    /// # Errors
    /// [`FabricError::UnknownNode`] if `node` is not one of the cluster's;
    /// [`FabricError::Options`] for a region whose length is not whole
    /// words, or `peers` not one address per node; [`FabricError::NoDevice`]
    /// without a (matching) RDMA device; [`FabricError::Verbs`] if the
    /// device cannot be set up (or returns atomic results in another byte
    /// order); [`FabricError::Unreachable`] for a peer that does not listen
    /// within `attach_timeout`; [`FabricError::Handshake`] for a peer of
    /// another cluster, version or configuration, or that did not connect
    /// to this node in time.
    pub fn open_with_listener(
        options: &VerbsOptions,
        listener: &TcpListener,
    ) -> Result<VerbsFabric, FabricError> {
        let membership = &options.membership;
        membership.validate()?;
        let (me, nodes) = (membership.node, membership.nodes);
        if options.peers.len() != nodes {
            return Err(FabricError::Options {
                reason: "peers must list one address per node",
            });
        }
        let deadline = Instant::now() + options.attach_timeout;
        let device = Device::open(
            options.device.as_deref(),
            options.gid_index,
            me,
            options.retransmission,
        )?;
        let (own, own_table) = register_regions(&device, membership)?;
        let lanes = open_lanes(&device, me, nodes, options.lanes)?;
        let mut table: Vec<Vec<Option<RemoteRegion>>> = vec![Vec::new(); nodes];
        table[me] = region_table(&own_table);
        let mut fabric = VerbsFabric {
            lanes: lanes.lanes,
            responders: lanes.responders,
            idle_cq: lanes.idle_cq,
            table,
            _own: own,
            device,
            node: me,
        };
        fabric.self_test(&membership.regions)?;
        fabric.shake_hands(options, listener, deadline, &own_table, &lanes.infos)?;
        Ok(fabric)
    }

    /// Exchanges hellos with every peer (serving theirs while sending
    /// ours), then connects each lane's queue pair to the peer's.
    fn shake_hands(
        &mut self,
        options: &VerbsOptions,
        listener: &TcpListener,
        deadline: Instant,
        own_table: &[(RegionId, RemoteRegion)],
        infos: &[Vec<QpInfo>],
    ) -> Result<(), FabricError> {
        let membership = &options.membership;
        let (me, nodes) = (membership.node, membership.nodes);
        let hello = |to: NodeId, qps: Vec<QpInfo>| Hello {
            format_version: membership.format_version,
            cluster_id: membership.cluster_id,
            nodes: nodes as u64,
            from: me as u64,
            to: to as u64,
            address: self.device.address,
            qps,
            regions: own_table.to_vec(),
        };
        let stop = AtomicBool::new(false);
        let refused = Mutex::new((0..nodes).map(|_| None).collect::<Vec<_>>());
        let (served, replies) = std::thread::scope(|s| {
            let device = &self.device;
            let idle_cq = &self.idle_cq;
            let server = s.spawn(|| {
                handshake::serve(
                    listener,
                    membership,
                    &options.peers,
                    deadline,
                    &stop,
                    &refused,
                    |peer| {
                        let from = peer.from as NodeId;
                        let mut qps = Vec::with_capacity(peer.qps.len());
                        let mut mine = Vec::with_capacity(peer.qps.len());
                        for &remote in &peer.qps {
                            let (mut qp, info) = device.qp(idle_cq, 1)?;
                            device.connect(&mut qp, info, remote, &peer.address, from)?;
                            qps.push(qp);
                            mine.push(info);
                        }
                        Ok((hello(from, mine), qps))
                    },
                )
            });
            let mut replies = Vec::new();
            let mut failed = None;
            for peer in (0..nodes).filter(|&n| n != me) {
                let qps = infos.iter().map(|lane| lane[peer]).collect();
                match handshake::exchange(
                    &options.peers[peer],
                    peer,
                    &hello(peer, qps),
                    membership,
                    deadline,
                    &stop,
                ) {
                    Ok(reply) => replies.push((peer, reply)),
                    Err(e) => {
                        failed = Some(prefer_refusal(e, &refused));
                        stop.store(true, Ordering::Relaxed);
                        break;
                    }
                }
            }
            let served = server.join().unwrap_or_else(|_| {
                Err(FabricError::Verbs {
                    node: me,
                    op: "serve handshakes",
                    reason: VerbsFailure::Unsupported("the handshake thread panicked"),
                })
            });
            match failed {
                Some(e) => Err(e),
                None => Ok((served?, replies)),
            }
        })?;
        for (_, qps) in served {
            self.responders.extend(qps);
        }
        for (peer, reply) in replies {
            for (l, (lane, remote)) in self.lanes.iter_mut().zip(&reply.qps).enumerate() {
                let lane = lane.get_mut().unwrap_or_else(PoisonError::into_inner);
                self.device.connect(
                    lane.qp_mut(peer),
                    infos[l][peer],
                    *remote,
                    &reply.address,
                    peer,
                )?;
            }
            self.table[peer] = region_table(&reply.regions);
        }
        Ok(())
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

    /// The name of the RDMA device in use.
    #[must_use]
    pub fn device_name(&self) -> &str {
        &self.device.name
    }

    /// Lanes (sets of queue pairs) this fabric opened.
    #[must_use]
    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// This node.
    #[must_use]
    pub fn node(&self) -> NodeId {
        self.node
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
        let regions = self.table.get(addr.node).ok_or(FabricError::UnknownNode {
            node: addr.node,
            nodes: self.table.len(),
        })?;
        let region = regions
            .get(usize::from(addr.region.0))
            .and_then(Option::as_ref)
            .ok_or(FabricError::UnknownRegion {
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
            self.resolve(verb.addr(), verb_len(verb))?;
        }
        if batch.is_empty() {
            return Ok(());
        }
        if batch.iter().all(|v| verb_len(v) <= PIECE) {
            return self.run_checked(batch);
        }
        let mut pieces: Vec<Verb<'_>> = Vec::new();
        for verb in batch.iter_mut() {
            match verb {
                Verb::Read { addr, buf } => {
                    for (k, part) in buf.chunks_mut(PIECE).enumerate() {
                        pieces.push(Verb::Read {
                            addr: addr.add((k * PIECE) as u64),
                            buf: part,
                        });
                    }
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
            .map(|verb| self.resolve(verb.addr(), verb_len(verb)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut lane = self.lane();
        let (mut rest, mut rest_targets) = (batch, &targets[..]);
        while !rest.is_empty() {
            let (mut n, mut bytes) = (0, 0);
            while n < rest.len() && n < CHUNK {
                let len = verb_len(&rest[n]);
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

impl Fabric for VerbsFabric {
    fn nodes(&self) -> usize {
        self.table.len()
    }

    fn region_len(&self, node: NodeId, region: RegionId) -> Option<u64> {
        self.table
            .get(node)?
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
}

/// A handshake that failed on the way (unreachable, broken connection)
/// while that peer's own hello was refused here: the refusal says more.
fn prefer_refusal(e: FabricError, refused: &Mutex<Vec<Option<HandshakeFailure>>>) -> FabricError {
    let node = match &e {
        FabricError::Unreachable { node, .. }
        | FabricError::Handshake {
            node,
            reason: HandshakeFailure::Io(_) | HandshakeFailure::NotConnected(_),
            ..
        } => *node,
        _ => return e,
    };
    let Some(reason) = handshake::lock(refused)
        .get_mut(node)
        .and_then(Option::take)
    else {
        return e;
    };
    match e {
        FabricError::Unreachable { addr, .. } | FabricError::Handshake { addr, .. } => {
            FabricError::Handshake { node, addr, reason }
        }
        other => other,
    }
}

fn region_table(regions: &[(RegionId, RemoteRegion)]) -> Vec<Option<RemoteRegion>> {
    let len = regions
        .iter()
        .map(|(id, _)| usize::from(id.0) + 1)
        .max()
        .unwrap_or(0);
    let mut table = vec![None; len];
    for (id, r) in regions {
        table[usize::from(id.0)] = Some(*r);
    }
    table
}
