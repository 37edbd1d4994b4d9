//! The out-of-band exchange of queue-pair information over TCP.
//!
//! Every node listens on its own address of the configuration. For each
//! peer, a node connects to the peer's address and sends a *hello*: its
//! cluster id, format version, node count, node ids (sender and intended
//! receiver), port address, one queue pair per lane and its region table
//! (address, length and rkey of every region). The peer checks all of it
//! against its own configuration, creates one responder queue pair per lane,
//! connects them, and answers with an *accept* of the same shape (its own
//! port, responder queue pairs and regions), or with a *refuse* that names
//! the first mismatch. The connecting side checks the accept the same way.
//! So every (initiator lane, peer) has its own RC connection, and no CPU of
//! the peer takes part after the handshake.
//!
//! Wire format, all integers little-endian: `magic[8] = "NESSIEvb"`,
//! `body_len: u32`, then the body: `kind: u8` (1 hello, 2 accept,
//! 3 refuse). Hello and accept: `format_version: u32, cluster_id: u64,
//! nodes: u64, from: u64, to: u64, lid: u16, global: u8, mtu: u8,
//! rd_atomic: u8, gid[16], lanes: u32, lanes × (qpn: u32, psn: u32),
//! regions: u32, regions × (id: u16, len: u64, addr: u64, rkey: u32)`.
//! Refuse: `code: u8, region: u16, flags: u8, found: u64, expected: u64`.

use super::device::{PortAddress, QpInfo};
use super::RemoteRegion;
use crate::membership::PeerClaim;
use crate::{FabricError, HandshakeFailure, Membership, NodeId, RegionId};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

const MAGIC: [u8; 8] = *b"NESSIEvb";
/// Largest body accepted (a hello of the most lanes and regions is far
/// smaller).
const MAX_BODY: u32 = 1 << 20;
/// Most queue-pair lanes a peer may ask for.
pub const MAX_LANES: usize = 64;
const KIND_HELLO: u8 = 1;
const KIND_ACCEPT: u8 = 2;
const KIND_REFUSE: u8 = 3;
/// Longest wait for one handshake message.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// One side's description of itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Hello {
    pub(super) format_version: u32,
    pub(super) cluster_id: u64,
    pub(super) nodes: u64,
    pub(super) from: u64,
    pub(super) to: u64,
    pub(super) address: PortAddress,
    pub(super) qps: Vec<QpInfo>,
    pub(super) regions: Vec<(RegionId, RemoteRegion)>,
}

/// A handshake message.
#[derive(Debug)]
pub(super) enum Message {
    Hello(Hello),
    Accept(Hello),
    Refuse(HandshakeFailure),
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
}

fn encode_hello(w: &mut Writer, h: &Hello) {
    w.u32(h.format_version);
    w.u64(h.cluster_id);
    w.u64(h.nodes);
    w.u64(h.from);
    w.u64(h.to);
    w.u16(h.address.lid);
    w.u8(u8::from(h.address.global));
    w.u8(h.address.mtu);
    w.u8(h.address.rd_atomic);
    w.0.extend_from_slice(&h.address.gid);
    w.u32(h.qps.len() as u32);
    for qp in &h.qps {
        w.u32(qp.qpn);
        w.u32(qp.psn);
    }
    w.u32(h.regions.len() as u32);
    for (id, r) in &h.regions {
        w.u16(id.0);
        w.u64(r.len);
        w.u64(r.addr);
        w.u32(r.rkey);
    }
}

