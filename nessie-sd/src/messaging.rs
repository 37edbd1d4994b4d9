//! FaRM-style ring-buffer messaging over fabric WRITEs (frame layout in
//! [`crate::ring`]).
//!
//! Each client slot of a node has one request ring in every server node's
//! memory (it is that ring's only sender) and one response ring in its own
//! node's memory. A request is one WRITE of one frame into the home node's
//! request ring; the reply is one WRITE of one frame into the client's
//! response ring. Same-node requests take the same path, but their WRITEs
//! land in the client's own memory (local copies, counted as local verbs).
//!
//! **Response rings need no head updates.** A client has one request
//! outstanding at a time, so it names in each request where the reply goes
//! (`reply_offset`, reserved for the largest reply) and is both the only
//! allocator and the only consumer of its response ring: it knows the ring
//! is empty whenever it sends. Several servers can reply into one ring
//! because each reply goes where the client said.
//!
//! **Request ring heads are published by WRITE into the sender's memory**
//! (`FaRM`'s choice, not the alternative of the sender reading the receiver's
//! head): the server worker consuming a ring WRITEs its head into the
//! client's head-mirror word once at least half the ring was consumed since
//! its last update, and the client reads that word from its own memory
//! (uncounted, like polling) only when its view says a frame may not fit.
//! So a head update is an occasional 8-byte WRITE issued and counted by the
//! server ([`crate::Cluster::server_verbs`]), and a client never issues a
//! verb for flow control: every remote operation costs the client exactly
//! its request WRITE, plus the reply WRITE the server issued for it, which
//! the client counts when the reply arrives — always, not only on average.
//! (Had the sender read the head remotely instead, one operation in every
//! half-ring's worth would cost an extra READ.) Rings are four largest
//! frames long, so with one request outstanding the sender never waits for
//! a head update (see the ring layout's documentation).
//!
//! **Ordering.** A receiver polls the header word, then reads the frame and
//! checks its trailer, a checksum of the payload: the words of one WRITE
//! may land in any order, and a frame is complete when the trailer matches.
//! Receivers zero what they consumed before anything else, and a server
//! zeroes a request and publishes its head before it replies, so when a
//! client has its reply its request ring is empty; the zeroes are ordered
//! before the sender's next frame in that space because the sender learns
//! of the space only from a later WRITE (the reply or the head update).

use crate::poll::Spinner;
use crate::ring::{
    self, begin_frame, decode_frame_header, finish_frame, frame_bytes, frame_trailer, place_frame,
    receiver_may_wrap, ReplyHeader, ReplyNotes, ReplyStatus, RequestHeader, RingGeometry, RingOp,
    HEAD_MIRRORS, REQUEST_RINGS, RESPONSE_RINGS,
};
use nessie::fabric::{Endpoint, Fabric, FabricError, NodeId, RemoteAddr, VerbCounts};
use nessie::layout::{round_up_words, WORD};
use nessie::{Clock, Error};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Zeros for clearing consumed frames, a chunk at a time.
static ZEROS: [u8; 4096] = [0; 4096];

/// Zeroes `len` bytes at `addr` with uncounted local WRITEs.
fn zero(fabric: &dyn Fabric, addr: RemoteAddr, len: usize) -> Result<(), FabricError> {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(ZEROS.len());
        fabric.write(addr.add(done as u64), &ZEROS[..n])?;
        done += n;
    }
    Ok(())
}

fn read_u64(fabric: &dyn Fabric, addr: RemoteAddr) -> Result<u64, FabricError> {
    let mut b = [0u8; WORD];
    fabric.read(addr, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// Reads the payload and trailer of the `len`-byte frame at `at` whose
/// header is `header` into `payload` (trailer removed); `false` if the
/// trailer does not match yet (the frame's WRITE has not fully landed).
fn read_frame(
    fabric: &dyn Fabric,
    at: RemoteAddr,
    header: u64,
    len: usize,
    payload: &mut Vec<u8>,
) -> Result<bool, FabricError> {
    payload.clear();
    payload.resize(len - WORD, 0);
    fabric.read(at.add(WORD as u64), payload)?;
    let trailer_at = payload.len() - WORD;
    let mut trailer = [0u8; WORD];
    trailer.copy_from_slice(&payload[trailer_at..]);
    payload.truncate(trailer_at);
    Ok(u64::from_le_bytes(trailer) == frame_trailer(header, payload))
}

/// A sender's view of one request ring.
#[derive(Clone, Copy, Debug, Default)]
struct SenderCursor {
    /// Where the next frame goes (offset in the ring).
    tail: usize,
    /// Bytes ever sent, skipped ends included.
    sent: u64,
    /// The receiver's `consumed` as last read from the head mirror.
    known_head: u64,
}

/// The messaging state of one client slot. It outlives the clients that use
/// the slot (servers keep their own cursors of its rings), so a node keeps
/// it in its slot pool between clients.
#[derive(Debug)]
pub(crate) struct SlotRings {
    pub(crate) slot: usize,
    seq: u64,
    senders: Vec<SenderCursor>,
    response_tail: usize,
    /// A reply the last client of this slot stopped waiting for: where it
    /// will land. No new request is sent until it has arrived.
    pending: Option<usize>,
}

impl SlotRings {
    pub(crate) fn new(slot: usize, nodes: usize) -> SlotRings {
        SlotRings {
            slot,
            seq: 0,
            senders: vec![SenderCursor::default(); nodes],
            response_tail: 0,
            pending: None,
        }
    }
}

/// A reply as received.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reply {
    pub(crate) status: ReplyStatus,
    pub(crate) notes: ReplyNotes,
}

/// What a request carries.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request<'a> {
    pub(crate) op: RingOp,
    pub(crate) key: &'a [u8],
    pub(crate) value: &'a [u8],
    /// When the operation began (µs); the server's deadline counts from it.
    pub(crate) created_at: u64,
}

