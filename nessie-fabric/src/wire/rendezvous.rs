//! Wire layout of the rendezvous through which the nodes of a cluster
//! exchange their addresses (see [`crate::rendezvous`]).
//!
//! Every field is little-endian; every message is a whole number of 8-byte
//! words. One connection carries one registration:
//!
//! ```text
//! HELLO (client → server, then server → client; 6 words)
//! word 0    magic "NESSIERV"
//! word 1    rendezvous layout version u32 | kind u32 (KIND_CLIENT_HELLO, KIND_SERVER_HELLO)
//! word 2-5  nonce (32 fresh random bytes)
//!
//! SEALED message (REGISTER client → server, then REPLY server → client)
//! word 0    magic "NESSIERV"
//! word 1    kind u32 (KIND_REGISTER, KIND_REPLY) | body length u32 (bytes, whole words)
//! word 2-5  client nonce of the connection the message was made for
//! word 6-9  server nonce of that connection
//! word 10-13 key proof = HMAC-SHA256(secret, PROOF_LABEL ‖ client nonce ‖ server nonce)
//! then      body
//! then      tag = HMAC-SHA256(secret, MESSAGE_LABEL ‖ header ‖ body)
//!
//! REGISTER body
//! word 0    format version u32 | node u32
//! word 1    cluster id
//! word 2    nodes u32 | region count u32
//! word 3    blob length in bytes
//! then      per region: id (low 16 bits of a word), length in bytes
//! then      the blob, zero-padded to whole words
//!
//! REPLY body
//! word 0    status u32 | count u32
//! ACCEPT (count = nodes):
//! word 1    serving node u32 | reserved u32
//! word 2    address family u32 (4 or 6) | port u32: where the server saw
//!           this connection come from
//! word 3-4  its IP address (IPv4 in the first 4 bytes)
//! then      per node: blob length word, then the blob zero-padded to words
//! refusal (count = detail words): the detail words of the status
//!
//! A rendezvous with a barrier then carries two more sealed messages on
//! the same connection, for the same nonces:
//! READY (client → server): empty body; the node connected with the table
//! GO (server → client): a REPLY body of status STATUS_GO (every node is
//!           connected) or of a refusal status (STATUS_NOT_READY: waited
//!           ms, then the node ids that did not report ready)
//! ```
//!
//! The labels differ per direction and per MAC, so no proof or tag can be
//! reflected back or passed off as another.

use super::frame::{put_word, word, HELLO_MAX_REGIONS, MAC_BYTES, NONCE_BYTES};
use super::WORD;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// Magic word at the start of every rendezvous message.
pub const MAGIC: u64 = u64::from_le_bytes(*b"NESSIERV");
/// Version of the rendezvous layouts; bump on any change of bits.
pub const LAYOUT_VERSION: u32 = 2;
/// Kind of the connecting node's hello.
pub const KIND_CLIENT_HELLO: u32 = 1;
/// Kind of the server's hello.
pub const KIND_SERVER_HELLO: u32 = 2;
/// Kind of a registration.
pub const KIND_REGISTER: u32 = 3;
/// Kind of the server's reply.
pub const KIND_REPLY: u32 = 4;
/// Kind of a node's report that it connected (barrier).
pub const KIND_READY: u32 = 5;
/// Kind of the server's verdict once every node reported (barrier).
pub const KIND_GO: u32 = 6;
/// Bytes of a hello.
pub const HELLO_BYTES: usize = 2 * WORD + NONCE_BYTES;
/// Bytes of a sealed message's header (before its body).
pub const SEALED_HEADER_BYTES: usize = 2 * WORD + 2 * NONCE_BYTES + MAC_BYTES;
/// Key proof of a registration.
pub const REGISTER_PROOF_LABEL: &[u8] = b"nessie-rendezvous/v1 register key proof";
/// Tag of a registration.
pub const REGISTER_LABEL: &[u8] = b"nessie-rendezvous/v1 register message";
/// Key proof of a reply.
pub const REPLY_PROOF_LABEL: &[u8] = b"nessie-rendezvous/v1 reply key proof";
/// Tag of a reply.
pub const REPLY_LABEL: &[u8] = b"nessie-rendezvous/v1 reply message";
/// Key proof of a ready report.
pub const READY_PROOF_LABEL: &[u8] = b"nessie-rendezvous/v1 ready key proof";
/// Tag of a ready report.
pub const READY_LABEL: &[u8] = b"nessie-rendezvous/v1 ready message";
/// Key proof of a go.
pub const GO_PROOF_LABEL: &[u8] = b"nessie-rendezvous/v1 go key proof";
/// Tag of a go.
pub const GO_LABEL: &[u8] = b"nessie-rendezvous/v1 go message";
/// Largest blob a node may register.
pub const MAX_BLOB_BYTES: usize = 64 << 10;
/// Bytes of a registration body before its regions.
pub const REGISTER_FIXED_BYTES: usize = 4 * WORD;
/// Largest registration body a server reads.
pub const MAX_REGISTER_BODY: usize =
    REGISTER_FIXED_BYTES + HELLO_MAX_REGIONS * 2 * WORD + MAX_BLOB_BYTES;
