//! The mirrors of a share (docs/replication.md#replicated-writes): every
//! step an operation takes on a primary index slot or entry state that the
//! mirrors must see, in the order the rules require. With one replica every
//! method here is the primary step alone, with no verb added.

use super::Ctx;
use crate::fabric::{RemoteAddr, Verb};
use crate::index::{Candidate, PerCandidate, MAX_HASHES};
use crate::layout::dte::{DteState, DteStatus};
use crate::layout::SlotRef;
use crate::layout::{read_word, Ite, WORD};
use crate::replica::{catch_up_mirror, sync_mirror, PerReplica, SyncVerbs};
use crate::Error;

/// How a commit ended (docs/replication.md#rp3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Commit {
    /// The entry is VALID on every replica.
    Done,
    /// A helper aborted it first.
    Aborted,
}

/// The verbs of one mirror's sync, through the operation's gate.
struct GateSync<'g, 'a> {
    gate: &'g mut super::Gate<'a>,
    primary: RemoteAddr,
    mirror: RemoteAddr,
}

impl SyncVerbs for GateSync<'_, '_> {
    type Error = Error;

    fn read_primary(&mut self) -> Result<u64, Error> {
        Ok(self.gate.read_word(self.primary)?)
    }

    fn cas_mirror(&mut self, expected: u64, new: u64) -> Result<u64, Error> {
        self.gate.cas(self.mirror, expected, new)
    }
}

