//! The TCP backend: a software NIC for hosts without RDMA.
//!
//! Each node keeps its regions in its own heap memory and runs a small
//! verb-executing service ([`service`]): a listener thread and one worker
//! thread per accepted connection. Peers connect with an authenticated
//! handshake ([`handshake`]: HMAC-SHA256 challenge–response in both
//! directions over the cluster secret, plus format version, cluster id, node
//! ids and region sizes, each mismatch its own [`HandshakeFailure`]), then
//! send request frames ([`crate::wire::frame`]) that the worker executes
//! in order and answers with one response frame each.
//!
//! * **Verbs.** A single verb is one frame. A batch ([`Fabric::post`]) sends
//!   one frame per peer it touches (split only if it exceeds the frame
//!   limit), each in one write, to every peer before reading any answer, and
//!   executes its verbs on this node's memory meanwhile: one round trip
//!   however many peers it spans.
//! * **Local verbs** go straight to the node's [`MemoryMap`], no socket: a
//!   local CAS and a peer's CAS act on the same `AtomicU64`, so the
//!   atomicity rule of [`crate::fabric`] holds as on a NIC.
//! * **Checks.** The service checks every verb against the registered
//!   region (bounds, alignment, region id) and refuses a bad one with a
//!   status that the caller turns into the same [`FabricError`] the local
//!   backends return; refusals are counted ([`TcpStats`]). Oversized,
//!   malformed or truncated frames close the connection and are counted. No
//!   bytes from the network can make the service panic.
//! * **Connections** ([`peer`]): a pool per peer of at most `threads`
//!   connections, each carrying one whole request/response exchange at a
//!   time; so every node serves each peer with at most `threads` worker
//!   threads, and at most `threads` verbs of a process are in flight to one
//!   peer at once. Broken connections are dropped and reopened on demand,
//!   with back-off after a failed attempt.
//! * **Start and stop.** [`TcpFabric::open`] binds the node's address,
//!   starts serving, then connects to every peer, retrying until
//!   `attach_timeout`, so nodes may start in any order. Dropping the
//!   fabric stops the listener, closes every connection and joins every
//!   thread.

pub(crate) mod handshake;
mod meeting;
mod peer;
mod service;

#[cfg(feature = "conformance")]
pub(crate) use service::serve_bytes_for_testing;

use super::memory::{HeapRegions, MemoryMap};
use super::{
    Fabric, FabricError, HandshakeFailure, NodeId, RegionId, RegionSpec, RemoteAddr, Verb,
};
use crate::clock::{Clock, WallClock};
use crate::rendezvous::{self, JoinService, Joins, RendezvousOptions};
use crate::wire::frame::{FRAME_HEADER_BYTES, VERB_HEADER_BYTES};
use crate::{Membership, Result};
use handshake::Identity;
use peer::{Link, Peer, BACKOFF_MAX, BACKOFF_MIN};
use serde::{Deserialize, Serialize};
use service::{Counters, Service, ServiceSetup};
use std::fmt;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to open a node's view of a TCP cluster.
#[derive(Clone)]
pub struct TcpOptions {
    /// This node, its cluster and the regions every node registers (the
    /// handshake checks them).
    pub membership: Membership,
    /// `host:port` of every node, indexed by node id; this node listens on
    /// its own entry. Empty: the nodes find each other through
    /// `rendezvous`.
    pub peers: Vec<String>,
    /// The cluster secret both sides of every connection prove they know.
    pub secret: String,
    /// Connections this node opens to each peer at most (and so worker
    /// threads each peer runs for this node).
    pub threads: usize,
    /// How long [`TcpFabric::open`] keeps trying to reach every peer.
    pub attach_timeout: Duration,
    /// How long a whole handshake may take: one deadline from connect
    /// (outgoing) or accept (incoming), however the peer paces its bytes.
    pub handshake_timeout: Duration,
    /// How long a verb waits for its peer before the connection counts as
    /// broken; less when the posting thread has a [`crate::WaitBound`].
    pub io_timeout: Duration,
    /// Largest frame payload this node accepts and sends.
    pub frame_limit: u64,
    /// Used when `peers` is empty: the node listens on an ephemeral port
    /// (or the listener given to [`TcpFabric::with_listener`]), registers
    /// `host:port` with this rendezvous (`host`: its address on the route
    /// to the rendezvous server) and takes every node's address from it.
    /// Its membership must be the fabric's.
    pub rendezvous: Option<RendezvousOptions>,
    /// Whether this node's memory starts closed: every peer's verb to it is
    /// refused until [`Fabric::close_own_memory`] opens it (a replacement
    /// of a lost node, whose empty memory must not answer for its
    /// predecessor's).
    pub closed: bool,
    /// With a `rendezvous`: whether the node serves the peers' addresses
    /// to replacements after start-up, or is a replacement that learns
    /// them from such a service and listens where its predecessor did.
    pub joins: Joins,
}

