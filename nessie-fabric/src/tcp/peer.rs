//! The connecting side: a small pool of authenticated connections per peer,
//! and the encoding of a batch's verbs into request frames and back.
//!
//! A verb (or a batch's share for one peer) takes an idle connection from
//! the peer's pool, or opens one while fewer than `threads` exist, or waits
//! for one to come back. The whole request/response exchange runs on that
//! connection, so exchanges never interleave on a stream; a batch that
//! spans several peers takes their connections in ascending node order
//! (no cycle of waiting threads can form). A connection that breaks is
//! dropped together with every idle connection of the same generation, so
//! after a peer restarts, one verb fails (`Disconnected`) and the next one
//! reconnects. A failed connection attempt starts a back-off (10 ms,
//! doubling up to 1 s) during which verbs fail fast with `Unreachable`.
//! Opening a connection (the dial and the handshake) and waiting for one to
//! come back to the pool end at the thread's [`WaitBound`] like an
//! exchange's reads do: a silent peer that must be dialled again holds a
//! verb no longer than one it is already connected to.
//!
//! [`WaitBound`]: crate::WaitBound

use super::super::{FabricError, HandshakeFailure, NodeId, RegionId, RemoteAddr, Verb};
use super::handshake::{self, Identity};
use super::service::Counters;
use crate::admission::Deadline;
use crate::wire::frame::{
    put_word, word, FrameHeader, VerbHeader, FRAME_HEADER_BYTES, OP_CAS, OP_READ, OP_WRITE,
    REQUEST_MAGIC, RESPONSE_MAGIC, STATUS_BAD_OP, STATUS_BYTES, STATUS_LATE, STATUS_MISALIGNED,
    STATUS_OK, STATUS_OUT_OF_BOUNDS, STATUS_RESPONSE_TOO_LARGE, STATUS_UNKNOWN_REGION,
};
use crate::wire::WORD;
use std::io::{self, BufReader, ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Shortest pause after a failed connection attempt.
pub(super) const BACKOFF_MIN: Duration = Duration::from_millis(10);
/// Longest pause after failed connection attempts.
pub(super) const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// What every connection of a node shares.
#[derive(Debug)]
pub(super) struct Link {
    pub(super) identity: Arc<Identity>,
    pub(super) counters: Arc<Counters>,
    pub(super) handshake_timeout: Duration,
    pub(super) io_timeout: Duration,
    pub(super) connections_per_peer: usize,
}

/// One authenticated connection.
#[derive(Debug)]
pub(super) struct Conn {
    reader: BufReader<TcpStream>,
    /// Largest frame payload both sides accept.
    limit: u64,
    generation: u64,
    /// The socket's read timeout as last set.
    read_timeout: Duration,
}

/// Granularity of a read timeout cut short by a [`WaitBound`]: rounding the
/// time left up to whole steps lets consecutive exchanges reuse the setting
/// instead of paying a system call each.
///
/// [`WaitBound`]: crate::WaitBound
const BOUND_STEP: Duration = Duration::from_millis(10);

impl Conn {
    /// Sets the socket's read timeout for the next exchange: the time left
    /// before this thread's wait bound, in whole [`BOUND_STEP`]s, if that is
    /// shorter than `io_timeout`. Returns whether the bound cut it short.
    fn bound_reads(&mut self, io_timeout: Duration) -> bool {
        let left = crate::wait_bound::current()
            .map(|at| at.saturating_duration_since(Instant::now()))
            .filter(|left| *left < io_timeout);
        let wanted = match left {
            Some(left) => {
                let steps = left.as_nanos().div_ceil(BOUND_STEP.as_nanos()).max(1);
                (BOUND_STEP * u32::try_from(steps).unwrap_or(u32::MAX)).min(io_timeout)
            }
            None => io_timeout,
        };
        if wanted != self.read_timeout
            && self.reader.get_ref().set_read_timeout(Some(wanted)).is_ok()
        {
            self.read_timeout = wanted;
        }
        left.is_some()
    }
}

#[derive(Debug)]
struct PeerState {
    idle: Vec<Conn>,
    /// Connections that exist (idle or in use).
    open: usize,
    generation: u64,
    backoff: Duration,
    retry_at: Option<Instant>,
    last_failure: ErrorKind,
    /// Threads waiting in [`Peer::acquire`] for a connection. A condition
    /// variable's notify is a system call whether or not anyone waits, and
    /// one per exchange was a third of the software NIC's system calls, so
    /// the pool notifies only when this is non-zero.
    waiting: usize,
}

/// Another node, and the pool of connections to it.
#[derive(Debug)]
pub(super) struct Peer {
    pub(super) node: NodeId,
    pub(super) addr: String,
    state: Mutex<PeerState>,
    returned: Condvar,
}

fn lock(m: &Mutex<PeerState>) -> MutexGuard<'_, PeerState> {
    // Every critical section leaves the state consistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Peer {
    pub(super) fn new(node: NodeId, addr: String) -> Peer {
        Peer {
            node,
            addr,
            state: Mutex::new(PeerState {
                idle: Vec::new(),
                open: 0,
                generation: 0,
                backoff: BACKOFF_MIN,
                retry_at: None,
                last_failure: ErrorKind::ConnectionRefused,
                waiting: 0,
            }),
            returned: Condvar::new(),
        }
    }

    fn dial(&self, timeout: Duration) -> io::Result<TcpStream> {
        let mut last = io::Error::new(ErrorKind::AddrNotAvailable, "address resolves to nothing");
        for a in self.addr.to_socket_addrs()? {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Opens and authenticates a new connection (not counted in the pool).
    pub(super) fn connect(&self, link: &Link, timeout: Duration) -> Result<Conn, FabricError> {
        let unreachable = |source| FabricError::Unreachable {
            node: self.node,
            addr: self.addr.clone(),
            source,
        };
        let stream = self.dial(timeout).map_err(unreachable)?;
        let setup = |s: &TcpStream, t: Duration| {
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(t))?;
            s.set_write_timeout(Some(t))
        };
        stream.set_nodelay(true).map_err(unreachable)?;
        // The whole handshake within one deadline, however the peer paces
        // it, and not past the thread's wait bound.
        let mut until = Instant::now() + link.handshake_timeout;
        if let Some(bound) = crate::wait_bound::current() {
            until = until.min(bound);
        }
        let mut timed = Deadline::new(&stream, until);
        let peer_limit =
            handshake::client(&mut timed, &link.identity, self.node).map_err(|reason| {
                FabricError::Handshake {
                    node: self.node,
                    addr: self.addr.clone(),
                    reason,
                }
            })?;
        setup(&stream, link.io_timeout).map_err(unreachable)?;
        link.counters.opened();
        Ok(Conn {
            reader: BufReader::with_capacity(64 << 10, stream),
            limit: peer_limit.min(link.identity.frame_limit),
            generation: 0,
            read_timeout: link.io_timeout,
        })
    }

    /// Adds a connection opened by [`Peer::connect`] to the idle pool.
    pub(super) fn add_idle(&self, mut conn: Conn) {
        let mut st = lock(&self.state);
        conn.generation = st.generation;
        st.open += 1;
        st.idle.push(conn);
        self.wake_one(st);
    }

    /// Unlocks `st` and wakes one thread waiting for a connection, if any.
    fn wake_one(&self, st: MutexGuard<'_, PeerState>) {
        self.wake(st, false);
    }

    /// Unlocks `st` and wakes one or `all` threads waiting for a
    /// connection, if any wait.
    fn wake(&self, st: MutexGuard<'_, PeerState>, all: bool) {
        let anyone = st.waiting > 0;
        drop(st);
        match (anyone, all) {
            (false, _) => {}
            (true, false) => self.returned.notify_one(),
            (true, true) => self.returned.notify_all(),
        }
    }

    /// A connection for one exchange: idle, new, or returned by another
    /// thread; opening one or waiting for one ends at the thread's wait
    /// bound (then nothing was sent: `Unreachable` with `TimedOut`).
    pub(super) fn acquire(&self, link: &Link) -> Result<Conn, FabricError> {
        let bound = crate::wait_bound::current();
        let left = || bound.map(|at| at.saturating_duration_since(Instant::now()));
        let too_late = || FabricError::Unreachable {
            node: self.node,
            addr: self.addr.clone(),
            source: io::Error::new(
                ErrorKind::TimedOut,
                "no connection to the peer before the operation's wait bound",
            ),
        };
        let mut st = lock(&self.state);
        loop {
            if let Some(conn) = st.idle.pop() {
                return Ok(conn);
            }
            if left().is_some_and(|l| l.is_zero()) {
                return Err(too_late());
            }
            if st.open < link.connections_per_peer {
                if st.retry_at.is_some_and(|at| Instant::now() < at) {
                    return Err(FabricError::Unreachable {
                        node: self.node,
                        addr: self.addr.clone(),
                        source: io::Error::new(
                            st.last_failure,
                            "the last connection attempt failed; backing off",
                        ),
                    });
                }
                st.open += 1;
                let generation = st.generation;
                drop(st);
                let dial = left().map_or(link.handshake_timeout, |l| l.min(link.handshake_timeout));
                let result = self.connect(link, dial);
                let mut st = lock(&self.state);
                return match result {
                    Ok(mut conn) => {
                        conn.generation = generation;
                        st.backoff = BACKOFF_MIN;
                        st.retry_at = None;
                        Ok(conn)
                    }
                    Err(e) => {
                        st.open -= 1;
                        if let FabricError::Unreachable { source, .. }
                        | FabricError::Handshake {
                            reason: HandshakeFailure::Io(source),
                            ..
                        } = &e
                        {
                            st.last_failure = source.kind();
                        }
                        st.retry_at = Some(Instant::now() + st.backoff);
                        st.backoff = (st.backoff * 2).min(BACKOFF_MAX);
                        self.wake_one(st);
                        Err(e)
                    }
                };
            }
            st.waiting += 1;
            st = match left() {
                None => self
                    .returned
                    .wait(st)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(l) => {
                    self.returned
                        .wait_timeout(st, l)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
            st.waiting -= 1;
        }
    }

    /// Returns a healthy connection to the pool.
    pub(super) fn release(&self, conn: Conn) {
        let mut st = lock(&self.state);
        if conn.generation == st.generation {
            st.idle.push(conn);
        } else {
            st.open -= 1;
        }
        self.wake_one(st);
    }

    /// Drops a broken connection and every idle one opened before it broke.
    pub(super) fn discard(&self, conn: Conn, link: &Link) {
        let mut st = lock(&self.state);
        let stale = st.idle.len();
        st.idle.clear();
        st.open -= 1 + stale;
        if conn.generation == st.generation {
            st.generation += 1;
        }
        link.counters.broke();
        self.wake(st, true);
    }

    /// Sends the verbs `group` of `batch` (all bound to this peer) on a
    /// pooled connection; returns it with the frames it carries.
    /// Sends the verbs `group` of `batch` (CASes with the land-by time
    /// `land_by`, 0 for none). A frame is sent once: a connection that
    /// breaks fails the verbs, which are never replayed on another one (a
    /// replayed CAS could land after its operation gave up).
    pub(super) fn send(
        &self,
        link: &Link,
        batch: &[Verb<'_>],
        group: &[usize],
        land_by: u64,
    ) -> Result<(Conn, Vec<Range<usize>>), FabricError> {
        let conn = self.acquire(link)?;
        let (bytes, frames) = match encode(batch, group, conn.limit, self.node, land_by) {
            Ok(r) => r,
            Err(e) => {
                self.release(conn);
                return Err(e);
            }
        };
        if let Err(source) = conn.reader.get_ref().write_all(&bytes) {
            self.discard(conn, link);
            return Err(FabricError::Disconnected {
                node: self.node,
                source,
            });
        }
        Ok((conn, frames))
    }

    /// Reads the responses to [`Peer::send`] into `batch`, then returns
    /// the connection to the pool (or drops it if it broke). Returns the
    /// first refused verb's index and error.
    pub(super) fn receive(
        &self,
        link: &Link,
        mut conn: Conn,
        batch: &mut [Verb<'_>],
        group: &[usize],
        frames: &[Range<usize>],
    ) -> Result<Option<(usize, FabricError)>, FabricError> {
        let bounded = conn.bound_reads(link.io_timeout);
        match receive(&mut conn.reader, batch, group, frames, self.node) {
            Ok(refused) => {
                self.release(conn);
                Ok(refused)
            }
            Err(FabricError::Disconnected { node, source })
                if bounded
                    && matches!(source.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
            {
                // Its answer may still come; the connection cannot carry
                // another exchange before it has, so it goes.
                self.discard(conn, link);
                Err(FabricError::Disconnected {
                    node,
                    source: io::Error::new(
                        ErrorKind::TimedOut,
                        "the peer did not answer before the operation's wait bound",
                    ),
                })
            }
            Err(e) => {
                self.discard(conn, link);
                Err(e)
            }
        }
    }
}

fn verb_header(verb: &Verb<'_>) -> VerbHeader {
    let op = match verb {
        Verb::Read { .. } | Verb::ReadScatter { .. } => OP_READ,
        Verb::Write { .. } => OP_WRITE,
        Verb::Cas { .. } => OP_CAS,
    };
    let addr = verb.addr();
    VerbHeader {
        op,
        region: addr.region.0,
        offset: addr.offset,
        len: verb.bytes_moved() as u64,
    }
}

/// Encodes the verbs `group` of `batch` as request frames of at most
/// `limit` payload bytes each (their responses too), back to back.
fn encode(
    batch: &[Verb<'_>],
    group: &[usize],
    limit: u64,
    node: NodeId,
    land_by: u64,
) -> Result<(Vec<u8>, Vec<Range<usize>>), FabricError> {
    // A refusal answers with a status and a detail word.
    const REFUSAL_BYTES: u64 = (STATUS_BYTES + WORD) as u64;
    let mut bytes = Vec::new();
    let mut frames: Vec<Range<usize>> = Vec::new();
    let mut open: Option<(usize, usize)> = None; // (header position, first verb)
    let (mut req, mut resp) = (0u64, 0u64);
    let close = |bytes: &mut Vec<u8>, at: usize, verbs: usize| {
        let header = FrameHeader {
            magic: REQUEST_MAGIC,
            verbs: verbs as u32,
            payload: (bytes.len() - at - FRAME_HEADER_BYTES) as u64,
        };
        bytes[at..at + FRAME_HEADER_BYTES].copy_from_slice(&header.encode());
    };
    for (k, &i) in group.iter().enumerate() {
        let verb = &batch[i];
        let h = verb_header(verb);
        let (rq, rs) = (h.request_bytes(), h.response_bytes().max(REFUSAL_BYTES));
        if rq > limit || rs > limit {
            return Err(FabricError::Refused {
                node,
                reason: "the verb is larger than the frame limit",
            });
        }
        if let Some((at, first)) = open {
            if req + rq > limit || resp + rs > limit || k - first >= u32::MAX as usize {
                close(&mut bytes, at, k - first);
                frames.push(first..k);
                open = None;
            }
        }
        if open.is_none() {
            open = Some((bytes.len(), k));
            bytes.extend_from_slice(&[0u8; FRAME_HEADER_BYTES]);
            (req, resp) = (0, 0);
        }
        req += rq;
        resp += rs;
        h.encode_into(&mut bytes);
        match verb {
            Verb::Read { .. } | Verb::ReadScatter { .. } => {}
            Verb::Write { data, .. } => bytes.extend_from_slice(data),
            Verb::Cas { expected, new, .. } => {
                put_word(&mut bytes, *expected);
                put_word(&mut bytes, *new);
                put_word(&mut bytes, land_by);
            }
        }
    }
    if let Some((at, first)) = open {
        close(&mut bytes, at, group.len() - first);
        frames.push(first..group.len());
    }
    Ok((bytes, frames))
}

fn receive(
    reader: &mut impl Read,
    batch: &mut [Verb<'_>],
    group: &[usize],
    frames: &[Range<usize>],
    node: NodeId,
) -> Result<Option<(usize, FabricError)>, FabricError> {
    let broke = |source| FabricError::Disconnected { node, source };
    let protocol = |reason| FabricError::Protocol { node, reason };
    let mut refused = None;
    for frame in frames {
        let mut head = [0u8; FRAME_HEADER_BYTES];
        reader.read_exact(&mut head).map_err(broke)?;
        let header = FrameHeader::decode(&head);
        if header.magic != RESPONSE_MAGIC || header.verbs as usize != frame.len() {
            return Err(protocol("unexpected response frame header"));
        }
        let mut left = header.payload;
        let mut take = |n: u64| {
            left = left
                .checked_sub(n)
                .ok_or_else(|| protocol("response shorter than its verbs"))?;
            Ok::<(), FabricError>(())
        };
        let read_word = |reader: &mut dyn Read| {
            let mut w = [0u8; WORD];
            reader.read_exact(&mut w).map_err(broke)?;
            Ok::<u64, FabricError>(word(&w, 0).unwrap_or_default())
        };
        for &i in &group[frame.clone()] {
            take(STATUS_BYTES as u64)?;
            let status = read_word(reader)?;
            let verb = &mut batch[i];
            if status == STATUS_OK {
                match verb {
                    Verb::Read { buf, .. } => {
                        take(buf.len() as u64)?;
                        reader.read_exact(buf).map_err(broke)?;
                    }
                    Verb::ReadScatter { head, tail, .. } => {
                        take((head.len() + tail.len()) as u64)?;
                        reader.read_exact(head).map_err(broke)?;
                        reader.read_exact(tail).map_err(broke)?;
                    }
                    Verb::Write { .. } => {}
                    Verb::Cas { old, .. } => {
                        take(WORD as u64)?;
                        *old = read_word(reader)?;
                    }
                }
                continue;
            }
            take(WORD as u64)?;
            let detail = read_word(reader)?;
            let h = verb_header(verb);
            let addr = RemoteAddr::new(node, RegionId(h.region), h.offset);
            let error = refusal(status, detail, addr, h.len).ok_or(protocol("unknown status"))?;
            if refused.is_none() {
                refused = Some((i, error));
            }
        }
        if left != 0 {
            return Err(protocol("response longer than its verbs"));
        }
    }
    Ok(refused)
}

/// The error a refusal status stands for: the same variant the local
/// backends return for the same verb.
fn refusal(status: u64, detail: u64, addr: RemoteAddr, len: u64) -> Option<FabricError> {
    let RemoteAddr {
        node,
        region,
        offset,
    } = addr;
    Some(match status {
        STATUS_OUT_OF_BOUNDS => FabricError::OutOfBounds {
            node,
            region,
            offset,
            len,
            region_len: detail,
        },
        STATUS_MISALIGNED => FabricError::Misaligned {
            node,
            region,
            offset,
            len,
        },
        STATUS_UNKNOWN_REGION => FabricError::UnknownRegion { node, region },
        STATUS_RESPONSE_TOO_LARGE => FabricError::Refused {
            node,
            reason: "the frame's READs exceed the peer's frame limit",
        },
        STATUS_BAD_OP => FabricError::Refused {
            node,
            reason: "the peer found the verb malformed",
        },
        STATUS_LATE => FabricError::LateCas {
            node,
            late_us: detail,
        },
        _ => return None,
    })
}