/// Largest reply body a node reads (and so the largest table).
pub const MAX_REPLY_BODY: usize = 16 << 20;
/// Bytes of an accepting reply before its table.
pub const ACCEPT_FIXED_BYTES: usize = 5 * WORD;

/// Status: registered; the table follows.
pub const STATUS_ACCEPT: u32 = 0;
/// Refused: the key proof did not verify (other secret).
pub const STATUS_AUTHENTICATION: u32 = 1;
/// Refused: the message was altered in transit.
pub const STATUS_TAMPERED: u32 = 2;
/// Refused: the message was made for another connection.
pub const STATUS_REPLAYED: u32 = 3;
/// Refused: the message does not parse or is too large.
pub const STATUS_MALFORMED: u32 = 4;
/// Refused: other format version (detail: found, expected).
pub const STATUS_VERSION: u32 = 5;
/// Refused: other cluster (detail: found, expected).
pub const STATUS_CLUSTER: u32 = 6;
/// Refused: other node count (detail: found, expected).
pub const STATUS_NODES: u32 = 7;
/// Refused: impossible node id (detail: found, expected).
pub const STATUS_NODE: u32 = 8;
/// Refused: other regions (detail: region, found, expected; [`NO_REGION`]
/// for a missing one).
pub const STATUS_REGION: u32 = 9;
/// Refused: another node registered this node id first (detail: node).
pub const STATUS_DUPLICATE: u32 = 10;
/// Refused: the server gave up waiting (detail: waited ms, then the node
/// ids that never registered).
pub const STATUS_MISSING: u32 = 11;
/// Barrier: every node connected; go on.
pub const STATUS_GO: u32 = 12;
/// Barrier refused: nodes did not report that they connected (detail:
/// waited ms, then their ids).
pub const STATUS_NOT_READY: u32 = 13;
/// Region size standing for "no such region" in a [`STATUS_REGION`] detail
/// (never a whole number of words).
pub const NO_REGION: u64 = u64::MAX;
/// Most detail words of a refusal.
pub const MAX_DETAIL_WORDS: usize = 1 << 16;

const _: () = assert!(HELLO_BYTES % WORD == 0 && SEALED_HEADER_BYTES % WORD == 0);
const _: () = assert!(MAX_REGISTER_BODY <= MAX_REPLY_BODY);
const _: () = assert!(MAX_REPLY_BODY <= u32::MAX as usize);

/// Why rendezvous bytes could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The first word is not [`MAGIC`].
    BadMagic,
    /// Another rendezvous layout version.
    Version(u32),
    /// Wrong kind, inconsistent lengths or counts.
    Malformed,
    /// A length over its bound.
    TooLarge,
}

/// A hello: the sender's fresh nonce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RvHello {
    /// [`KIND_CLIENT_HELLO`] or [`KIND_SERVER_HELLO`].
    pub kind: u32,
    /// Fresh random bytes.
    pub nonce: [u8; NONCE_BYTES],
}

impl RvHello {
    /// Encodes the hello.
    #[must_use]
    pub fn encode(&self) -> [u8; HELLO_BYTES] {
        let mut out = Vec::with_capacity(HELLO_BYTES);
        put_word(&mut out, MAGIC);
        put_word(
            &mut out,
            u64::from(LAYOUT_VERSION) | u64::from(self.kind) << 32,
        );
        out.extend_from_slice(&self.nonce);
        let mut bytes = [0u8; HELLO_BYTES];
        bytes.copy_from_slice(&out);
        bytes
    }

