//! Data table entry (DTE): a fixed-size slot holding a header, the key and
//! the value.
//!
//! ```text
//! word 0  state       CAS only: status, flags, generation, key and value lengths
//! word 1  created_at  µs when the owning operation began
//! word 2  expires_at  0 while live; set once (WRITE) by whoever unlinked it
//! word 3  prev        the key's last committed version (an ITE value)
//! word 4  replaced    the exact ITE value the owner's CAS replaced
//! word 5  source      MIGRATE copies: the source index slot
//! word 6  checksum    xxh3 over every immutable field, the key and the value
//! then    key, padded to a word; value, padded to a word
//! ```
//!
//! A DTE is written in full before any ITE points at it and never changes
//! afterwards except `state` (by CAS) and `expires_at` (one WRITE).

use super::{read_word, round_up_words, WORD};
use twox_hash::XxHash3_64;

/// Bytes of the DTE header.
pub const DTE_HEADER_BYTES: usize = 7 * WORD;
/// Offset of the state word.
pub const STATE_OFFSET: usize = 0;
/// Offset of `created_at`.
pub const CREATED_AT_OFFSET: usize = WORD;
/// Offset of `expires_at`.
pub const EXPIRES_AT_OFFSET: usize = 2 * WORD;
/// Offset of the key.
pub const KEY_OFFSET: usize = DTE_HEADER_BYTES;

/// Bits of the key length field of the state word.
pub const KEY_LEN_BITS: u32 = 16;
/// Bits of the value length field of the state word.
pub const VALUE_LEN_BITS: u32 = 32;
/// Bits of the generation field of the state word (same as the ITE's).
pub const STATE_GENERATION_BITS: u32 = super::ite::GENERATION_BITS;

const STATUS_MASK: u64 = 0b11;
const TOMBSTONE: u64 = 1 << 2;
const MIGRATED: u64 = 1 << 3;
const GEN_SHIFT: u32 = 4;
const KEY_LEN_SHIFT: u32 = 16;
const VALUE_LEN_SHIFT: u32 = 32;
const _: () = assert!(GEN_SHIFT + STATE_GENERATION_BITS <= KEY_LEN_SHIFT);
const _: () = assert!(KEY_LEN_SHIFT + KEY_LEN_BITS == VALUE_LEN_SHIFT);
const _: () = assert!(VALUE_LEN_SHIFT + VALUE_LEN_BITS == 64);

/// The largest key a DTE can describe.
pub const MAX_KEY_LEN: usize = (1 << KEY_LEN_BITS) - 1;
/// The largest value a DTE can describe.
pub const MAX_VALUE_LEN: u64 = (1 << VALUE_LEN_BITS) - 1;

/// Where a DTE stands in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DteStatus {
    /// Written, not yet committed (0, so a zeroed slot reads as INVALID).
    Invalid,
    /// Committed by its owner or a helper.
    Valid,
    /// Rolled back by its owner or a helper.
    Aborted,
}

/// The state word of a DTE, the only word of a DTE that is ever CAS'd.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct DteState(pub u64);

impl DteState {
    /// What a restoring mirror's state word holds until its slot is
    /// copied: generation 0 (no entry has it) with both status bits set
    /// (docs/replication.md#restore).
    pub const UNSET: DteState = DteState(STATUS_MASK);

    /// A new INVALID state word.
    #[must_use]
    pub fn new(
        generation: u16,
        key_len: usize,
        value_len: usize,
        tombstone: bool,
        migrated: bool,
    ) -> DteState {
        debug_assert!(key_len <= MAX_KEY_LEN);
        debug_assert!(value_len as u64 <= MAX_VALUE_LEN);
        let mut v = (u64::from(generation) & ((1 << STATE_GENERATION_BITS) - 1)) << GEN_SHIFT
            | (key_len as u64) << KEY_LEN_SHIFT
            | (value_len as u64) << VALUE_LEN_SHIFT;
        if tombstone {
            v |= TOMBSTONE;
        }
        if migrated {
            v |= MIGRATED;
        }
        DteState(v)
    }

