//! Ring-buffer messaging frames of the server-driven and hybrid baselines
//! (`FaRM` §3.1), and the request/reply messages they carry.
//!
//! A ring is a span of a receiver's memory that one sender fills with
//! fabric WRITEs. Every frame is one WRITE:
//!
//! ```text
//! word 0        header   FRAME_MAGIC << 32 | payload length in bytes (never 0)
//! words 1..n-1  payload, zero-padded to a whole word
//! word n        trailer  xxh3 of the padded payload, seeded with the header
//!                        (never 0)
//! ```
//!
//! The receiver polls the header word at its head; a non-zero header gives
//! the frame length, and the frame is complete once the trailer at its end
//! matches the payload read with it ([`frame_trailer`]). `FaRM` only checks
//! that the trailer is non-zero, relying on the NIC landing a WRITE in
//! increasing address order; our fabrics promise no order among the words
//! of one WRITE (the in-process and shared-memory backends store words with
//! relaxed atomics after one release fence, the `tcp` backend copies on a
//! service thread), so the trailer is a checksum instead: a frame whose
//! words have not all landed fails it and the receiver polls again
//! (self-verifying, as Pilaf's entries). This keeps every message to one
//! WRITE; the polled words themselves are whole aligned words, never torn.
//! Processed frames are zeroed by the receiver, so a zero header means "no
//! frame yet".
//!
//! **Wrapping without a marker.** A frame never straddles the end of the
//! ring: when it does not fit before the end, the sender writes it at offset
//! 0 instead and the bytes left at the end are skipped ([`place_frame`]).
//! The receiver needs no marker WRITE to learn this: whenever fewer than the
//! largest frame's bytes remain before the end and its head is still zero, it
//! also polls offset 0 ([`receiver_may_wrap`]). Offset 0 can only be non-zero
//! there if the sender wrapped, because everything before the head has been
//! processed and zeroed. So every message costs exactly one WRITE.
//!
//! **Capacity.** [`ring_bytes`] makes a ring at least four of its largest
//! frames long. A receiver publishes its head to the sender once at least
//! half the ring was consumed since it last did, so a sender whose requests
//! have all been consumed always has more than half the ring, that is more
//! than two largest frames, free in its view: enough for a frame plus the
//! skipped tail of a wrap. A sender with one request outstanding at a time
//! therefore never waits for a head update.
//!
//! All words are little-endian. Three regions of each node hold the rings
//! ([`RingGeometry`] gives the offsets): request rings (one per client slot
//! of every node, in the server node's memory), response rings (one per
//! client slot, in the client's node) and head mirrors (one word per client
//! slot and server node, in the client's node, where servers publish the
//! head of the request ring they consume).

use nessie::layout::read_word;
use nessie::layout::region;
use nessie::layout::{round_up_words, RegionId, WORD};
use twox_hash::XxHash3_64;

/// The request rings of a node: one per (client node, client slot).
pub const REQUEST_RINGS: RegionId = RegionId(region::FIRST_EXTERNAL);
/// The response rings of a node: one per local client slot.
pub const RESPONSE_RINGS: RegionId = RegionId(region::FIRST_EXTERNAL + 1);
/// The head mirrors of a node: one word per (local client slot, server node).
pub const HEAD_MIRRORS: RegionId = RegionId(region::FIRST_EXTERNAL + 2);

/// High half of every frame header: tells a frame from stray non-zero bytes.
pub const FRAME_MAGIC: u64 = 0x4e52_4e47; // "GNRN" little-endian
/// Bytes a frame adds to its payload (header and trailer words).
pub const FRAME_OVERHEAD: usize = 2 * WORD;
/// Smallest ring, so that rings of small messages do not wrap (and publish
/// their head) every few messages.
pub const MIN_RING_BYTES: usize = 64 << 10;
/// Longest error message a reply carries (longer ones are cut).
pub const MAX_ERROR_MESSAGE: usize = 256;

/// Bytes of a frame carrying `payload_len` bytes.
#[must_use]
pub const fn frame_bytes(payload_len: usize) -> usize {
    FRAME_OVERHEAD + round_up_words(payload_len)
}

