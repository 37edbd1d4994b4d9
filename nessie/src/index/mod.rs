//! The distributed cuckoo index: where a key may live.
//!
//! `H` hash functions (xxh3 with per-function seeds) map a key to `H` index
//! slots, placed as [`Placement`] says (docs/design.md#candidates); repeats
//! are dropped, keeping the first. Filter bits come from a hash with an
//! independent seed. The ITE layout itself lives in [`crate::layout::ite`].

use crate::fabric::{NodeId, RemoteAddr};
use crate::layout::region;
use crate::layout::WORD;
use crate::Config;
use serde::{Deserialize, Serialize};
use twox_hash::XxHash3_64;

pub use crate::layout::ite::{Ite, IteKind, SlotRef};

const FILTER_SEED: u64 = 0x243f_6a88_85a3_08d3;
/// The most hash functions, so the most candidates a key has.
pub const MAX_HASHES: usize = HASH_SEEDS.len();

/// How many candidates a [`PerCandidate`] list holds without the heap:
/// the default `hashes` and one more. Larger lists spill; a capacity of
/// [`MAX_HASHES`] would make every list a large stack copy.
const INLINE_CANDIDATES: usize = 4;

/// A list with at most one element per candidate of a key, kept inline:
/// operations build several per pass, and the heap would cost more than
/// the verbs on a local fabric.
pub(crate) type PerCandidate<T> = smallvec::SmallVec<[T; INLINE_CANDIDATES]>;

const HASH_SEEDS: [u64; 16] = [
    0x9e37_79b9_7f4a_7c15,
    0xbf58_476d_1ce4_e5b9,
    0x94d0_49bb_1331_11eb,
    0xd6e8_feb8_6659_fd93,
    0xa076_1d64_78bd_642f,
    0xe703_7ed1_a0b4_28db,
    0x8ebc_6af0_9c88_c6e3,
    0x5899_65cc_7537_4cc3,
    0x1d8e_4e27_c47d_124f,
    0x72be_5d74_f27b_0f1d,
    0x2127_599b_f432_5c37,
    0x880d_bbab_b7bf_9a6b,
    0x4cf5_ad43_2745_937f,
    0xb492_b66f_be98_f273,
    0x9ae1_6a3b_2f90_404f,
    0xcbf2_9ce4_8422_2325,
];

/// One candidate index slot of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Candidate {
    /// Node whose index table holds the slot.
    pub node: NodeId,
    /// Slot within that node's index table.
    pub slot: u64,
}

impl Candidate {
    /// Address of the ITE.
    #[must_use]
    pub fn addr(self) -> RemoteAddr {
        RemoteAddr::new(self.node, region::INDEX, self.slot * WORD as u64)
    }
}

/// Where a key's candidate index slots lie (docs/design.md#candidates).
/// Every node of a cluster must use the same placement; it is part of
/// [`Config::cluster_id`], so nodes that differ refuse each other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// Each hash picks a slot among all nodes' index tables (global slot =
    /// h mod (nodes × slots per node)): the paper's layout. A key's
    /// candidates are usually on several nodes.
    #[default]
    Spread,
    /// The first hash picks one node and every hash a slot in that node's
    /// index table, so a pass over the candidates reads from one node: a
    /// round trip less wherever the candidates would have been split
    /// between this node and others.
    OneNode,
}

/// Maps keys to candidate slots and filter bits for one cluster shape.
#[derive(Clone, Debug)]
pub struct KeyHasher {
    hashes: usize,
    placement: Placement,
    nodes: u64,
    slots_per_node: u64,
    filter_mask: u8,
}

impl KeyHasher {
    /// The hasher of a (validated) configuration.
    #[must_use]
    pub fn new(config: &Config) -> KeyHasher {
        KeyHasher {
            hashes: config.hashes.min(HASH_SEEDS.len()),
            placement: config.placement,
            nodes: config.nodes as u64,
            slots_per_node: config.index_slots_per_node as u64,
            filter_mask: ((1u16 << config.filter_bits) - 1) as u8,
        }
    }

    /// The key's candidate slots, first hash first, repeats dropped.
    #[must_use]
    pub fn candidates(&self, key: &[u8]) -> Vec<Candidate> {
        self.candidate_list(key).into_vec()
    }

