//! The first pass of a GET or a write with a location hint
//! (docs/design.md#location-hints): the key's ITEs and the entry its hint
//! names in one batch; a GET's answer from that entry, or a write's use of
//! its header, when an ITE of the batch still holds the hinted value.

use super::get::{Pass, ValueOut};
use super::reads::DteRead;
use super::{Ctx, DteView};
use crate::cache::hints::Hint;
use crate::fabric::Verb;
use crate::index::{Candidate, PerCandidate, MAX_HASHES};
use crate::layout::dte::{self, DteStatus};
use crate::layout::{Ite, IteKind, SlotRef};
use crate::Error;

/// An entry's header read through a hint, with the ITE value that named it:
/// it stands for the read of the candidate whose ITE holds that value.
pub(super) type HintedRead = (Ite, DteView);

impl Ctx<'_> {
    /// Whether this client's operations use location hints: they are on, the
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

    /// Reads the ITEs of `cands` and the hinted entry `req` in one batch;
    /// `landing` cuts a whole read at the value of a key of its length, as
    /// [`Ctx::read_dtes`] does (docs/design.md#one-copy-gets). The view is
    /// `None` if the slot holds another generation or an insane header: a
    /// miss, not a torn pass, since no ITE read before it named that entry.
    fn read_ites_hinted(
        &mut self,
        cands: &[Candidate],
        req: DteRead,
        mut landing: Option<&mut [u8]>,
    ) -> Result<(PerCandidate<Ite>, Option<DteView>), Error> {
        let (dte, key_len, whole) = req;
        let Some(addr) = self.env.geometry().dte_addr(dte) else {
            return Ok((self.read_ites(cands, false)?, None));
        };
        debug_assert!(
            landing
                .as_ref()
                .is_none_or(|t| Some(t.len()) == self.landing_len(req)),
            "a landing takes exactly the whole read's bytes past the key"
        );
        let head_len = match landing {
            Some(_) => dte::value_offset(key_len),
            None => self.read_len(dte, key_len, whole),
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

    /// Whether the entry read through `hint` may stand for a read of it
    /// made after this pass's ITE reads (docs/design.md#location-hints):
    /// an ITE of the pass holds the hinted value, the entry is a committed
    /// one of the key, and the batch ended within half an expiry of its
    /// start. Reads the monotonic clock once, after the batch, and returns
    /// that reading if the hint holds (it serves the answer's other time
    /// tests too). Counts the hit or the miss.
    fn hint_holds(
        &mut self,
        key: &[u8],
        ites: &[Ite],
        (hint, view): (Hint, &DteView),
    ) -> Option<u64> {
        let ended = self.env.clock.mono_us();
        let within = ended.saturating_sub(self.op.index_read_at) < self.env.timing.expiry_us / 2;
        let holds = within
            && ites.contains(&Ite(hint.ite))
            && view.holds(key)
            && view.status() == DteStatus::Valid;
        if holds {
            self.op.stats.hint_hits += 1;
        } else {
            self.op.stats.hint_misses += 1;
        }
        holds.then_some(ended)
    }

    /// A GET's first read with a hint: the ITEs and the hinted entry's
    /// whole slot in one batch, its value landing in `out` unless the cache
    /// will keep the entry (docs/design.md#one-copy-gets); and the answer
    /// from that entry if the hint holds.
    pub(super) fn get_hinted(
        &mut self,
        key: &[u8],
        cands: &[Candidate],
        (hint, dte): (Hint, SlotRef),
        out: &mut impl ValueOut,
    ) -> Result<(PerCandidate<Ite>, Option<Pass>), Error> {
        let req = (dte, key.len(), true);
        let cache = self.env.config.optimizations.cache;
        let kept = self.gate.caches(cache, dte.node.into());
        let landing = self.landing_len(req).filter(|_| !kept);
        let tail = landing.and_then(|len| out.landing(len));
        let (ites, view) = self.read_ites_hinted(cands, req, tail)?;
        let pass = self.answer_hinted(key, &ites, hint, view, out)?;
        Ok((ites, pass))
    }

    /// Answers from the entry read through `hint` if [`Ctx::hint_holds`];
    /// `None`: the pass goes on as one without a hint.
    fn answer_hinted(
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
        let Some(ended) = self.hint_holds(key, ites, (hint, &view)) else {
            self.recycle(view);
            return Ok(None);
        };
        let ite = Ite(hint.ite);
        // Within an expiry of the sighting the hinted incarnation is the
        // one the ITE names and was whole before this batch; past that,
        // its generation may have come round again: the checksum decides.
        let age = ended.saturating_sub(hint.seen_at);
        // The policy's stall test may use `ended` only if the value was read
        // before it; a value still to be read is judged when it is.
        let read = view.landed.is_some() || view.has_value();
        self.op.verify_answer = if age > self.env.timing.expiry_us {
            Some(true)
        } else {
            read.then(|| self.verify_after(ended))
        };
        let pass = self.answer(ite, &mut view, out);
        self.op.verify_answer = None;
        self.op.decided_by = Some(ite);
        self.recycle(view);
        pass.map(Some)
    }

    /// A write's first read: the ITEs, with the header of its hinted entry
    /// in the same batch, and that header if it may stand for the read of
    /// its candidate's entry ([`Ctx::hint_holds`]).
    pub(super) fn read_ites_for_write(
        &mut self,
        key: &[u8],
        cands: &[Candidate],
        hint: Option<(Hint, SlotRef)>,
    ) -> Result<(PerCandidate<Ite>, Option<HintedRead>), Error> {
        let Some((hint, dte)) = hint else {
            return Ok((self.read_ites(cands, false)?, None));
        };
        let (ites, view) = self.read_ites_hinted(cands, (dte, key.len(), false), None)?;
        let Some(view) = view else {
            self.op.stats.hint_misses += 1;
            return Ok((ites, None));
        };
        if self.hint_holds(key, &ites, (hint, &view)).is_none() {
            self.recycle(view);
            return Ok((ites, None));
        }
        Ok((ites, Some((Ite(hint.ite), view))))
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