    /// Decodes a hello of kind `kind`.
    ///
    /// # Errors
    /// Wrong magic, version or kind.
    pub fn decode(bytes: &[u8; HELLO_BYTES], kind: u32) -> Result<RvHello, DecodeError> {
        if word(bytes, 0) != Some(MAGIC) {
            return Err(DecodeError::BadMagic);
        }
        let w1 = word(bytes, 1).unwrap_or_default();
        if w1 as u32 != LAYOUT_VERSION {
            return Err(DecodeError::Version(w1 as u32));
        }
        if (w1 >> 32) as u32 != kind {
            return Err(DecodeError::Malformed);
        }
        let mut nonce = [0u8; NONCE_BYTES];
        nonce.copy_from_slice(&bytes[2 * WORD..]);
        Ok(RvHello { kind, nonce })
    }
}

/// The header of a sealed message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SealedHeader {
    /// [`KIND_REGISTER`] or [`KIND_REPLY`].
    pub kind: u32,
    /// Bytes of the body.
    pub body_len: u32,
    /// The client nonce the message claims to be made for.
    pub client_nonce: [u8; NONCE_BYTES],
    /// The server nonce the message claims to be made for.
    pub server_nonce: [u8; NONCE_BYTES],
    /// The sender's key proof over the two nonces.
    pub proof: [u8; MAC_BYTES],
}

impl SealedHeader {
    /// Encodes the header.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(SEALED_HEADER_BYTES);
        put_word(&mut out, MAGIC);
        put_word(
            &mut out,
            u64::from(self.kind) | u64::from(self.body_len) << 32,
        );
        out.extend_from_slice(&self.client_nonce);
        out.extend_from_slice(&self.server_nonce);
        out.extend_from_slice(&self.proof);
        out
    }

    /// Decodes a header of kind `kind` whose body may hold at most
    /// `max_body` bytes.
    ///
    /// # Errors
    /// Wrong magic or kind, a body that is not whole words, or too large.
    pub fn decode(
        bytes: &[u8; SEALED_HEADER_BYTES],
        kind: u32,
        max_body: usize,
    ) -> Result<SealedHeader, DecodeError> {
        if word(bytes, 0) != Some(MAGIC) {
            return Err(DecodeError::BadMagic);
        }
        let w1 = word(bytes, 1).unwrap_or_default();
        let body_len = (w1 >> 32) as u32;
        if w1 as u32 != kind || body_len as usize % WORD != 0 {
            return Err(DecodeError::Malformed);
        }
        if body_len as usize > max_body {
            return Err(DecodeError::TooLarge);
        }
        let mut h = SealedHeader {
            kind,
            body_len,
            client_nonce: [0; NONCE_BYTES],
            server_nonce: [0; NONCE_BYTES],
            proof: [0; MAC_BYTES],
        };
        let (c, rest) = bytes[2 * WORD..].split_at(NONCE_BYTES);
        let (s, p) = rest.split_at(NONCE_BYTES);
        h.client_nonce.copy_from_slice(c);
        h.server_nonce.copy_from_slice(s);
        h.proof.copy_from_slice(p);
        Ok(h)
    }
}

/// Appends `blob`, zero-padded to whole words.
fn put_padded(out: &mut Vec<u8>, blob: &[u8]) {
    out.extend_from_slice(blob);
    out.resize(super::round_up_words(out.len()), 0);
}

/// A node's registration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    /// Layout version of the node's build (its membership's).
    pub format_version: u32,
    /// The node's id.
    pub node: u32,
    /// Cluster identity.
    pub cluster_id: u64,
    /// Nodes in the node's cluster.
    pub nodes: u32,
    /// Regions every node registers: id and length.
    pub regions: Vec<(u16, u64)>,
    /// The node's opaque blob (at most [`MAX_BLOB_BYTES`]).
    pub blob: Vec<u8>,
}