fn decode_hello(r: &mut Reader<'_>) -> Option<Hello> {
    let format_version = r.u32()?;
    let cluster_id = r.u64()?;
    let nodes = r.u64()?;
    let from = r.u64()?;
    let to = r.u64()?;
    let lid = r.u16()?;
    let global = r.u8()? != 0;
    let mtu = r.u8()?;
    let rd_atomic = r.u8()?;
    let gid = r.take::<16>()?;
    let lanes = r.u32()? as usize;
    if lanes > MAX_LANES {
        return None;
    }
    let qps = (0..lanes)
        .map(|_| {
            Some(QpInfo {
                qpn: r.u32()?,
                psn: r.u32()?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let count = r.u32()? as usize;
    // Each region takes 22 bytes: refuse counts the body cannot hold.
    if count > r.0.len() / 22 {
        return None;
    }
    let regions = (0..count)
        .map(|_| {
            Some((
                RegionId(r.u16()?),
                RemoteRegion {
                    len: r.u64()?,
                    addr: r.u64()?,
                    rkey: r.u32()?,
                },
            ))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Hello {
        format_version,
        cluster_id,
        nodes,
        from,
        to,
        address: PortAddress {
            lid,
            gid,
            global,
            mtu,
            rd_atomic,
        },
        qps,
        regions,
    })
}

fn encode_refusal(w: &mut Writer, f: &HandshakeFailure) {
    use HandshakeFailure as F;
    let (code, region, found, expected) = match f {
        F::Version { found, expected } => {
            (1, 0, Some(u64::from(*found)), Some(u64::from(*expected)))
        }
        F::Cluster { found, expected } => (2, 0, Some(*found), Some(*expected)),
        F::Nodes { found, expected } => (3, 0, Some(u64::from(*found)), Some(u64::from(*expected))),
        F::Node { found, expected } => (4, 0, Some(u64::from(*found)), Some(u64::from(*expected))),
        F::RegionSize {
            region,
            found,
            expected,
        } => (5, region.0, *found, *expected),
        F::BadMagic => (7, 0, None, None),
        _ => (6, 0, None, None),
    };
    w.u8(code);
    w.u16(region);
    w.u8(u8::from(found.is_some()) | u8::from(expected.is_some()) << 1);
    w.u64(found.unwrap_or(0));
    w.u64(expected.unwrap_or(0));
}

fn decode_refusal(r: &mut Reader<'_>) -> Option<HandshakeFailure> {
    use HandshakeFailure as F;
    let code = r.u8()?;
    let region = RegionId(r.u16()?);
    let flags = r.u8()?;
    let found = r.u64()?;
    let expected = r.u64()?;
    let narrow = |v: u64| u32::try_from(v).ok();
    Some(match code {
        1 => F::Version {
            found: narrow(found)?,
            expected: narrow(expected)?,
        },
        2 => F::Cluster { found, expected },
        3 => F::Nodes {
            found: narrow(found)?,
            expected: narrow(expected)?,
        },
        4 => F::Node {
            found: narrow(found)?,
            expected: narrow(expected)?,
        },
        5 => F::RegionSize {
            region,
            found: (flags & 1 != 0).then_some(found),
            expected: (flags & 2 != 0).then_some(expected),
        },
        7 => F::BadMagic,
        _ => F::Malformed,
    })
}

impl Message {
    /// The message as a frame (magic, length, body).
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut body = Writer(Vec::with_capacity(256));
        match self {
            Message::Hello(h) => {
                body.u8(KIND_HELLO);
                encode_hello(&mut body, h);
            }
            Message::Accept(h) => {
                body.u8(KIND_ACCEPT);
                encode_hello(&mut body, h);
            }
            Message::Refuse(f) => {
                body.u8(KIND_REFUSE);
                encode_refusal(&mut body, f);
            }
        }
        let mut frame = Writer(Vec::with_capacity(12 + body.0.len()));
        frame.0.extend_from_slice(&MAGIC);
        frame.u32(body.0.len() as u32);
        frame.0.extend_from_slice(&body.0);
        frame.0
    }

    /// Parses a frame's body.
    pub(super) fn decode(body: &[u8]) -> Result<Message, HandshakeFailure> {
        let mut r = Reader(body);
        let message = match r.u8() {
            Some(KIND_HELLO) => decode_hello(&mut r).map(Message::Hello),
            Some(KIND_ACCEPT) => decode_hello(&mut r).map(Message::Accept),
            Some(KIND_REFUSE) => decode_refusal(&mut r).map(Message::Refuse),
            _ => None,
        };
        match message {
            Some(m) if r.0.is_empty() => Ok(m),
            _ => Err(HandshakeFailure::Malformed),
        }
    }

    /// Reads one frame from `stream`.
    pub(super) fn read(stream: &mut impl Read) -> Result<Message, HandshakeFailure> {
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).map_err(HandshakeFailure::Io)?;
        if head[..8] != MAGIC {
            return Err(HandshakeFailure::BadMagic);
        }
        let len = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        if len > MAX_BODY {
            return Err(HandshakeFailure::Malformed);
        }
        let mut body = vec![0u8; len as usize];
        stream.read_exact(&mut body).map_err(HandshakeFailure::Io)?;
        Message::decode(&body)
    }
}

/// Checks a peer's hello (or accept) against this node's membership;
/// `peer` is the node it must come from (`None`: any other node).
fn check(hello: &Hello, me: &Membership, peer: Option<NodeId>) -> Result<(), HandshakeFailure> {
    let regions: Vec<(RegionId, u64)> = hello.regions.iter().map(|(id, r)| (*id, r.len)).collect();
    let claim = PeerClaim {
        format_version: hello.format_version,
        cluster_id: hello.cluster_id,
        from: hello.from,
        to_of: Some((hello.to, hello.nodes)),
        regions: &regions,
    };
    me.check(&claim, peer, &me.regions)?;
    if hello.qps.is_empty() {
        return Err(HandshakeFailure::Malformed);
    }
    Ok(())
}

fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .clamp(Duration::from_millis(100), IO_TIMEOUT)
}

fn prepare(stream: &TcpStream, deadline: Instant) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(remaining(deadline)))?;
    stream.set_write_timeout(Some(remaining(deadline)))
}