    /// The status bits.
    #[must_use]
    pub fn status(self) -> DteStatus {
        match self.0 & STATUS_MASK {
            0 => DteStatus::Invalid,
            1 => DteStatus::Valid,
            _ => DteStatus::Aborted,
        }
    }

    /// The same word with another status.
    #[must_use]
    pub fn with_status(self, status: DteStatus) -> DteState {
        let bits = match status {
            DteStatus::Invalid => 0,
            DteStatus::Valid => 1,
            DteStatus::Aborted => 2,
        };
        DteState((self.0 & !STATUS_MASK) | bits)
    }

    /// Whether the entry is a DELETE's tombstone.
    #[must_use]
    pub fn is_tombstone(self) -> bool {
        self.0 & TOMBSTONE != 0
    }

    /// Whether the entry is a MIGRATE copy.
    #[must_use]
    pub fn is_migrated(self) -> bool {
        self.0 & MIGRATED != 0
    }

    /// Slot reuse generation this DTE was written under.
    #[must_use]
    pub fn generation(self) -> u16 {
        ((self.0 >> GEN_SHIFT) & ((1 << STATE_GENERATION_BITS) - 1)) as u16
    }

    /// Key length in bytes.
    #[must_use]
    pub fn key_len(self) -> usize {
        ((self.0 >> KEY_LEN_SHIFT) & ((1 << KEY_LEN_BITS) - 1)) as usize
    }

    /// Value length in bytes.
    #[must_use]
    pub fn value_len(self) -> usize {
        (self.0 >> VALUE_LEN_SHIFT) as usize
    }

    /// The bits that never change after the DTE is written (all but status).
    #[must_use]
    pub fn immutable_bits(self) -> u64 {
        self.0 & !STATUS_MASK
    }
}

/// The decoded header of a DTE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DteHeader {
    /// State word.
    pub state: DteState,
    /// µs timestamp of the start of the owning operation.
    pub created_at: u64,
    /// 0 while the DTE is linked; afterwards when it may be reused.
    pub expires_at: u64,
    /// The key's last committed version (ITE value).
    pub prev: u64,
    /// The exact ITE value the owner's CAS replaced.
    pub replaced: u64,
    /// MIGRATE copies: the source index slot, see [`encode_source`].
    pub source: u64,
    /// Checksum, see [`DteHeader::compute_checksum`].
    pub checksum: u64,
}

impl DteHeader {
    /// Encodes the header, little-endian.
    #[must_use]
    pub fn encode(&self) -> [u8; DTE_HEADER_BYTES] {
        let mut out = [0u8; DTE_HEADER_BYTES];
        write_words(
            &mut out,
            &[
                self.state.0,
                self.created_at,
                self.expires_at,
                self.prev,
                self.replaced,
                self.source,
                self.checksum,
            ],
        );
        out
    }

    /// Decodes a header from the first [`DTE_HEADER_BYTES`] of `bytes`.
    ///
    /// # Panics
    /// If `bytes` is shorter than a header (a caller bug, not bad data).
    #[must_use]
    pub fn decode(bytes: &[u8]) -> DteHeader {
        let w = |i: usize| read_word(bytes, i * WORD);
        DteHeader {
            state: DteState(w(0)),
            created_at: w(1),
            expires_at: w(2),
            prev: w(3),
            replaced: w(4),
            source: w(5),
            checksum: w(6),
        }
    }

    /// Bytes a slot needs for this header's key and value.
    #[must_use]
    pub fn entry_bytes(&self) -> usize {
        entry_bytes(self.state.key_len(), self.state.value_len())
    }

    /// The checksum this header's immutable fields, `key` and `value` should
    /// carry: xxh3 of the value, seeded with xxh3 of the key, seeded with
    /// xxh3 of the fields. Chaining one-shot hashes lets the long value be
    /// hashed in one pass from the caller's buffer; a streaming hasher
    /// buffers and costs a sixth more on a 16 KiB value.
    #[must_use]
    pub fn compute_checksum(&self, key: &[u8], value: &[u8]) -> u64 {
        let mut fields = [0u8; 5 * WORD];
        write_words(
            &mut fields,
            &[
                self.state.immutable_bits(),
                self.created_at,
                self.prev,
                self.replaced,
                self.source,
            ],
        );
        let seed = XxHash3_64::oneshot_with_seed(XxHash3_64::oneshot(&fields), key);
        XxHash3_64::oneshot_with_seed(seed, value)
    }
}