impl Registration {
    /// Encodes the registration body.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_word(
            &mut out,
            u64::from(self.format_version) | u64::from(self.node) << 32,
        );
        put_word(&mut out, self.cluster_id);
        put_word(
            &mut out,
            u64::from(self.nodes) | (self.regions.len() as u64) << 32,
        );
        put_word(&mut out, self.blob.len() as u64);
        for &(id, len) in &self.regions {
            put_word(&mut out, u64::from(id));
            put_word(&mut out, len);
        }
        put_padded(&mut out, &self.blob);
        out
    }

    /// Decodes a registration body.
    ///
    /// # Errors
    /// Inconsistent lengths, too many regions or too long a blob.
    pub fn decode(bytes: &[u8]) -> Result<Registration, DecodeError> {
        let w = |i| word(bytes, i).ok_or(DecodeError::Malformed);
        let (w0, w2, blob_len) = (w(0)?, w(2)?, w(3)?);
        let count = (w2 >> 32) as usize;
        if count > HELLO_MAX_REGIONS || blob_len > MAX_BLOB_BYTES as u64 {
            return Err(DecodeError::TooLarge);
        }
        let first = REGISTER_FIXED_BYTES / WORD;
        let blob_at = REGISTER_FIXED_BYTES + count * 2 * WORD;
        let blob_len = blob_len as usize;
        if bytes.len() != super::round_up_words(blob_at + blob_len) {
            return Err(DecodeError::Malformed);
        }
        let regions = (0..count)
            .map(|i| Ok((w(first + 2 * i)? as u16, w(first + 2 * i + 1)?)))
            .collect::<Result<Vec<_>, DecodeError>>()?;
        Ok(Registration {
            format_version: w0 as u32,
            node: (w0 >> 32) as u32,
            cluster_id: w(1)?,
            nodes: w2 as u32,
            regions,
            blob: bytes[blob_at..blob_at + blob_len].to_vec(),
        })
    }
}

/// The server's reply to a registration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Registered: every node's blob.
    Accept {
        /// The node that serves the rendezvous.
        server: u32,
        /// Where the server saw the registration come from.
        seen_from: SocketAddr,
        /// Every node's blob, by node id.
        blobs: Vec<Vec<u8>>,
    },
    /// Refused, with one of the `STATUS_*` codes and its detail words.
    Refuse {
        /// Why (not [`STATUS_ACCEPT`]).
        status: u32,
        /// Detail words of the status.
        detail: Vec<u64>,
    },
}

