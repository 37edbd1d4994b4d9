//! The verbs a scan needs before it may free some slots: resolving the source
//! marker of an expired MIGRATE copy
//! (docs/design.md#f3-rule-ii-the-recycler-restores-an-aborted-copys-marker
//! and
//! docs/design.md#f2-rule-iii-the-recycler-clears-a-committed-copys-marker,
//! rules (ii) and (iii)), and learning the fate of a slot whose publishing CAS
//! had an unknown outcome.
//!
//! These run without the allocator's lock (they may reach other nodes); the
//! slots they concern are out of `in_use` meanwhile, so no other scan sees
//! them, and a [`PendingGuard`] puts back whatever was not settled if the
//! scanning thread unwinds.

use super::{bump, ClassTable, NodeData, TableAccess};
use crate::fabric::{Fabric, FabricError, RemoteAddr};
use crate::layout::dte::{decode_source, DteHeader, DteState, DteStatus, EXPIRES_AT_OFFSET};
use crate::layout::{Ite, SlotRef};
use crate::replica::{sync_mirror, PerReplica, SyncVerbs};

/// A slot taken out of `in_use` by a scan, to be settled by verbs.
#[derive(Debug, Clone, Copy)]
pub(super) enum Pending {
    /// An expired MIGRATE copy whose source slot may still hold
    /// `MOVED(copy)`.
    Copy {
        slot: u32,
        /// Its header, read under the lock (immutable but for the state,
        /// which is final once the copy is staged).
        header: DteHeader,
    },
    /// A slot whose publishing CAS (into `ite`, installing `value`) had an
    /// unknown outcome, old enough that the CAS can no longer land.
    Doubt {
        slot: u32,
        ite: RemoteAddr,
        value: u64,
    },
}

impl Pending {
    pub(super) fn slot(&self) -> u32 {
        match *self {
            Pending::Copy { slot, .. } | Pending::Doubt { slot, .. } => slot,
        }
    }
}

/// What resolving a pending slot decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
    /// Nothing can point at the slot any more: reuse it.
    Free,
    /// Back to `in_use`, to be looked at again by a later scan (a verb
    /// failed, or the slot is linked after all).
    Keep,
    /// Back to `in_use` as an ordinary published slot: its publishing CAS
    /// landed, so it is recycled like any other once staged.
    Published,
}

/// Returns the pending slots nobody settled to `in_use` when dropped (the
/// scanning thread unwound midway).
pub(super) struct PendingGuard<'a> {
    data: &'a NodeData,
    class: u8,
    left: Vec<Pending>,
}

impl<'a> PendingGuard<'a> {
    pub(super) fn new(data: &'a NodeData, class: u8, left: Vec<Pending>) -> PendingGuard<'a> {
        PendingGuard { data, class, left }
    }

    /// The next slot to settle. It stays in the guard until
    /// [`PendingGuard::settled`], so that a thread unwinding while it
    /// resolves the slot still puts it back.
    pub(super) fn next(&self) -> Option<Pending> {
        self.left.last().copied()
    }

    /// The slot [`PendingGuard::next`] returned was settled.
    pub(super) fn settled(&mut self) {
        self.left.pop();
    }
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if self.left.is_empty() {
            return;
        }
        if let Some(mut table) = self.data.table(self.class) {
            for item in self.left.drain(..) {
                table.enter(item.slot());
            }
        }
    }
}

impl NodeData {
    /// Issues the verbs that decide a pending slot's fate. A failed verb
    /// keeps the slot: it is freed only after every CAS it needed has a
    /// definite outcome.
    pub(super) fn resolve(&self, class: u8, item: &Pending, access: TableAccess<'_>) -> Fate {
        let result = match *item {
            Pending::Copy { slot, header } => self.resolve_copy(class, slot, &header, access),
            Pending::Doubt { slot, ite, value } => {
                self.resolve_doubt(class, slot, ite, value, access)
            }
        };
        result.unwrap_or_else(|e| {
            tracing::warn!(
                node = self.node,
                class,
                slot = item.slot(),
                "recycling a slot needs a verb that failed ({e}); kept for a later scan"
            );
            bump(&self.counters.kept_after_error);
            Fate::Keep
        })
    }