/// Writes `words` little-endian into the first `8 × words.len()` bytes of
/// `out` (the inverse of [`read_word`]).
///
/// # Panics
/// If `out` is shorter than that.
pub fn write_words(out: &mut [u8], words: &[u64]) {
    for (chunk, w) in out[..words.len() * WORD].chunks_exact_mut(WORD).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
}

/// Offset of the value within a DTE whose key is `key_len` bytes.
#[must_use]
pub fn value_offset(key_len: usize) -> usize {
    KEY_OFFSET + round_up_words(key_len)
}

/// Bytes of a DTE (header, padded key, padded value).
#[must_use]
pub fn entry_bytes(key_len: usize, value_len: usize) -> usize {
    value_offset(key_len) + round_up_words(value_len)
}

/// Packs a MIGRATE copy's source index slot into the `source` word.
#[must_use]
pub fn encode_source(node: u16, slot: u64) -> u64 {
    debug_assert!(slot < 1 << 48);
    u64::from(node) << 48 | slot
}

/// Unpacks the `source` word into (node, index slot).
#[must_use]
pub fn decode_source(source: u64) -> (u16, u64) {
    ((source >> 48) as u16, source & ((1 << 48) - 1))
}

/// A complete DTE image (header with checksum, key, value) as runs of whole
/// words, so that a WRITE can gather the key and value from the caller's
/// buffers instead of copying them into an image first.
#[derive(Debug)]
pub struct EntryImage<'a> {
    /// The header as written (with its checksum).
    pub header: DteHeader,
    encoded: [u8; DTE_HEADER_BYTES],
    key: WordRuns<'a>,
    value: WordRuns<'a>,
}

/// Bytes as their whole words, borrowed, and the last partial word,
/// zero-padded.
#[derive(Debug)]
struct WordRuns<'a> {
    whole: &'a [u8],
    tail: [u8; WORD],
    tail_len: usize,
}

impl<'a> WordRuns<'a> {
    fn new(bytes: &'a [u8]) -> WordRuns<'a> {
        let whole = bytes.len() / WORD * WORD;
        let mut tail = [0u8; WORD];
        tail[..bytes.len() - whole].copy_from_slice(&bytes[whole..]);
        WordRuns {
            whole: &bytes[..whole],
            tail,
            tail_len: if whole == bytes.len() { 0 } else { WORD },
        }
    }

    fn tail(&self) -> &[u8] {
        &self.tail[..self.tail_len]
    }
}

impl<'a> EntryImage<'a> {
    /// Runs of [`EntryImage::parts`] that hold the header and the key:
    /// the writer touches those again at once (see
    /// [`crate::fabric::Fabric::write_streaming`]).
    pub const HEAD_PARTS: usize = 3;

    /// The image of `header` (its checksum filled in), `key` and `value`.
    #[must_use]
    pub fn new(mut header: DteHeader, key: &'a [u8], value: &'a [u8]) -> EntryImage<'a> {
        header.checksum = header.compute_checksum(key, value);
        EntryImage {
            header,
            encoded: header.encode(),
            key: WordRuns::new(key),
            value: WordRuns::new(value),
        }
    }

    /// The image's runs in order (header, key, value); together
    /// [`entry_bytes`] bytes.
    #[must_use]
    pub fn parts(&self) -> [&[u8]; 5] {
        [
            &self.encoded,
            self.key.whole,
            self.key.tail(),
            self.value.whole,
            self.value.tail(),
        ]
    }
}

