//! The MEMBERSHIP region of a replicated store's node: the disk of the
//! membership agreement (docs/replication.md#views-leases-and-the-drain).
//!
//! ```text
//! word 0                 incarnation of this node's memory (M3)
//! words 1 ..             the decided view this disk knows of (M4): a record
//! BLOCKS ..              one block per proposer and epoch parity (M1),
//!                        parity-major, so that one READ fetches every
//!                        block of an instance
//! ```
//!
//! A view record is `epoch`, one word per node (`state << 62 |
//! incarnation`) and a checksum; a block is `instance`, `mbal`, `bal`, a
//! view record (the block's `inp`) and a checksum. Every record is written
//! by one node only, with one WRITE; a reader that meets a bad checksum saw
//! a torn record and reads again.

use super::WORD;
use crate::fabric::RegionId;
use twox_hash::XxHash3_64;

/// The region's id.
pub const MEMBERSHIP: RegionId = RegionId(super::region::FIRST_EXTERNAL - 2);

// The store's own id, apart from its others: below the ids of other
// stores, above every data table's, not META's.
const _: () = assert!(MEMBERSHIP.0 < super::region::FIRST_EXTERNAL);
const _: () = assert!(MEMBERSHIP.0 != super::region::META.0);
const _: () = assert!(super::region::data((super::ite::MAX_CLASSES - 1) as u8).0 < MEMBERSHIP.0);

/// Most nodes of a replicated cluster: every disk holds two blocks per
/// node, each the size of a view.
pub const MAX_MEMBERS: usize = 64;

/// Offset of the incarnation word.
pub const INCARNATION_OFFSET: u64 = 0;
/// Offset of the decision record.
pub const DECISION_OFFSET: u64 = WORD as u64;

/// A node's state in a view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberState {
    /// Serving.
    Active,
    /// Gone: its shares are served by their next replicas.
    Lost,
    /// Joining: a mirror of what it holds, primary of nothing.
    Restoring,
}

impl MemberState {
    fn bits(self) -> u64 {
        match self {
            MemberState::Active => 0,
            MemberState::Lost => 1,
            MemberState::Restoring => 2,
        }
    }

    fn from_bits(b: u64) -> Option<MemberState> {
        match b {
            0 => Some(MemberState::Active),
            1 => Some(MemberState::Lost),
            2 => Some(MemberState::Restoring),
            _ => None,
        }
    }
}

/// A view as stored: its epoch and each node's state and incarnation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewRecord {
    /// The view's number.
    pub epoch: u64,
    /// Per node: state and incarnation.
    pub members: Vec<(MemberState, u64)>,
}

const INCARNATION_MASK: u64 = (1 << 62) - 1;

/// Words of a view record of `nodes` nodes.
#[must_use]
pub const fn view_words(nodes: usize) -> usize {
    1 + nodes + 1
}

/// Words of a block of `nodes` nodes.
#[must_use]
pub const fn block_words(nodes: usize) -> usize {
    3 + view_words(nodes) + 1
}

/// Offset of the first block.
#[must_use]
pub const fn blocks_offset(nodes: usize) -> u64 {
    DECISION_OFFSET + (view_words(nodes) * WORD) as u64
}

/// Offset of the blocks of epoch parity `parity`: one per proposer.
#[must_use]
pub const fn parity_offset(nodes: usize, parity: u64) -> u64 {
    blocks_offset(nodes) + parity * (nodes * block_words(nodes) * WORD) as u64
}

/// Offset of proposer `p`'s block for instance `instance`.
#[must_use]
pub const fn block_offset(nodes: usize, instance: u64, p: usize) -> u64 {
    parity_offset(nodes, instance % 2) + (p * block_words(nodes) * WORD) as u64
}

/// Bytes of the region.
#[must_use]
pub const fn region_bytes(nodes: usize) -> u64 {
    parity_offset(nodes, 2)
}

fn checksum(words: &[u64]) -> u64 {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    // Never 0, so that zeroed memory is no valid record.
    XxHash3_64::oneshot(&bytes) | 1
}

impl ViewRecord {
    /// The first view of `nodes` nodes: all active, incarnation 0.
    #[must_use]
    pub fn first(nodes: usize) -> ViewRecord {
        ViewRecord {
            epoch: 0,
            members: vec![(MemberState::Active, 0); nodes],
        }
    }

    fn words(&self) -> Vec<u64> {
        let mut w = Vec::with_capacity(view_words(self.members.len()));
        w.push(self.epoch);
        w.extend(
            self.members
                .iter()
                .map(|&(s, inc)| s.bits() << 62 | (inc & INCARNATION_MASK)),
        );
        w.push(checksum(&w));
        w
    }

    fn parse(words: &[u64], nodes: usize) -> Option<ViewRecord> {
        let n = view_words(nodes);
        let w = words.get(..n)?;
        if checksum(&w[..n - 1]) != w[n - 1] {
            return None;
        }
        let members = w[1..=nodes]
            .iter()
            .map(|&m| Some((MemberState::from_bits(m >> 62)?, m & INCARNATION_MASK)))
            .collect::<Option<Vec<_>>>()?;
        Some(ViewRecord {
            epoch: w[0],
            members,
        })
    }

    /// The record's bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        to_bytes(&self.words())
    }

    /// The record in `bytes`, if whole (`None`: never written, or torn).
    #[must_use]
    pub fn decode(bytes: &[u8], nodes: usize) -> Option<ViewRecord> {
        ViewRecord::parse(&to_words(bytes), nodes)
    }

    /// The nodes whose memory counts as a disk: every member not lost.
    pub fn disks(&self) -> impl Iterator<Item = usize> + '_ {
        self.members
            .iter()
            .enumerate()
            .filter(|(_, (s, _))| *s != MemberState::Lost)
            .map(|(n, _)| n)
    }
}