/// Connects to `peer` at `addr` (retrying until `deadline` while it is not
/// listening yet), sends `hello` and returns the peer's checked accept.
///
/// # Errors
/// [`FabricError::Unreachable`] if nothing accepts the connection by the
/// deadline; [`FabricError::Handshake`]: refused (with the peer's reason),
/// the connection broke, or an accept that fails [`check`].
pub(super) fn exchange(
    addr: &str,
    peer: NodeId,
    hello: &Hello,
    expect: &Membership,
    deadline: Instant,
    stop: &AtomicBool,
) -> Result<Hello, FabricError> {
    let fail = |reason| FabricError::Handshake {
        node: peer,
        addr: addr.to_owned(),
        reason,
    };
    let mut stream = loop {
        let attempt = addr.to_socket_addrs().and_then(|mut addrs| {
            let first = addrs.next().ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, "the address resolves to nothing")
            })?;
            TcpStream::connect_timeout(&first, remaining(deadline))
        });
        match attempt {
            Ok(s) => break s,
            Err(source) if Instant::now() >= deadline || stop.load(Ordering::Relaxed) => {
                return Err(FabricError::Unreachable {
                    node: peer,
                    addr: addr.to_owned(),
                    source,
                })
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    prepare(&stream, deadline).map_err(|e| fail(HandshakeFailure::Io(e)))?;
    stream
        .write_all(&Message::Hello(hello.clone()).encode())
        .map_err(|e| fail(HandshakeFailure::Io(e)))?;
    match Message::read(&mut stream).map_err(fail)? {
        Message::Accept(reply) => {
            check(&reply, expect, Some(peer)).map_err(fail)?;
            if reply.qps.len() != hello.qps.len() {
                return Err(fail(HandshakeFailure::Malformed));
            }
            Ok(reply)
        }
        Message::Refuse(reason) => Err(fail(HandshakeFailure::Refused(Box::new(reason)))),
        Message::Hello(_) => Err(fail(HandshakeFailure::Malformed)),
    }
}

/// Serves peers' hellos on `listener` until every other node has been
/// accepted once, `deadline` passes or `stop` is set. `accept` turns a
/// checked hello into this node's accept (creating and connecting the
/// responder queue pairs); its results are returned, one per peer. Why a
/// hello was refused is recorded in `refused` under the node it claimed to
/// come from.
///
/// # Errors
/// For a peer that never completed a handshake: the last reason it was
/// refused for, else [`HandshakeFailure::NotConnected`]. An error of
/// `accept` ends serving at once.
pub(super) fn serve<T>(
    listener: &TcpListener,
    expect: &Membership,
    peers: &[String],
    deadline: Instant,
    stop: &AtomicBool,
    refused: &Mutex<Vec<Option<HandshakeFailure>>>,
    mut accept: impl FnMut(&Hello) -> Result<(Hello, T), FabricError>,
) -> Result<Vec<(NodeId, T)>, FabricError> {
    let started = Instant::now();
    let nodes = expect.nodes;
    let mut served: Vec<(NodeId, T)> = Vec::new();
    let done = |served: &Vec<(NodeId, T)>| {
        (0..nodes)
            .filter(|&n| n != expect.node)
            .all(|n| served.iter().any(|(s, _)| *s == n))
    };
    let fail_listen = |source| FabricError::Bind {
        addr: peers.get(expect.node).cloned().unwrap_or_default(),
        source,
    };
    listener.set_nonblocking(true).map_err(fail_listen)?;
    while !done(&served) {
        if Instant::now() >= deadline || stop.load(Ordering::Relaxed) {
            let missing = (0..nodes)
                .find(|&n| n != expect.node && !served.iter().any(|(s, _)| *s == n))
                .unwrap_or(expect.node);
            // A copy: the connecting side may want the same reason.
            let reason = lock(refused)
                .get(missing)
                .and_then(|r| r.as_ref().map(HandshakeFailure::clone_shallow))
                .unwrap_or(HandshakeFailure::NotConnected(started.elapsed()));
            return Err(FabricError::Handshake {
                node: missing,
                addr: peers.get(missing).cloned().unwrap_or_default(),
                reason,
            });
        }
        let mut stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(fail_listen(e)),
        };
        if prepare(&stream, deadline).is_err() {
            continue;
        }
        let hello = match Message::read(&mut stream) {
            Ok(Message::Hello(h)) => h,
            Ok(_) => {
                let _ = stream.write_all(&Message::Refuse(HandshakeFailure::Malformed).encode());
                continue;
            }
            Err(reason) => {
                tracing::warn!(%reason, "refused a verbs handshake");
                let _ = stream.write_all(&Message::Refuse(reason).encode());
                continue;
            }
        };
        if let Err(reason) = check(&hello, expect, None) {
            tracing::warn!(from = hello.from, %reason, "refused a verbs handshake");
            let _ = stream.write_all(&Message::Refuse(reason.clone_shallow()).encode());
            let mut record = lock(refused);
            if let Some(slot) = usize::try_from(hello.from)
                .ok()
                .and_then(|n| record.get_mut(n))
            {
                *slot = Some(reason);
            }
            continue;
        }
        let (reply, value) = accept(&hello)?;
        if stream.write_all(&Message::Accept(reply).encode()).is_ok() {
            served.push((hello.from as NodeId, value));
        }
    }
    Ok(served)
}

