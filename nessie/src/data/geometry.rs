//! The shape of the tables every node registers: size classes, slot sizes
//! and counts, the regions they take, and where an index slot or a DTE
//! lives. Everything that sizes or addresses these tables asks
//! [`Geometry`] ([`Config`]'s size-class methods delegate to it).

use crate::config::MIN_CLASS_BYTES;
use crate::fabric::{NodeId, RegionSpec, RemoteAddr};
use crate::index::Candidate;
use crate::layout::region;
use crate::layout::{dte, SlotRef, WORD};
use crate::Config;

/// The size class of tombstones (they have no value): the smallest.
pub const TOMBSTONE_CLASS: u8 = 0;

/// Where slot `slot` of a data table with `slot_bytes`-byte slots lives
/// (unchecked).
fn slot_addr(node: NodeId, class: u8, slot: u32, slot_bytes: usize) -> RemoteAddr {
    RemoteAddr::new(
        node,
        region::data(class),
        u64::from(slot) * slot_bytes as u64,
    )
}

/// Where the DTE `r` lives, given the slot size of its class (unchecked; see
/// [`Geometry::dte_addr`] for references read from memory).
#[must_use]
pub fn dte_addr(r: SlotRef, slot_bytes: usize) -> RemoteAddr {
    slot_addr(usize::from(r.node), r.class, r.slot, slot_bytes)
}

/// Size classes, slot arithmetic and address checks of one configuration.
///
/// References to DTEs also come out of remote memory (an entry's `prev`,
/// `replaced` or `source` word), where a reader that raced a slot's reuse may
/// see any bits; every such reference is resolved through the checked
/// methods here, so a torn word becomes a retry, never an out-of-range verb
/// or a panic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    nodes: usize,
    /// Copies of every share (docs/replication.md#placement).
    replicas: usize,
    index_slots: u64,
    capacities: Vec<usize>,
    slot_bytes: Vec<usize>,
    slots: Vec<usize>,
    tombstone_reserve: usize,
}

impl Geometry {
    /// The tables of a configuration (validated, for tables that are to be
    /// registered).
    ///
    /// Size classes: value capacities are powers of two from
    /// [`MIN_CLASS_BYTES`] up to `value_size_max` rounded up to a power of
    /// two. A slot of a class holds a DTE header, a key of up to
    /// `key_size_max` bytes and a value of up to the class's capacity, so a
    /// 16 KiB value takes a 16 KiB class, not a 32 KiB one.
    ///
    /// Slots per class: every class gets an equal share of
    /// `data_bytes_per_node`, so large classes have few slots and small ones
    /// many. An equal byte share keeps every class usable whatever the
    /// workload's value sizes and needs no knowledge of the workload; a
    /// workload of one value size leaves the other classes' memory idle,
    /// which is the price of that. Memory is touched only when used, so
    /// generous settings cost address space only.
    ///
    /// The smallest class, where tombstones go, also gets
    /// `tombstone_reserve` slots on top of its share (see
    /// [`Geometry::reserve`]).
    #[must_use]
    pub fn new(config: &Config) -> Geometry {
        let top = config
            .value_size_max
            .max(1)
            .next_power_of_two()
            .max(MIN_CLASS_BYTES);
        let capacities: Vec<usize> =
            std::iter::successors(Some(MIN_CLASS_BYTES), |&c| (c < top).then_some(c * 2)).collect();
        let share = config.data_bytes_per_node / capacities.len();
        let slot_bytes: Vec<usize> = capacities
            .iter()
            .map(|&cap| dte::entry_bytes(config.key_size_max, cap))
            .collect();
        let mut slots: Vec<usize> = slot_bytes.iter().map(|&bytes| share / bytes).collect();
        slots[TOMBSTONE_CLASS as usize] =
            slots[TOMBSTONE_CLASS as usize].saturating_add(config.tombstone_reserve);
        Geometry {
            nodes: config.nodes,
            replicas: config.replicas.max(1),
            index_slots: config.index_slots_per_node as u64,
            slots,
            slot_bytes,
            capacities,
            tombstone_reserve: config.tombstone_reserve,
        }
    }