/// Writes a complete DTE image (header with checksum, key, value) into `out`,
/// which must hold [`entry_bytes`] bytes. Returns the header as written.
///
/// # Panics
/// If `out` is too short (a caller bug).
pub fn encode_entry(header: DteHeader, key: &[u8], value: &[u8], out: &mut [u8]) -> DteHeader {
    let image = EntryImage::new(header, key, value);
    let mut at = 0;
    for part in image.parts() {
        out[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    image.header
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn zero_state_is_invalid() {
        assert_eq!(DteState(0).status(), DteStatus::Invalid);
    }

    /// The checksum is XXH3-64: the run-time dispatched implementation the
    /// store uses agrees with an independent one on every length class
    /// XXH3 treats differently (≤16, ≤128, ≤240 bytes, then striped
    /// blocks with a partial last stripe), so nodes agree whatever their
    /// CPU features.
    #[test]
    fn checksum_hash_is_xxh3() {
        let data: Vec<u8> = (0..20_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in (0..=300).chain([1_023, 1_024, 1_025, 16_384, 20_000]) {
            for seed in [0, 1, 0x9e37_79b9_7f4a_7c15] {
                let bytes = &data[..len];
                assert_eq!(
                    XxHash3_64::oneshot_with_seed(seed, bytes),
                    xxhash_rust::xxh3::xxh3_64_with_seed(bytes, seed),
                    "length {len}, seed {seed:#x}"
                );
            }
        }
    }

    proptest! {
        #[test]
        fn state_round_trips(g in 1u16..2048, k in 0usize..=MAX_KEY_LEN, v in 0usize..1 << 30,
                             t in any::<bool>(), m in any::<bool>()) {
            let s = DteState::new(g, k, v, t, m);
            prop_assert_eq!(s.status(), DteStatus::Invalid);
            prop_assert_eq!((s.generation(), s.key_len(), s.value_len()), (g, k, v));
            prop_assert_eq!((s.is_tombstone(), s.is_migrated()), (t, m));
            for st in [DteStatus::Valid, DteStatus::Aborted, DteStatus::Invalid] {
                let s2 = s.with_status(st);
                prop_assert_eq!(s2.status(), st);
                prop_assert_eq!(s2.immutable_bits(), s.immutable_bits());
            }
        }

        #[test]
        fn header_round_trips(words in proptest::array::uniform7(any::<u64>())) {
            let h = DteHeader {
                state: DteState(words[0]), created_at: words[1], expires_at: words[2],
                prev: words[3], replaced: words[4], source: words[5], checksum: words[6],
            };
            prop_assert_eq!(DteHeader::decode(&h.encode()), h);
        }

        #[test]
        fn entry_checksum_detects_changes(key in proptest::collection::vec(any::<u8>(), 1..64),
                                          value in proptest::collection::vec(any::<u8>(), 0..300),
                                          flip in any::<prop::sample::Index>()) {
            let state = DteState::new(3, key.len(), value.len(), false, false);
            let header = DteHeader { state, created_at: 7, prev: 9, ..DteHeader::default() };
            let image = EntryImage::new(header, &key, &value);
            prop_assert_eq!(image.parts().concat().len(), entry_bytes(key.len(), value.len()));
            let mut buf = vec![0xffu8; entry_bytes(key.len(), value.len())];
            let written = encode_entry(header, &key, &value, &mut buf);
            prop_assert_eq!(&image.parts().concat(), &buf);
            // The padding after the key and after the value is zero.
            prop_assert!(buf[KEY_OFFSET + key.len()..value_offset(key.len())].iter().all(|&b| b == 0));
            prop_assert!(buf[value_offset(key.len()) + value.len()..].iter().all(|&b| b == 0));
            let decoded = DteHeader::decode(&buf);
            prop_assert_eq!(decoded, written);
            let vo = value_offset(key.len());
            prop_assert_eq!(&buf[KEY_OFFSET..KEY_OFFSET + key.len()], &key[..]);
            prop_assert_eq!(&buf[vo..vo + value.len()], &value[..]);
            prop_assert_eq!(decoded.compute_checksum(&key, &value), decoded.checksum);
            // Any flipped byte of key or value is caught.
            let mut torn = value.clone();
            torn.push(0);
            let i = flip.index(torn.len());
            torn[i] ^= 0x5a;
            torn.pop();
            if i < value.len() {
                prop_assert_ne!(decoded.compute_checksum(&key, &torn), decoded.checksum);
            }
        }
    }

    #[test]
    fn source_round_trips() {
        assert_eq!(
            decode_source(encode_source(513, (1 << 40) + 5)),
            (513, (1 << 40) + 5)
        );
    }
}
