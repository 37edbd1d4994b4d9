//! A client's queue of the slots of its own node it staged, and their
//! reuse in O(1) once expired.

use super::scan::Verdict;
use super::{bump, ClassTable, NodeData, TableAccess};
use crate::fabric::FabricError;
use crate::layout::SlotRef;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A local staging: a client stamped `expires_at` into a slot of its own
/// node.
#[derive(Debug, Clone, Copy)]
pub(super) struct Staged {
    slot: u32,
    expires_at: u64,
}

impl NodeData {
    /// An empty queue of stagings for a client of this node, counted in
    /// [`NodeData::queued`].
    #[must_use]
    pub fn stagings(&self) -> Stagings {
        // Each class keeps as many entries as it has slots.
        let caps = (0..self.classes() as u8)
            .map(|c| self.geometry.slots(c))
            .collect();
        Stagings::counted(Arc::clone(&self.queued), caps)
    }

    /// Slots of `class` that clients of this node staged and keep in their
    /// queues: their allocations take them back without a scan.
    #[must_use]
    pub fn queued(&self, class: u8) -> usize {
        self.queued
            .get(usize::from(class))
            .map_or(0, |n| n.load(Ordering::Relaxed))
    }
}

/// The slots of its own node a client staged, oldest first, per size
/// class. The client keeps them (noting one takes no lock), and its
/// allocations take the oldest once expired, in O(1), under the class's
/// lock. A slot whose entry is dropped (the client went away, or its queue
/// overflowed) is found by a scan like any other.
///
/// Stagings made by [`NodeData::stagings`] keep the node's count of queued
/// slots per class up to date, so that the recycler does not scan for slots
/// these queues will return anyway, and keep up to as many entries per class
/// as the class has slots: a client that stages faster than a smaller queue
/// holds over an expiry would leave the overflow to the recycler's scans,
/// which read the stamps of slots the client writes from another core.
#[derive(Debug, Default)]
pub struct Stagings {
    pub(super) classes: Vec<VecDeque<Staged>>,
    /// The node's queued-slot counts, per class.
    queued: Option<Arc<[AtomicUsize]>>,
    /// Most entries kept, per class (empty: [`Stagings::CAP`] for each).
    caps: Arc<[usize]>,
}

impl Stagings {
    /// Stagings counted in `queued` (one counter per class), keeping at
    /// most `caps[class]` entries of each class.
    pub(super) fn counted(queued: Arc<[AtomicUsize]>, caps: Arc<[usize]>) -> Stagings {
        Stagings {
            classes: Vec::new(),
            queued: Some(queued),
            caps,
        }
    }

    /// Most entries kept per class by stagings not made by a node; the
    /// oldest go first.
    pub const CAP: usize = 1 << 16;

    /// Most entries kept of `class`. Past the class's slot count every
    /// further entry would be stale; below it, a queue grows only as
    /// entries come, so a high cap costs nothing until it is used.
    fn cap(&self, class: usize) -> usize {
        self.caps.get(class).copied().unwrap_or(Self::CAP)
    }

    /// Notes that the client staged `r` (a slot of its own node) with
    /// `expires_at`.
    pub fn note(&mut self, r: SlotRef, expires_at: u64) {
        let class = usize::from(r.class);
        if self.classes.len() <= class {
            self.classes.resize_with(class + 1, VecDeque::new);
        }
        if self.classes[class].len() >= self.cap(class) {
            self.pop_front(r.class);
        }
        self.classes[class].push_back(Staged {
            slot: r.slot,
            expires_at,
        });
        self.count(class, |n| n.fetch_add(1, Ordering::Relaxed));
    }

    /// The oldest entry of `class`.
    pub(super) fn front(&self, class: u8) -> Option<Staged> {
        self.classes.get(usize::from(class))?.front().copied()
    }

    /// Drops the oldest entry of `class`.
    pub(super) fn pop_front(&mut self, class: u8) {
        let class = usize::from(class);
        if self
            .classes
            .get_mut(class)
            .and_then(VecDeque::pop_front)
            .is_some()
        {
            self.count(class, |n| n.fetch_sub(1, Ordering::Relaxed));
        }
    }

    fn count(&self, class: usize, f: impl FnOnce(&AtomicUsize) -> usize) {
        if let Some(n) = self.queued.as_ref().and_then(|q| q.get(class)) {
            f(n);
        }
    }
}