    /// Rules (ii) and (iii): a `MOVED(copy)` still in the copy's source slot
    /// is cleared (copy committed; the winner stages the copy's predecessor)
    /// or put back to the copy's `prev` (copy aborted) before the copy's
    /// slot may be reused.
    fn resolve_copy(
        &self,
        class: u8,
        slot: u32,
        header: &DteHeader,
        access: TableAccess<'_>,
    ) -> Result<Fate, FabricError> {
        let copy = SlotRef {
            node: self.node as u16,
            class,
            slot,
            generation: header.state.generation(),
        };
        let (node, index_slot) = decode_source(header.source);
        let Some(source) = self.geometry.index_slot(node, index_slot) else {
            tracing::error!(
                node = self.node,
                class,
                slot,
                "a staged MIGRATE copy names no index slot as its source; reusing it"
            );
            return Ok(Fate::Free);
        };
        let marker = Ite::moved(copy);
        // Its CASes reach other nodes: only while this node serves (the
        // lease may end during a period).
        if !access.serving() {
            return Ok(Fate::Keep);
        }
        if read_word(access.cluster, source)? != marker.0 {
            // A mirror may still name the copy if the sync of the marker's
            // removal never finished (docs/replication.md#rp5).
            return self.sync_source(source, marker.0, access);
        }
        match header.state.status() {
            DteStatus::Valid => {
                let cleared = marker.emptied().0;
                if access.cluster.cas(source, marker.0, cleared)? == marker.0 {
                    bump(&self.counters.markers_cleared);
                    let synced = self.sync_source(source, marker.0, access)?;
                    if let (Fate::Free, Some(prev)) = (synced, Ite(header.prev).target()) {
                        self.stage_from_recycler(prev, access);
                    }
                    return Ok(synced);
                }
                Ok(Fate::Free)
            }
            DteStatus::Aborted => {
                if access.cluster.cas(source, marker.0, header.prev)? == marker.0 {
                    bump(&self.counters.markers_restored);
                }
                self.sync_source(source, marker.0, access)
            }
            DteStatus::Invalid => {
                tracing::error!(
                    node = self.node,
                    class,
                    slot,
                    "an uncommitted MIGRATE copy was staged; keeping its slot"
                );
                Ok(Fate::Keep)
            }
        }
    }

    /// An in-doubt slot whose publishing CAS can no longer land: still in
    /// its ITE → published (helpers finish it); gone and never aborted → it
    /// never landed (an entry leaves an ITE only after it was aborted or
    /// committed, and nobody commits an entry whose owner gave up).
    fn resolve_doubt(
        &self,
        class: u8,
        slot: u32,
        ite: RemoteAddr,
        value: u64,
        access: TableAccess<'_>,
    ) -> Result<Fate, FabricError> {
        if read_word(access.cluster, ite)? == value {
            return Ok(Fate::Published);
        }
        let state = DteState(read_word(access.local, self.slot_addr(class, slot))?);
        Ok(if state.status() == DteStatus::Invalid {
            Fate::Free
        } else {
            Fate::Published
        })
    }

    /// Brings every mirror of the copy's source slot past `marker` to the
    /// primary's value (docs/replication.md#rp2): the copy's slot is reused
    /// only once no replica of its source names it
    /// (docs/replication.md#rp5). [`Fate::Keep`] when the slot kept
    /// changing: a later scan tries again.
    fn sync_source(
        &self,
        source: RemoteAddr,
        marker: u64,
        access: TableAccess<'_>,
    ) -> Result<Fate, FabricError> {
        let mirrors: PerReplica<RemoteAddr> = match access.views {
            Some(views) => views.mirrors(source),
            None => self.geometry.mirrors(source).collect(),
        };
        for mirror in mirrors {
            if read_word(access.cluster, mirror)? != marker {
                continue;
            }
            let mut verbs = FabricSync {
                fabric: access.cluster,
                primary: source,
                mirror,
                cases_left: MAX_RECYCLER_SYNC_CASES,
            };
            // As a sync of a change marker → the primary's value now.
            let now = read_word(access.cluster, source)?;
            let synced = verbs
                .cas_mirror(marker, now)
                .and_then(|was| sync_mirror(marker, now, was, &mut verbs));
            match synced {
                Ok(()) => {}
                Err(SyncStop::Fabric(e)) => return Err(e),
                Err(SyncStop::TooBusy) => return Ok(Fate::Keep),
            }
        }
        Ok(Fate::Free)
    }