impl fmt::Debug for TcpOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpOptions")
            .field("membership", &self.membership)
            .field("peers", &self.peers)
            .field("secret", &"<redacted>")
            .field("threads", &self.threads)
            .field("attach_timeout", &self.attach_timeout)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("io_timeout", &self.io_timeout)
            .field("frame_limit", &self.frame_limit)
            .field("rendezvous", &self.rendezvous)
            .field("closed", &self.closed)
            .field("joins", &self.joins)
            .finish()
    }
}

/// Counters of a node's TCP fabric: what its service served and refused,
/// and what its connections to peers went through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpStats {
    /// Verbs executed or refused for peers.
    pub verbs_served: u64,
    /// Request frames answered.
    pub frames_served: u64,
    /// Verbs refused: past the end of their region.
    pub refused_out_of_bounds: u64,
    /// Verbs refused: offset or length not a multiple of 8.
    pub refused_misaligned: u64,
    /// Verbs refused: no such region.
    pub refused_unknown_region: u64,
    /// Verbs refused otherwise (bad CAS length, READs over the frame limit).
    pub refused_other: u64,
    /// CASes refused because they arrived after their land-by time (their
    /// deadline check plus the landing bound): not executed.
    pub refused_late: u64,
    /// Connections closed for announcing a frame over the limit.
    pub oversized_frames: u64,
    /// Connections closed for a frame that does not parse.
    pub malformed_frames: u64,
    /// Connections that ended inside a frame.
    pub truncated_frames: u64,
    /// Incoming connections that failed the handshake.
    pub handshake_failures: u64,
    /// Incoming connections accepted.
    pub connections_accepted: u64,
    /// Incoming connections closed at once (over the connection limit).
    pub connections_rejected: u64,
    /// Incoming connections still in their handshake closed to make room
    /// for a newer one (the oldest goes first).
    #[serde(default)]
    pub connections_evicted: u64,
    /// Outgoing connections opened (handshake passed).
    pub connections_opened: u64,
    /// Outgoing connections that broke during a verb.
    pub connections_broken: u64,
}

impl TcpStats {
    /// Verbs refused for any reason.
    #[must_use]
    pub fn refused(&self) -> u64 {
        self.refused_out_of_bounds
            + self.refused_misaligned
            + self.refused_unknown_region
            + self.refused_other
            + self.refused_late
    }
}

/// A node's view of a TCP cluster.
#[derive(Debug)]
pub struct TcpFabric {
    // Dropped first: stops serving (joins every worker) before the rest.
    _service: Service,
    /// Serves the peers' addresses to replacements after start-up.
    joins: Option<JoinService>,
    node: NodeId,
    nodes: usize,
    regions: Vec<RegionSpec>,
    memory: Arc<HeapRegions>,
    peers: Vec<Option<Peer>>,
    link: Link,
    counters: Arc<Counters>,
    local_addr: SocketAddr,
}

fn bad_options(reason: &'static str) -> FabricError {
    FabricError::Options { reason }
}