/// A client's side of the messaging: sends requests, waits for replies.
#[derive(Debug)]
pub(crate) struct RpcClient {
    pub(crate) ep: Endpoint,
    geometry: RingGeometry,
    pub(crate) rings: SlotRings,
    frame: Vec<u8>,
    /// Reply WRITEs that servers issued for this client.
    pub(crate) served: VerbCounts,
    running: Arc<AtomicBool>,
}

impl RpcClient {
    pub(crate) fn new(
        ep: Endpoint,
        geometry: RingGeometry,
        rings: SlotRings,
        running: Arc<AtomicBool>,
    ) -> RpcClient {
        RpcClient {
            ep,
            geometry,
            rings,
            frame: Vec::with_capacity(geometry.max_request_frame),
            served: VerbCounts::default(),
            running,
        }
    }

    /// Verbs this client caused: its own and its replies.
    pub(crate) fn counts(&self) -> VerbCounts {
        self.ep.counts() + self.served
    }

    fn own(&self, region: nessie::fabric::RegionId, offset: u64) -> RemoteAddr {
        RemoteAddr::new(self.ep.node(), region, offset)
    }

    /// Sends `req` to `server` and waits, until `give_up_us`, for the reply,
    /// whose body is left in `body`.
    ///
    /// # Errors
    /// [`Error::Timeout`] if no reply came in time (or an earlier one is
    /// still outstanding, or the local servers stopped); [`Error::Corrupt`]
    /// for a malformed reply; a fabric error.
    pub(crate) fn call(
        &mut self,
        server: NodeId,
        req: Request<'_>,
        give_up_us: u64,
        clock: &dyn Clock,
        body: &mut Vec<u8>,
    ) -> Result<Reply, Error> {
        if let Some(offset) = self.rings.pending {
            // The server may still write that reply: nothing else may use
            // the ring until it has.
            if self.try_receive(offset, body)?.is_none() {
                return Err(Error::Timeout);
            }
            self.rings.pending = None;
        }
        let g = self.geometry;
        self.rings.seq += 1;
        let seq = self.rings.seq;
        let (reply_offset, _) = place_frame(
            self.rings.response_tail,
            g.max_reply_frame,
            g.response_ring_bytes,
        );

        begin_frame(&mut self.frame);
        RequestHeader {
            op: req.op as u8,
            key_len: req.key.len() as u16,
            seq,
            reply_offset: reply_offset as u64,
            created_at: req.created_at,
            value_len: req.value.len() as u64,
        }
        .encode_into(&mut self.frame);
        self.frame.extend_from_slice(req.key);
        self.frame.resize(
            self.frame.len() + round_up_words(req.key.len()) - req.key.len(),
            0,
        );
        self.frame.extend_from_slice(req.value);
        let len = finish_frame(&mut self.frame);

        let (at, cursor) = self.reserve(server, len, give_up_us, clock)?;
        let ring = g.request_ring_offset(g.request_ring_index(self.ep.node(), self.rings.slot));
        self.ep.write(
            RemoteAddr::new(server, REQUEST_RINGS, ring + at as u64),
            &self.frame,
        )?;
        // Only a WRITE that succeeded moves the tail: after a failed one
        // (which may have landed in part) the next frame goes to the same
        // place, where the receiver is still looking.
        self.rings.senders[server] = cursor;

        let mut spinner = Spinner::default();
        loop {
            if let Some(reply) = self.try_receive(reply_offset, body)? {
                if reply.0 != seq {
                    return Err(Error::corrupt(format!(
                        "reply for request {} arrived where request {seq} expected its reply",
                        reply.0
                    )));
                }
                self.count_reply(server, reply.2);
                return Ok(reply.1);
            }
            if clock.now_us() > give_up_us || !self.running.load(Ordering::Relaxed) {
                self.rings.pending = Some(reply_offset);
                return Err(Error::Timeout);
            }
            spinner.idle();
        }
    }

