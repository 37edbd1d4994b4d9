//! A client's queue of the slots of its own node it staged, and their
//! reuse in O(1) once expired.

use super::scan::Verdict;
use super::{bump, ClassTable, NodeData, TableAccess, NOT_IN_USE};
use crate::fabric::FabricError;
use crate::layout::SlotRef;
use std::collections::VecDeque;

/// A local staging: a client stamped `expires_at` into a slot of its own
/// node.
#[derive(Debug, Clone, Copy)]
pub(super) struct Staged {
    slot: u32,
    expires_at: u64,
}

/// The slots of its own node a client staged, oldest first, per size
/// class. The client keeps them (noting one takes no lock), and its
/// allocations take the oldest once expired, in O(1), under the class's
/// lock. A slot whose entry is dropped (the client went away, or its queue
/// overflowed) is found by a scan like any other.
#[derive(Debug, Default)]
pub struct Stagings {
    pub(super) classes: Vec<VecDeque<Staged>>,
}

impl Stagings {
    /// The queue of `class`, if anything was ever noted there.
    pub(super) fn class_mut(&mut self, class: u8) -> Option<&mut VecDeque<Staged>> {
        self.classes.get_mut(usize::from(class))
    }

    /// Most entries kept per class; the oldest go first.
    pub const CAP: usize = 1 << 16;

    /// Notes that the client staged `r` (a slot of its own node) with
    /// `expires_at`.
    pub fn note(&mut self, r: SlotRef, expires_at: u64) {
        let class = usize::from(r.class);
        if self.classes.len() <= class {
            self.classes.resize_with(class + 1, VecDeque::new);
        }
        let queue = &mut self.classes[class];
        if queue.len() >= Self::CAP {
            queue.pop_front();
        }
        queue.push_back(Staged {
            slot: r.slot,
            expires_at,
        });
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
        queue: &mut VecDeque<Staged>,
    ) -> Result<(), FabricError> {
        if queue.is_empty() {
            return Ok(());
        }
        let now = access.clock.now_us();
        while let Some(s) = queue.front().copied() {
            // A slot that left `in_use` since (reclaimed, or with a scan
            // that resolves it) is not this entry's business any more.
            let in_use =
                matches!(table.in_use_at.get(s.slot as usize), Some(&i) if i != NOT_IN_USE);
            if in_use && now <= s.expires_at.saturating_add(self.skew_us) {
                return Ok(());
            }
            queue.pop_front();
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
}
