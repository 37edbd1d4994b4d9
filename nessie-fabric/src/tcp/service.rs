//! The software NIC: a listener thread and one worker thread per accepted
//! connection, executing peers' verbs on this node's memory.
//!
//! A worker first runs the handshake, which must end within one deadline
//! from accept however the peer paces its bytes; unauthenticated
//! connections are capped apart from authenticated ones, and the oldest
//! is evicted to make room for a newcomer (see [`crate::admission`]), so
//! strangers cannot keep a peer out. Then the worker loops: read a request frame, execute its verbs in
//! order on the [`MemoryMap`], write one response frame. Every verb is
//! checked against the registered region (bounds, alignment, region id)
//! before it touches memory; a refused verb gets a refusal status and is
//! counted, and the frame goes on. A frame that is oversized, malformed or
//! cut short closes the connection and is counted. Nothing a peer sends can
//! make a worker panic or allocate more than the frame limit.

use super::super::memory::{HeapRegions, MemoryMap};
use super::super::{FabricError, RegionId, RemoteAddr};
use super::handshake::{self, Identity};
use super::TcpStats;
use crate::admission::{Admission, Deadline};
use crate::clock::{Clock, WallClock};
use crate::wire::frame::{
    put_word, word, FrameHeader, VerbHeader, CAS_OPERANDS, FRAME_HEADER_BYTES, OP_CAS, OP_READ,
    OP_WRITE, REQUEST_MAGIC, RESPONSE_MAGIC, STATUS_BAD_OP, STATUS_LATE, STATUS_MISALIGNED,
    STATUS_OK, STATUS_OUT_OF_BOUNDS, STATUS_RESPONSE_TOO_LARGE, STATUS_UNKNOWN_REGION,
    VERB_HEADER_BYTES,
};
use crate::wire::WORD;
use std::io::{self, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Counters of the service; [`TcpStats`] is their snapshot.
#[derive(Debug, Default)]
pub(super) struct Counters {
    verbs: AtomicU64,
    frames: AtomicU64,
    refused_out_of_bounds: AtomicU64,
    refused_misaligned: AtomicU64,
    refused_unknown_region: AtomicU64,
    refused_other: AtomicU64,
    refused_late: AtomicU64,
    oversized_frames: AtomicU64,
    malformed_frames: AtomicU64,
    truncated_frames: AtomicU64,
    handshake_failures: AtomicU64,
    connections: AtomicU64,
    rejected_connections: AtomicU64,
    evicted_connections: AtomicU64,
    opened: AtomicU64,
    broken: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    pub(super) fn opened(&self) {
        bump(&self.opened);
    }

    pub(super) fn broke(&self) {
        bump(&self.broken);
    }

    pub(super) fn snapshot(&self) -> TcpStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TcpStats {
            verbs_served: g(&self.verbs),
            frames_served: g(&self.frames),
            refused_out_of_bounds: g(&self.refused_out_of_bounds),
            refused_misaligned: g(&self.refused_misaligned),
            refused_unknown_region: g(&self.refused_unknown_region),
            refused_other: g(&self.refused_other),
            refused_late: g(&self.refused_late),
            oversized_frames: g(&self.oversized_frames),
            malformed_frames: g(&self.malformed_frames),
            truncated_frames: g(&self.truncated_frames),
            handshake_failures: g(&self.handshake_failures),
            connections_accepted: g(&self.connections),
            connections_rejected: g(&self.rejected_connections),
            connections_evicted: g(&self.evicted_connections),
            connections_opened: g(&self.opened),
            connections_broken: g(&self.broken),
        }
    }
}

