//! Scans: finding reusable slots among a class's in-use slots, a slice at
//! a time under the allocator's lock, and settling the slots that need
//! verbs to other nodes first (see `reclaim.rs`).

use super::reclaim::{Pending, PendingGuard};
use super::{bump, ClassTable, NodeData, TableAccess};
use crate::fabric::{Fabric, FabricError};
use crate::layout::dte::{DteHeader, DTE_HEADER_BYTES, EXPIRES_AT_OFFSET};
use std::sync::atomic::Ordering;

/// In-use slots one slice of a scan looks at (small: the simulation's small
/// tables cross slice boundaries).
pub const SCAN_SLICE: usize = 32;

/// The slots of one slice, kept inline.
pub(super) type Slice<T> = smallvec::SmallVec<[T; SCAN_SLICE]>;

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

    /// As [`NodeData::recycle`], for at most `slots` in-use slots from
    /// where the last scan stopped (the background recycler's paced scan).
    ///
    /// # Errors
    /// As [`NodeData::recycle`].
    pub fn recycle_some(
        &self,
        class: u8,
        access: TableAccess<'_>,
        slots: usize,
    ) -> Result<usize, FabricError> {
        self.timed(|| self.sweep_budget(class, access, slots, false))
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
        self.timed(|| self.sweep_slices(class, access, until_first))
    }

    /// Runs a scan, adding its time to the counters.
    fn timed(
        &self,
        scan: impl FnOnce() -> Result<usize, FabricError>,
    ) -> Result<usize, FabricError> {
        let started = std::time::Instant::now();
        let result = scan();
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
        let Some(in_use) = self.table(class).map(|t| t.in_use.len()) else {
            return Ok(0);
        };
        self.sweep_budget(class, access, in_use, until_first)
    }

    /// Looks at up to `budget` in-use slots of `class` from the table's
    /// cursor on, a slice at a time; with `until_first`, stops after the
    /// first slice that freed a slot. Returns how many slots it freed.
    pub(super) fn sweep_budget(
        &self,
        class: u8,
        access: TableAccess<'_>,
        budget: usize,
        until_first: bool,
    ) -> Result<usize, FabricError> {
        if self.clock_gate.shut() {
            // Nothing staged may be reused, nor any slot in doubt freed:
            // a scan would look in vain.
            return Ok(0);
        }
        bump(&self.counters.scans);
        let mut freed = 0;
        let mut left = budget;
        while left > 0 {
            let (plain, pending, looked) = self.scan_slice(class, access, left.min(SCAN_SLICE))?;
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

    /// One slice: up to `budget` in-use slots from the table's cursor on.
    /// Their `expires_at` stamps are read without the lock, and only the
    /// slots whose stamp (or doubt) says they may be reusable get a verdict,
    /// under the lock as always: a stamp that changes in between only
    /// delays a slot to a later scan or is caught by the verdict. The lock
    /// is held for bookkeeping, never for a pass of memory reads, so a
    /// scanning thread preempted mid-slice does not stall the node's
    /// allocations. Frees the expired plain slots and takes out of `in_use`
    /// those that need verbs to other nodes first. Returns (freed, pending,
    /// slots looked at).
    fn scan_slice(
        &self,
        class: u8,
        access: TableAccess<'_>,
        budget: usize,
    ) -> Result<(usize, Vec<Pending>, usize), FabricError> {
        let picked = match self.table(class) {
            Some(mut table) => table.next_slice(budget),
            None => return Ok((0, Vec::new(), 0)),
        };
        // One reading for the filter and the verdicts: an earlier `now`
        // only finds fewer slots expired.
        let now = access.clock.now_us();
        let mut maybe = Slice::new();
        for &(slot, in_doubt) in &picked {
            let expires_at = self.read_expires_at(class, slot, access.local)?;
            if self.expired(expires_at, now) || (expires_at == 0 && in_doubt) {
                maybe.push(slot);
            }
        }
        let looked = picked.len();
        if maybe.is_empty() {
            return Ok((0, Vec::new(), looked));
        }
        // Between the unlocked stamp reads and the verdicts another thread
        // may free and reallocate a slot read here: a scheduling fabric
        // runs others at this point, so that the verdict's re-read is
        // tested (it issues no verb).
        access.cluster.yield_point();
        let Some(mut table) = self.table(class) else {
            return Ok((0, Vec::new(), looked));
        };
        let mut freed = 0;
        let mut pending: Vec<Pending> = Vec::new();
        for slot in maybe {
            // A slot that left `in_use` meanwhile (allocated anew is
            // impossible without leaving it first) is not this scan's.
            if !table.is_in_use(slot) {
                continue;
            }
            let verdict = match self.verdict(class, &table, slot, now, access.local) {
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
                Verdict::Keep => {}
                Verdict::Free => {
                    table.leave(slot);
                    table.reclaim(slot);
                    bump(&self.counters.reclaimed);
                    freed += 1;
                }
                Verdict::Pending(item) => {
                    table.leave(slot);
                    pending.push(item);
                }
            }
        }
        Ok((freed, pending, looked))
    }

    /// Whether a slot stamped `expires_at` (0: not staged) may be reused
    /// at wall time `now`: strictly more than `max_clock_skew` after its
    /// stamp, so that no node's clock can still read a time before it, on
    /// this node's clock now and, when a watch checks that clock, on a
    /// reading of it the watch vouched for (see `clock_gate.rs`): a clock
    /// that stepped ahead would find every stamp expired at once. The one
    /// reuse-time rule of scans, verdicts and the stagings queue.
    pub(super) fn expired(&self, expires_at: u64, now: u64) -> bool {
        let reuse_at = expires_at.saturating_add(self.skew_us);
        expires_at != 0 && now > reuse_at && self.clock_gate.admits(reuse_at)
    }

    fn read_expires_at(
        &self,
        class: u8,
        slot: u32,
        local: &dyn Fabric,
    ) -> Result<u64, FabricError> {
        let mut word = [0u8; 8];
        local.read(
            self.slot_addr(class, slot).add(EXPIRES_AT_OFFSET as u64),
            &mut word,
        )?;
        Ok(u64::from_le_bytes(word))
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
        let expires_at = self.read_expires_at(class, slot, local)?;
        let expired = self.expired(expires_at, now);
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
            None => {
                debug_assert!(
                    self.clock_gate
                        .once_admitted(expires_at.saturating_add(self.skew_us)),
                    "a staged slot reused without the clock watch's word"
                );
                if header.state.is_migrated() {
                    Verdict::Pending(Pending::Copy { slot, header })
                } else {
                    Verdict::Free
                }
            }
            Some(d) => {
                // The publishing CAS passed its deadline check before
                // `created_at + op_timeout` and lands within the landing
                // bound of it: after `expiry` it has landed or never will,
                // judged by the rule of stamps (a clock that stepped ahead
                // would free the slot while the CAS may still land).
                if self.expired(header.created_at.saturating_add(self.expiry_us), now) {
                    Verdict::Pending(Pending::Doubt {
                        slot,
                        ite: d.ite,
                        value: d.value,
                    })
                } else {
                    Verdict::Keep
                }
            }
        })
    }
}