/// The header word of a frame of `payload_len` bytes (never 0).
#[must_use]
pub const fn frame_header(payload_len: u32) -> u64 {
    FRAME_MAGIC << 32 | payload_len as u64
}

/// The payload length a header word announces, or `None` for 0 (no frame
/// yet) or a word that is not a frame header.
#[must_use]
pub fn decode_frame_header(word: u64) -> Option<usize> {
    (word >> 32 == FRAME_MAGIC).then_some((word & 0xffff_ffff) as usize)
}

/// The trailer word that completes the frame whose header is `header` and
/// whose payload, padded to a word, is `padded_payload`: a checksum, so
/// that a frame whose words have not all landed yet is recognised.
#[must_use]
pub fn frame_trailer(header: u64, padded_payload: &[u8]) -> u64 {
    match XxHash3_64::oneshot_with_seed(header, padded_payload) {
        0 => 1,
        t => t,
    }
}

/// Starts a frame in `buf`: clears it and reserves the header word. Append
/// the payload, then call [`finish_frame`].
pub fn begin_frame(buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend_from_slice(&[0; WORD]);
}

/// Completes the frame begun by [`begin_frame`]: pads the payload to a word,
/// writes the header and appends the trailer. Returns the frame's bytes.
///
/// # Panics
/// If the payload is 4 GiB or more (no configuration allows that).
pub fn finish_frame(buf: &mut Vec<u8>) -> usize {
    let payload = buf.len() - WORD;
    let header = frame_header(u32::try_from(payload).expect("payload below 4 GiB"));
    buf.resize(WORD + round_up_words(payload), 0);
    buf[..WORD].copy_from_slice(&header.to_le_bytes());
    let trailer = frame_trailer(header, &buf[WORD..]);
    buf.extend_from_slice(&trailer.to_le_bytes());
    buf.len()
}

/// Where a frame of `frame_len` bytes goes when the sender's tail is at
/// `tail` in a ring of `capacity` bytes: `(offset, skipped)`, where
/// `skipped` bytes at the end of the ring are given up because the frame
/// does not fit before the end.
#[must_use]
pub const fn place_frame(tail: usize, frame_len: usize, capacity: usize) -> (usize, usize) {
    if capacity - tail < frame_len {
        (0, capacity - tail)
    } else {
        (tail, 0)
    }
}

/// Whether a receiver whose head is at `head` must also poll offset 0: true
/// when a frame of up to `max_frame` bytes might not have fit before the end.
#[must_use]
pub const fn receiver_may_wrap(head: usize, max_frame: usize, capacity: usize) -> bool {
    head != 0 && capacity - head < max_frame
}

/// Bytes of a ring whose largest frame is `max_frame` bytes (see the module
/// documentation for why four frames).
#[must_use]
pub fn ring_bytes(max_frame: usize) -> usize {
    (4 * max_frame).max(MIN_RING_BYTES)
}

