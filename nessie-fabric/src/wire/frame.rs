//! Wire layout of the `tcp` fabric: the handshake and the verb frames.
//!
//! Every field is little-endian; every message is a whole number of 8-byte
//! words. A connection starts with the handshake, then carries request
//! frames from the connecting node (the client) and one response frame per
//! request frame, in order, from the serving node.
//!
//! ```text
//! HELLO (both directions)
//! word 0   magic "NESSIETC"
//! word 1   format version u32 | hello length u32 (bytes, whole message)
//! word 2   cluster id
//! word 3   sender node u32 | intended receiver node u32
//! word 4   nodes u32 | region count u32
//! word 5   frame limit (bytes of a frame's payload this side accepts)
//! word 6-9 nonce (32 random bytes)
//! then     per region: id (low 16 bits of a word), length in bytes
//!
//! The first two words never change between versions, so peers of different
//! builds can tell each other which version they speak.
//!
//! server: HELLO, then MAC = HMAC-SHA256(secret, SERVER_LABEL ‖ client hello ‖ server hello)
//! client: MAC = HMAC-SHA256(secret, CLIENT_LABEL ‖ client hello ‖ server hello)
//! server: VERDICT word (VERDICT_ACCEPT, or a rejection code)
//!
//! FRAME header (request and response)
//! word 0   magic u32 (REQUEST_MAGIC or RESPONSE_MAGIC) | verb count u32
//! word 1   payload bytes after the header
//!
//! request verb
//! word 0   op u16 | region u16 | reserved u32
//! word 1   offset
//! word 2   length in bytes (READ, WRITE; 8 for CAS)
//! then     WRITE: the data; CAS: expected, new, land-by (wall-clock µs
//!          after which the serving node must not execute it; 0: none)
//!
//! response verb
//! word 0   status (STATUS_OK or a refusal code)
//! then     OK READ: the data; OK CAS: the old value; OK WRITE: nothing;
//!          refusal: one detail word (the region length for
//!          STATUS_OUT_OF_BOUNDS, how late in µs for STATUS_LATE)
//! ```

use super::WORD;

/// Magic word at the start of every hello.
pub const HELLO_MAGIC: u64 = u64::from_le_bytes(*b"NESSIETC");
/// Bytes of a hello before its region list.
pub const HELLO_FIXED_BYTES: usize = 10 * WORD;
/// Bytes of one region entry of a hello.
pub const HELLO_REGION_BYTES: usize = 2 * WORD;
/// Most regions a hello may list (a hello claiming more is malformed).
pub const HELLO_MAX_REGIONS: usize = 1024;
/// Bytes of the random nonce in a hello.
pub const NONCE_BYTES: usize = 32;
/// Bytes of an HMAC-SHA256 tag.
pub const MAC_BYTES: usize = 32;
/// Domain separation of the server's proof.
pub const SERVER_LABEL: &[u8] = b"nessie-tcp/v1 server proof";
/// Domain separation of the client's proof.
pub const CLIENT_LABEL: &[u8] = b"nessie-tcp/v1 client proof";
/// Verdict: the client's proof checked out; frames follow.
pub const VERDICT_ACCEPT: u64 = u64::from_le_bytes(*b"ACCEPTED");
/// Verdict: the client's proof did not check out (other secret).
pub const VERDICT_BAD_PROOF: u64 = 1;

/// First word of a request frame (low half).
pub const REQUEST_MAGIC: u32 = u32::from_le_bytes(*b"NVRQ");
/// First word of a response frame (low half).
pub const RESPONSE_MAGIC: u32 = u32::from_le_bytes(*b"NVRS");
/// Bytes of a frame header.
pub const FRAME_HEADER_BYTES: usize = 2 * WORD;
/// Bytes of a request verb's header.
pub const VERB_HEADER_BYTES: usize = 3 * WORD;
/// Bytes of a response verb's status word.
pub const STATUS_BYTES: usize = WORD;

/// Op code of READ.
pub const OP_READ: u16 = 1;
/// Op code of WRITE.
pub const OP_WRITE: u16 = 2;
/// Op code of CAS.
pub const OP_CAS: u16 = 3;

/// The verb executed.
pub const STATUS_OK: u64 = 0;
/// Refused: the verb reaches past the end of the region.
pub const STATUS_OUT_OF_BOUNDS: u64 = 1;
/// Refused: offset or length not a multiple of 8.
pub const STATUS_MISALIGNED: u64 = 2;
/// Refused: the node has no such region.
pub const STATUS_UNKNOWN_REGION: u64 = 3;
/// Refused: unknown op code.
pub const STATUS_BAD_OP: u64 = 4;
/// Refused: the frame's READs together exceed the frame limit.
pub const STATUS_RESPONSE_TOO_LARGE: u64 = 5;
/// Refused: a CAS arrived after its land-by time (not executed).
pub const STATUS_LATE: u64 = 6;
/// Operand words of a CAS request: expected, new, land-by.
pub const CAS_OPERANDS: usize = 3;

