//! A GET's first pass with a location hint (docs/design.md#location-hints):
//! the key's ITEs and the entry its hint names in one batch, and the answer
//! from that entry when an ITE of the batch still holds the hinted value.

use super::get::{Pass, ValueOut};
use super::{Ctx, DteView};
use crate::cache::hints::Hint;
use crate::fabric::Verb;
use crate::index::{Candidate, PerCandidate, MAX_HASHES};
use crate::layout::dte::{self, DteStatus};
use crate::layout::{Ite, IteKind, SlotRef};
use crate::Error;

impl Ctx<'_> {
    /// Whether this client's GETs use location hints: they are on, the
    /// index is read in batches, and the fabric's remote reads cost more
    /// than local ones (on `shm`, a second read costs no round trip to
    /// save).
    pub(super) fn uses_hints(&self) -> bool {
        let o = self.env.config.optimizations;
        o.hints
            && o.batched_reads
            && self.kept.hints.enabled()
            && self.gate.remote_reads_cost_more()
    }

    /// The key's hint and the entry it names, if the pass should read that
    /// entry with the index: not when the cache holds the entry, which
    /// answers from the ITE read alone.
    pub(super) fn hint_to_read(&mut self, hint_key: u64) -> Option<(Hint, SlotRef)> {
        let hint = self.kept.hints.get(hint_key)?;
        let IteKind::Occupied { dte, .. } = Ite(hint.ite).kind() else {
            return None;
        };
        let cache = self.env.config.optimizations.cache;
        if self.gate.caches(cache, dte.node.into()) && self.kept.cache.holds(hint.ite) {
            return None;
        }
        self.env.geometry().dte_addr(dte)?;
        Some((hint, dte))
    }

    /// Reads the ITEs of `cands` and the whole slot of `dte` in one batch.
    /// The entry's value lands in `out` (docs/design.md#one-copy-gets)
    /// unless the cache will keep the entry. The view is `None` if the slot
    /// holds another generation or an insane header: a miss, not a torn
    /// pass, since no ITE read before it named that entry.
    pub(super) fn read_ites_hinted(
        &mut self,
        cands: &[Candidate],
        dte: SlotRef,
        key_len: usize,
        out: &mut impl ValueOut,
    ) -> Result<(PerCandidate<Ite>, Option<DteView>), Error> {
        let Some(addr) = self.env.geometry().dte_addr(dte) else {
            return Ok((self.read_ites(cands, false)?, None));
        };
        let req = (dte, key_len, true);
        let cache = self.env.config.optimizations.cache;
        let kept = self.gate.caches(cache, dte.node.into());
        let landing_len = self.landing_len(req).filter(|_| !kept);
        let mut landing = landing_len.and_then(|len| out.landing(len));
        let head_len = match landing {
            Some(_) => dte::value_offset(key_len),
            None => self.env.geometry().slot_bytes(dte.class),
        };
        let landed = landing.as_ref().map(|tail| tail.len());
        let mut head = self.buffer(head_len);
        let mut all = [[0u8; 8]; MAX_HASHES];
        let words = &mut all[..cands.len()];
        {
            let mut verbs: PerCandidate<Verb<'_>> = cands
                .iter()
                .zip(words.iter_mut())
                .map(|(c, w)| Verb::Read {
                    addr: c.addr(),
                    buf: &mut w[..],
                })
                .collect();
            verbs.push(match landing.take() {
                Some(tail) => Verb::ReadScatter {
                    addr,
                    head: &mut head,
                    tail,
                },
                None => Verb::Read {
                    addr,
                    buf: &mut head,
                },
            });
            self.gate.post_reads(&mut verbs)?;
        }
        let ites = words.iter().map(|w| Ite(u64::from_le_bytes(*w))).collect();
        let view = self.view(dte, head).map(|mut v| {
            v.landed = landed;
            v
        });
        Ok((ites, view))
    }

    /// Answers from the entry read through `hint` if an ITE of this batch
    /// still holds the hinted value, the entry is a committed one of the
    /// key, and the batch ended within half an expiry of its start
    /// (docs/design.md#location-hints); `None`: the pass goes on as one
    /// without a hint.
    pub(super) fn answer_hinted(
        &mut self,
        key: &[u8],
        ites: &[Ite],
        hint: Hint,
        view: Option<DteView>,
        out: &mut impl ValueOut,
    ) -> Result<Option<Pass>, Error> {
        let Some(mut view) = view else {
            self.op.stats.hint_misses += 1;
            return Ok(None);
        };
        let ite = Ite(hint.ite);
        let ended = self.env.clock.mono_us();
        let expiry = self.env.timing.expiry_us;
        let within = ended.saturating_sub(self.op.index_read_at) < expiry / 2;
        if !(within && ites.contains(&ite) && view.holds(key) && view.status() == DteStatus::Valid)
        {
            self.op.stats.hint_misses += 1;
            self.recycle(view);
            return Ok(None);
        }
        self.op.stats.hint_hits += 1;
        // Within an expiry of the sighting the hinted incarnation is the
        // one the ITE names and was whole before this batch; past that,
        // its generation may have come round again: the checksum decides.
        self.op.verify_answer = ended.saturating_sub(hint.seen_at) > expiry;
        let pass = self.answer(ite, &mut view, out);
        self.op.verify_answer = false;
        self.op.decided_by = Some(ite);
        self.recycle(view);
        pass.map(Some)
    }

    /// After an answer or a write: the key's hint becomes the ITE value
    /// whose entry decided the GET or that the write linked and committed,
    /// or goes if there is none (the key is absent, the answer came from a
    /// `prev`, or the write was a DELETE).
    pub(super) fn keep_hint(&mut self, hint_key: u64) {
        match self.op.decided_by {
            Some(ite) => self.kept.hints.set(hint_key, ite.0, self.op.index_read_at),
            None => self.kept.hints.forget(hint_key),
        }
    }
}