impl Drop for Stagings {
    fn drop(&mut self) {
        for class in 0..self.classes.len() {
            let left = self.classes[class].len();
            self.count(class, |n| n.fetch_sub(left, Ordering::Relaxed));
        }
    }
}

impl NodeData {
    /// Under the lock: frees the oldest of a client's stagings if it expired
    /// and may be reused as it is (a MIGRATE copy or a slot in doubt is left to
    /// a scan). Entries of slots a scan took or reclaimed meanwhile are
    /// dropped.
    pub(super) fn reuse_staged(
        &self,
        class: u8,
        table: &mut ClassTable,
        access: TableAccess<'_>,
        stagings: &mut Stagings,
    ) -> Result<(), FabricError> {
        if stagings.front(class).is_none() {
            return Ok(());
        }
        let now = access.wall_read_us.unwrap_or_else(|| access.clock.now_us());
        while let Some(s) = stagings.front(class) {
            // A slot that left `in_use` since (reclaimed, or with a scan
            // that resolves it) is not this entry's business any more.
            let in_use = table.is_in_use(s.slot);
            if in_use && !self.expired(s.expires_at, now) {
                return Ok(());
            }
            stagings.pop_front(class);
            // The slot's own stamp decides (it may hold a later incarnation
            // by now, staged or not): the entry only says where to look.
            if in_use
                && matches!(
                    self.verdict(class, table, s.slot, now, access.local)?,
                    Verdict::Free
                )
                && table.leave(s.slot)
            {
                table.reclaim(s.slot);
                bump(&self.counters.reclaimed);
                bump(&self.counters.reclaimed_from_queue);
                return Ok(());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_stagings_keep_the_newest_when_full() {
        let mut st = Stagings::default();
        let at = |slot| SlotRef {
            node: 0,
            class: 2,
            slot,
            generation: 1,
        };
        for slot in 0..=Stagings::CAP as u32 {
            st.note(at(slot), u64::from(slot));
        }
        assert_eq!(
            st.classes.len(),
            3,
            "one queue per class up to the noted one"
        );
        let q = &st.classes[2];
        assert_eq!(q.len(), Stagings::CAP);
        assert_eq!(q.front().map(|s| s.slot), Some(1), "the oldest went first");
        assert_eq!(q.back().map(|s| s.slot), Some(Stagings::CAP as u32));
    }

    #[test]
    fn a_nodes_queued_count_follows_its_clients_stagings() {
        let data = NodeData::new(&crate::data::small_config(1, 4096, 1 << 20), 0).unwrap();
        let at = |slot| SlotRef {
            node: 0,
            class: 1,
            slot,
            generation: 1,
        };
        let slots = data.geometry().slots(1);
        let mut a = data.stagings();
        let mut b = data.stagings();
        for slot in 0..=slots as u32 {
            a.note(at(slot), 5);
        }
        b.note(at(7), 5);
        assert_eq!(data.queued(1), slots + 1, "an overflow drops one");
        assert_eq!(data.queued(0), 0);
        a.pop_front(1);
        assert_eq!(data.queued(1), slots);
        drop(a);
        assert_eq!(data.queued(1), 1, "a client that goes away takes its queue");
        drop(b);
        assert_eq!(data.queued(1), 0);
    }

    /// A node's queues keep as many entries per class as the class has
    /// slots, above [`Stagings::CAP`] as below it: a client staging faster
    /// than that would otherwise hand the overflow to the recycler's scans.
    #[test]
    fn a_nodes_queues_keep_as_many_as_the_class_has_slots() {
        let config = crate::data::small_config(1, 256, 96 << 20);
        let data = NodeData::new(&config, 0).unwrap();
        for class in 0..data.classes() as u8 {
            let slots = data.geometry().slots(class);
            let mut q = data.stagings();
            for slot in 0..=slots as u32 {
                q.note(
                    SlotRef {
                        node: 0,
                        class,
                        slot,
                        generation: 1,
                    },
                    5,
                );
            }
            assert_eq!(data.queued(class), slots, "class {class}: one dropped");
            assert_eq!(q.front(class).map(|s| s.slot), Some(1));
        }
        let largest = (0..data.classes() as u8)
            .map(|c| data.geometry().slots(c))
            .max();
        assert!(
            largest > Some(Stagings::CAP),
            "a class above the default cap"
        );
    }
}