impl TcpFabric {
    /// Binds `peers[node]`, serves this node's regions, and connects to
    /// every peer (retrying until `attach_timeout`). With `peers` empty and
    /// a `rendezvous`, binds an ephemeral port on every interface instead
    /// and learns the peers' addresses from the rendezvous first.
    ///
    /// # Errors
    /// [`FabricError::Bind`] if the address cannot be bound;
    /// [`FabricError::Rendezvous`] if the rendezvous fails;
    /// [`FabricError::Unreachable`] for a peer not reached in time;
    /// [`FabricError::Handshake`] for a peer of another secret, cluster,
    /// version, node or configuration; [`FabricError::Options`] for
    /// inconsistent options; [`FabricError::OutOfMemory`] when this node's
    /// regions cannot be allocated.
    pub fn open(options: &TcpOptions) -> Result<TcpFabric, FabricError> {
        if let (true, Some(rv)) = (options.peers.is_empty(), &options.rendezvous) {
            if let Joins::Replace { also } = &options.joins {
                return TcpFabric::replace(options, rv, also);
            }
            let any = rendezvous::wildcard_for(&rv.address);
            let listener = TcpListener::bind(any).map_err(|source| FabricError::Bind {
                addr: any.to_owned(),
                source,
            })?;
            return TcpFabric::with_listener(options, listener);
        }
        let addr = options
            .peers
            .get(options.membership.node)
            .ok_or(bad_options("peers has no entry for this node"))?;
        let listener = TcpListener::bind(addr.as_str()).map_err(|source| FabricError::Bind {
            addr: addr.clone(),
            source,
        })?;
        TcpFabric::with_listener(options, listener)
    }

    /// As [`TcpFabric::open`], on a listener the caller bound (e.g. to port
    /// 0 in tests; `peers[node]` is then only informative). With `peers`
    /// empty and a `rendezvous`, the node registers the listener's port.
    ///
    /// # Errors
    /// As [`TcpFabric::open`].
    pub fn with_listener(
        options: &TcpOptions,
        listener: TcpListener,
    ) -> Result<TcpFabric, FabricError> {
        let found;
        let options = match (options.peers.is_empty(), &options.rendezvous) {
            (true, Some(rv)) => {
                found = meeting::find_peers(options, rv, &listener)?;
                &found
            }
            _ => options,
        };
        let mut fabric = TcpFabric::serve(options, listener)?;
        fabric.attach(options.attach_timeout)?;
        fabric.joins = meeting::serve_joins(options)?;
        Ok(fabric)
    }

    /// Starts serving, without connecting to anyone yet.
    fn serve(options: &TcpOptions, listener: TcpListener) -> Result<TcpFabric, FabricError> {
        let me = &options.membership;
        me.validate()?;
        if options.peers.len() != me.nodes {
            return Err(bad_options("peers must list one address per node"));
        }
        if options.threads == 0 {
            return Err(bad_options("threads must be at least 1"));
        }
        let bind = |source| FabricError::Bind {
            addr: options.peers[me.node].clone(),
            source,
        };
        let local_addr = listener.local_addr().map_err(bind)?;
        let memory = Arc::new(HeapRegions::new_gated(
            me.nodes,
            &[me.node],
            &me.regions,
            options.closed,
        )?);
        let identity = Arc::new(Identity {
            membership: me.clone(),
            frame_limit: options
                .frame_limit
                .max(FRAME_HEADER_BYTES as u64 + VERB_HEADER_BYTES as u64 + 64),
            secret: options.secret.as_bytes().to_vec(),
        });
        let counters = Arc::new(Counters::default());
        let service = Service::start(
            listener,
            ServiceSetup {
                identity: Arc::clone(&identity),
                memory: Arc::clone(&memory),
                counters: Arc::clone(&counters),
                max_connections: 2 * options.threads * me.nodes + 16,
                // Every peer's whole pool handshaking at once fits.
                max_unauthenticated: options.threads * me.nodes + 16,
                handshake_timeout: options.handshake_timeout,
                io_timeout: options.io_timeout,
            },
        )
        .map_err(bind)?;
        Ok(TcpFabric {
            _service: service,
            joins: None,
            node: me.node,
            nodes: me.nodes,
            regions: me.regions.clone(),
            memory,
            peers: (0..me.nodes)
                .map(|n| (n != me.node).then(|| Peer::new(n, options.peers[n].clone())))
                .collect(),
            link: Link {
                identity,
                counters: Arc::clone(&counters),
                handshake_timeout: options.handshake_timeout,
                io_timeout: options.io_timeout,
                connections_per_peer: options.threads,
            },
            counters,
            local_addr,
        })
    }