/// Default bytes of a frame's payload a node accepts (requests and
/// responses alike); a node raises it to fit its largest verb.
pub const DEFAULT_FRAME_LIMIT: u64 = 16 << 20;

const _: () = assert!(HELLO_FIXED_BYTES == 6 * WORD + NONCE_BYTES);
const _: () = assert!(NONCE_BYTES % WORD == 0 && MAC_BYTES % WORD == 0);
const _: () = assert!(VERB_HEADER_BYTES % WORD == 0 && FRAME_HEADER_BYTES % WORD == 0);

/// Reads word `index` of `bytes`, if it is there.
#[must_use]
pub fn word(bytes: &[u8], index: usize) -> Option<u64> {
    let start = index.checked_mul(WORD)?;
    let b = bytes.get(start..start.checked_add(WORD)?)?;
    let mut w = [0u8; WORD];
    w.copy_from_slice(b);
    Some(u64::from_le_bytes(w))
}

/// Appends one little-endian word.
pub fn put_word(out: &mut Vec<u8>, w: u64) {
    out.extend_from_slice(&w.to_le_bytes());
}

/// A hello: what each side says about itself before anything else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Layout version of the sender's build.
    pub format_version: u32,
    /// Cluster identity.
    pub cluster_id: u64,
    /// The sender's node id.
    pub from: u32,
    /// The node the sender believes it talks to.
    pub to: u32,
    /// Nodes in the sender's cluster.
    pub nodes: u32,
    /// Largest frame payload the sender accepts.
    pub frame_limit: u64,
    /// Fresh random bytes.
    pub nonce: [u8; NONCE_BYTES],
    /// Regions every node registers: id and length.
    pub regions: Vec<(u16, u64)>,
}

/// Why a hello could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelloError {
    /// The first word is not [`HELLO_MAGIC`].
    BadMagic,
    /// Another layout version (the rest is not decoded).
    Version(u32),
    /// Lengths or counts are inconsistent or too large.
    Malformed,
}

impl Hello {
    /// Bytes of the encoded hello.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        HELLO_FIXED_BYTES + self.regions.len() * HELLO_REGION_BYTES
    }

    /// Encodes the hello.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        put_word(&mut out, HELLO_MAGIC);
        put_word(
            &mut out,
            u64::from(self.format_version) | (self.encoded_len() as u64) << 32,
        );
        put_word(&mut out, self.cluster_id);
        put_word(&mut out, u64::from(self.from) | u64::from(self.to) << 32);
        put_word(
            &mut out,
            u64::from(self.nodes) | (self.regions.len() as u64) << 32,
        );
        put_word(&mut out, self.frame_limit);
        out.extend_from_slice(&self.nonce);
        for &(id, len) in &self.regions {
            put_word(&mut out, u64::from(id));
            put_word(&mut out, len);
        }
        out
    }

    /// From the first two words of a hello: its total length, once magic
    /// and version are checked against `version`.
    ///
    /// # Errors
    /// Wrong magic, another version, or a length out of range.
    pub fn total_len(prefix: &[u8; 2 * WORD], version: u32) -> Result<usize, HelloError> {
        if word(prefix, 0) != Some(HELLO_MAGIC) {
            return Err(HelloError::BadMagic);
        }
        let w1 = word(prefix, 1).unwrap_or_default();
        if w1 as u32 != version {
            return Err(HelloError::Version(w1 as u32));
        }
        let len = (w1 >> 32) as usize;
        let max = HELLO_FIXED_BYTES + HELLO_MAX_REGIONS * HELLO_REGION_BYTES;
        if !(HELLO_FIXED_BYTES..=max).contains(&len) || len % WORD != 0 {
            return Err(HelloError::Malformed);
        }
        Ok(len)
    }

    /// Decodes a whole hello (as long as [`Hello::total_len`] said).
    ///
    /// # Errors
    /// Wrong magic or inconsistent lengths.
    pub fn decode(bytes: &[u8]) -> Result<Hello, HelloError> {
        let w = |i| word(bytes, i).ok_or(HelloError::Malformed);
        if w(0)? != HELLO_MAGIC {
            return Err(HelloError::BadMagic);
        }
        let w1 = w(1)?;
        let (w3, w4) = (w(3)?, w(4)?);
        let count = (w4 >> 32) as usize;
        if count > HELLO_MAX_REGIONS
            || (w1 >> 32) as usize != bytes.len()
            || bytes.len() != HELLO_FIXED_BYTES + count * HELLO_REGION_BYTES
        {
            return Err(HelloError::Malformed);
        }
        let mut nonce = [0u8; NONCE_BYTES];
        nonce.copy_from_slice(&bytes[6 * WORD..HELLO_FIXED_BYTES]);
        let first = HELLO_FIXED_BYTES / WORD;
        let regions = (0..count)
            .map(|i| Ok((w(first + 2 * i)? as u16, w(first + 2 * i + 1)?)))
            .collect::<Result<Vec<_>, HelloError>>()?;
        Ok(Hello {
            format_version: w1 as u32,
            cluster_id: w(2)?,
            from: w3 as u32,
            to: (w3 >> 32) as u32,
            nodes: w4 as u32,
            frame_limit: w(5)?,
            nonce,
            regions,
        })
    }
}

