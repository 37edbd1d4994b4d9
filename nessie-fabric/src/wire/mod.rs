//! Every byte layout the fabric itself puts in files or on the wire: the
//! header of an `shm` region file ([`region`]), the `tcp` backend's
//! handshake and verb frames ([`frame`]) and the rendezvous through which
//! nodes find each other ([`rendezvous`]). The `verbs` backend's hello is
//! private to its handshake.
//!
//! All multi-byte fields are little-endian and every layout is a whole
//! number of [`WORD`]s.

pub mod frame;
pub mod region;
pub mod rendezvous;

pub use region::{RegionHeader, REGION_HEADER_BYTES};

/// Version of the layouts of this module: bump on any change of bits. A
/// store folds it into the format version of its [`crate::Membership`].
pub const VERSION: u32 = 1;

/// Size of the machine word that verbs move and CAS operates on.
pub const WORD: usize = 8;

/// Rounds `n` up to a whole number of words.
#[must_use]
pub const fn round_up_words(n: usize) -> usize {
    n.div_ceil(WORD) * WORD
}

/// Reads the little-endian word at `offset` of `bytes`.
///
/// # Panics
/// If `bytes` holds fewer than `offset + 8` bytes.
#[must_use]
pub fn read_word(bytes: &[u8], offset: usize) -> u64 {
    let mut b = [0u8; WORD];
    b.copy_from_slice(&bytes[offset..offset + WORD]);
    u64::from_le_bytes(b)
}
