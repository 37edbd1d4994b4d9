//! GET: forward pass (candidate ITEs in one batch, then the DTEs of filter
//! matches in one batch), previous versions for in-progress entries, and a
//! reverse pass before answering "not found".

use super::help::Helped;
use super::reads::DteRead;
use super::{Ctx, DteView, Retry};
use crate::fabric::RemoteAddr;
use crate::index::{Candidate, PerCandidate};
use crate::layout::dte::DteStatus;
use crate::layout::{Ite, IteKind};
use crate::Error;

/// Where a GET puts the value it found: a `Vec` it grows, or a caller's
/// slice (see [`SliceOut`]). A GET may fill it more than once if it goes
/// around again; the last fill is the answer.
pub(crate) trait ValueOut {
    /// Takes `value` as the answer.
    fn fill(&mut self, value: &[u8]);

    /// Room for a scatter READ to put `len` bytes in, a value first
    /// (docs/design.md#one-copy-gets); `None` if this destination takes
    /// values through [`ValueOut::fill`] only.
    fn landing(&mut self, len: usize) -> Option<&mut [u8]> {
        let _ = len;
        None
    }

    /// The bytes the last [`ValueOut::landing`] holds.
    fn landed(&self) -> &[u8] {
        &[]
    }

    /// Takes the first `len` bytes landed as the answer.
    fn settle(&mut self, len: usize) {
        let _ = len;
    }
}

/// A `Vec` lands values in place: resizing it to the landing's length
/// writes only the bytes it grows by, so a `Vec` that held a value of
/// the size before costs no more than a few words.
impl ValueOut for Vec<u8> {
    fn fill(&mut self, value: &[u8]) {
        self.clear();
        self.extend_from_slice(value);
    }

    fn landing(&mut self, len: usize) -> Option<&mut [u8]> {
        self.resize(len, 0);
        Some(self)
    }

    fn landed(&self) -> &[u8] {
        self
    }

    fn settle(&mut self, len: usize) {
        debug_assert!(len <= self.len(), "a settled value landed whole");
        self.truncate(len);
    }
}

/// A caller's slice as a GET's destination: a value that fits is copied to
/// its start; one that does not leaves the slice untouched and records its
/// length, so that the caller can tell how much room it needs. Nothing
/// lands in it (the slice stays untouched when the key holds no value).
#[derive(Debug)]
pub(crate) struct SliceOut<'a> {
    buf: &'a mut [u8],
    /// The length of the last value given, whether or not it fitted.
    pub(crate) len: usize,
}

impl<'a> SliceOut<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> SliceOut<'a> {
        SliceOut { buf, len: 0 }
    }

    /// Whether the last value given fitted (and was copied).
    pub(crate) fn fitted(&self) -> bool {
        self.len <= self.buf.len()
    }
}

impl ValueOut for SliceOut<'_> {
    fn fill(&mut self, value: &[u8]) {
        self.len = value.len();
        if let Some(dst) = self.buf.get_mut(..value.len()) {
            dst.copy_from_slice(value);
        }
    }
}

/// What one pass over the candidates decided.
pub(super) enum Pass {
    /// The key's value (copied into the caller's buffer).
    Found,
    /// The key is absent (a committed tombstone, or a deleted `prev`).
    Absent,
    /// This candidate holds no committed version of the key: look further.
    Skip,
    /// No candidate holds the key; the reverse pass decides.
    NothingHere,
    /// Go around again.
    Again(Retry),
}