impl Reply {
    /// Encodes the reply body.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Reply::Accept {
                server,
                seen_from,
                blobs,
            } => {
                put_word(&mut out, (blobs.len() as u64) << 32);
                put_word(&mut out, u64::from(*server));
                let (family, ip) = match seen_from.ip() {
                    IpAddr::V4(v4) => (4u64, v4.to_ipv6_mapped().octets()),
                    IpAddr::V6(v6) => (6u64, v6.octets()),
                };
                put_word(&mut out, family | u64::from(seen_from.port()) << 32);
                out.extend_from_slice(&ip);
                for blob in blobs {
                    put_word(&mut out, blob.len() as u64);
                    put_padded(&mut out, blob);
                }
            }
            Reply::Refuse { status, detail } => {
                put_word(&mut out, u64::from(*status) | (detail.len() as u64) << 32);
                for &d in detail {
                    put_word(&mut out, d);
                }
            }
        }
        out
    }

    /// Decodes a reply body.
    ///
    /// # Errors
    /// Inconsistent lengths or counts, an unknown address family, a blob
    /// over [`MAX_BLOB_BYTES`].
    pub fn decode(bytes: &[u8]) -> Result<Reply, DecodeError> {
        let w = |i| word(bytes, i).ok_or(DecodeError::Malformed);
        let w0 = w(0)?;
        let (status, count) = (w0 as u32, (w0 >> 32) as usize);
        if status != STATUS_ACCEPT {
            if count > MAX_DETAIL_WORDS || bytes.len() != (1 + count) * WORD {
                return Err(DecodeError::Malformed);
            }
            let detail = (1..=count).map(w).collect::<Result<Vec<_>, _>>()?;
            return Ok(Reply::Refuse { status, detail });
        }
        let server = w(1)? as u32;
        let w2 = w(2)?;
        let mut ip = [0u8; 16];
        ip.copy_from_slice(
            bytes
                .get(3 * WORD..ACCEPT_FIXED_BYTES)
                .ok_or(DecodeError::Malformed)?,
        );
        let ip = match w2 as u32 {
            4 => IpAddr::V4(
                Ipv6Addr::from(ip)
                    .to_ipv4_mapped()
                    .ok_or(DecodeError::Malformed)?,
            ),
            6 => IpAddr::V6(Ipv6Addr::from(ip)),
            _ => return Err(DecodeError::Malformed),
        };
        let seen_from = SocketAddr::new(ip, (w2 >> 32) as u16);
        // Each entry takes at least a word, so `count` is bounded by the
        // body the caller already bounded.
        if count > bytes.len() / WORD {
            return Err(DecodeError::Malformed);
        }
        let mut blobs = Vec::with_capacity(count);
        let mut at = ACCEPT_FIXED_BYTES;
        for _ in 0..count {
            let len = word(bytes, at / WORD).ok_or(DecodeError::Malformed)?;
            if len > MAX_BLOB_BYTES as u64 {
                return Err(DecodeError::TooLarge);
            }
            let start = at + WORD;
            let blob = bytes
                .get(start..start + len as usize)
                .ok_or(DecodeError::Malformed)?;
            blobs.push(blob.to_vec());
            at = super::round_up_words(start + len as usize);
        }
        if at != bytes.len() {
            return Err(DecodeError::Malformed);
        }
        Ok(Reply::Accept {
            server,
            seen_from,
            blobs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let h = RvHello {
            kind: KIND_SERVER_HELLO,
            nonce: [7; NONCE_BYTES],
        };
        assert_eq!(RvHello::decode(&h.encode(), KIND_SERVER_HELLO), Ok(h));
        assert_eq!(
            RvHello::decode(&h.encode(), KIND_CLIENT_HELLO),
            Err(DecodeError::Malformed)
        );
        let s = SealedHeader {
            kind: KIND_REPLY,
            body_len: 64,
            client_nonce: [1; NONCE_BYTES],
            server_nonce: [2; NONCE_BYTES],
            proof: [3; MAC_BYTES],
        };
        let bytes: [u8; SEALED_HEADER_BYTES] = s.encode().try_into().unwrap();
        assert_eq!(SealedHeader::decode(&bytes, KIND_REPLY, 64), Ok(s));
        assert_eq!(
            SealedHeader::decode(&bytes, KIND_REPLY, 56),
            Err(DecodeError::TooLarge)
        );
        let r = Registration {
            format_version: 3,
            node: 2,
            cluster_id: 99,
            nodes: 5,
            regions: vec![(0, 4096), (3, 8)],
            blob: b"10.0.0.1:7000".to_vec(),
        };
        let body = r.encode();
        assert_eq!(body.len() % WORD, 0);
        assert_eq!(Registration::decode(&body), Ok(r));
        assert_eq!(
            Registration::decode(&body[..body.len() - 8]),
            Err(DecodeError::Malformed)
        );
        for seen_from in ["10.1.2.3:4000", "[fe80::1]:9"] {
            let a = Reply::Accept {
                server: 1,
                seen_from: seen_from.parse().unwrap(),
                blobs: vec![b"a".to_vec(), Vec::new(), vec![9; 17]],
            };
            assert_eq!(Reply::decode(&a.encode()), Ok(a));
        }
        let f = Reply::Refuse {
            status: STATUS_MISSING,
            detail: vec![1500, 2, 4],
        };
        assert_eq!(Reply::decode(&f.encode()), Ok(f));
    }

    #[test]
    fn lying_lengths_are_refused() {
        let mut body = Vec::new();
        put_word(&mut body, u64::from(u32::MAX) << 32);
        assert_eq!(Reply::decode(&body), Err(DecodeError::Malformed));
        let mut reg = Registration {
            format_version: 1,
            node: 0,
            cluster_id: 1,
            nodes: 1,
            regions: Vec::new(),
            blob: Vec::new(),
        }
        .encode();
        reg[3 * WORD..4 * WORD].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(Registration::decode(&reg), Err(DecodeError::TooLarge));
    }
}