    /// Finds room for a frame of `len` bytes in the request ring of
    /// `server`; returns its offset and the sender's cursor once it is
    /// sent.
    fn reserve(
        &mut self,
        server: NodeId,
        len: usize,
        give_up_us: u64,
        clock: &dyn Clock,
    ) -> Result<(usize, SenderCursor), Error> {
        let cap = self.geometry.request_ring_bytes;
        let mirror = self.own(
            HEAD_MIRRORS,
            self.geometry.head_mirror_offset(self.rings.slot, server),
        );
        let c = self.rings.senders[server];
        let (at, skipped) = place_frame(c.tail, len, cap);
        let end = c.sent + (skipped + len) as u64;
        let mut spinner = Spinner::default();
        let mut known = c.known_head;
        while end - known > cap as u64 {
            known = read_u64(self.ep.fabric().as_ref(), mirror)?;
            if end - known <= cap as u64 {
                break;
            }
            if clock.now_us() > give_up_us || !self.running.load(Ordering::Relaxed) {
                return Err(Error::Timeout);
            }
            spinner.idle();
        }
        self.rings.senders[server].known_head = known;
        let tail = if at + len == cap { 0 } else { at + len };
        Ok((
            at,
            SenderCursor {
                tail,
                sent: end,
                known_head: known,
            },
        ))
    }

    /// Checks once for a complete reply frame at `offset` of the response
    /// ring; if there is one, copies its body into `body`, zeroes the frame
    /// and returns (seq, reply, frame bytes).
    fn try_receive(
        &mut self,
        offset: usize,
        body: &mut Vec<u8>,
    ) -> Result<Option<(u64, Reply, usize)>, Error> {
        let g = self.geometry;
        let fabric = Arc::clone(self.ep.fabric());
        let base = g.response_ring_offset(self.rings.slot) + offset as u64;
        let at = self.own(RESPONSE_RINGS, base);
        let header = read_u64(fabric.as_ref(), at)?;
        if header == 0 {
            return Ok(None);
        }
        let corrupt = |what: &str| Error::corrupt(format!("reply frame at {at}: {what}"));
        let Some(payload) = decode_frame_header(header) else {
            return Err(corrupt("bad header"));
        };
        let len = frame_bytes(payload);
        if len > g.max_reply_frame || offset + len > g.response_ring_bytes {
            return Err(corrupt("longer than the largest reply"));
        }
        if !read_frame(fabric.as_ref(), at, header, len, &mut self.frame)? {
            return Ok(None);
        }
        zero(fabric.as_ref(), at, len)?;
        self.rings.response_tail = if offset + len == g.response_ring_bytes {
            0
        } else {
            offset + len
        };
        let h = ReplyHeader::decode(&self.frame).ok_or_else(|| corrupt("short payload"))?;
        let status = ReplyStatus::from_code(h.status).ok_or_else(|| corrupt("bad status"))?;
        let start = ring::REPLY_HEADER_BYTES;
        let body_len = usize::try_from(h.body_len).unwrap_or(usize::MAX);
        if body_len > self.frame.len() - start {
            return Err(corrupt("body longer than the frame"));
        }
        body.clear();
        body.extend_from_slice(&self.frame[start..start + body_len]);
        Ok(Some((
            h.seq,
            Reply {
                status,
                notes: h.notes,
            },
            len,
        )))
    }

    fn count_reply(&mut self, server: NodeId, bytes: usize) {
        let s = &mut self.served;
        s.writes += 1;
        s.write_bytes += bytes as u64;
        if server == self.ep.node() {
            s.local += 1;
        } else {
            s.remote += 1;
            s.remote_bytes += bytes as u64;
        }
    }
}

/// A server worker's view of one request ring.
#[derive(Debug)]
pub(crate) struct Inbox {
    pub(crate) client_node: NodeId,
    pub(crate) slot: usize,
    base: u64,
    head: usize,
    /// Bytes ever consumed, skipped ends included.
    consumed: u64,
    published: u64,
    publish_failing: bool,
    broken: bool,
}

/// A request taken out of a ring: its payload is in the worker's buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Incoming {
    pub(crate) client_node: NodeId,
    pub(crate) slot: usize,
}

impl Inbox {
    pub(crate) fn new(geometry: &RingGeometry, client_node: NodeId, slot: usize) -> Inbox {
        Inbox {
            client_node,
            slot,
            base: geometry.request_ring_offset(geometry.request_ring_index(client_node, slot)),
            head: 0,
            consumed: 0,
            published: 0,
            publish_failing: false,
            broken: false,
        }
    }

