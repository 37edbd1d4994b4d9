//! MIGRATE: moving a committed entry to another of its key's candidates to
//! free a slot, cuckoo style, recursively up to `max_migrate_depth`.
//!
//! The copy is a new local DTE (`INVALID|MIGRATED`) recording the source's
//! ITE value (`prev`), the destination's exact empty value (`replaced`) and
//! the source slot. Order: CAS destination empty → copy; CAS source →
//! `MOVED(copy)`; commit the copy; clear the marker. Helpers can finish or
//! undo each step (see `help.rs`); a marker left behind is resolved by the
//! recycler before the copy's slot is reused (see [`crate::data`]).

use super::help::Helped;
use super::mirror::Commit;
use super::{Ctx, Linked, Retry};
use crate::data::SlotUse;
use crate::index::{Candidate, PerCandidate};
use crate::layout::dte::{encode_source, DteHeader, DteState, DteStatus};
use crate::layout::{Ite, IteKind};
use crate::Error;

/// What an attempt to free a slot achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Freed {
    /// The slot is empty now (or was helped along): retry the operation.
    Yes,
    /// It is in a passing state (a live owner's entry, a migration under
    /// way): retry after a back-off.
    Busy,
    /// No data slot for the copy.
    NoSlot,
    /// Could not free it this way.
    No,
}

impl Ctx<'_> {
    /// Frees one of `cands` (holding `ites`) by migrating its entry, trying
    /// each candidate in turn; returns why the caller should retry.
    ///
    /// # Errors
    /// [`Error::IndexFull`] when no candidate can be freed within
    /// `max_migrate_depth` levels, and none is merely busy or short of a
    /// data slot.
    pub(crate) fn make_room(&mut self, cands: &[Candidate], ites: &[Ite]) -> Result<Retry, Error> {
        let mut why = None;
        for (c, ite) in cands.iter().zip(ites) {
            match self.free_slot(*c, *ite, 1)? {
                Freed::Yes => return Ok(Retry::Changed),
                Freed::Busy => why = Some(Retry::Busy),
                Freed::NoSlot => why = why.or(Some(Retry::NoFreeSlot)),
                Freed::No => {}
            }
        }
        why.ok_or(Error::IndexFull)
    }

    /// Frees the index slot `src` (holding `src_ite`) by moving its entry to
    /// another candidate of that entry's key, recursively freeing that one
    /// first if needed.
    fn free_slot(&mut self, src: Candidate, src_ite: Ite, depth: usize) -> Result<Freed, Error> {
        let IteKind::Occupied { dte, filter } = src_ite.kind() else {
            // An empty slot is free already; a marker is being helped by
            // readers. Either way the caller re-reads.
            return Ok(if src_ite.is_empty() {
                Freed::Yes
            } else {
                Freed::Busy
            });
        };
        let Some(view) = self.read_dte(dte, 0, true)? else {
            self.op.note(Retry::Torn);
            return Ok(Freed::Yes);
        };
        let slot = src.addr();
        if view.status() != DteStatus::Valid {
            // Only committed entries move; help the others along.
            return Ok(match self.help_entry(slot, src_ite, &view)? {
                Helped::Acted => Freed::Yes,
                Helped::Nothing => Freed::Busy,
            });
        }
        if view.state().is_tombstone() {
            // A committed tombstone need not move: unlinking it frees the slot.
            if self.cas_ite(slot, src_ite.0, src_ite.emptied().0)? == src_ite.0 {
                self.stage(dte);
            }
            return Ok(Freed::Yes);
        }
        let Some(key) = view.key().filter(|_| view.checksum_ok()) else {
            self.op.torn_at = Some(view.at);
            self.op.note(Retry::Torn);
            return Ok(Freed::Yes);
        };
        let others: PerCandidate<Candidate> = self
            .env
            .hasher
            .candidate_list(key)
            .into_iter()
            .filter(|c| *c != src)
            .collect();
        if others.is_empty() {
            return Ok(Freed::No);
        }
        let mut other_ites = self.read_ites(&others, false)?;
        let mut dest = other_ites.iter().position(|i| i.is_empty());
        // Why a deeper level could not free a destination: a full data
        // table or a busy slot is not a full index
        // (docs/design.md#errors-name-their-cause).
        let mut deeper = Freed::No;
        if dest.is_none() && depth < self.env.config.max_migrate_depth {
            for j in 0..others.len() {
                if !other_ites[j].is_occupied() {
                    continue;
                }
                match self.free_slot(others[j], other_ites[j], depth + 1)? {
                    Freed::Yes => {
                        other_ites[j] = Ite(self.gate.read_word(others[j].addr())?);
                        if !other_ites[j].is_empty() {
                            // Refilled before the re-read: something
                            // changed, so the caller retries.
                            return Ok(Freed::Yes);
                        }
                        dest = Some(j);
                        break;
                    }
                    Freed::NoSlot => deeper = Freed::NoSlot,
                    Freed::Busy if deeper == Freed::No => deeper = Freed::Busy,
                    Freed::Busy | Freed::No => {}
                }
            }
        }
        let Some(d) = dest else {
            return Ok(deeper);
        };
        let (dest_slot, dest_ite) = (others[d].addr(), other_ites[d]);
        let source = encode_source(src.node as u16, src.slot);
        let class = view.at.class;
        let created_at = self.op.created_at;
        let (key_len, value_len) = (key.len(), view.value().len());
        let Some(copy) = self.write_entry(
            class,
            SlotUse::Entry,
            |generation| DteHeader {
                state: DteState::new(generation, key_len, value_len, false, true),
                created_at,
                prev: src_ite.0,
                replaced: dest_ite.0,
                source,
                ..DteHeader::default()
            },
            key,
            view.value(),
        )?
        else {
            self.op.note(Retry::NoFreeSlot);
            return Ok(Freed::NoSlot);
        };
        let state = DteState::new(copy.generation, key_len, value_len, false, true);
        let copy_ite = Ite::occupied(copy, filter);
        if self.link(dest_slot, dest_ite, copy_ite, copy)? == Linked::Lost {
            return Ok(Freed::Yes);
        }
        self.sync_mirrors(dest_slot, dest_ite.0, copy_ite.0)?;
        let marker = Ite::moved(copy);
        if self.cas_ite(slot, src_ite.0, marker.0)? != src_ite.0 {
            // The source changed under us: undo the copy. The winner of the
            // destination's restore stages the copy.
            self.undo_own(copy, state, dest_slot, copy_ite.0, dest_ite.0)?;
            return Ok(Freed::Yes);
        }
        let committed = self.commit(copy, state)?;
        self.op.stats.migrations += 1;
        // CV: clear the marker only if the copy committed (by us or a
        // helper); if a helper aborted it, the marker is theirs to restore.
        if committed == Commit::Aborted {
            self.op.stats.markers_left += 1;
        } else if self.cas_ite(slot, marker.0, marker.emptied().0)? == marker.0 {
            self.stage(dte);
        }
        Ok(Freed::Yes)
    }
}
