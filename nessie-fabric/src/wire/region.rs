//! The header at the start of every region file of the `shm` backend.

use super::{read_word, WORD};
use crate::RegionId;

/// Bytes reserved for the header at the start of a region file; the region's
/// memory starts right after it (page aligned).
pub const REGION_HEADER_BYTES: usize = 4096;
/// Magic bytes at the start of every region file.
pub const REGION_MAGIC: u64 = u64::from_le_bytes(*b"NESSIERG");
/// Bytes of the header that carry fields.
pub const REGION_HEADER_USED: usize = 6 * WORD;
/// Offset in the header of the word that marks the node's host lost (on
/// `shm`, where the loss of a host is emulated): 0 while the node serves.
/// Written after the header, by whoever declares the loss and by the
/// replacement.
pub const REGION_LOST_OFFSET: usize = REGION_HEADER_USED;
const _: () = assert!(REGION_LOST_OFFSET + WORD <= REGION_HEADER_BYTES);

/// The header of a region file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionHeader {
    /// [`REGION_MAGIC`].
    pub magic: u64,
    /// Format version of the layouts of the build that created the file
    /// ([`crate::Membership::format_version`]).
    pub format_version: u32,
    /// Which region this is.
    pub region: RegionId,
    /// Node that owns the region.
    pub node: u16,
    /// Cluster the region belongs to.
    pub cluster_id: u64,
    /// Bytes of region memory after the header.
    pub len: u64,
    /// Process that created the file.
    pub creator_pid: u32,
}

impl RegionHeader {
    /// Encodes the header, little-endian.
    #[must_use]
    pub fn encode(&self) -> [u8; REGION_HEADER_USED] {
        let mut out = [0u8; REGION_HEADER_USED];
        let words = [
            self.magic,
            u64::from(self.format_version)
                | u64::from(self.region.0) << 32
                | u64::from(self.node) << 48,
            self.cluster_id,
            self.len,
            u64::from(self.creator_pid),
            0,
        ];
        for (chunk, w) in out.chunks_exact_mut(WORD).zip(words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Decodes a header from the first [`REGION_HEADER_USED`] bytes.
    ///
    /// # Panics
    /// If `bytes` is shorter than [`REGION_HEADER_USED`].
    #[must_use]
    pub fn decode(bytes: &[u8]) -> RegionHeader {
        let w1 = read_word(bytes, WORD);
        RegionHeader {
            magic: read_word(bytes, 0),
            format_version: w1 as u32,
            region: RegionId((w1 >> 32) as u16),
            node: (w1 >> 48) as u16,
            cluster_id: read_word(bytes, 2 * WORD),
            len: read_word(bytes, 3 * WORD),
            creator_pid: read_word(bytes, 4 * WORD) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let h = RegionHeader {
            magic: REGION_MAGIC,
            format_version: 7,
            region: RegionId(4),
            node: 513,
            cluster_id: 0xdead_beef_0123,
            len: 1 << 33,
            creator_pid: 4242,
        };
        assert_eq!(RegionHeader::decode(&h.encode()), h);
    }
}