impl Ctx<'_> {
    /// Whether this cluster keeps more than one replica of each share.
    fn mirrored(&self) -> bool {
        self.env.geometry().replicas() > 1
    }

    /// The mirrors of what replica 0 keeps at `at`.
    fn mirrors_of(&self, at: RemoteAddr) -> PerReplica<RemoteAddr> {
        self.env.views.mirrors(at)
    }

    /// CAS on a primary index slot. The winner brings the slot's mirrors up
    /// to date before this returns (docs/replication.md#rp2), so a caller
    /// that sees its CAS won may stage what it unlinked
    /// (docs/replication.md#rp5) or go on to commit
    /// (docs/replication.md#rp4).
    ///
    /// # Errors
    /// As [`super::Gate::cas`]; and, after a CAS that won, the error that
    /// stopped its sync: the caller neither stages nor commits then.
    pub(crate) fn cas_ite(
        &mut self,
        slot: RemoteAddr,
        expected: u64,
        new: u64,
    ) -> Result<u64, Error> {
        let old = self.gate.cas(slot, expected, new)?;
        if old == expected {
            self.sync_mirrors(slot, expected, new)?;
        }
        Ok(old)
    }

    /// Brings every mirror of the index slot `slot` forward after `x → y`
    /// took effect on it (docs/replication.md#rp2): one batch of CASes, and
    /// for a mirror found behind or ahead, the sync's loop.
    ///
    /// # Errors
    /// The deadline or a fabric error; the mirror lags until the slot's
    /// next change (counted in [`crate::OpStats::mirrors_behind`]).
    pub(crate) fn sync_mirrors(&mut self, slot: RemoteAddr, x: u64, y: u64) -> Result<(), Error> {
        if !self.mirrored() {
            return Ok(());
        }
        let result = self.sync_mirrors_now(slot, x, y);
        if result.is_err() {
            self.op.stats.mirrors_behind += 1;
        }
        result
    }

    fn sync_mirrors_now(&mut self, slot: RemoteAddr, x: u64, y: u64) -> Result<(), Error> {
        let mut batch = self.mirror_cases(slot, x, y);
        self.gate.cas_batch(&mut batch)?;
        self.finish_sync(slot, x, y, &batch)
    }

    /// One CAS `expected → new` on every mirror of what replica 0 keeps
    /// at `at` (a sync's first step, a commit's or an abort's).
    fn mirror_cases(&self, at: RemoteAddr, expected: u64, new: u64) -> PerReplica<Verb<'static>> {
        self.mirrors_of(at)
            .into_iter()
            .map(|addr| Verb::Cas {
                addr,
                expected,
                new,
                old: 0,
            })
            .collect()
    }

    /// The rest of a sync whose first CASes (posted) are in `posted`.
    fn finish_sync(
        &mut self,
        slot: RemoteAddr,
        x: u64,
        y: u64,
        posted: &[Verb<'_>],
    ) -> Result<(), Error> {
        for verb in posted {
            let Verb::Cas { addr, old, .. } = *verb else {
                continue;
            };
            let mut verbs = GateSync {
                gate: &mut self.gate,
                primary: slot,
                mirror: addr,
            };
            sync_mirror(x, y, old, &mut verbs)?;
        }
        Ok(())
    }

    /// Whether a write's reverse pass rides in its link's batch
    /// ([`Ctx::link_and_reread`], docs/design.md#put, step 7): reads are
    /// batched, the fabric keeps a node's verbs in batch order and charges
    /// a round trip for another node's (on `shm` riding saves nothing), no
    /// mirror needs the link's sync in the reverse pass's batch, and no
    /// duplicate is to be cleared between the link and the reverse pass.
    pub(crate) fn reverse_pass_rides_link(&self, no_duplicates: bool) -> bool {
        no_duplicates
            && !self.mirrored()
            && self.env.config.optimizations.batched_reads
            && self.gate.keeps_batch_order()
            && self.gate.remote_reads_cost_more()
    }

    /// The reverse pass of a write (the ITEs of `cands`), carrying the
    /// first CASes of the sync of its link `(slot, x, y)` and READs of the
    /// other candidates' mirrors in the same batch where reads are batched
    /// (docs/replication.md#round-trips). A mirror found lagging its
    /// primary is brought forward before this returns, so that the write
    /// commits only once no mirror of its key's candidates still holds what
    /// the primaries no longer do (docs/replication.md#rp4b).
    ///
    /// # Errors
    /// As [`Ctx::read_ites`] and [`Ctx::sync_mirrors`].
    pub(crate) fn reverse_pass_syncing(
        &mut self,
        cands: &[Candidate],
        link: (RemoteAddr, u64, u64),
    ) -> Result<PerCandidate<Ite>, Error> {
        let (slot, x, y) = link;
        if !self.mirrored() {
            return self.read_ites(cands, true);
        }
        let others: Vec<(RemoteAddr, RemoteAddr)> = cands
            .iter()
            .map(|c| c.addr())
            .filter(|&c| c != slot)
            .flat_map(|c| self.mirrors_of(c).into_iter().map(move |m| (c, m)))
            .collect();
        let mut seen = vec![[0u8; 8]; others.len()];
        if !self.env.config.optimizations.batched_reads {
            self.sync_mirrors(slot, x, y)?;
            let ites = self.read_ites(cands, true)?;
            let reads = others.iter().map(|o| o.1).zip(seen.iter_mut());
            self.gate
                .read_batch(reads.map(|(addr, w)| (addr, &mut w[..])))?;
            self.catch_up(&others, &seen, cands, &ites)?;
            return Ok(ites);
        }
        let mut words = [[0u8; 8]; MAX_HASHES];
        let cases = self.mirror_cases(slot, x, y);
        let mirrors = cases.len();
        let mut batch: Vec<Verb<'_>> = cases.into_iter().collect();
        batch.extend(cands.iter().zip(words.iter_mut()).map(|(c, w)| Verb::Read {
            addr: c.addr(),
            buf: &mut w[..],
        }));
        batch.extend(others.iter().zip(seen.iter_mut()).map(|(o, w)| Verb::Read {
            addr: o.1,
            buf: &mut w[..],
        }));
        let synced = self
            .gate
            .cas_batch(&mut batch)
            .and_then(|()| self.finish_sync(slot, x, y, &batch[..mirrors]));
        if synced.is_err() {
            self.op.stats.mirrors_behind += 1;
        }
        synced?;
        drop(batch);
        let ites: PerCandidate<Ite> = words[..cands.len()]
            .iter()
            .map(|w| Ite(u64::from_le_bytes(*w)))
            .collect();
        self.catch_up(&others, &seen, cands, &ites)?;
        Ok(ites)
    }

    /// Brings forward every mirror in `others` (pairs of a candidate's slot
    /// and one of its mirrors) whose word, read as `seen`, differs from
    /// what the reverse pass read on its primary (`ites` of `cands`): a
    /// change whose winner's sync was cut short (a deadline, a crash). It
    /// is the sync's loop from the mirror's value, each primary value read
    /// after the mirror's (docs/replication.md#rp2).
    fn catch_up(
        &mut self,
        others: &[(RemoteAddr, RemoteAddr)],
        seen: &[[u8; 8]],
        cands: &[Candidate],
        ites: &[Ite],
    ) -> Result<(), Error> {
        for (&(primary, mirror), word) in others.iter().zip(seen) {
            let found = u64::from_le_bytes(*word);
            let read = cands.iter().position(|c| c.addr() == primary);
            if read.is_some_and(|i| ites[i].0 == found) {
                continue;
            }
            let mut verbs = GateSync {
                gate: &mut self.gate,
                primary,
                mirror,
            };
            let caught = catch_up_mirror(found, &mut verbs);
            if caught.is_err() {
                self.op.stats.mirrors_behind += 1;
            }
            caught?;
        }
        Ok(())
    }

    /// Commits the entry `at`, written with `state`: on every mirror first,
    /// then on the primary, and on the primary only if every mirror CAS
    /// found the entry INVALID or already VALID
    /// (docs/replication.md#rp3). Callers have had the syncs of every index
    /// CAS the attempt won return (docs/replication.md#rp4).
    pub(crate) fn commit(&mut self, at: SlotRef, state: DteState) -> Result<Commit, Error> {
        let invalid = state.with_status(DteStatus::Invalid);
        let valid = state.with_status(DteStatus::Valid);
        if self.mirrored() {
            let primary = self.dte_state_addr(at)?;
            let mut batch = self.mirror_cases(primary, invalid.0, valid.0);
            self.gate.cas_batch(&mut batch)?;
            for verb in &batch {
                let Verb::Cas { addr, old, .. } = *verb else {
                    continue;
                };
                if self.mirror_committed(at, addr, DteState(old), state)? == Commit::Aborted {
                    return Ok(Commit::Aborted);
                }
            }
        }
        let found = self.cas_state(at, state, DteStatus::Valid)?;
        Ok(if found.status() == DteStatus::Aborted {
            Commit::Aborted
        } else {
            Commit::Done
        })
    }

    /// After the commit CAS on the mirror at `mirror` found `found`: the
    /// entry is VALID there now, or a helper aborted it (then the primary
    /// says so too, docs/replication.md#rp3b). A restoring mirror that has
    /// not copied the slot yet gets it from the primary first, then the
    /// CAS again (the checker's flaw 6).
    fn mirror_committed(
        &mut self,
        at: SlotRef,
        mirror: RemoteAddr,
        mut found: DteState,
        state: DteState,
    ) -> Result<Commit, Error> {
        let invalid = state.with_status(DteStatus::Invalid);
        let valid = state.with_status(DteStatus::Valid);
        for _ in 0..3 {
            // INVALID: the CAS took effect; VALID: it had already.
            if found == invalid || found == valid {
                return Ok(Commit::Done);
            }
            if found == state.with_status(DteStatus::Aborted) {
                return Ok(Commit::Aborted);
            }
            self.bring_mirror(at, mirror, found)?;
            found = DteState(self.gate.cas(mirror, invalid.0, valid.0)?);
        }
        Err(Error::Corrupt {
            entry: Some(at),
            what: format!(
                "a mirror of the entry holds state {:#x}, not the {:#x} its image was written with",
                found.0, invalid.0
            ),
        })
    }

    /// Copies the entry `at` from its primary to a restoring mirror whose
    /// state word holds `found`: the slot but its state word, then the
    /// state word from UNSET (docs/replication.md#restore).
    fn bring_mirror(
        &mut self,
        at: SlotRef,
        mirror: RemoteAddr,
        found: DteState,
    ) -> Result<(), Error> {
        let primary = self.dte_state_addr(at)?;
        let mut slot = vec![0u8; self.env.geometry().slot_bytes(at.class)];
        self.gate.read(primary, &mut slot)?;
        self.gate.write(mirror.add(WORD as u64), &slot[WORD..])?;
        if found == DteState::UNSET {
            self.gate.cas(mirror, found.0, read_word(&slot, 0))?;
        }
        Ok(())
    }

    /// Marks every mirror's copy of the aborted entry `at` (written with
    /// `state`) ABORTED, from INVALID or from a VALID its owner's mirror
    /// commit left there: a restorer does this before it puts the entry's
    /// `replaced` value back (docs/replication.md#rp3b).
    pub(crate) fn abort_mirrors(&mut self, at: SlotRef, state: DteState) -> Result<(), Error> {
        if !self.mirrored() {
            return Ok(());
        }
        let aborted = state.with_status(DteStatus::Aborted).0;
        let valid = state.with_status(DteStatus::Valid).0;
        let primary = self.dte_state_addr(at)?;
        let invalid = state.with_status(DteStatus::Invalid).0;
        let mut batch = self.mirror_cases(primary, invalid, aborted);
        self.gate.cas_batch(&mut batch)?;
        // A restoring mirror that has not copied the slot yet (UNSET) gets
        // the primary's ABORTED from its restorer.
        for verb in batch {
            if let Verb::Cas { addr, old, .. } = verb {
                if old == valid {
                    self.gate.cas(addr, valid, aborted)?;
                }
            }
        }
        Ok(())
    }

    /// Undoes one's own entry `mine` (written with `state`) linked at
    /// `slot` as `linked` in place of `replaced`: abort it, mark its
    /// mirrors aborted, put `replaced` back. A helper may have taken any of
    /// these steps already; whoever wins the restore stages the entry.
    pub(crate) fn undo_own(
        &mut self,
        mine: SlotRef,
        state: DteState,
        slot: RemoteAddr,
        linked: u64,
        replaced: u64,
    ) -> Result<(), Error> {
        self.cas_state(mine, state, DteStatus::Aborted)?;
        self.abort_mirrors(mine, state)?;
        if self.cas_ite(slot, linked, replaced)? == linked {
            self.stage(mine);
        }
        Ok(())
    }

    /// Writes an entry's image, gathered in `image`, to every mirror of
    /// its slot `at` (replica 0 holds it already), and waits for all of
    /// them: before the CAS that links it (docs/replication.md#rp1).
    pub(crate) fn write_images(&mut self, at: RemoteAddr, image: &[u8]) -> Result<(), Error> {
        let mut batch: PerReplica<Verb<'_>> = self
            .mirrors_of(at)
            .into_iter()
            .map(|addr| Verb::Write { addr, data: image })
            .collect();
        Ok(self.gate.write_batch(&mut batch)?)
    }

    /// The address of the state word of the entry `at` on replica 0.
    fn dte_state_addr(&self, at: SlotRef) -> Result<RemoteAddr, Error> {
        self.env
            .geometry()
            .dte_addr(at)
            .ok_or_else(|| Error::Corrupt {
                entry: Some(at),
                what: "no such slot in the data tables".into(),
            })
    }
}
