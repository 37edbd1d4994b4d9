//! Reading candidates and entries: the ITEs of a key's candidates, the DTEs
//! they point at (batched or one at a time), values, and the read buffers a
//! client keeps between operations.

use super::view::DteView;
use super::Ctx;
use crate::fabric::{RemoteAddr, Verb};
use crate::index::{Candidate, PerCandidate, MAX_HASHES};
use crate::layout::dte::{self, DteHeader, DTE_HEADER_BYTES};
use crate::layout::{round_up_words, Ite, IteKind, SlotRef};
use crate::Error;

/// Read buffers a client keeps between operations.
const MAX_KEPT_BUFFERS: usize = 8;

/// A DTE to read: the slot, the key bytes to read, and whether to read the
/// whole slot.
pub(crate) type DteRead = (SlotRef, usize, bool);

impl Ctx<'_> {
    /// Whether a committed entry read in this pass must have its checksum
    /// verified (see [`crate::ChecksumPolicy`]): the reader's stall since
    /// its index read, measured on the monotonic clock now.
    pub(crate) fn must_verify(&self) -> bool {
        self.op
            .verify_answer
            .unwrap_or_else(|| self.verify_after(self.env.clock.mono_us()))
    }

    /// Whether the checksum policy verifies an entry whose read ended
    /// before monotonic time `ended`: a later `ended` only overstates the
    /// stall.
    pub(crate) fn verify_after(&self, ended: u64) -> bool {
        match self.env.config.verify_checksums {
            crate::ChecksumPolicy::Always => true,
            crate::ChecksumPolicy::AfterStall => {
                ended.saturating_sub(self.op.index_read_at) >= self.env.timing.expiry_us / 2
            }
        }
    }

    /// Reads the ITEs of `cands`: one batch, or one READ at a time when
    /// batched reads are off; `reverse` reads them last to first (the
    /// reverse pass; the order only matters when reads are sequential).
    pub(crate) fn read_ites(
        &mut self,
        cands: &[Candidate],
        reverse: bool,
    ) -> Result<PerCandidate<Ite>, Error> {
        let mut all = [[0u8; 8]; MAX_HASHES];
        let words = &mut all[..cands.len()];
        if self.env.config.optimizations.batched_reads {
            let reads = cands
                .iter()
                .zip(words.iter_mut())
                .map(|(c, w)| (c.addr(), &mut w[..]));
            self.gate.read_batch(reads)?;
        } else {
            for j in 0..cands.len() {
                let i = if reverse { cands.len() - 1 - j } else { j };
                self.gate.read(cands[i].addr(), &mut words[i])?;
            }
        }
        let mut ites = PerCandidate::new();
        for w in words.iter() {
            ites.push(Ite(u64::from_le_bytes(*w)));
        }
        Ok(ites)
    }

    /// The DTEs a pass over the candidates must read, with the index of the
    /// candidate each belongs to: the copies behind `MOVED` markers (Z1b: a
    /// marker whose copy aborted must be restored before anyone answers "not
    /// found") and the entries whose filter bits admit the key (all of them
    /// when filters are off). `whole` reads those entries' whole slots.
    pub(crate) fn entries_to_read(
        &self,
        ites: &[Ite],
        filter: u8,
        key_len: usize,
        whole: bool,
    ) -> PerCandidate<(usize, DteRead)> {
        let config = self.env.config;
        let use_filter = config.optimizations.filter;
        // Pushed in place, as in `Gate::read_batch`.
        let mut reads = PerCandidate::new();
        for (i, ite) in ites.iter().enumerate() {
            match ite.kind() {
                IteKind::Empty => {}
                IteKind::Moved { copy } => reads.push((i, (copy, config.key_size_max, false))),
                IteKind::Occupied { dte, .. } => {
                    if !use_filter || ite.filter_matches(filter, config.filter_bits) {
                        reads.push((i, (dte, key_len, whole)));
                    }
                }
            }
        }
        reads
    }

    /// Bytes to read of a DTE: header and `key_len` bytes of key, or the
    /// whole slot when `whole`.
    pub(super) fn read_len(&self, r: SlotRef, key_len: usize, whole: bool) -> usize {
        if whole {
            self.env.geometry().slot_bytes(r.class)
        } else {
            DTE_HEADER_BYTES + round_up_words(key_len)
        }
    }

    /// Reads DTEs in one batch, or one at a time when batched reads are
    /// off, into `views` (which it extends: the caller's own, so that no
    /// list of views is moved on return), `None` for a DTE that does not
    /// exist or whose header fails the sanity checks (torn or reused slot).
    /// `landing` = `(i, tail)` cuts the whole read of `reqs[i]` at the value
    /// of a key of its length: header and key into the view, the rest into
    /// `tail`, which must be as long (see [`Ctx::landing_len`]).
    pub(crate) fn read_dtes(
        &mut self,
        reqs: &[DteRead],
        mut landing: Option<(usize, &mut [u8])>,
        views: &mut PerCandidate<Option<DteView>>,
    ) -> Result<(), Error> {
        if let Some((i, tail)) = &landing {
            debug_assert!(
                Some(tail.len()) == self.landing_len(reqs[*i]),
                "a landing takes exactly the whole read's bytes past the key"
            );
        }
        let (mut addrs, mut bufs) = (
            PerCandidate::<Option<RemoteAddr>>::new(),
            PerCandidate::new(),
        );
        for (i, &(r, k, whole)) in reqs.iter().enumerate() {
            let addr = self.env.geometry().dte_addr(r);
            let len = match (addr, &landing) {
                (None, _) => 0,
                (Some(_), Some((at, _))) if *at == i => dte::value_offset(k),
                (Some(_), _) => self.read_len(r, k, whole),
            };
            addrs.push(addr);
            bufs.push(self.buffer(len));
        }
        let landed = landing.as_ref().map(|(i, tail)| (*i, tail.len()));
        {
            let mut verbs: PerCandidate<Verb<'_>> = PerCandidate::new();
            for (i, (addr, buf)) in addrs.iter().zip(bufs.iter_mut()).enumerate() {
                let Some(addr) = *addr else { continue };
                verbs.push(match landing.take_if(|(at, _)| *at == i) {
                    Some((_, tail)) => Verb::ReadScatter {
                        addr,
                        head: buf,
                        tail,
                    },
                    None => Verb::Read { addr, buf },
                });
            }
            if self.env.config.optimizations.batched_reads {
                self.gate.post_reads(&mut verbs)?;
            } else {
                for verb in verbs.chunks_mut(1) {
                    self.gate.post_reads(verb)?;
                }
            }
        }
        let first = views.len();
        views.extend(reqs.iter().zip(bufs.drain(..)).enumerate().map(
            |(i, (&(r, _, _), bytes))| {
                let mut view = self.view(r, bytes)?;
                view.landed = landed.and_then(|(at, n)| (at == i).then_some(n));
                Some(view)
            },
        ));
        if let Some(&(torn, _, _)) = reqs
            .iter()
            .zip(&views[first..])
            .find_map(|(r, v)| v.is_none().then_some(r))
        {
            self.op.torn_at = Some(torn);
        }
        Ok(())
    }

    /// Bytes a whole read of `req` puts past the value offset of a key of
    /// its length (`None` for a read that is not whole, or of no slot).
    pub(crate) fn landing_len(&self, req: DteRead) -> Option<usize> {
        let (r, k, whole) = req;
        let geometry = self.env.geometry();
        geometry.dte_addr(r)?;
        whole
            .then(|| {
                geometry
                    .slot_bytes(r.class)
                    .checked_sub(dte::value_offset(k))
            })
            .flatten()
    }

    /// Reads one DTE (`None`: it does not exist, or the read was torn).
    pub(crate) fn read_dte(
        &mut self,
        r: SlotRef,
        key_len: usize,
        whole: bool,
    ) -> Result<Option<DteView>, Error> {
        let Some(addr) = self.env.geometry().dte_addr(r) else {
            return Ok(None);
        };
        let len = self.read_len(r, key_len, whole);
        let mut bytes = self.buffer(len);
        self.gate.read(addr, &mut bytes)?;
        let view = self.view(r, bytes);
        if view.is_none() {
            self.op.torn_at = Some(r);
        }
        Ok(view)
    }

    /// A buffer of `len` bytes (contents unspecified: a READ overwrites
    /// them), from the kept ones if any.
    pub(super) fn buffer(&mut self, len: usize) -> Vec<u8> {
        let mut b = self.kept.buffers.pop().unwrap_or_default();
        b.resize(len, 0);
        b
    }

    /// Keeps a view's buffer for later READs.
    pub(crate) fn recycle(&mut self, view: DteView) {
        if self.kept.buffers.len() < MAX_KEPT_BUFFERS {
            self.kept.buffers.push(view.bytes);
        }
    }

    /// Decodes and sanity-checks a DTE read: the generation must be the one
    /// the ITE named (else the slot was reused since), lengths must fit.
    /// The key need not have been read whole (see [`DteView::key`]).
    pub(super) fn view(&self, at: SlotRef, bytes: Vec<u8>) -> Option<DteView> {
        if bytes.len() < DTE_HEADER_BYTES {
            return None;
        }
        let header = DteHeader::decode(&bytes);
        let s = header.state;
        let sane = s.generation() == at.generation
            && s.key_len() >= 1
            && s.key_len() <= self.env.config.key_size_max
            && s.value_len() <= self.env.geometry().capacity(at.class);
        sane.then_some(DteView {
            at,
            header,
            bytes,
            landed: None,
        })
    }

    /// Reads the value of a DTE whose header and key were read before.
    pub(crate) fn read_value(&mut self, view: &mut DteView) -> Result<(), Error> {
        let s = view.header.state;
        let off = dte::value_offset(s.key_len());
        let need = off + round_up_words(s.value_len());
        if view.bytes.len() >= need {
            return Ok(());
        }
        let Some(addr) = self.env.geometry().dte_addr(view.at) else {
            return Ok(());
        };
        let have = view.bytes.len();
        view.bytes.resize(need, 0);
        self.gate
            .read(addr.add(have as u64), &mut view.bytes[have..need])?;
        Ok(())
    }
}