    /// WRITEs the head into the sender's mirror if at least half the ring
    /// was consumed since the last update. A failed update is logged and
    /// retried at the next poll (the request it followed is already taken).
    fn publish_if_due(&mut self, ep: &mut Endpoint, geometry: &RingGeometry) {
        if self.consumed - self.published < (geometry.request_ring_bytes / 2) as u64 {
            return;
        }
        let mirror = RemoteAddr::new(
            self.client_node,
            HEAD_MIRRORS,
            geometry.head_mirror_offset(self.slot, ep.node()),
        );
        match ep.write(mirror, &self.consumed.to_le_bytes()) {
            Ok(()) => {
                self.published = self.consumed;
                self.publish_failing = false;
            }
            // Warn once per outage, not on every poll.
            Err(e) if !self.publish_failing => {
                tracing::warn!("publishing the head to {mirror} failed: {e}");
                self.publish_failing = true;
            }
            Err(_) => {}
        }
    }

    /// Stops serving this ring (after a failure that leaves it unusable).
    pub(crate) fn abandon(&mut self) {
        self.broken = true;
    }

    /// Takes the next complete request, if any, out of the ring: copies its
    /// payload into `payload`, zeroes it, advances the head and publishes
    /// the head to the sender if half the ring was consumed since the last
    /// time (a WRITE counted on the worker's endpoint `ep`, on node `node`).
    pub(crate) fn poll(
        &mut self,
        ep: &mut Endpoint,
        geometry: &RingGeometry,
        payload: &mut Vec<u8>,
    ) -> Result<Option<Incoming>, FabricError> {
        if self.broken {
            return Ok(None);
        }
        // A head update that failed earlier is retried on every poll.
        self.publish_if_due(ep, geometry);
        let node = ep.node();
        let fabric = Arc::clone(ep.fabric());
        let cap = geometry.request_ring_bytes;
        let max = geometry.max_request_frame;
        let at = |off: usize| RemoteAddr::new(node, REQUEST_RINGS, self.base + off as u64);
        let mut header = read_u64(fabric.as_ref(), at(self.head))?;
        if header == 0 && receiver_may_wrap(self.head, max, cap) {
            // The sender wraps when a frame does not fit before the end;
            // offset 0 is zero unless it did (everything before our head has
            // been consumed and zeroed).
            header = read_u64(fabric.as_ref(), at(0))?;
            if header == 0 {
                return Ok(None);
            }
            self.consumed += (cap - self.head) as u64;
            self.head = 0;
        }
        if header == 0 {
            return Ok(None);
        }
        let len = decode_frame_header(header).map(frame_bytes);
        let Some(len) = len.filter(|&l| l <= max && self.head + l <= cap) else {
            // Only a bug or a foreign writer gets here. The ring cannot be
            // resynchronised, so stop serving it; its client times out.
            tracing::error!(
                "request ring of node {} slot {} on node {node}: bad frame header {header:#x} at {}; ring abandoned",
                self.client_node,
                self.slot,
                self.head
            );
            self.broken = true;
            return Ok(None);
        };
        if !read_frame(fabric.as_ref(), at(self.head), header, len, payload)? {
            return Ok(None);
        }
        zero(fabric.as_ref(), at(self.head), len)?;
        self.head = if self.head + len == cap {
            0
        } else {
            self.head + len
        };
        self.consumed += len as u64;
        self.publish_if_due(ep, geometry);
        Ok(Some(Incoming {
            client_node: self.client_node,
            slot: self.slot,
        }))
    }
}

/// Writes the reply frame in `frame` (built with [`begin_reply`] and
/// [`finish_frame`]) to `offset` of the response ring of `to`, if it fits
/// there (one WRITE, counted on the worker's endpoint).
pub(crate) fn send_reply(
    ep: &mut Endpoint,
    geometry: &RingGeometry,
    to: Incoming,
    offset: u64,
    frame: &[u8],
) -> Result<(), FabricError> {
    let fits = offset % WORD as u64 == 0
        && offset
            .checked_add(frame.len() as u64)
            .is_some_and(|end| end <= geometry.response_ring_bytes as u64);
    if !fits {
        tracing::error!(
            "reply to node {} slot {}: offset {offset} leaves no room for {} bytes; dropped",
            to.client_node,
            to.slot,
            frame.len()
        );
        return Ok(());
    }
    ep.write(
        RemoteAddr::new(
            to.client_node,
            RESPONSE_RINGS,
            geometry.response_ring_offset(to.slot) + offset,
        ),
        frame,
    )
}

/// Starts a reply frame in `frame`; append the body, then
/// [`finish_frame`].
pub(crate) fn begin_reply(frame: &mut Vec<u8>, header: &ReplyHeader) {
    begin_frame(frame);
    header.encode_into(frame);
}