    /// Slots of `class` that only tombstones may take: while no more than
    /// these are free, other entries find the class full
    /// (docs/design.md#the-tombstone-reserve). Nonzero only for
    /// [`TOMBSTONE_CLASS`].
    #[must_use]
    pub fn reserve(&self, class: u8) -> usize {
        if class == TOMBSTONE_CLASS {
            self.tombstone_reserve
        } else {
            0
        }
    }

    /// Value capacities of the size classes, smallest first.
    #[must_use]
    pub fn capacities(&self) -> &[usize] {
        &self.capacities
    }

    /// Number of size classes.
    #[must_use]
    pub fn classes(&self) -> usize {
        self.capacities.len()
    }

    /// Number of nodes.
    #[must_use]
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Copies of every share ([`Config::replicas`]).
    #[must_use]
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// Where replica `j` of a share keeps the word or entry that replica 0
    /// keeps at `at`: the same offset, on node `at.node + j` (mod the
    /// nodes), in that replica's region
    /// (docs/replication.md#placement).
    #[must_use]
    pub fn replica_addr(&self, at: RemoteAddr, j: usize) -> RemoteAddr {
        debug_assert!(j < self.replicas, "replica {j} of {}", self.replicas);
        RemoteAddr::new(
            (at.node + j) % self.nodes,
            region::replica(j, at.region),
            at.offset,
        )
    }

