//! Helping: finishing or undoing entries of aborted, dead or stalled owners.
//!
//! Every step is a CAS from an exact value, so racing helpers and a late
//! owner are harmless: at most one of them wins each step, and only that
//! winner stages what its CAS unlinked.

use super::mirror::Commit;
use super::{Ctx, DteView};
use crate::fabric::RemoteAddr;
use crate::layout::dte::{decode_source, DteStatus};
use crate::layout::{Ite, SlotRef};
use crate::Error;

/// What helping did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Helped {
    /// Nothing needed helping (a live owner, or a committed entry).
    Nothing,
    /// Some step was taken or found taken; the caller re-reads.
    Acted,
}

/// An ITE slot and the value a helper read there.
pub(crate) type Seen = (RemoteAddr, Ite);

impl Ctx<'_> {
    /// Helps the entry `view` met in the ITE at `slot` holding `ite`, if it
    /// is `ABORTED` or its owner is dead.
    pub(crate) fn help_entry(
        &mut self,
        slot: RemoteAddr,
        ite: Ite,
        view: &DteView,
    ) -> Result<Helped, Error> {
        match view.status() {
            DteStatus::Valid => Ok(Helped::Nothing),
            DteStatus::Aborted => {
                self.restore((slot, ite), view)?;
                Ok(Helped::Acted)
            }
            DteStatus::Invalid if !self.env.is_dead(view.header.created_at) => Ok(Helped::Nothing),
            DteStatus::Invalid if view.state().is_migrated() => {
                self.help_dead_copy(Some((slot, ite)), view)?;
                Ok(Helped::Acted)
            }
            DteStatus::Invalid => {
                let found = self.cas_state(view.at, view.state(), DteStatus::Aborted)?;
                if found.status() != DteStatus::Valid {
                    self.op.stats.recoveries += 1;
                    self.restore((slot, ite), view)?;
                }
                Ok(Helped::Acted)
            }
        }
    }

    /// Puts back the `replaced` value of an aborted entry (V4: anyone may),
    /// with a CAS from the value `seen` read in the ITE, and only if that
    /// value points at the entry itself
    /// (docs/design.md#f5-rule-iv-restore-only-what-you-saw: never from a
    /// value read later, which may belong to another key). The winner of the
    /// CAS is the entry's one stager, also for a MIGRATE copy whose source
    /// holds, or may later receive, `MOVED(copy)`: the recycler resolves such
    /// a marker before the copy's slot is reused
    /// (docs/design.md#f3-rule-ii-the-recycler-restores-an-aborted-copys-marker,
    /// docs/design.md#f4-rule-i-one-stager-per-incarnation).
    pub(crate) fn restore(&mut self, seen: Seen, entry: &DteView) -> Result<(), Error> {
        let (slot, ite) = seen;
        if !ite.is_occupied() || ite.target() != Some(entry.at) {
            return Ok(());
        }
        // Its mirrors say ABORTED before any replica of the slot stops
        // naming it (docs/replication.md#rp3b).
        self.abort_mirrors(entry.at, entry.state())?;
        if self.cas_ite(slot, ite.0, entry.header.replaced)? == ite.0 {
            self.op.stats.recoveries += 1;
            self.stage(entry.at);
        }
        Ok(())
    }

    /// The index slot a copy was moved from, if its `source` word names one
    /// (a header read through a stale reference may hold any bits).
    fn source_of(&self, copy: &DteView) -> Option<RemoteAddr> {
        let (node, slot) = decode_source(copy.header.source);
        self.env.geometry().index_slot(node, slot)
    }

    /// Helps a MIGRATE copy whose owner is dead, linked at `dest` if known.
    /// Rolls forward only if the source holds `MOVED(copy)` (V2), else back.
    pub(crate) fn help_dead_copy(
        &mut self,
        dest: Option<Seen>,
        copy: &DteView,
    ) -> Result<(), Error> {
        let Some(source) = self.source_of(copy) else {
            return Ok(());
        };
        let marker = Ite::moved(copy.at);
        if self.gate.read_word(source)? == marker.0 {
            if self.env.geometry().replicas() > 1 {
                // The dead owner's part first: its links on the mirrors
                // (docs/replication.md#rp4). Without its destination the
                // copy cannot be rolled forward yet; the caller retries.
                let Some((dest, linked)) = dest else {
                    return Ok(());
                };
                self.sync_mirrors(dest, copy.header.replaced, linked.0)?;
                self.sync_mirrors(source, copy.header.prev, marker.0)?;
            }
            let committed = self.commit(copy.at, copy.state())?;
            self.op.stats.recoveries += 1;
            if committed == Commit::Done {
                self.clear_marker(source, marker, copy)?;
            }
            return Ok(());
        }
        let found = self.cas_state(copy.at, copy.state(), DteStatus::Aborted)?;
        if found.status() == DteStatus::Valid {
            return Ok(());
        }
        self.op.stats.recoveries += 1;
        if let Some(dest) = dest {
            self.restore(dest, copy)?;
        }
        Ok(())
    }

    /// Clears a marker whose copy committed; the winner stages the source's
    /// old DTE (the copy's `prev`).
    pub(crate) fn clear_marker(
        &mut self,
        source: RemoteAddr,
        marker: Ite,
        copy: &DteView,
    ) -> Result<(), Error> {
        if self.cas_ite(source, marker.0, marker.emptied().0)? == marker.0 {
            if let Some(old) = Ite(copy.header.prev).target() {
                self.stage(old);
            }
        }
        Ok(())
    }

    /// Helps a `MOVED(copy)` marker found at `source` whose copy was read as
    /// `copy`: clear it if the copy committed, restore the copy's `prev` if
    /// it aborted (Z1), help the copy if its owner is dead.
    pub(crate) fn help_marker(
        &mut self,
        source: RemoteAddr,
        marker: Ite,
        copy: &DteView,
    ) -> Result<Helped, Error> {
        match copy.status() {
            DteStatus::Valid => {
                self.clear_marker(source, marker, copy)?;
                Ok(Helped::Acted)
            }
            DteStatus::Aborted => {
                // Z1: a zombie migrator's late marker. The copy was staged by
                // whoever restored its destination; this restorer stages
                // nothing (a second stage could land after the slot's reuse
                // and stamp its next occupant, see
                // docs/design.md#f4-rule-i-one-stager-per-incarnation).
                if self.cas_ite(source, marker.0, copy.header.prev)? == marker.0 {
                    self.op.stats.marker_restores += 1;
                }
                Ok(Helped::Acted)
            }
            DteStatus::Invalid if self.env.is_dead(copy.header.created_at) => {
                let holder = self.find_holder(copy)?;
                self.help_dead_copy(holder, copy)?;
                Ok(Helped::Acted)
            }
            DteStatus::Invalid => Ok(Helped::Nothing),
        }
    }

    /// The candidate of the copy's key whose ITE points at the copy, with
    /// the exact value found there.
    fn find_holder(&mut self, copy: &DteView) -> Result<Option<Seen>, Error> {
        let Some(key) = copy.key() else {
            return Ok(None);
        };
        let cands = self.env.hasher.candidate_list(key);
        let ites = self.read_ites(&cands, false)?;
        let points_at = |v: &Ite, at: SlotRef| v.is_occupied() && v.target() == Some(at);
        Ok(cands
            .iter()
            .zip(ites)
            .find(|(_, v)| points_at(v, copy.at))
            .map(|(c, v)| (c.addr(), v)))
    }
}