/// The refusal record, usable even if a thread panicked holding it.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl HandshakeFailure {
    /// A copy of the reasons that travel in a refusal (I/O causes do not).
    fn clone_shallow(&self) -> HandshakeFailure {
        let mut w = Writer(Vec::new());
        encode_refusal(&mut w, self);
        decode_refusal(&mut Reader(&w.0)).unwrap_or(HandshakeFailure::Malformed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RegionSpec;

    fn hello() -> Hello {
        Hello {
            format_version: 1,
            cluster_id: 0xc1,
            nodes: 3,
            from: 1,
            to: 0,
            address: PortAddress {
                lid: 7,
                gid: [9; 16],
                global: true,
                mtu: 5,
                rd_atomic: 16,
            },
            qps: vec![
                QpInfo { qpn: 17, psn: 3 },
                QpInfo {
                    qpn: 18,
                    psn: 0xff_ffff,
                },
            ],
            regions: vec![
                (
                    RegionId(0),
                    RemoteRegion {
                        len: 4096,
                        addr: 0x7f00_0000_0000,
                        rkey: 0x1234,
                    },
                ),
                (
                    RegionId(1),
                    RemoteRegion {
                        len: 65536,
                        addr: 0x7f00_1000_0000,
                        rkey: 0x5678,
                    },
                ),
            ],
        }
    }

    fn specs() -> Vec<RegionSpec> {
        vec![
            RegionSpec {
                id: RegionId(0),
                len: 4096,
            },
            RegionSpec {
                id: RegionId(1),
                len: 65536,
            },
        ]
    }

    fn expect(regions: &[RegionSpec]) -> Membership {
        Membership {
            node: 0,
            nodes: 3,
            cluster_id: 0xc1,
            format_version: 1,
            regions: regions.to_vec(),
        }
    }

    fn round_trip(m: &Message) -> Message {
        let frame = m.encode();
        Message::read(&mut &frame[..]).unwrap()
    }

    #[test]
    fn hello_and_accept_round_trip() {
        let h = hello();
        assert!(matches!(round_trip(&Message::Hello(h.clone())), Message::Hello(x) if x == h));
        assert!(matches!(round_trip(&Message::Accept(h.clone())), Message::Accept(x) if x == h));
    }

    #[test]
    fn refusals_round_trip() {
        use HandshakeFailure as F;
        let cases = [
            F::Version {
                found: 2,
                expected: 1,
            },
            F::Cluster {
                found: 5,
                expected: 6,
            },
            F::Nodes {
                found: 2,
                expected: 3,
            },
            F::Node {
                found: 9,
                expected: 0,
            },
            F::RegionSize {
                region: RegionId(4),
                found: None,
                expected: Some(8),
            },
            F::Malformed,
            F::BadMagic,
        ];
        for f in cases {
            let back = match round_trip(&Message::Refuse(f.clone_shallow())) {
                Message::Refuse(b) => b,
                other => panic!("{other:?}"),
            };
            assert_eq!(back.to_string(), f.to_string());
        }
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        let frame = Message::Hello(hello()).encode();
        let mut bad_magic = frame.clone();
        bad_magic[0] = b'X';
        assert!(matches!(
            Message::read(&mut &bad_magic[..]),
            Err(HandshakeFailure::BadMagic)
        ));
        // Every truncation is malformed or an I/O error, never a panic.
        for cut in 0..frame.len() {
            assert!(Message::read(&mut &frame[..cut]).is_err());
            let mut short = frame[..cut.max(12)].to_vec();
            let len = (short.len() - 12) as u32;
            short[8..12].copy_from_slice(&len.to_le_bytes());
            if cut < frame.len() {
                assert!(Message::read(&mut &short[..]).is_err(), "cut at {cut}");
            }
        }
        let mut huge = frame.clone();
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Message::read(&mut &huge[..]),
            Err(HandshakeFailure::Malformed)
        ));
        let mut trailing = frame;
        trailing.push(0);
        let len = (trailing.len() - 12) as u32;
        trailing[8..12].copy_from_slice(&len.to_le_bytes());
        assert!(matches!(
            Message::read(&mut &trailing[..]),
            Err(HandshakeFailure::Malformed)
        ));
    }

    #[test]
    fn mismatches_are_named() {
        use HandshakeFailure as F;
        let regions = specs();
        let e = expect(&regions);
        check(&hello(), &e, None).unwrap();
        check(&hello(), &e, Some(1)).unwrap();
        let with = |f: &dyn Fn(&mut Hello)| {
            let mut h = hello();
            f(&mut h);
            check(&h, &e, None).unwrap_err()
        };
        assert!(matches!(
            with(&|h| h.format_version = 2),
            F::Version {
                found: 2,
                expected: 1
            }
        ));
        assert!(matches!(
            with(&|h| h.cluster_id = 7),
            F::Cluster { found: 7, .. }
        ));
        assert!(matches!(
            with(&|h| h.nodes = 4),
            F::Nodes {
                found: 4,
                expected: 3
            }
        ));
        assert!(matches!(
            with(&|h| h.to = 2),
            F::Node {
                found: 2,
                expected: 0
            }
        ));
        assert!(matches!(with(&|h| h.from = 0), F::Node { found: 0, .. }));
        assert!(matches!(with(&|h| h.from = 3), F::Node { found: 3, .. }));
        assert!(matches!(
            with(&|h| h.regions[1].1.len = 8),
            F::RegionSize {
                found: Some(8),
                expected: Some(65536),
                ..
            }
        ));
        assert!(matches!(
            with(&|h| {
                h.regions.pop();
            }),
            F::RegionSize { found: None, .. }
        ));
        assert!(matches!(
            with(&|h| h.regions.push((RegionId(6), h.regions[0].1))),
            F::RegionSize { expected: None, .. }
        ));
        assert!(matches!(with(&|h| h.qps.clear()), F::Malformed));
        assert!(matches!(
            check(&hello(), &e, Some(2)),
            Err(F::Node {
                found: 1,
                expected: 2
            })
        ));
    }
}