    /// The copy's predecessor is staged by whoever clears the copy's marker
    /// (docs/design.md#f4-rule-i-one-stager-per-incarnation); a failed WRITE
    /// leaks it (logged), it never risks data.
    fn stage_from_recycler(&self, r: SlotRef, access: TableAccess<'_>) {
        let Some(addr) = self.geometry.dte_addr(r) else {
            tracing::error!(node = self.node, ?r, "a copy's prev names no DTE slot");
            return;
        };
        let at = self.expires_at(access.clock.now_us()).to_le_bytes();
        let word = addr.add(EXPIRES_AT_OFFSET as u64);
        let mirrors: PerReplica<RemoteAddr> = match access.views {
            Some(views) => views.mirrors(word),
            None => self.geometry.mirrors(word).collect(),
        };
        // The mirrors' stamps first: the primary's lets the slot be reused
        // (docs/replication.md#rp5).
        let staged = mirrors
            .into_iter()
            .chain(std::iter::once(word))
            .try_for_each(|replica| access.cluster.write(replica, &at));
        if let Err(e) = staged {
            tracing::warn!(
                node = self.node,
                ?r,
                "staging a copy's predecessor failed ({e}); its slot leaks"
            );
        }
    }

    /// Applies a fate under the lock; returns whether the slot was freed.
    pub(super) fn settle(&self, table: &mut ClassTable, item: &Pending, fate: Fate) -> bool {
        let slot = item.slot();
        match fate {
            Fate::Free => {
                if matches!(item, Pending::Doubt { .. }) {
                    bump(&self.counters.in_doubt_freed);
                } else {
                    bump(&self.counters.reclaimed);
                }
                table.reclaim(slot);
                true
            }
            Fate::Keep => {
                table.enter(slot);
                false
            }
            Fate::Published => {
                table.in_doubt.retain(|d| d.slot != slot);
                table.enter(slot);
                false
            }
        }
    }
}

/// Mirror CASes one sync of the recycler may issue before it gives up and
/// keeps the slot for a later scan (a slot that keeps changing this fast is
/// not worth a scan's time).
const MAX_RECYCLER_SYNC_CASES: u32 = 16;

/// A mirror sync's verbs, issued by the recycler straight on the fabric.
struct FabricSync<'a> {
    fabric: &'a dyn Fabric,
    primary: RemoteAddr,
    mirror: RemoteAddr,
    cases_left: u32,
}

/// Why the recycler's sync stopped.
enum SyncStop {
    Fabric(FabricError),
    /// [`MAX_RECYCLER_SYNC_CASES`] were not enough.
    TooBusy,
}

impl SyncVerbs for FabricSync<'_> {
    type Error = SyncStop;

    fn read_primary(&mut self) -> Result<u64, SyncStop> {
        read_word(self.fabric, self.primary).map_err(SyncStop::Fabric)
    }

    fn cas_mirror(&mut self, expected: u64, new: u64) -> Result<u64, SyncStop> {
        if self.cases_left == 0 {
            return Err(SyncStop::TooBusy);
        }
        self.cases_left -= 1;
        self.fabric
            .cas(self.mirror, expected, new)
            .map_err(SyncStop::Fabric)
    }
}

fn read_word(fabric: &dyn Fabric, addr: RemoteAddr) -> Result<u64, FabricError> {
    let mut w = [0u8; 8];
    fabric.read(addr, &mut w)?;
    Ok(u64::from_le_bytes(w))
}
