//! Scans: finding reusable slots among a class's in-use slots, a slice at
//! a time under the allocator's lock, and settling the slots that need
//! verbs to other nodes first (see `reclaim.rs`).

use super::reclaim::{Pending, PendingGuard};
use super::{bump, ClassTable, NodeData, TableAccess};
use crate::fabric::{Fabric, FabricError};
use crate::layout::dte::{DteHeader, DTE_HEADER_BYTES, EXPIRES_AT_OFFSET};
use std::sync::atomic::Ordering;

/// In-use slots one lock hold of a scan looks at (small: a lock hold stays
/// within a few microseconds, and the simulation's small tables cross
/// slice boundaries).
pub const SCAN_SLICE: usize = 32;

/// What a look at one in-use slot decided.
pub(super) enum Verdict {
    /// Not reusable yet.
    Keep,
    /// Reusable now.
    Free,
    /// Needs verbs (to other nodes) first.
    Pending(Pending),
}

impl NodeData {
    /// Scans `class` for slots that may be reused, resolves the source
    /// markers of expired MIGRATE copies and the fate of in-doubt slots, and
    /// frees what it can. Returns how many slots it freed. The scan holds
    /// the allocator's lock for [`SCAN_SLICE`] slots at a time, so
    /// allocations of the node's clients interleave with it.
    ///
    /// # Errors
    /// A fabric error on the node's own memory (a failed verb to another
    /// node only keeps the slot for a later scan).
    pub fn recycle(&self, class: u8, access: TableAccess<'_>) -> Result<usize, FabricError> {
        self.sweep(class, access, false)
    }

    /// One pass over the in-use slots of `class` (from where the last one
    /// stopped), a slice per lock hold; with `until_first`, it stops after
    /// the first slice that freed a slot (an allocation waits for one slot,
    /// not for the whole table).
    pub(super) fn sweep(
        &self,
        class: u8,
        access: TableAccess<'_>,
        until_first: bool,
    ) -> Result<usize, FabricError> {
        let started = std::time::Instant::now();
        let result = self.sweep_slices(class, access, until_first);
        self.counters.scan_ns.fetch_add(
            u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        result
    }

    fn sweep_slices(
        &self,
        class: u8,
        access: TableAccess<'_>,
        until_first: bool,
    ) -> Result<usize, FabricError> {
        let Some(mut left) = self.table(class).map(|t| t.in_use.len()) else {
            return Ok(0);
        };
        bump(&self.counters.scans);
        let mut freed = 0;
        while left > 0 {
            let Some(mut table) = self.table(class) else {
                break;
            };
            let (plain, pending, looked) =
                self.scan(class, &mut table, access, left.min(SCAN_SLICE))?;
            drop(table);
            freed += plain + self.settle_pending(class, pending, access);
            left = left.saturating_sub(looked);
            // Nothing left to look at (the table emptied meanwhile), or an
            // allocation's slot is free.
            if looked == 0 || (until_first && freed > 0) {
                break;
            }
        }
        Ok(freed)
    }

    /// Resolves the slots a scan took out of `in_use` (verbs, without the
    /// lock) and settles each; returns how many were freed.
    fn settle_pending(&self, class: u8, pending: Vec<Pending>, access: TableAccess<'_>) -> usize {
        let mut freed = 0;
        let mut guard = PendingGuard::new(self, class, pending);
        while let Some(item) = guard.next() {
            let fate = self.resolve(class, &item, access);
            guard.settled();
            if let Some(mut table) = self.table(class) {
                if self.settle(&mut table, &item, fate) {
                    freed += 1;
                }
            }
        }
        freed
    }

    /// Under the lock: looks at up to `budget` in-use slots from the
    /// table's cursor on, frees the expired plain ones and takes out of
    /// `in_use` those that need verbs to other nodes before they may be
    /// freed. Returns (freed, pending, slots looked at).
    fn scan(
        &self,
        class: u8,
        table: &mut ClassTable,
        access: TableAccess<'_>,
        budget: usize,
    ) -> Result<(usize, Vec<Pending>, usize), FabricError> {
        let now = access.clock.now_us();
        let mut freed = 0;
        let mut pending: Vec<Pending> = Vec::new();
        let mut looked = 0;
        while looked < budget && !table.in_use.is_empty() {
            if table.cursor >= table.in_use.len() {
                table.cursor = 0;
            }
            let i = table.cursor;
            let slot = table.in_use[i];
            looked += 1;
            // A slot taken out of `in_use` is replaced at `i` by the last
            // one, which the cursor looks at next.
            let verdict = match self.verdict(class, table, slot, now, access.local) {
                Ok(v) => v,
                Err(e) => {
                    // Nothing taken out may be lost: back to `in_use`.
                    for item in &pending {
                        table.enter(item.slot());
                    }
                    return Err(e);
                }
            };
            match verdict {
                Verdict::Keep => table.cursor += 1,
                Verdict::Free => {
                    table.leave_at(i);
                    table.reclaim(slot);
                    bump(&self.counters.reclaimed);
                    freed += 1;
                }
                Verdict::Pending(item) => {
                    table.leave_at(i);
                    pending.push(item);
                }
            }
        }
        Ok((freed, pending, looked))
    }

    /// Under the lock: whether the in-use `slot` may be reused now, needs
    /// verbs to other nodes first, or stays.
    pub(super) fn verdict(
        &self,
        class: u8,
        table: &ClassTable,
        slot: u32,
        now: u64,
        local: &dyn Fabric,
    ) -> Result<Verdict, FabricError> {
        let base = self.slot_addr(class, slot);
        let mut word = [0u8; 8];
        local.read(base.add(EXPIRES_AT_OFFSET as u64), &mut word)?;
        let expires_at = u64::from_le_bytes(word);
        let expired = expires_at != 0 && now > expires_at.saturating_add(self.skew_us);
        let doubt = if expires_at == 0 {
            table.doubt(slot)
        } else {
            None
        };
        if !expired && doubt.is_none() {
            return Ok(Verdict::Keep);
        }
        let mut bytes = [0u8; DTE_HEADER_BYTES];
        local.read(base, &mut bytes)?;
        let header = DteHeader::decode(&bytes);
        Ok(match doubt {
            None if !header.state.is_migrated() => Verdict::Free,
            None => Verdict::Pending(Pending::Copy { slot, header }),
            Some(d) => {
                // The publishing CAS passed its deadline check before
                // `created_at + op_timeout` and lands within the landing
                // bound of it: after `expiry` it has landed or never will.
                let settled = header
                    .created_at
                    .saturating_add(self.expiry_us)
                    .saturating_add(self.skew_us);
                if now <= settled {
                    Verdict::Keep
                } else {
                    Verdict::Pending(Pending::Doubt {
                        slot,
                        ite: d.ite,
                        value: d.value,
                    })
                }
            }
        })
    }
}