    /// The mirrors of what replica 0 keeps at `at` (none at r = 1).
    pub fn mirrors(&self, at: RemoteAddr) -> impl Iterator<Item = RemoteAddr> + '_ {
        (1..self.replicas).map(move |j| self.replica_addr(at, j))
    }

    /// The regions a node registers for the replicas it holds of other
    /// shares: for each replica j ≥ 1, an index table and the data tables
    /// under that replica's ids (none at r = 1).
    #[must_use]
    pub fn mirror_regions(&self) -> Vec<RegionSpec> {
        let own: Vec<RegionSpec> = std::iter::once(self.index_region())
            .chain(self.data_regions())
            .collect();
        (1..self.replicas)
            .flat_map(|j| {
                own.iter().map(move |spec| RegionSpec {
                    id: region::replica(j, spec.id),
                    len: spec.len,
                })
            })
            .collect()
    }

    /// Index slots of each node.
    #[must_use]
    pub fn index_slots(&self) -> u64 {
        self.index_slots
    }

    /// The index table region of a node.
    #[must_use]
    pub fn index_region(&self) -> RegionSpec {
        RegionSpec {
            id: region::INDEX,
            len: self.index_slots * WORD as u64,
        }
    }

    /// The data-table regions of a node, one per size class.
    #[must_use]
    pub fn data_regions(&self) -> Vec<RegionSpec> {
        (0..self.classes() as u8)
            .map(|class| RegionSpec {
                id: region::data(class),
                len: (self.slots(class) * self.slot_bytes(class)) as u64,
            })
            .collect()
    }

    /// The smallest size class whose capacity holds `value_len` bytes.
    #[must_use]
    pub fn class_for(&self, value_len: usize) -> Option<u8> {
        self.capacities
            .iter()
            .position(|&cap| cap >= value_len)
            .map(|c| c as u8)
    }

    /// Value capacity of `class` in bytes (0 for a class that does not exist).
    #[must_use]
    pub fn capacity(&self, class: u8) -> usize {
        self.capacities
            .get(usize::from(class))
            .copied()
            .unwrap_or(0)
    }

    /// Bytes of one slot of `class` (0 for a class that does not exist).
    #[must_use]
    pub fn slot_bytes(&self, class: u8) -> usize {
        self.slot_bytes
            .get(usize::from(class))
            .copied()
            .unwrap_or(0)
    }

    /// Slots of `class` on each node (0 for a class that does not exist).
    #[must_use]
    pub fn slots(&self, class: u8) -> usize {
        self.slots.get(usize::from(class)).copied().unwrap_or(0)
    }

    /// Address of slot `slot` of `node`'s data table of `class` (unchecked:
    /// for the node's own bookkeeping of slots it hands out).
    #[must_use]
    pub fn slot_addr(&self, node: NodeId, class: u8, slot: u32) -> RemoteAddr {
        slot_addr(node, class, slot, self.slot_bytes(class))
    }

    /// Address of the DTE `r`, or `None` if `r` names a node, class or slot
    /// that does not exist.
    #[must_use]
    pub fn dte_addr(&self, r: SlotRef) -> Option<RemoteAddr> {
        let fits = usize::from(r.node) < self.nodes && (r.slot as usize) < self.slots(r.class);
        fits.then(|| dte_addr(r, self.slot_bytes(r.class)))
    }

    /// Address of index slot `slot` of `node`, or `None` if there is none.
    #[must_use]
    pub fn index_slot(&self, node: u16, slot: u64) -> Option<RemoteAddr> {
        let fits = usize::from(node) < self.nodes && slot < self.index_slots;
        fits.then(|| {
            Candidate {
                node: usize::from(node),
                slot,
            }
            .addr()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_outside_the_tables_have_no_address() {
        let g = Geometry::new(&super::super::small_config(2, 1024, 1 << 20));
        assert_eq!(g.nodes(), 2);
        assert_eq!(g.classes(), 3);
        assert_eq!(g.class_for(300), Some(1));
        assert_eq!(g.class_for(1025), None);
        let r = |node, class, slot| SlotRef {
            node,
            class,
            slot,
            generation: 1,
        };
        assert!(g.dte_addr(r(1, 2, 0)).is_some());
        assert!(g.dte_addr(r(2, 0, 0)).is_none(), "no node 2");
        assert!(g.dte_addr(r(0, 3, 0)).is_none(), "no class 3");
        let slots = g.slots(0) as u32;
        assert!(g.dte_addr(r(0, 0, slots - 1)).is_some());
        assert!(g.dte_addr(r(0, 0, slots)).is_none(), "past the last slot");
        assert!(g.index_slot(1, 7).is_some());
        assert!(g.index_slot(1, 8).is_none());
        assert!(g.index_slot(2, 0).is_none());
        assert_eq!(g.capacity(9), 0);
        assert_eq!(g.slot_bytes(9), 0);
    }

    #[test]
    fn the_tombstone_reserve_is_in_the_smallest_class_and_sized_by_its_rule() {
        let mut config = super::super::small_config(1, 1024, 1 << 20);
        config.tombstone_reserve = 0;
        let plain = Geometry::new(&config);
        assert!(config
            .validate()
            .unwrap_err()
            .to_string()
            .contains("tombstone_reserve"));
        config.tombstone_reserve = 7;
        config.validate().unwrap();
        let g = Geometry::new(&config);
        assert_eq!(g.slots(TOMBSTONE_CLASS), plain.slots(TOMBSTONE_CLASS) + 7);
        assert_eq!(g.reserve(TOMBSTONE_CLASS), 7);
        for class in 1..g.classes() as u8 {
            assert_eq!(g.slots(class), plain.slots(class));
            assert_eq!(g.reserve(class), 0);
        }
        // The reserve's slots are addressable; the region grew by them.
        let last = SlotRef {
            node: 0,
            class: TOMBSTONE_CLASS,
            slot: g.slots(TOMBSTONE_CLASS) as u32 - 1,
            generation: 1,
        };
        assert!(g.dte_addr(last).is_some());
        assert_eq!(
            g.data_regions()[0].len,
            (g.slots(0) * g.slot_bytes(0)) as u64
        );
        // One window of DELETE attempts: (0.5 + 1 + 0.01 + 0.015) s at the
        // defaults.
        let d = Config::default();
        assert_eq!(d.tombstone_reserve_for(100.0), 153);
        assert_eq!(d.tombstone_reserve_for(0.0), 1, "never 0");
        assert!(d.tombstone_reserve_for(670.0) <= d.tombstone_reserve);
        assert!(d.tombstone_reserve_for(700.0) > d.tombstone_reserve);
    }
}