    /// Opens one connection to every peer, retrying with back-off until
    /// the deadline (peers may not have started yet).
    fn attach(&self, timeout: Duration) -> Result<(), FabricError> {
        let deadline = Instant::now() + timeout;
        for peer in self.peers.iter().flatten() {
            let mut pause = BACKOFF_MIN;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let attempt = left.clamp(Duration::from_millis(10), Duration::from_secs(2));
                match peer.connect(&self.link, attempt) {
                    Ok(conn) => {
                        peer.add_idle(conn);
                        break;
                    }
                    Err(
                        e @ (FabricError::Unreachable { .. }
                        | FabricError::Handshake {
                            reason: HandshakeFailure::Io(_),
                            ..
                        }),
                    ) => {
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            return Err(e);
                        }
                        std::thread::sleep(pause.min(left));
                        pause = (pause * 2).min(BACKOFF_MAX / 2);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// This node's id.
    #[must_use]
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The address the service listens on.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// What the service served and refused so far.
    #[must_use]
    pub fn stats(&self) -> TcpStats {
        self.counters.snapshot()
    }

    fn map(&self) -> &MemoryMap {
        self.memory.memory_map()
    }

    fn execute_local(&self, verb: &mut Verb<'_>) -> Result<(), FabricError> {
        verb.execute_on(self.map())
    }

    fn check_node(&self, node: NodeId) -> Result<(), FabricError> {
        if node < self.nodes {
            Ok(())
        } else {
            Err(FabricError::UnknownNode {
                node,
                nodes: self.nodes,
            })
        }
    }
}

impl Fabric for TcpFabric {
    fn nodes(&self) -> usize {
        self.nodes
    }

    fn region_len(&self, node: NodeId, region: RegionId) -> Option<u64> {
        if node >= self.nodes {
            return None;
        }
        self.regions.iter().find(|r| r.id == region).map(|r| r.len)
    }

    fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
        if addr.node == self.node {
            return self.map().read(addr, buf);
        }
        self.post(&mut [Verb::Read { addr, buf }])
    }

    fn read_scatter(
        &self,
        addr: RemoteAddr,
        head: &mut [u8],
        tail: &mut [u8],
    ) -> Result<(), FabricError> {
        if addr.node == self.node {
            return self.map().read_scatter(addr, head, tail);
        }
        // One frame: a scatter READ is one round trip.
        self.post(&mut [Verb::ReadScatter { addr, head, tail }])
    }

    fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
        if addr.node == self.node {
            return self.map().write(addr, data);
        }
        self.post(&mut [Verb::Write { addr, data }])
    }

    fn write_streaming(
        &self,
        addr: RemoteAddr,
        parts: &[&[u8]],
        cached: usize,
    ) -> Result<(), FabricError> {
        if addr.node == self.node {
            return self.map().write_streaming(addr, parts, cached);
        }
        self.write(addr, &parts.concat())
    }

    fn prefault(&self, addr: RemoteAddr, len: u64) -> Result<(), FabricError> {
        if addr.node == self.node {
            return self.map().prefault(addr, len);
        }
        self.check_node(addr.node)
    }

    fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
        self.cas_by(addr, expected, new, 0)
    }

    fn cas_by(&self, addr: RemoteAddr, expected: u64, new: u64, land_by_us: u64) -> Result<u64> {
        if addr.node == self.node {
            // The local CAS is this thread's own instruction; the check
            // still catches a stall since the operation's deadline check.
            if land_by_us != 0 {
                let now = WallClock::default().now_us();
                if now > land_by_us {
                    return Err(FabricError::LateCas {
                        node: addr.node,
                        late_us: now - land_by_us,
                    });
                }
            }
            return self.map().cas(addr, expected, new);
        }
        let mut batch = [Verb::Cas {
            addr,
            expected,
            new,
            old: 0,
        }];
        self.post_land_by(&mut batch, land_by_us)?;
        match batch {
            [Verb::Cas { old, .. }] => Ok(old),
            _ => unreachable!("the batch holds the CAS built above"),
        }
    }

    fn enforces_land_by(&self) -> bool {
        true
    }