/// A frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// [`REQUEST_MAGIC`] or [`RESPONSE_MAGIC`].
    pub magic: u32,
    /// Verbs in the frame.
    pub verbs: u32,
    /// Bytes after the header.
    pub payload: u64,
}

impl FrameHeader {
    /// Encodes the header.
    #[must_use]
    pub fn encode(&self) -> [u8; FRAME_HEADER_BYTES] {
        let mut out = [0u8; FRAME_HEADER_BYTES];
        out[..WORD]
            .copy_from_slice(&(u64::from(self.magic) | u64::from(self.verbs) << 32).to_le_bytes());
        out[WORD..].copy_from_slice(&self.payload.to_le_bytes());
        out
    }

    /// Decodes a header.
    #[must_use]
    pub fn decode(bytes: &[u8; FRAME_HEADER_BYTES]) -> FrameHeader {
        let w0 = word(bytes, 0).unwrap_or_default();
        FrameHeader {
            magic: w0 as u32,
            verbs: (w0 >> 32) as u32,
            payload: word(bytes, 1).unwrap_or_default(),
        }
    }
}

/// A request verb's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerbHeader {
    /// [`OP_READ`], [`OP_WRITE`] or [`OP_CAS`].
    pub op: u16,
    /// Region id.
    pub region: u16,
    /// Offset in the region.
    pub offset: u64,
    /// Bytes moved (8 for CAS).
    pub len: u64,
}

impl VerbHeader {
    /// Appends the encoded header to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        put_word(out, u64::from(self.op) | u64::from(self.region) << 16);
        put_word(out, self.offset);
        put_word(out, self.len);
    }

    /// Decodes a header from the first [`VERB_HEADER_BYTES`] of `bytes`.
    #[must_use]
    pub fn decode(bytes: &[u8]) -> Option<VerbHeader> {
        let w0 = word(bytes, 0)?;
        Some(VerbHeader {
            op: w0 as u16,
            region: (w0 >> 16) as u16,
            offset: word(bytes, 1)?,
            len: word(bytes, 2)?,
        })
    }

    /// Bytes this verb adds to a request frame (header and operands).
    #[must_use]
    pub fn request_bytes(&self) -> u64 {
        VERB_HEADER_BYTES as u64
            + match self.op {
                OP_WRITE => self.len,
                OP_CAS => (CAS_OPERANDS * WORD) as u64,
                _ => 0,
            }
    }

    /// Bytes this verb adds to a response frame when it succeeds.
    #[must_use]
    pub fn response_bytes(&self) -> u64 {
        STATUS_BYTES as u64
            + match self.op {
                OP_READ => self.len,
                OP_CAS => WORD as u64,
                _ => 0,
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Hello {
        Hello {
            format_version: 3,
            cluster_id: 0x1234_5678_9abc,
            from: 2,
            to: 7,
            nodes: 9,
            frame_limit: 1 << 20,
            nonce: [0xa5; NONCE_BYTES],
            regions: vec![(0, 4096), (1, 1 << 33), (65, 8)],
        }
    }

    #[test]
    fn hello_round_trips() {
        let h = hello();
        let bytes = h.encode();
        assert_eq!(bytes.len(), h.encoded_len());
        let prefix: [u8; 16] = bytes[..16].try_into().unwrap();
        assert_eq!(Hello::total_len(&prefix, 3), Ok(bytes.len()));
        assert_eq!(Hello::decode(&bytes), Ok(h));
    }

    #[test]
    fn bad_hellos_are_named() {
        let bytes = hello().encode();
        let prefix: [u8; 16] = bytes[..16].try_into().unwrap();
        assert_eq!(Hello::total_len(&prefix, 4), Err(HelloError::Version(3)));
        let mut bad = prefix;
        bad[0] ^= 1;
        assert_eq!(Hello::total_len(&bad, 3), Err(HelloError::BadMagic));
        assert_eq!(
            Hello::decode(&bytes[..bytes.len() - 8]),
            Err(HelloError::Malformed)
        );
        assert_eq!(Hello::decode(&bytes[..5]), Err(HelloError::Malformed));
    }

    #[test]
    fn frame_and_verb_headers_round_trip() {
        let f = FrameHeader {
            magic: REQUEST_MAGIC,
            verbs: 17,
            payload: 1 << 40,
        };
        assert_eq!(FrameHeader::decode(&f.encode()), f);
        let v = VerbHeader {
            op: OP_CAS,
            region: 65,
            offset: 4096,
            len: 8,
        };
        let mut out = Vec::new();
        v.encode_into(&mut out);
        assert_eq!(out.len(), VERB_HEADER_BYTES);
        assert_eq!(VerbHeader::decode(&out), Some(v));
        assert_eq!(VerbHeader::decode(&out[..20]), None);
        assert_eq!(v.request_bytes(), 48);
        assert_eq!(v.response_bytes(), 16);
    }
}
