//! Helping: finishing or undoing entries of aborted, dead or stalled owners.
//!
//! Every step is a CAS from an exact value, so racing helpers and a late
//! owner are harmless: at most one of them wins each step.

use super::{Ctx, DteView};
use crate::fabric::RemoteAddr;
use crate::index::Candidate;
use crate::layout::dte::{decode_source, DteStatus};
use crate::layout::Ite;
use crate::Error;

/// What helping did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Helped {
    /// Nothing needed helping (a live owner, or a committed entry).
    Nothing,
    /// Some step was taken or found taken; the caller re-reads.
    Acted,
}

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
                self.restore(slot, ite, view)?;
                Ok(Helped::Acted)
            }
            DteStatus::Invalid if !self.is_dead(view.header.created_at) => Ok(Helped::Nothing),
            DteStatus::Invalid if view.state().is_migrated() => {
                self.help_dead_copy(Some(slot), ite, view)?;
                Ok(Helped::Acted)
            }
            DteStatus::Invalid => {
                let found = self.cas_state(view.at, view.state(), DteStatus::Aborted)?;
                if found.status() != DteStatus::Valid {
                    self.stats.recoveries += 1;
                    self.restore(slot, ite, view)?;
                }
                Ok(Helped::Acted)
            }
        }
    }

    /// Puts back the `replaced` value of an aborted entry (V4: anyone may).
    /// The winner of the CAS stages the entry, unless it is a MIGRATE copy
    /// that a source marker still points at (the marker's restorer stages
    /// it then, Z1).
    pub(crate) fn restore(
        &mut self,
        slot: RemoteAddr,
        ite: Ite,
        view: &DteView,
    ) -> Result<(), Error> {
        let old = self.cas(slot, ite.0, view.header.replaced)?;
        if old != ite.0 {
            return Ok(());
        }
        self.stats.recoveries += 1;
        if view.state().is_migrated() {
            let source = self.source_addr(view);
            if self.ep.read_word(source)? == Ite::moved(view.at).0 {
                return Ok(());
            }
        }
        self.stage(view.at)
    }

    fn source_addr(&self, copy: &DteView) -> RemoteAddr {
        let (node, slot) = decode_source(copy.header.source);
        Candidate {
            node: usize::from(node),
            slot,
        }
        .addr()
    }

    /// Helps a MIGRATE copy whose owner is dead. `dest` is the ITE holding
    /// it, if known (else it is searched among the copy's key's candidates).
    /// Rolls forward only if the source holds `MOVED(copy)` (V2), else back.
    pub(crate) fn help_dead_copy(
        &mut self,
        dest: Option<RemoteAddr>,
        copy_ite: Ite,
        copy: &DteView,
    ) -> Result<(), Error> {
        let source = self.source_addr(copy);
        let marker = Ite::moved(copy.at);
        if self.ep.read_word(source)? == marker.0 {
            let found = self.cas_state(copy.at, copy.state(), DteStatus::Valid)?;
            self.stats.recoveries += 1;
            if found.status() != DteStatus::Aborted {
                self.clear_marker(source, marker, copy)?;
            }
            return Ok(());
        }
        let found = self.cas_state(copy.at, copy.state(), DteStatus::Aborted)?;
        if found.status() == DteStatus::Valid {
            return Ok(());
        }
        self.stats.recoveries += 1;
        let dest = match dest {
            Some(d) => Some(d),
            None => self.find_holder(copy.key(), copy_ite)?,
        };
        if let Some(dest) = dest {
            self.restore(dest, copy_ite, copy)?;
        }
        Ok(())
    }

    /// Makes an unlinked committed DTE reusable. A MIGRATE copy may still be
    /// pointed at by its source's `MOVED` marker (the migrator stalled or
    /// died before clearing it): readers look behind markers, so the marker
    /// is cleared first. No marker can appear later: a copy commits only
    /// after its marker was installed, and a marker is installed once.
    pub(crate) fn retire(
        &mut self,
        at: crate::layout::SlotRef,
        header: &crate::layout::DteHeader,
    ) -> Result<(), Error> {
        if header.state.is_migrated() {
            let (node, slot) = decode_source(header.source);
            let source = Candidate {
                node: usize::from(node),
                slot,
            }
            .addr();
            let marker = Ite::moved(at);
            if self.ep.read_word(source)? == marker.0
                && self.cas(source, marker.0, marker.emptied().0)? == marker.0
            {
                if let Some(old) = Ite(header.prev).target() {
                    self.stage(old)?;
                }
            }
        }
        self.stage(at)
    }

    /// Clears a marker whose copy committed; the winner stages the source's
    /// old DTE (the copy's `prev`).
    pub(crate) fn clear_marker(
        &mut self,
        source: RemoteAddr,
        marker: Ite,
        copy: &DteView,
    ) -> Result<(), Error> {
        if self.cas(source, marker.0, marker.emptied().0)? == marker.0 {
            if let Some(old) = Ite(copy.header.prev).target() {
                self.stage(old)?;
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
                if self.cas(source, marker.0, copy.header.prev)? == marker.0 {
                    self.stats.recoveries += 1;
                    let copy_ite = Ite::occupied(copy.at, 0);
                    if self.find_holder(copy.key(), copy_ite)?.is_none() {
                        self.stage(copy.at)?;
                    }
                }
                Ok(Helped::Acted)
            }
            DteStatus::Invalid if self.is_dead(copy.header.created_at) => {
                let holder = self.find_holder(copy.key(), Ite::occupied(copy.at, 0))?;
                match holder {
                    Some(dest) => {
                        let ite = Ite(self.ep.read_word(dest)?);
                        self.help_dead_copy(Some(dest), ite, copy)?;
                    }
                    None => self.help_dead_copy(None, Ite::occupied(copy.at, 0), copy)?,
                }
                Ok(Helped::Acted)
            }
            DteStatus::Invalid => Ok(Helped::Nothing),
        }
    }

    /// The candidate of `key` whose ITE points at the same DTE as `ite`
    /// (filter bits aside), if any.
    fn find_holder(&mut self, key: &[u8], ite: Ite) -> Result<Option<RemoteAddr>, Error> {
        let Some(target) = ite.target() else {
            return Ok(None);
        };
        let cands = self.hasher.candidates(key);
        let ites = self.read_ites(&cands, false)?;
        Ok(cands
            .iter()
            .zip(ites)
            .find(|(_, v)| v.is_occupied() && v.target() == Some(target))
            .map(|(c, _)| c.addr()))
    }
}
