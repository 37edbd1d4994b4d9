//! Writing and publishing one's own entries: a fresh local DTE, the CAS that
//! links it into an ITE, CASes on DTE state words, and staging an unlinked
//! DTE for reuse.

use super::Ctx;
use crate::data::SlotUse;
use crate::fabric::{FabricError, RemoteAddr, Verb};
use crate::index::{Candidate, PerCandidate, MAX_HASHES};
use crate::layout::dte::{self, DteHeader, DteState, DteStatus};
use crate::layout::{Ite, SlotRef};
use crate::replica::PerReplica;
use crate::Error;
use smallvec::{smallvec, SmallVec};

/// How a CAS that links a fresh DTE into an ITE ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Linked {
    /// The ITE now points at the DTE.
    Yes,
    /// The ITE held another value; the DTE's slot is free again.
    Lost,
}

impl Ctx<'_> {
    /// CAS on a DTE's state word from `from` to the same word with `to`
    /// status; returns the state found.
    pub(crate) fn cas_state(
        &mut self,
        at: SlotRef,
        from: DteState,
        to: DteStatus,
    ) -> Result<DteState, Error> {
        let Some(addr) = self.env.geometry().dte_addr(at) else {
            return Err(Error::Corrupt {
                entry: Some(at),
                what: "no such slot in the data tables".into(),
            });
        };
        debug_assert_ne!(to, DteStatus::Invalid, "a state CAS leaves INVALID");
        debug_assert!(
            to != DteStatus::Valid
                || usize::from(at.node) == self.env.data.node()
                || from.is_migrated(),
            "only an entry's owner commits it, or a helper rolling a dead copy forward"
        );
        let expected = from.with_status(DteStatus::Invalid);
        Ok(DteState(self.gate.cas(
            addr,
            expected.0,
            expected.with_status(to).0,
        )?))
    }

    /// CASes the ITE at `at` from `expected` to `new`, which links the fresh
    /// DTE `mine`; the caller syncs the mirrors of a link that took effect
    /// before it commits (docs/replication.md#rp4), in the batch of its
    /// next round trip where it has one. A CAS that lost or was refused
    /// frees `mine` at once (it
    /// was never published); one whose outcome is unknown leaves `mine` to
    /// the recycler, which frees it once that CAS can no longer land and
    /// never did.
    ///
    /// # Errors
    /// [`Error::Timeout`] (refused: nothing happened) and fabric errors
    /// (outcome unknown).
    pub(crate) fn link(
        &mut self,
        at: RemoteAddr,
        expected: Ite,
        new: Ite,
        mine: SlotRef,
    ) -> Result<Linked, Error> {
        self.check_linkable(new, mine);
        let outcome = self.gate.cas(at, expected.0, new.0);
        self.settle_link(outcome, true, (at, expected, new, mine))
    }

    /// [`Ctx::link`] with the reverse pass riding in its batch: the READs
    /// of the candidates on the link's node follow its CAS there, which a
    /// fabric that keeps a node's verbs in batch order executes after the
    /// CAS; the other candidates are read once the CAS has returned
    /// (docs/design.md#put, step 7). Returns the reverse pass's ITEs once
    /// linked, `None` when the link lost.
    ///
    /// # Errors
    /// As [`Ctx::link`], except that any fabric error leaves `mine` in
    /// doubt: it may be a READ's, after the CAS took effect.
    pub(crate) fn link_and_reread(
        &mut self,
        cands: &[Candidate],
        at: RemoteAddr,
        (expected, new): (Ite, Ite),
        mine: SlotRef,
    ) -> Result<Option<PerCandidate<Ite>>, Error> {
        debug_assert!(
            self.gate.keeps_batch_order(),
            "a READ rides after a CAS only where a node's verbs keep their order"
        );
        self.check_linkable(new, mine);
        // Only a READ to the CAS's node is ordered after it.
        let rides = |c: &Candidate| c.addr().node == at.node;
        let mut words = [[0u8; 8]; MAX_HASHES];
        let words = &mut words[..cands.len()];
        let outcome = {
            let mut batch: SmallVec<[Verb<'_>; 4]> = smallvec![Verb::Cas {
                addr: at,
                expected: expected.0,
                new: new.0,
                old: 0,
            }];
            batch.extend(
                cands
                    .iter()
                    .zip(words.iter_mut())
                    .filter(|(c, _)| rides(c))
                    .map(|(c, w)| Verb::Read {
                        addr: c.addr(),
                        buf: &mut w[..],
                    }),
            );
            self.gate.cas_batch(&mut batch).map(|()| match batch[0] {
                Verb::Cas { old, .. } => old,
                _ => unreachable!("the batch starts with the link's CAS"),
            })
        };
        if self.settle_link(outcome, false, (at, expected, new, mine))? == Linked::Lost {
            return Ok(None);
        }
        let others = cands
            .iter()
            .zip(words.iter_mut())
            .filter(|(c, _)| !rides(c))
            .map(|(c, w)| (c.addr(), &mut w[..]));
        self.gate.read_batch(others)?;
        Ok(Some(
            words.iter().map(|w| Ite(u64::from_le_bytes(*w))).collect(),
        ))
    }

    /// What a fresh DTE must be to be linked by this client.
    fn check_linkable(&self, new: Ite, mine: SlotRef) {
        let data = self.env.data;
        debug_assert_eq!(
            usize::from(mine.node),
            data.node(),
            "a client links only entries of its own node"
        );
        debug_assert_eq!(new.target(), Some(mine), "the linked value names the entry");
        debug_assert!(
            data.holds(mine),
            "the allocator holds a linked entry's slot"
        );
        // An entry whose link lost is free again at its generation, so the
        // next attempt may link the same (slot, generation): only a link
        // that took (or may have taken) effect counts.
        #[cfg(debug_assertions)]
        debug_assert!(!self.op.linked.contains(&mine), "an entry is linked once");
    }

    /// Settles `mine` after the CAS of `at` from `expected` to `new`, which
    /// links it, returned `outcome` (the word's old value). A CAS that lost
    /// or was refused frees `mine`; so does a fabric error that says the
    /// CAS did not execute, where `cas_alone` (no other verb could have
    /// failed instead); any other error leaves `mine` to the recycler.
    fn settle_link(
        &mut self,
        outcome: Result<u64, Error>,
        cas_alone: bool,
        (at, expected, new, mine): (RemoteAddr, Ite, Ite, SlotRef),
    ) -> Result<Linked, Error> {
        let data = self.env.data;
        match outcome {
            Ok(old) if old == expected.0 => {
                #[cfg(debug_assertions)]
                self.op.linked.push(mine);
                Ok(Linked::Yes)
            }
            Ok(_) => {
                data.release_unpublished(mine);
                Ok(Linked::Lost)
            }
            Err(Error::Timeout) => {
                data.release_unpublished(mine);
                Err(Error::Timeout)
            }
            Err(Error::Fabric(e)) if cas_alone && !e.may_have_executed() => {
                data.release_unpublished(mine);
                Err(Error::Fabric(e))
            }
            Err(e) => {
                #[cfg(debug_assertions)]
                self.op.linked.push(mine);
                data.note_in_doubt(mine, at, new.0);
                Err(e)
            }
        }
    }

    /// Stages an unlinked DTE: one WRITE of `expires_at = now + expiry`
    /// (never a CAS'd word). Only the thread whose CAS unlinked the DTE
    /// calls this, once (see the module docs). The operation's outcome no
    /// longer depends on it, so a failed WRITE is logged and counted (the
    /// slot leaks), not returned.
    pub(crate) fn stage(&mut self, r: SlotRef) {
        let Some(addr) = self.env.geometry().dte_addr(r) else {
            return;
        };
        #[cfg(debug_assertions)]
        {
            debug_assert!(
                !self.op.staged.contains(&r),
                "{r} staged twice by one operation"
            );
            self.op.staged.push(r);
        }
        let at = self.env.data.expires_at(self.gate.wall_now());
        let addr = addr.add(dte::EXPIRES_AT_OFFSET as u64);
        match self.stage_write(addr, at) {
            // Its own node's slots come back through its own allocations.
            Ok(()) if usize::from(r.node) == self.env.data.node() => self.kept.stagings.note(r, at),
            Ok(()) => {}
            Err(e) => {
                self.op.stats.stage_failures += 1;
                tracing::warn!(%addr, "staging an unlinked entry failed ({e}); its slot leaks");
            }
        }
    }

    /// The stage WRITE of `expires_at` to the entry's word at `addr` on
    /// every replica: the mirrors' first, in one batch, then the primary's
    /// (docs/replication.md#rp5). The primary's stamp lets the slot be
    /// reused an expiry later, so a mirror's stamp posted with it could
    /// land on the slot's next occupant.
    fn stage_write(&mut self, addr: RemoteAddr, expires_at: u64) -> Result<(), FabricError> {
        let word = expires_at.to_le_bytes();
        if self.env.geometry().replicas() > 1 {
            let mut batch: PerReplica<Verb<'_>> = self
                .env
                .views
                .mirrors(addr)
                .into_iter()
                .map(|addr| Verb::Write { addr, data: &word })
                .collect();
            self.gate.write_batch(&mut batch)?;
        }
        self.gate.write(addr, &word)
    }

    /// Allocates a local DTE slot of `class` for `purpose` and writes a
    /// complete entry into it. `None` when the data table has no free slot
    /// for it yet.
    pub(crate) fn write_entry(
        &mut self,
        class: u8,
        purpose: SlotUse,
        header: impl FnOnce(u16) -> DteHeader,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<SlotRef>, Error> {
        let (stagings, scan_ns) = (&mut self.kept.stagings, &mut self.op.stats.scan_ns);
        let Some(slot) = self.gate.allocate(
            &self.env,
            class,
            purpose,
            self.op.created_at,
            stagings,
            scan_ns,
        )?
        else {
            return Ok(None);
        };
        self.op.got_slot();
        let Some(addr) = self.env.geometry().dte_addr(slot) else {
            return Err(Error::Corrupt {
                entry: Some(slot),
                what: "the allocator returned a slot outside the tables".into(),
            });
        };
        let h = header(slot.generation);
        let image = dte::EntryImage::new(h, key, value);
        let parts = image.parts();
        if let Err(e) = self
            .gate
            .write_streaming(addr, &parts, dte::EntryImage::HEAD_PARTS)
        {
            // Never linked: the slot is free again whatever the WRITE did.
            self.env.data.release_unpublished(slot);
            return Err(e.into());
        }
        if self.env.geometry().replicas() > 1 {
            let whole = parts.concat();
            if let Err(e) = self.write_images(addr, &whole) {
                self.env.data.release_unpublished(slot);
                return Err(e);
            }
        }
        Ok(Some(slot))
    }
}