    /// [`KeyHasher::candidates`] without a heap allocation (operations
    /// compute them once per call).
    pub(crate) fn candidate_list(&self, key: &[u8]) -> PerCandidate<Candidate> {
        let mut out = PerCandidate::new();
        let mut add = |c: Candidate| {
            if !out.contains(&c) {
                out.push(c);
            }
        };
        match self.placement {
            Placement::Spread => {
                let total = self.nodes * self.slots_per_node;
                for i in 0..self.hashes {
                    let global = self.hash(key, i) % total;
                    add(Candidate {
                        node: (global / self.slots_per_node) as NodeId,
                        slot: global % self.slots_per_node,
                    });
                }
            }
            Placement::OneNode => {
                let first = self.hash(key, 0);
                // The node from the hash's high bits (a multiply-shift), the
                // slot from its remainder: with powers of two for both, a
                // remainder for each would tie the slot's low bits to the
                // node, leaving part of every table unused.
                let node = ((u128::from(first) * u128::from(self.nodes)) >> 64) as NodeId;
                add(Candidate {
                    node,
                    slot: first % self.slots_per_node,
                });
                for i in 1..self.hashes {
                    add(Candidate {
                        node,
                        slot: self.hash(key, i) % self.slots_per_node,
                    });
                }
            }
        }
        out
    }

    /// The key's filter bits (only the configured number are set).
    #[must_use]
    pub fn filter(&self, key: &[u8]) -> u8 {
        self.filter_and_hint_key(key).0
    }

    /// The key's filter bits and the 64-bit hash they are cut from, which
    /// keys the client's location hints (one hash for both).
    #[must_use]
    pub(crate) fn filter_and_hint_key(&self, key: &[u8]) -> (u8, u64) {
        let h = XxHash3_64::oneshot_with_seed(FILTER_SEED, key);
        ((h as u8) & self.filter_mask, h)
    }

    /// The key's hash under hash function `i` (the first is 0; at most 16
    /// functions exist): candidates are placed by these hashes (see
    /// [`Placement`]), and partitioned designs place keys by them too.
    ///
    /// # Panics
    /// If `i` is 16 or more.
    #[must_use]
    pub fn hash(&self, key: &[u8], i: usize) -> u64 {
        XxHash3_64::oneshot_with_seed(HASH_SEEDS[i], key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_distinct_and_in_range() {
        let h = KeyHasher::new(&Config {
            nodes: 2,
            index_slots_per_node: 3,
            ..Config::default()
        });
        for i in 0..1000u32 {
            let c = h.candidates(&i.to_le_bytes());
            assert!(!c.is_empty() && c.len() <= 3);
            for (a, x) in c.iter().enumerate() {
                assert!(x.node < 2 && x.slot < 3);
                assert!(!c[a + 1..].contains(x), "duplicate candidate");
            }
            assert_eq!(c, h.candidates(&i.to_le_bytes()), "deterministic");
        }
    }

    #[test]
    fn candidates_spread_over_nodes() {
        let h = KeyHasher::new(&Config::default());
        let mut per_node = [0u32; 3];
        for i in 0..3000u32 {
            for c in h.candidates(format!("key{i}").as_bytes()) {
                per_node[c.node] += 1;
            }
        }
        assert!(per_node.iter().all(|&n| n > 2500), "{per_node:?}");
    }

    #[test]
    fn one_node_placement_keeps_a_keys_candidates_together_and_fills_every_slot() {
        let config = Config {
            nodes: 2,
            index_slots_per_node: 64,
            placement: Placement::OneNode,
            ..Config::default()
        };
        let h = KeyHasher::new(&config);
        let mut used = [[0u32; 64]; 2];
        for i in 0..20_000u32 {
            let c = h.candidates(&i.to_le_bytes());
            assert!(!c.is_empty() && c.len() <= 3);
            assert!(c.iter().all(|x| x.node == c[0].node), "{c:?}");
            used[c[0].node][c[0].slot as usize] += 1;
        }
        // Every slot of both tables is some key's first candidate, each
        // about as often as the others (156 on average): the node does not
        // decide the slot.
        let (lo, hi) = (
            used.iter().flatten().min().copied().unwrap_or(0),
            used.iter().flatten().max().copied().unwrap_or(0),
        );
        assert!(lo > 100 && hi < 220, "per-slot use from {lo} to {hi}");
        // The paper's placement splits most keys' candidates over both.
        let spread = KeyHasher::new(&Config {
            placement: Placement::Spread,
            ..config
        });
        let split = (0..1000u32)
            .filter(|i| {
                let c = spread.candidates(&i.to_le_bytes());
                c.iter().any(|x| x.node != c[0].node)
            })
            .count();
        assert!(split > 600, "{split} of 1000 keys split");
    }

    #[test]
    fn filter_respects_bit_count() {
        let h = KeyHasher::new(&Config {
            filter_bits: 3,
            ..Config::default()
        });
        assert!((0..500u32).all(|i| h.filter(&i.to_le_bytes()) < 8));
    }
}