/// Declares an enum carried as a `u8` code on the wire, and its decoder,
/// from one list of variants and codes.
macro_rules! wire_codes {
    ($(#[$meta:meta])* pub enum $name:ident {
        $($(#[$vmeta:meta])* $variant:ident = $code:literal,)*
    }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vmeta])* $variant = $code,)*
        }

        impl $name {
            /// Decodes a code (`None` for an unknown one).
            #[must_use]
            pub fn from_code(code: u8) -> Option<$name> {
                match code {
                    $($code => Some($name::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

wire_codes! {
    /// What a request asks the home node to do.
    pub enum RingOp {
        /// Read a key.
        Get = 1,
        /// Store a value.
        Put = 2,
        /// Remove a key.
        Delete = 3,
    }
}

wire_codes! {
    /// How the home node answered.
    pub enum ReplyStatus {
        /// Done; a GET's body is the value, a DELETE found the key.
        Ok = 1,
        /// GET or DELETE: the key is absent.
        NotFound = 2,
        /// PUT: no candidate slot could be freed.
        IndexFull = 3,
        /// PUT: no free data slot before the deadline.
        DataTableFull = 4,
        /// The deadline passed (outcome unknown); the body may explain.
        Timeout = 5,
        /// An entry failed its checksum on every retry; the body explains.
        Corrupt = 6,
        /// The request was malformed or the server failed; the body explains.
        Failed = 7,
    }
}

/// Bytes of a request's fixed fields.
pub const REQUEST_HEADER_BYTES: usize = 5 * WORD;

/// The fixed fields of a request, followed in the payload by the key and
/// the value, each padded to a word.
///
/// ```text
/// word 0  op (8 bits) | key length (16 bits) << 8
/// word 1  seq           the client's request number, echoed in the reply
/// word 2  reply_offset  where in the client's response ring to reply
/// word 3  created_at    µs when the client began the operation (deadline)
/// word 4  value length
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    /// Op code, see [`RingOp`].
    pub op: u8,
    /// Key length in bytes.
    pub key_len: u16,
    /// Request number.
    pub seq: u64,
    /// Offset of the reply frame in the client's response ring.
    pub reply_offset: u64,
    /// Start of the operation, µs since the epoch.
    pub created_at: u64,
    /// Value length in bytes (PUT), else 0.
    pub value_len: u64,
}

impl RequestHeader {
    /// Appends the encoded fields to `buf`.
    pub fn encode_into(&self, buf: &mut Vec<u8>) {
        push_words(
            buf,
            [
                u64::from(self.op) | u64::from(self.key_len) << 8,
                self.seq,
                self.reply_offset,
                self.created_at,
                self.value_len,
            ],
        );
    }

    /// Decodes the fields at the start of a payload; `None` if it is too
    /// short.
    #[must_use]
    pub fn decode(payload: &[u8]) -> Option<RequestHeader> {
        let [ops, seq, reply_offset, created_at, value_len] = first_words(payload)?;
        Some(RequestHeader {
            op: ops as u8,
            key_len: (ops >> 8) as u16,
            seq,
            reply_offset,
            created_at,
            value_len,
        })
    }

    /// Offset of the key in the payload.
    #[must_use]
    pub const fn key_offset() -> usize {
        REQUEST_HEADER_BYTES
    }

    /// Offset of the value in the payload.
    #[must_use]
    pub fn value_offset(&self) -> usize {
        REQUEST_HEADER_BYTES + round_up_words(usize::from(self.key_len))
    }

    /// Payload bytes of a request with this header.
    #[must_use]
    pub fn payload_bytes(&self) -> usize {
        self.value_offset() + round_up_words(self.value_len as usize)
    }
}

/// Appends `words` to `buf`, little-endian.
fn push_words<const N: usize>(buf: &mut Vec<u8>, words: [u64; N]) {
    for w in words {
        buf.extend_from_slice(&w.to_le_bytes());
    }
}

/// The first `N` little-endian words of `payload`; `None` if it is shorter.
fn first_words<const N: usize>(payload: &[u8]) -> Option<[u64; N]> {
    (payload.len() >= N * WORD).then(|| std::array::from_fn(|i| read_word(payload, i * WORD)))
}

/// Bytes of a reply's fixed fields.
pub const REPLY_HEADER_BYTES: usize = 4 * WORD;

/// What the server did besides answering, for the client's statistics.
/// Each counter saturates at `u16::MAX`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplyNotes {
    /// ITE CASes that lost a race.
    pub cas_failed: u16,
    /// Torn or recycled entries re-read.
    pub torn: u16,
    /// Allocation attempts that found no free data slot.
    pub no_free_slot: u16,
    /// Entries moved to make room (cuckoo displacement).
    pub migrations: u16,
}

/// The fixed fields of a reply, followed in the payload by the body (a
/// GET's value, or an error message), padded to a word.
///
/// ```text
/// word 0  status (8 bits)
/// word 1  seq of the request answered
/// word 2  body length
/// word 3  notes: cas_failed | torn << 16 | no_free_slot << 32 | migrations << 48
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyHeader {
    /// Status code, see [`ReplyStatus`].
    pub status: u8,
    /// Request number answered.
    pub seq: u64,
    /// Body length in bytes.
    pub body_len: u64,
    /// Server-side counters.
    pub notes: ReplyNotes,
}

impl ReplyHeader {
    /// Appends the encoded fields to `buf`.
    pub fn encode_into(&self, buf: &mut Vec<u8>) {
        let n = self.notes;
        push_words(
            buf,
            [
                u64::from(self.status),
                self.seq,
                self.body_len,
                u64::from(n.cas_failed)
                    | u64::from(n.torn) << 16
                    | u64::from(n.no_free_slot) << 32
                    | u64::from(n.migrations) << 48,
            ],
        );
    }

    /// Decodes the fields at the start of a payload; `None` if it is too
    /// short.
    #[must_use]
    pub fn decode(payload: &[u8]) -> Option<ReplyHeader> {
        let [status, seq, body_len, notes] = first_words(payload)?;
        Some(ReplyHeader {
            status: status as u8,
            seq,
            body_len,
            notes: ReplyNotes {
                cas_failed: notes as u16,
                torn: (notes >> 16) as u16,
                no_free_slot: (notes >> 32) as u16,
                migrations: (notes >> 48) as u16,
            },
        })
    }
}

/// Where every ring of a cluster lives, for `nodes` nodes with `slots`
/// client slots each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingGeometry {
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Client slots per node.
    pub slots: usize,
    /// Largest request frame, bytes.
    pub max_request_frame: usize,
    /// Largest reply frame, bytes.
    pub max_reply_frame: usize,
    /// Bytes of one request ring.
    pub request_ring_bytes: usize,
    /// Bytes of one response ring.
    pub response_ring_bytes: usize,
}

impl RingGeometry {
    /// The geometry for keys of up to `key_size_max` and values of up to
    /// `value_size_max` bytes; `None` if a frame or a region's size would
    /// overflow.
    #[must_use]
    pub fn new(
        nodes: usize,
        slots: usize,
        key_size_max: usize,
        value_size_max: usize,
    ) -> Option<RingGeometry> {
        // A frame header holds a 32-bit payload length.
        let limit = u32::MAX as usize / 2;
        if key_size_max > limit || value_size_max > limit {
            return None;
        }
        let max_request_frame = frame_bytes(
            REQUEST_HEADER_BYTES + round_up_words(key_size_max) + round_up_words(value_size_max),
        );
        let max_reply_frame =
            frame_bytes(REPLY_HEADER_BYTES + round_up_words(value_size_max.max(MAX_ERROR_MESSAGE)));
        let g = RingGeometry {
            nodes,
            slots,
            max_request_frame,
            max_reply_frame,
            request_ring_bytes: ring_bytes(max_request_frame),
            response_ring_bytes: ring_bytes(max_reply_frame),
        };
        // Every region length must be representable.
        g.request_region_bytes()?;
        g.response_region_bytes()?;
        g.head_region_bytes()?;
        Some(g)
    }

    /// Bytes of a node's [`REQUEST_RINGS`] region.
    #[must_use]
    pub fn request_region_bytes(&self) -> Option<u64> {
        (self.nodes as u64)
            .checked_mul(self.slots as u64)?
            .checked_mul(self.request_ring_bytes as u64)
    }

    /// Bytes of a node's [`RESPONSE_RINGS`] region.
    #[must_use]
    pub fn response_region_bytes(&self) -> Option<u64> {
        (self.slots as u64).checked_mul(self.response_ring_bytes as u64)
    }

    /// Bytes of a node's [`HEAD_MIRRORS`] region.
    #[must_use]
    pub fn head_region_bytes(&self) -> Option<u64> {
        (self.slots as u64)
            .checked_mul(self.nodes as u64)?
            .checked_mul(WORD as u64)
    }

    /// Index of the request ring of (`client_node`, `slot`) within a server
    /// node's [`REQUEST_RINGS`].
    #[must_use]
    pub fn request_ring_index(&self, client_node: usize, slot: usize) -> usize {
        client_node * self.slots + slot
    }

    /// Offset of request ring `index` in [`REQUEST_RINGS`].
    #[must_use]
    pub fn request_ring_offset(&self, index: usize) -> u64 {
        index as u64 * self.request_ring_bytes as u64
    }

    /// Offset of the response ring of `slot` in [`RESPONSE_RINGS`].
    #[must_use]
    pub fn response_ring_offset(&self, slot: usize) -> u64 {
        slot as u64 * self.response_ring_bytes as u64
    }

    /// Offset of the head mirror of (`slot`, `server_node`) in
    /// [`HEAD_MIRRORS`].
    #[must_use]
    pub fn head_mirror_offset(&self, slot: usize, server_node: usize) -> u64 {
        ((slot * self.nodes + server_node) * WORD) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_length_and_trailer() {
        let mut buf = Vec::new();
        begin_frame(&mut buf);
        buf.extend_from_slice(b"hello");
        let n = finish_frame(&mut buf);
        assert_eq!(n, frame_bytes(5));
        assert_eq!(n, 24);
        let header = super::read_word(&buf, 0);
        assert_eq!(decode_frame_header(header), Some(5));
        assert_eq!(
            super::read_word(&buf, n - WORD),
            frame_trailer(header, &buf[WORD..n - WORD])
        );
        assert_eq!(&buf[WORD..WORD + 5], b"hello");
        assert_eq!(decode_frame_header(0), None);
        assert_ne!(frame_header(0), 0, "an empty payload still has a header");
        assert_ne!(frame_trailer(frame_header(0), &[]), 0);
        // A word that has not landed yet (still zero) fails the trailer.
        let mut partial = buf[WORD..n - WORD].to_vec();
        partial[0] = 0;
        assert_ne!(
            frame_trailer(header, &partial),
            frame_trailer(header, &buf[WORD..n - WORD])
        );
    }

    #[test]
    fn wrap_rule_agrees_between_sender_and_receiver() {
        let (cap, max) = (1024, 200);
        for tail in (0..cap).step_by(8) {
            for len in (16..=max).step_by(8) {
                let (at, skipped) = place_frame(tail, len, cap);
                assert!(at + len <= cap);
                if at == 0 && tail != 0 {
                    assert_eq!(skipped, cap - tail);
                    assert!(receiver_may_wrap(tail, max, cap), "tail {tail} len {len}");
                }
            }
        }
        assert!(!receiver_may_wrap(0, max, cap));
    }

    #[test]
    fn messages_round_trip() {
        let r = RequestHeader {
            op: RingOp::Put as u8,
            key_len: 300,
            seq: 7,
            reply_offset: 4096,
            created_at: 123_456,
            value_len: 1 << 20,
        };
        let mut buf = Vec::new();
        r.encode_into(&mut buf);
        assert_eq!(buf.len(), REQUEST_HEADER_BYTES);
        assert_eq!(RequestHeader::decode(&buf), Some(r));
        assert_eq!(r.value_offset(), REQUEST_HEADER_BYTES + 304);
        assert_eq!(RequestHeader::decode(&buf[..8]), None);
        let p = ReplyHeader {
            status: ReplyStatus::Timeout as u8,
            seq: 9,
            body_len: 17,
            notes: ReplyNotes {
                cas_failed: 1,
                torn: 2,
                no_free_slot: 3,
                migrations: u16::MAX,
            },
        };
        buf.clear();
        p.encode_into(&mut buf);
        assert_eq!(ReplyHeader::decode(&buf), Some(p));
        for s in 1..=7 {
            assert_eq!(ReplyStatus::from_code(s).map(|s| s as u8), Some(s));
        }
        assert_eq!(ReplyStatus::from_code(0), None);
        assert_eq!(RingOp::from_code(4), None);
    }

    #[test]
    fn geometry_places_rings_apart() {
        let g = RingGeometry::new(3, 4, 128, 1000).unwrap();
        assert!(g.request_ring_bytes >= 4 * g.max_request_frame);
        assert!(g.response_ring_bytes >= 4 * g.max_reply_frame);
        assert_eq!(
            g.request_ring_offset(g.request_ring_index(2, 3)) + g.request_ring_bytes as u64,
            g.request_region_bytes().unwrap()
        );
        assert_eq!(
            g.head_mirror_offset(3, 2) + 8,
            g.head_region_bytes().unwrap()
        );
        assert!(RingGeometry::new(usize::MAX, 2, 128, 1000).is_none());
        assert!(RingGeometry::new(1, 1, 128, usize::MAX - 4).is_none());
    }
}