    fn keeps_batch_order(&self) -> bool {
        // A node's verbs of a batch go, in batch order, in frames on one
        // connection, whose worker executes them one after another; this
        // node's own run in order too.
        true
    }

    fn post(&self, batch: &mut [Verb<'_>]) -> Result<(), FabricError> {
        self.post_land_by(batch, 0)
    }

    fn close_own_memory(&self, closed: bool) {
        self.memory.set_closed(closed);
    }

    fn post_by(&self, batch: &mut [Verb<'_>], land_by_us: u64) -> Result<(), FabricError> {
        self.post_land_by(batch, land_by_us)
    }
}

impl TcpFabric {
    /// Posts `batch`, its CASes with the land-by time `land_by` (0: none).
    fn post_land_by(&self, batch: &mut [Verb<'_>], land_by: u64) -> Result<(), FabricError> {
        let mut groups: Vec<Vec<usize>> = vec![Vec::new(); self.nodes];
        for (i, verb) in batch.iter().enumerate() {
            let node = verb.addr().node;
            self.check_node(node)?;
            groups[node].push(i);
        }
        // The failed verb that comes first in the batch wins.
        let mut first: Option<(usize, FabricError)> = None;
        let mut note = |i: usize, e: FabricError| {
            if first.as_ref().is_none_or(|(j, _)| i < *j) {
                first = Some((i, e));
            }
        };
        // Send to every peer (ascending node order), then run the local
        // verbs while the peers work, then collect the answers.
        let mut in_flight = Vec::new();
        for (node, group) in groups.iter().enumerate() {
            let Some(peer) = self.peers[node].as_ref().filter(|_| !group.is_empty()) else {
                continue;
            };
            match peer.send(&self.link, batch, group, land_by) {
                Ok((conn, frames)) => in_flight.push((peer, conn, frames, group)),
                Err(e) => note(group[0], e),
            }
        }
        for &i in &groups[self.node] {
            if let Err(e) = self.execute_local(&mut batch[i]) {
                note(i, e);
            }
        }
        for (peer, conn, frames, group) in in_flight {
            match peer.receive(&self.link, conn, batch, group, &frames) {
                Ok(None) => {}
                Ok(Some((i, e))) => note(i, e),
                Err(e) => note(group[0], e),
            }
        }
        first.map_or(Ok(()), |(_, e)| Err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::frame::{
        put_word, FrameHeader, VerbHeader, OP_READ, REQUEST_MAGIC, RESPONSE_MAGIC, STATUS_OK,
        STATUS_RESPONSE_TOO_LARGE,
    };
    use std::io::{Read, Write};
    use std::net::TcpStream;

    const LIMIT: u64 = 4096;

    /// Node 0 of a two-node cluster, serving; the test plays node 1.
    fn server() -> (TcpFabric, Arc<Identity>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let regions = vec![RegionSpec {
            id: RegionId(0),
            len: 1024,
        }];
        let membership = Membership {
            cluster_id: 9,
            format_version: 1,
            node: 0,
            nodes: 2,
            regions,
        };
        let options = TcpOptions {
            closed: false,
            joins: Joins::Off,
            membership: membership.clone(),
            peers: vec![
                listener.local_addr().unwrap().to_string(),
                "127.0.0.1:1".into(),
            ],
            secret: "unit-test-secret".into(),
            threads: 1,
            attach_timeout: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(5),
            frame_limit: LIMIT,
            rendezvous: None,
        };
        let fabric = TcpFabric::serve(&options, listener).unwrap();
        let me = Arc::new(Identity {
            membership: Membership {
                node: 1,
                ..membership
            },
            frame_limit: LIMIT,
            secret: b"unit-test-secret".to_vec(),
        });
        (fabric, me)
    }

    fn connect(fabric: &TcpFabric, me: &Identity) -> TcpStream {
        let mut s = TcpStream::connect(fabric.local_addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        handshake::client(&mut s, me, 0).unwrap();
        s
    }

    fn read_frame(fabric: &TcpFabric, me: &Identity, verbs: u32, each: u64) -> Vec<u8> {
        let mut req = FrameHeader {
            magic: REQUEST_MAGIC,
            verbs,
            payload: u64::from(verbs) * VERB_HEADER_BYTES as u64,
        }
        .encode()
        .to_vec();
        for _ in 0..verbs {
            VerbHeader {
                op: OP_READ,
                region: 0,
                offset: 0,
                len: each,
            }
            .encode_into(&mut req);
        }
        let mut s = connect(fabric, me);
        s.write_all(&req).unwrap();
        let mut head = [0u8; FRAME_HEADER_BYTES];
        s.read_exact(&mut head).unwrap();
        let h = FrameHeader::decode(&head);
        assert_eq!((h.magic, h.verbs), (RESPONSE_MAGIC, verbs));
        let mut body = vec![0u8; h.payload as usize];
        s.read_exact(&mut body).unwrap();
        body
    }

    /// The connection ends (EOF or reset) without an answer.
    fn closed(mut s: TcpStream) -> bool {
        let mut b = [0u8; 1];
        matches!(s.read(&mut b), Ok(0) | Err(_))
    }

    #[test]
    fn hostile_bytes_close_the_connection_and_are_counted() {
        let (fabric, me) = server();
        // Not a nessie peer at all.
        let mut s = TcpStream::connect(fabric.local_addr()).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        assert!(closed(s));
        // Oversized: the header announces more than the limit.
        let mut s = connect(&fabric, &me);
        let h = FrameHeader {
            magic: REQUEST_MAGIC,
            verbs: 1,
            payload: LIMIT + 8,
        };
        s.write_all(&h.encode()).unwrap();
        assert!(closed(s));
        // Truncated: the payload stops short, then the peer hangs up.
        let mut s = connect(&fabric, &me);
        let h = FrameHeader {
            magic: REQUEST_MAGIC,
            verbs: 1,
            payload: 64,
        };
        s.write_all(&h.encode()).unwrap();
        s.write_all(&[0u8; 16]).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        assert!(closed(s));
        // Malformed: an unknown op, then a WRITE longer than the frame.
        for op in [77u16, crate::wire::frame::OP_WRITE] {
            let mut s = connect(&fabric, &me);
            let mut req = FrameHeader {
                magic: REQUEST_MAGIC,
                verbs: 1,
                payload: VERB_HEADER_BYTES as u64,
            }
            .encode()
            .to_vec();
            VerbHeader {
                op,
                region: 0,
                offset: 0,
                len: 1 << 40,
            }
            .encode_into(&mut req);
            s.write_all(&req).unwrap();
            assert!(closed(s));
        }
        // A lying verb count (more verbs than the payload can hold).
        let mut s = connect(&fabric, &me);
        let h = FrameHeader {
            magic: REQUEST_MAGIC,
            verbs: u32::MAX,
            payload: 8,
        };
        s.write_all(&h.encode()).unwrap();
        assert!(closed(s));
        let stats = fabric.stats();
        assert_eq!(stats.handshake_failures, 1, "{stats:?}");
        assert_eq!(stats.oversized_frames, 1, "{stats:?}");
        assert_eq!(stats.truncated_frames, 1, "{stats:?}");
        assert_eq!(stats.malformed_frames, 3, "{stats:?}");
        // The service still serves well-formed frames.
        let body = read_frame(&fabric, &me, 1, 16);
        let mut expected = Vec::new();
        put_word(&mut expected, STATUS_OK);
        expected.extend_from_slice(&[0u8; 16]);
        assert_eq!(body, expected);
    }

    #[test]
    fn reads_past_the_frame_limit_are_refused_not_buffered() {
        let (fabric, me) = server();
        // Five 1 KiB READs: the fifth would take the response past 4 KiB.
        let body = read_frame(&fabric, &me, 5, 1024);
        let statuses: Vec<u64> = {
            let mut at = 0;
            let mut out = Vec::new();
            for _ in 0..5 {
                let st = crate::wire::frame::word(&body[at..], 0).unwrap();
                out.push(st);
                at += 8 + if st == STATUS_OK { 1024 } else { 8 };
            }
            assert_eq!(at, body.len());
            out
        };
        assert_eq!(&statuses[..3], &[STATUS_OK; 3]);
        assert_eq!(statuses[4], STATUS_RESPONSE_TOO_LARGE);
        assert!(fabric.stats().refused_other >= 1);
    }
}