/// What the service needs from its fabric.
#[derive(Debug)]
pub(super) struct ServiceSetup {
    pub(super) identity: Arc<Identity>,
    pub(super) memory: Arc<HeapRegions>,
    pub(super) counters: Arc<Counters>,
    /// Authenticated connections served at once.
    pub(super) max_connections: usize,
    /// Connections still in their handshake at once; the oldest is
    /// evicted for a newcomer.
    pub(super) max_unauthenticated: usize,
    /// How long a whole handshake may take, from accept.
    pub(super) handshake_timeout: Duration,
    pub(super) io_timeout: Duration,
}

#[derive(Debug)]
struct Shared {
    config: ServiceSetup,
    stop: AtomicBool,
    /// Live connections, so eviction and shutdown can wake their workers.
    admission: Admission,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

/// A running service; stops and joins its threads on drop.
#[derive(Debug)]
pub(super) struct Service {
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
    wake_addr: SocketAddr,
}

impl Service {
    pub(super) fn start(listener: TcpListener, config: ServiceSetup) -> io::Result<Service> {
        // The accept loop blocks; a caller's listener may be non-blocking.
        listener.set_nonblocking(false)?;
        let mut wake_addr = listener.local_addr()?;
        if wake_addr.ip().is_unspecified() {
            wake_addr.set_ip(match wake_addr {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let node = config.identity.membership.node;
        let shared = Arc::new(Shared {
            admission: Admission::new(config.max_unauthenticated, config.max_connections),
            config,
            stop: AtomicBool::new(false),
            workers: Mutex::new(Vec::new()),
        });
        let s = Arc::clone(&shared);
        let acceptor = std::thread::Builder::new()
            .name(format!("nessie-tcp{node}-accept"))
            .spawn(move || accept_loop(&s, &listener))?;
        Ok(Service {
            shared,
            acceptor: Some(acceptor),
            wake_addr,
        })
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept with a connection of our own.
        match TcpStream::connect_timeout(&self.wake_addr, Duration::from_secs(2)) {
            Ok(_) => {
                if let Some(a) = self.acceptor.take() {
                    let _ = a.join();
                }
            }
            Err(e) => tracing::warn!(
                "tcp fabric: cannot wake the listener at {} ({e}); leaving it behind",
                self.wake_addr
            ),
        }
        self.shared.admission.close();
        let workers: Vec<_> = lock(&self.shared.workers).drain(..).collect();
        for w in workers {
            let _ = w.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A worker that panicked (it should not) leaves consistent data behind:
    // every critical section is a single insert or remove.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    let node = shared.config.identity.membership.node;
    let counters = &shared.config.counters;
    // Evicted workers take a moment to notice; past this many threads a
    // newcomer waits for them instead of adding one more.
    let max_workers = shared.config.max_connections + 2 * shared.config.max_unauthenticated;
    for incoming in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let stream = match incoming {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors and the like: back off, keep serving.
                tracing::warn!("tcp fabric node {node}: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        let accepted = Instant::now();
        let mut workers = lock(&shared.workers);
        workers.retain(|w| !w.is_finished());
        let admitted = if workers.len() < max_workers {
            shared.admission.admit(&stream)
        } else {
            None
        };
        let Some(admitted) = admitted else {
            drop(workers);
            bump(&counters.rejected_connections);
            tracing::warn!(
                "tcp fabric node {node}: refusing a connection beyond the limit of {} peers' connections",
                shared.config.max_connections
            );
            continue;
        };
        if admitted.evicted {
            bump(&counters.evicted_connections);
            tracing::warn!(
                "tcp fabric node {node}: {} connections still in their handshake; closed the oldest",
                shared.config.max_unauthenticated
            );
        }
        bump(&counters.connections);
        let id = admitted.id;
        let s = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name(format!("nessie-tcp{node}-conn{id}"))
            .spawn(move || {
                serve(&s, id, stream, accepted);
                s.admission.remove(id);
            });
        match spawned {
            Ok(handle) => workers.push(handle),
            Err(e) => {
                drop(workers);
                tracing::warn!("tcp fabric node {node}: cannot start a worker: {e}");
                shared.admission.remove(id);
                bump(&counters.rejected_connections);
            }
        }
    }
}

/// Why a connection ends.
enum End {
    /// The peer closed it between frames (or shutdown woke us).
    Closed,
    /// An I/O error.
    Io,
    /// The header announced more than the frame limit.
    Oversized,
    /// The bytes do not parse.
    Malformed,
    /// The connection ended inside a frame.
    Truncated,
}

/// Serves the connection `id`, accepted at `accepted`: the handshake
/// within its deadline, then frames until it ends.
fn serve(shared: &Shared, id: u64, stream: TcpStream, accepted: Instant) {
    let cfg = &shared.config;
    let me = cfg.identity.membership.node;
    let _ = stream.set_nodelay(true);
    let peer_addr = stream
        .peer_addr()
        .map_or_else(|_| "?".to_owned(), |a| a.to_string());
    let mut timed = Deadline::new(&stream, accepted + cfg.handshake_timeout);
    let peer = match handshake::server(&mut timed, &cfg.identity) {
        Ok((peer, _)) => peer,
        Err(e) => {
            if !shared.stop.load(Ordering::SeqCst) {
                bump(&cfg.counters.handshake_failures);
                tracing::warn!("tcp fabric node {me}: handshake with {peer_addr} failed: {e}");
            }
            return;
        }
    };
    if !shared.admission.authenticate(id) {
        // Evicted at the last moment, or every authenticated slot taken.
        tracing::warn!("tcp fabric node {me}: no room for node {peer} ({peer_addr}); closing");
        return;
    }
    let _ = stream.set_read_timeout(None);
    let _ = stream.set_write_timeout(Some(cfg.io_timeout));
    let mut reader = BufReader::with_capacity(64 << 10, stream);
    let mut payload = Vec::new();
    let mut response = Vec::new();
    let end = loop {
        match serve_frame(cfg, &mut reader, &mut payload, &mut response) {
            Ok(()) => {}
            Err(end) => break end,
        }
    };
    let counter = match end {
        End::Closed | End::Io => None,
        End::Oversized => Some(&cfg.counters.oversized_frames),
        End::Malformed => Some(&cfg.counters.malformed_frames),
        End::Truncated => Some(&cfg.counters.truncated_frames),
    };
    if let Some(c) = counter {
        bump(c);
        tracing::warn!("tcp fabric node {me}: closing the connection of node {peer} ({peer_addr}) after a bad frame");
    }
}

/// Reads exactly `buf.len()` bytes; `Closed` if the stream ends before the
/// first byte, `Truncated` if it ends later.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> Result<(), End> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Err(End::Closed),
            Ok(0) => return Err(End::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) if got == 0 => return Err(End::Io),
            Err(_) => return Err(End::Truncated),
        }
    }
    Ok(())
}

/// Serves one request frame from `reader`, answering into the same stream.
/// Generic over the stream so that tests and the fuzz target can feed it
/// arbitrary bytes without a socket.
fn serve_frame<S: Read + Write>(
    cfg: &ServiceSetup,
    reader: &mut BufReader<S>,
    payload: &mut Vec<u8>,
    response: &mut Vec<u8>,
) -> Result<(), End> {
    let mut head = [0u8; FRAME_HEADER_BYTES];
    read_full(reader, &mut head)?;
    let header = FrameHeader::decode(&head);
    if header.magic != REQUEST_MAGIC {
        return Err(End::Malformed);
    }
    let limit = cfg.identity.frame_limit;
    if header.payload > limit {
        return Err(End::Oversized);
    }
    if u64::from(header.verbs) * VERB_HEADER_BYTES as u64 > header.payload {
        return Err(End::Malformed);
    }
    payload.clear();
    // Grows as bytes arrive: a lying header costs no memory up front.
    let got = reader
        .by_ref()
        .take(header.payload)
        .read_to_end(payload)
        .map_err(|_| End::Truncated)?;
    if got as u64 != header.payload {
        return Err(End::Truncated);
    }
    execute(cfg, header.verbs, payload, response)?;
    bump(&cfg.counters.frames);
    reader.get_mut().write_all(response).map_err(|_| End::Io)
}

/// Serves frames from an in-memory byte stream until it ends or a frame is
/// refused; returns how many frames were answered and the responses. The
/// entry point of the decoder property tests and of the fuzz target
/// (through [`crate::conformance::serve_tcp_bytes`]); compiled only with
/// the feature `conformance`.
#[cfg(feature = "conformance")]
pub(crate) fn serve_bytes_for_testing(input: &[u8]) -> (usize, Vec<u8>) {
    struct Duplex<'a> {
        input: &'a [u8],
        output: Vec<u8>,
    }
    impl Read for Duplex<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.input.read(buf)
        }
    }
    impl Write for Duplex<'_> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.output.write(buf)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let cfg = testing_setup();
    let mut reader = BufReader::new(Duplex {
        input,
        output: Vec::new(),
    });
    let (mut payload, mut response) = (Vec::new(), Vec::new());
    let mut frames = 0;
    while serve_frame(&cfg, &mut reader, &mut payload, &mut response).is_ok() {
        frames += 1;
    }
    (frames, reader.into_inner().output)
}

/// A one-node service configuration with two small regions, for tests.
#[cfg(feature = "conformance")]
fn testing_setup() -> ServiceSetup {
    use crate::RegionSpec;
    let regions = vec![
        RegionSpec {
            id: RegionId(0),
            len: 256,
        },
        RegionSpec {
            id: RegionId(1),
            len: 4096,
        },
    ];
    ServiceSetup {
        identity: Arc::new(Identity {
            membership: crate::Membership {
                cluster_id: 1,
                format_version: 1,
                node: 0,
                nodes: 1,
                regions: regions.clone(),
            },
            frame_limit: 1 << 16,
            secret: b"testing".to_vec(),
        }),
        memory: Arc::new(HeapRegions::new(1, &[0], &regions).unwrap()),
        counters: Arc::new(Counters::default()),
        max_connections: 1,
        max_unauthenticated: 1,
        handshake_timeout: Duration::from_secs(1),
        io_timeout: Duration::from_secs(1),
    }
}

/// Executes the verbs of one request payload, building the response frame.
fn execute(cfg: &ServiceSetup, verbs: u32, payload: &[u8], out: &mut Vec<u8>) -> Result<(), End> {
    let map = cfg.memory.memory_map();
    let node = cfg.identity.membership.node;
    out.clear();
    out.extend_from_slice(&[0u8; FRAME_HEADER_BYTES]);
    let mut pos = 0usize;
    let mut read_budget = cfg.identity.frame_limit;
    let take = |pos: &mut usize, len: u64| -> Result<std::ops::Range<usize>, End> {
        let len = usize::try_from(len).map_err(|_| End::Malformed)?;
        let end = pos
            .checked_add(len)
            .filter(|&e| e <= payload.len())
            .ok_or(End::Malformed)?;
        let r = *pos..end;
        *pos = end;
        Ok(r)
    };
    for _ in 0..verbs {
        let v = VerbHeader::decode(&payload[take(&mut pos, VERB_HEADER_BYTES as u64)?])
            .ok_or(End::Malformed)?;
        let addr = RemoteAddr::new(node, RegionId(v.region), v.offset);
        bump(&cfg.counters.verbs);
        let result = match v.op {
            OP_READ => read(map, addr, v.len, &mut read_budget, out),
            OP_WRITE => {
                let data = &payload[take(&mut pos, v.len)?];
                map.write(addr, data)
                    .map(|()| put_word(out, STATUS_OK))
                    .map_err(Refusal::Verb)
            }
            OP_CAS => {
                let ops = &payload[take(&mut pos, (CAS_OPERANDS * WORD) as u64)?];
                let (expected, new, land_by) = (word(ops, 0), word(ops, 1), word(ops, 2));
                match (expected, new, land_by) {
                    (Some(e), Some(n), Some(by)) if v.len == WORD as u64 => {
                        cas_by(map, addr, e, n, by, out)
                    }
                    _ => Err(Refusal::BadCas),
                }
            }
            // Unknown op: its operands' size is unknown, so the rest of
            // the frame cannot be parsed.
            _ => return Err(End::Malformed),
        };
        if let Err(e) = result {
            refuse(&cfg.counters, &e, out);
        }
    }
    if pos != payload.len() {
        return Err(End::Malformed);
    }
    let header = FrameHeader {
        magic: RESPONSE_MAGIC,
        verbs,
        payload: (out.len() - FRAME_HEADER_BYTES) as u64,
    };
    out[..FRAME_HEADER_BYTES].copy_from_slice(&header.encode());
    Ok(())
}

/// Executes a CAS unless its land-by time (`0`: none) has passed on this
/// node's wall clock, checked right before executing it
/// (docs/design.md#the-landing-bound: a CAS must land within the landing bound
/// of its deadline check, or not at all).
fn cas_by(
    map: &MemoryMap,
    addr: RemoteAddr,
    expected: u64,
    new: u64,
    land_by: u64,
    out: &mut Vec<u8>,
) -> Result<(), Refusal> {
    if land_by != 0 {
        let now = WallClock::default().now_us();
        if now > land_by {
            return Err(Refusal::Late(now - land_by));
        }
    }
    let old = map.cas(addr, expected, new).map_err(Refusal::Verb)?;
    put_word(out, STATUS_OK);
    put_word(out, old);
    Ok(())
}

/// Why the service refused a verb.
enum Refusal {
    /// The memory map's bounds, alignment or region check.
    Verb(FabricError),
    /// The frame's READs together exceed the frame limit.
    TooLarge,
    /// A CAS whose length is not 8.
    BadCas,
    /// A CAS past its land-by time, by this many µs.
    Late(u64),
}

fn read(
    map: &MemoryMap,
    addr: RemoteAddr,
    len: u64,
    budget: &mut u64,
    out: &mut Vec<u8>,
) -> Result<(), Refusal> {
    map.check(addr, len).map_err(Refusal::Verb)?;
    if len > *budget {
        return Err(Refusal::TooLarge);
    }
    *budget -= len;
    let status_at = out.len();
    put_word(out, STATUS_OK);
    let start = out.len();
    // `check` bounded `len` by the region's length.
    out.resize(start + len as usize, 0);
    map.read(addr, &mut out[start..]).map_err(|e| {
        out.truncate(status_at);
        Refusal::Verb(e)
    })
}

fn refuse(counters: &Counters, refusal: &Refusal, out: &mut Vec<u8>) {
    let (status, detail, counter) = match refusal {
        Refusal::Verb(FabricError::OutOfBounds { region_len, .. }) => (
            STATUS_OUT_OF_BOUNDS,
            *region_len,
            &counters.refused_out_of_bounds,
        ),
        Refusal::Verb(FabricError::Misaligned { .. }) => {
            (STATUS_MISALIGNED, 0, &counters.refused_misaligned)
        }
        Refusal::Verb(FabricError::UnknownRegion { .. }) => {
            (STATUS_UNKNOWN_REGION, 0, &counters.refused_unknown_region)
        }
        Refusal::TooLarge => (STATUS_RESPONSE_TOO_LARGE, 0, &counters.refused_other),
        Refusal::Late(us) => (STATUS_LATE, *us, &counters.refused_late),
        Refusal::Verb(_) | Refusal::BadCas => (STATUS_BAD_OP, 0, &counters.refused_other),
    };
    bump(counter);
    put_word(out, status);
    put_word(out, detail);
}