impl Ctx<'_> {
    /// GET `key` into `out`; returns whether it was found.
    pub(crate) fn get(&mut self, key: &[u8], out: &mut impl ValueOut) -> Result<bool, Error> {
        let cands = self.env.hasher.candidate_list(key);
        let (filter, hint_key) = self.env.hasher.filter_and_hint_key(key);
        let hints = self.uses_hints();
        // Only the first pass reads a hinted entry: a retry follows what
        // the index says now.
        let mut hint = hints.then(|| self.hint_to_read(hint_key)).flatten();
        // The first pass starts when the operation did (one clock read
        // fewer on the fast path); later passes read the clock again.
        let mut first = true;
        loop {
            if !first {
                self.op.index_read_at = self.env.clock.mono_us();
                self.gate.check_deadline()?;
            }
            first = false;
            self.op.decided_by = None;
            let (ites, hinted) = match hint.take() {
                Some(hint) => self.get_hinted(key, &cands, hint, out)?,
                None => (self.read_ites(&cands, false)?, None),
            };
            let pass = match hinted {
                Some(pass) => pass,
                None => self.get_pass(key, filter, &cands, &ites, out)?,
            };
            let found = match pass {
                Pass::Found => true,
                Pass::Absent => false,
                Pass::Again(why) => {
                    self.retry(why)?;
                    continue;
                }
                Pass::NothingHere | Pass::Skip => {
                    if self.read_ites(&cands, true)? != ites {
                        self.retry(Retry::Changed)?;
                        continue;
                    }
                    false
                }
            };
            self.gate.check_answer()?;
            if hints {
                self.keep_hint(hint_key);
            }
            return Ok(found);
        }
    }

    fn get_pass(
        &mut self,
        key: &[u8],
        filter: u8,
        cands: &[Candidate],
        ites: &[Ite],
        out: &mut impl ValueOut,
    ) -> Result<Pass, Error> {
        let opts = self.env.config.optimizations;
        // A cache entry is fresh if at most `expiry` passed between the
        // index read that last confirmed it and the end of this pass's index
        // read: the clock is read after the ITEs (docs/design.md#cache), once.
        let mut read_ended = None;
        let mut reqs = PerCandidate::<DteRead>::new();
        let mut slots = PerCandidate::<usize>::new();
        for (i, req) in self.entries_to_read(ites, filter, key.len(), opts.multi_read) {
            if self.gate.caches(opts.cache, req.0.node.into()) && ites[i].is_occupied() {
                let ended = *read_ended.get_or_insert_with(|| self.env.clock.mono_us());
                if let Some(hit) = self.kept.cache.get(ites[i].0, self.op.index_read_at, ended) {
                    if hit.key() != key {
                        continue;
                    }
                    self.op.stats.cache_hits += 1;
                    self.op.decided_by = Some(ites[i]);
                    return Ok(match hit.value() {
                        Some(v) => {
                            out.fill(v);
                            Pass::Found
                        }
                        None => Pass::Absent,
                    });
                }
            }
            reqs.push(req);
            slots.push(i);
        }
        let landing = self.landing_for(&reqs, out);
        let mut views = PerCandidate::new();
        self.read_dtes(&reqs, landing, &mut views)?;
        let pass = self.first_holder(key, cands, ites, &slots, &mut views, out);
        for view in views.into_iter().flatten() {
            self.recycle(view);
        }
        pass
    }

    /// Where the pass's first whole read of an entry the cache will not
    /// keep may put its value: straight into `out`, which saves copying it
    /// there from a read buffer (docs/design.md#one-copy-gets). An entry
    /// the cache keeps is read into a buffer the cache takes.
    fn landing_for<'o>(
        &self,
        reqs: &[DteRead],
        out: &'o mut impl ValueOut,
    ) -> Option<(usize, &'o mut [u8])> {
        let cache = self.env.config.optimizations.cache;
        let (i, len) = reqs.iter().enumerate().find_map(|(i, &req)| {
            let kept = self.gate.caches(cache, req.0.node.into());
            let len = self.landing_len(req).filter(|_| !kept)?;
            Some((i, len))
        })?;
        Some((i, out.landing(len)?))
    }

    /// Goes through the DTEs read, in candidate order, until one decides.
    fn first_holder(
        &mut self,
        key: &[u8],
        cands: &[Candidate],
        ites: &[Ite],
        slots: &[usize],
        views: &mut [Option<DteView>],
        out: &mut impl ValueOut,
    ) -> Result<Pass, Error> {
        let mut skipped = false;
        for (view, &i) in views.iter_mut().zip(slots) {
            let Some(view) = view else {
                return Ok(Pass::Again(Retry::Torn));
            };
            let slot = cands[i].addr();
            if ites[i].is_moved() {
                if view.status() != DteStatus::Valid
                    && self.help_marker(slot, ites[i], view)? == Helped::Acted
                {
                    return Ok(Pass::Again(Retry::Helped));
                }
                continue;
            }
            if !view.holds(key) {
                continue;
            }
            match self.decide(key, ites[i], slot, view, out)? {
                Pass::Skip => skipped = true,
                decided => return Ok(decided),
            }
        }
        Ok(if skipped {
            Pass::Skip
        } else {
            Pass::NothingHere
        })
    }

    /// Decides a GET on an entry holding the key.
    fn decide(
        &mut self,
        key: &[u8],
        ite: Ite,
        slot: RemoteAddr,
        view: &mut DteView,
        out: &mut impl ValueOut,
    ) -> Result<Pass, Error> {
        // Only `answer` reads a value; helping reads headers alone, so a
        // view whose value landed in `out` serves every path.
        match view.status() {
            DteStatus::Valid => {
                self.op.decided_by = Some(ite);
                self.answer(ite, view, out)
            }
            DteStatus::Aborted => {
                self.help_entry(slot, ite, view)?;
                Ok(Pass::Again(Retry::Helped))
            }
            DteStatus::Invalid => {
                if self.help_entry(slot, ite, view)? == Helped::Acted {
                    return Ok(Pass::Again(Retry::Helped));
                }
                // V1: a copy's `prev` is another slot's value; never follow it.
                // With replicas the entry may be VALID on a mirror already,
                // and its owner's operation over: answering from `prev` now
                // would let a view change make the write take effect after
                // it returned (docs/replication.md#rp6b).
                if view.state().is_migrated()
                    || !self.env.config.optimizations.prev_versions
                    || self.env.geometry().replicas() > 1
                {
                    return Ok(Pass::Again(Retry::Busy));
                }
                let prev = Ite(view.header.prev);
                if prev.is_empty() {
                    // The key's first insert into this slot: no committed
                    // version of it is here until the owner commits, so
                    // the GET reads on, as it would from a `prev` (the
                    // reverse pass still guards "not found").
                    return Ok(Pass::Skip);
                }
                self.follow_prev(key, prev, out)
            }
        }
    }

    /// Answers from a committed entry: not found for a tombstone, else its
    /// value after the checksum check.
    pub(super) fn answer(
        &mut self,
        ite: Ite,
        view: &mut DteView,
        out: &mut impl ValueOut,
    ) -> Result<Pass, Error> {
        if view.state().is_tombstone() {
            self.cache_entry(ite, view, false);
            return Ok(Pass::Absent);
        }
        if view.landed.is_some() {
            // The value is in `out` already, right after the key: the entry
            // holds a key of the length the read was cut for, and the
            // sanity check bounds its value by the class's capacity, which
            // the landing holds.
            debug_assert!(view.has_landed_value(), "a landed value is whole");
            let len = view.value_range().len();
            if self.must_verify()
                && !out
                    .landed()
                    .get(..len)
                    .is_some_and(|value| view.checksum_matches(value))
            {
                self.op.torn_at = Some(view.at);
                return Ok(Pass::Again(Retry::Torn));
            }
            out.settle(len);
            self.op.stats.values_landed += 1;
            return Ok(Pass::Found);
        }
        self.read_value(view)?;
        if !view.has_value() || (self.must_verify() && !view.checksum_ok()) {
            self.op.torn_at = Some(view.at);
            return Ok(Pass::Again(Retry::Torn));
        }
        out.fill(view.value());
        self.cache_entry(ite, view, true);
        Ok(Pass::Found)
    }

    /// Caches a committed entry of another node, found through `ite`: its
    /// bytes move into the cache (no copy), and the view takes the buffer
    /// the cache hands back, if any.
    fn cache_entry(&mut self, ite: Ite, view: &mut DteView, with_value: bool) {
        if !self
            .gate
            .caches(self.env.config.optimizations.cache, view.at.node.into())
        {
            return;
        }
        let (key, value) = (view.key_range(), with_value.then(|| view.value_range()));
        let bytes = std::mem::take(&mut view.bytes);
        if let Some(back) = self
            .kept
            .cache
            .insert(ite.0, bytes, key, value, self.op.index_read_at)
        {
            view.bytes = back;
        }
    }

    /// The previous version of an in-progress PUT/DELETE: returned if it is
    /// a committed entry of the same key, else back off.
    fn follow_prev(
        &mut self,
        key: &[u8],
        prev: Ite,
        out: &mut impl ValueOut,
    ) -> Result<Pass, Error> {
        let IteKind::Occupied { dte, .. } = prev.kind() else {
            return Ok(Pass::Again(Retry::Busy));
        };
        let Some(mut view) =
            self.read_dte(dte, key.len(), self.env.config.optimizations.multi_read)?
        else {
            return Ok(Pass::Again(Retry::Busy));
        };
        if !view.holds(key) || view.status() != DteStatus::Valid {
            return Ok(Pass::Again(Retry::Busy));
        }
        self.answer(prev, &mut view, out)
    }
}