/// A block whose checksum fails: a READ that raced its WRITE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TornBlock;

/// One proposer's block of one instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// The instance: it decides view `instance + 1`.
    pub instance: u64,
    /// The highest ballot the proposer began.
    pub mbal: u64,
    /// The ballot of the value it last accepted (0: none).
    pub bal: u64,
    /// The value it last accepted, or its proposal.
    pub inp: ViewRecord,
}

impl Block {
    /// The block's bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut w = vec![self.instance, self.mbal, self.bal];
        w.extend(self.inp.words());
        w.push(checksum(&w));
        to_bytes(&w)
    }

    /// The block in `bytes`: `Ok(None)` for memory never written (all
    /// zero).
    ///
    /// # Errors
    /// [`TornBlock`] when the checksum fails on a block that is not all
    /// zero.
    pub fn decode(bytes: &[u8], nodes: usize) -> Result<Option<Block>, TornBlock> {
        let w = to_words(bytes);
        let n = block_words(nodes);
        let Some(w) = w.get(..n) else {
            return Err(TornBlock);
        };
        if w.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        if checksum(&w[..n - 1]) != w[n - 1] {
            return Err(TornBlock);
        }
        let inp = ViewRecord::parse(&w[3..n - 1], nodes).ok_or(TornBlock)?;
        Ok(Some(Block {
            instance: w[0],
            mbal: w[1],
            bal: w[2],
            inp,
        }))
    }
}

fn to_bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn to_words(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(WORD)
        .map(|c| {
            let mut w = [0u8; WORD];
            w.copy_from_slice(c);
            u64::from_le_bytes(w)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> ViewRecord {
        ViewRecord {
            epoch: 7,
            members: vec![
                (MemberState::Active, 0),
                (MemberState::Lost, 3),
                (MemberState::Restoring, 4),
            ],
        }
    }

    #[test]
    fn records_and_blocks_round_trip_and_torn_ones_are_refused() {
        let v = view();
        assert_eq!(ViewRecord::decode(&v.encode(), 3), Some(v.clone()));
        let b = Block {
            instance: 7,
            mbal: 65,
            bal: 65,
            inp: v,
        };
        let mut bytes = b.encode();
        assert_eq!(bytes.len(), block_words(3) * WORD);
        assert_eq!(Block::decode(&bytes, 3), Ok(Some(b)));
        bytes[20] ^= 1;
        assert_eq!(Block::decode(&bytes, 3), Err(TornBlock));
        assert_eq!(Block::decode(&vec![0; bytes.len()], 3), Ok(None));
        assert_eq!(ViewRecord::decode(&vec![0; view_words(3) * WORD], 3), None);
    }

    #[test]
    fn the_blocks_of_an_instance_are_contiguous_and_the_parities_apart() {
        let n = 5;
        assert_eq!(block_offset(n, 4, 0), parity_offset(n, 0));
        assert_eq!(block_offset(n, 5, 0), parity_offset(n, 1));
        assert_eq!(
            block_offset(n, 2, 4) + (block_words(n) * WORD) as u64,
            parity_offset(n, 1)
        );
        assert_eq!(
            region_bytes(n),
            parity_offset(n, 1) + (parity_offset(n, 1) - parity_offset(n, 0))
        );
        let first = ViewRecord::first(3);
        assert_eq!(first.disks().count(), 3);
        assert_eq!(view().disks().collect::<Vec<_>>(), vec![0, 2]);
    }

    /// Every record written at its offset into a region of
    /// `region_bytes` reads back intact: none overlaps another, and
    /// nothing is left between them (the layout of the module's
    /// documentation).
    #[test]
    fn every_record_has_its_own_words_and_the_region_no_others() {
        for nodes in [3, 5, MAX_MEMBERS] {
            let mut region = vec![0u8; region_bytes(nodes) as usize];
            let put = |region: &mut Vec<u8>, at: u64, bytes: &[u8]| {
                region[at as usize..at as usize + bytes.len()].copy_from_slice(bytes);
            };
            let decided = ViewRecord {
                epoch: 9,
                members: vec![(MemberState::Active, 2); nodes],
            };
            put(&mut region, INCARNATION_OFFSET, &5u64.to_le_bytes());
            put(&mut region, DECISION_OFFSET, &decided.encode());
            let block = |instance: u64, p: usize| Block {
                instance,
                mbal: p as u64 + 1,
                bal: p as u64,
                inp: decided.clone(),
            };
            for instance in [0, 1] {
                for p in 0..nodes {
                    put(
                        &mut region,
                        block_offset(nodes, instance, p),
                        &block(instance, p).encode(),
                    );
                }
            }
            let at = |at: u64, words: usize| &region[at as usize..at as usize + words * WORD];
            assert_eq!(at(INCARNATION_OFFSET, 1), 5u64.to_le_bytes());
            let view_len = view_words(nodes);
            assert_eq!(
                ViewRecord::decode(at(DECISION_OFFSET, view_len), nodes),
                Some(decided.clone())
            );
            for instance in [0, 1] {
                for p in 0..nodes {
                    let bytes = at(block_offset(nodes, instance, p), block_words(nodes));
                    assert_eq!(Block::decode(bytes, nodes), Ok(Some(block(instance, p))));
                }
            }
            let used = WORD * (1 + view_len + 2 * nodes * block_words(nodes));
            assert_eq!(region_bytes(nodes) as usize, used, "{nodes} nodes");
        }
    }
}
