//! GET, PUT, DELETE and MIGRATE on the distributed cuckoo index, using only
//! READ, WRITE and CAS (DESIGN §5).
//!
//! # Invariants this module keeps
//!
//! * **Publish once, fully written.** A DTE is written in full into the
//!   client's own node before any ITE points at it; afterwards only its
//!   `state` (by CAS) and `expires_at` (one WRITE, by whoever unlinks it)
//!   change.
//! * **CAS'd words are only CAS'd.** ITEs and DTE state words are modified
//!   only through the fabric's CAS ([`Ctx::cas`]), never written.
//! * **Deadline before every CAS.** Every CAS an operation issues is preceded
//!   by a check of its own deadline (`created_at + op_timeout`); a failed
//!   check returns [`Error::Timeout`] and issues no further CAS. A stalled
//!   owner (a *zombie*) therefore lands at most one late CAS per operation.
//! * **Empty values never repeat.** Clearing an ITE writes `EMPTY(old)`;
//!   writers CAS from the exact value they read, so the reverse pass sees
//!   every change (V3).
//! * **Only committers stage what they replaced.** A replaced DTE becomes
//!   reusable (`expires_at` set) only after the operation that replaced it
//!   committed, or after it was unlinked by an abort/restore; so restoring a
//!   `replaced` value can never resurrect a recycled slot.
//! * **Helping.** Anyone who meets an `ABORTED` entry restores its
//!   `replaced` value (V4); a dead owner's entry is aborted and restored, or,
//!   for a MIGRATE copy whose source holds `MOVED(copy)`, rolled forward
//!   (V2); a marker whose copy is `VALID` is cleared, one whose copy is
//!   `ABORTED` is restored to the copy's `prev` (Z1).
//!
//! Linearization points: PUT at its commit CAS, DELETE at the commit CAS of
//! its tombstone, GET at the read that decided its answer.

mod get;
mod help;
mod migrate;
mod write;

use crate::cache::DteCache;
use crate::clock::Clock;
use crate::data::{dte_addr, NodeData};
use crate::fabric::{Endpoint, Fabric, RemoteAddr, Verb};
use crate::index::{Candidate, KeyHasher};
use crate::layout::dte::{self, DteHeader, DteState, DteStatus, DTE_HEADER_BYTES, KEY_OFFSET};
use crate::layout::{round_up_words, Ite, IteKind, SlotRef};
use crate::stats::OpStats;
use crate::{Config, Error};
use rand::rngs::StdRng;
use rand::Rng;
use std::sync::Arc;
use std::time::Duration;

pub(crate) use write::WriteKind;

/// Consecutive torn reads of one entry after which an operation reports
/// [`Error::Corrupt`] instead of retrying.
const MAX_TORN: u32 = 64;
/// Read buffers a client keeps between operations.
const MAX_KEPT_BUFFERS: usize = 8;
/// First back-off delay.
const BACKOFF_BASE: Duration = Duration::from_micros(2);
/// Longest back-off delay.
const BACKOFF_CAP: Duration = Duration::from_millis(2);

/// Everything a client's operations need, borrowed for one operation.
pub(crate) struct Ctx<'a> {
    pub(crate) config: &'a Config,
    pub(crate) hasher: &'a KeyHasher,
    pub(crate) ep: &'a mut Endpoint,
    pub(crate) clock: &'a dyn Clock,
    pub(crate) data: &'a NodeData,
    pub(crate) scan_fabric: &'a dyn Fabric,
    pub(crate) slot_bytes: &'a [usize],
    pub(crate) class_caps: &'a [usize],
    pub(crate) cache: &'a mut DteCache,
    /// Read buffers kept across operations (no allocation or zeroing of a
    /// whole slot per READ once warm).
    pub(crate) buffers: &'a mut Vec<Vec<u8>>,
    pub(crate) rng: &'a mut StdRng,
    pub(crate) stats: &'a mut OpStats,
    /// `created_at` of the operation (µs).
    pub(crate) start: u64,
    pub(crate) deadline: u64,
    pub(crate) torn: u32,
    pub(crate) backoffs: u32,
    /// When the current pass began reading the index (µs): entries found
    /// linked then cannot be reused before `expiry` has passed.
    pub(crate) index_read_at: u64,
}

/// A DTE as read through an ITE value.
#[derive(Debug, Clone)]
pub(crate) struct DteView {
    /// The DTE.
    pub(crate) at: SlotRef,
    /// Its decoded header.
    pub(crate) header: DteHeader,
    /// The bytes read: header, key, and (if `has_value`) the value.
    pub(crate) bytes: Vec<u8>,
}

impl DteView {
    pub(crate) fn state(&self) -> DteState {
        self.header.state
    }

    pub(crate) fn status(&self) -> DteStatus {
        self.header.state.status()
    }

    pub(crate) fn key(&self) -> &[u8] {
        let n = self.header.state.key_len();
        &self.bytes[KEY_OFFSET..KEY_OFFSET + n]
    }

    pub(crate) fn has_value(&self) -> bool {
        let s = self.header.state;
        self.bytes.len() >= dte::value_offset(s.key_len()) + s.value_len()
    }

    pub(crate) fn value(&self) -> &[u8] {
        let s = self.header.state;
        let off = dte::value_offset(s.key_len());
        &self.bytes[off..off + s.value_len()]
    }

    /// Whether the value read matches the checksum (needs the value).
    /// Callers decide when to verify: see [`Ctx::must_verify`].
    pub(crate) fn checksum_ok(&self) -> bool {
        self.has_value()
            && self.header.compute_checksum(self.key(), self.value()) == self.header.checksum
    }
}

/// Why a pass over the candidates ended without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// A live in-progress entry: back off first.
    Busy,
    /// Someone else's entry was helped.
    Helped,
    /// A CAS lost a race.
    CasFailed,
    /// A re-read saw a change.
    Changed,
    /// A torn or stale read.
    Torn,
    /// A helper aborted our entry.
    AbortedByHelper,
    /// No free DTE slot yet.
    NoFreeSlot,
}

impl<'a> Ctx<'a> {
    /// Whether a committed entry read in this pass must have its checksum
    /// verified (see [`crate::ChecksumPolicy`]).
    pub(crate) fn must_verify(&self) -> bool {
        match self.config.verify_checksums {
            crate::ChecksumPolicy::Always => true,
            crate::ChecksumPolicy::AfterStall => {
                let half_expiry = self.config.expiry.as_micros() as u64 / 2;
                self.clock.now_us().saturating_sub(self.index_read_at) >= half_expiry
            }
        }
    }

    /// Dead owner: `created_at + op_timeout + 2·max_clock_skew < now`.
    pub(crate) fn is_dead(&self, created_at: u64) -> bool {
        let margin = self.config.op_timeout + self.config.max_clock_skew * 2;
        created_at.saturating_add(margin.as_micros() as u64) < self.clock.now_us()
    }

    pub(crate) fn past_deadline(&self) -> bool {
        self.clock.now_us() > self.deadline
    }

    /// Fails with [`Error::Timeout`] once the deadline passed.
    pub(crate) fn check_deadline(&self) -> Result<(), Error> {
        if self.past_deadline() {
            Err(Error::Timeout)
        } else {
            Ok(())
        }
    }

    /// CAS, preceded by the deadline check every CAS must have.
    pub(crate) fn cas(&mut self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, Error> {
        self.check_deadline()?;
        Ok(self.ep.cas(addr, expected, new)?)
    }

    /// CAS on a DTE's state word from `from` to the same word with `to`
    /// status; returns the state found.
    pub(crate) fn cas_state(
        &mut self,
        at: SlotRef,
        from: DteState,
        to: DteStatus,
    ) -> Result<DteState, Error> {
        let addr = self.dte_addr(at);
        let expected = from.with_status(DteStatus::Invalid);
        Ok(DteState(self.cas(
            addr,
            expected.0,
            expected.with_status(to).0,
        )?))
    }

    /// The smallest size class whose capacity holds `value_len` bytes
    /// (callers have checked `value_len <= value_size_max`).
    pub(crate) fn class_of(&self, value_len: usize) -> u8 {
        self.class_caps
            .iter()
            .position(|&cap| cap >= value_len)
            .unwrap_or(0) as u8
    }

    pub(crate) fn dte_addr(&self, r: SlotRef) -> RemoteAddr {
        dte_addr(r, self.slot_bytes[usize::from(r.class)])
    }

    pub(crate) fn note(&mut self, why: Retry) {
        let r = &mut self.stats.retries;
        match why {
            Retry::Busy => r.busy += 1,
            Retry::Helped => r.helped += 1,
            Retry::CasFailed => r.cas_failed += 1,
            Retry::Changed => r.changed += 1,
            Retry::Torn => r.torn += 1,
            Retry::AbortedByHelper => r.aborted_by_helper += 1,
            Retry::NoFreeSlot => r.no_free_slot += 1,
        }
    }

    /// Accounts a retry; backs off for busy entries and missing slots, and
    /// turns too many torn reads into [`Error::Corrupt`].
    pub(crate) fn retry(&mut self, why: Retry) -> Result<(), Error> {
        self.note(why);
        match why {
            Retry::Torn => {
                self.torn += 1;
                if self.torn > MAX_TORN {
                    return Err(Error::Corrupt(format!(
                        "an entry failed its checksum or generation check {MAX_TORN} times in a row"
                    )));
                }
                self.backoff();
            }
            Retry::Busy | Retry::NoFreeSlot | Retry::CasFailed | Retry::AbortedByHelper => {
                self.backoff()
            }
            Retry::Helped | Retry::Changed => {}
        }
        Ok(())
    }

    /// Exponential back-off with jitter, capped, never past the deadline.
    pub(crate) fn backoff(&mut self) {
        let exp = BACKOFF_BASE.saturating_mul(1 << self.backoffs.min(16));
        let cap = exp.min(BACKOFF_CAP);
        self.backoffs += 1;
        let jittered = cap.mul_f64(self.rng.gen_range(0.5..1.5));
        let left = self.deadline.saturating_sub(self.clock.now_us());
        self.clock.sleep(jittered.min(Duration::from_micros(left)));
    }

    /// Reads the ITEs of `cands`: one batch, or one READ at a time when
    /// batched reads are off; `reverse` reads them last to first (the
    /// reverse pass; the order only matters when reads are sequential).
    pub(crate) fn read_ites(
        &mut self,
        cands: &[Candidate],
        reverse: bool,
    ) -> Result<Vec<Ite>, Error> {
        // At most 16 candidates (validated): the words live on the stack.
        let mut all = [[0u8; 8]; 16];
        let words = &mut all[..cands.len()];
        if self.config.optimizations.batched_reads {
            let mut batch: Vec<Verb<'_>> = cands
                .iter()
                .zip(words.iter_mut())
                .map(|(c, w)| Verb::Read {
                    addr: c.addr(),
                    buf: w,
                })
                .collect();
            self.ep.post(&mut batch)?;
        } else {
            for j in 0..cands.len() {
                let i = if reverse { cands.len() - 1 - j } else { j };
                self.ep.read(cands[i].addr(), &mut words[i])?;
            }
        }
        Ok(words.iter().map(|w| Ite(u64::from_le_bytes(*w))).collect())
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
    ) -> Vec<(usize, (SlotRef, usize, bool))> {
        let use_filter = self.config.optimizations.filter;
        ites.iter()
            .enumerate()
            .filter_map(|(i, ite)| match ite.kind() {
                IteKind::Empty => None,
                IteKind::Moved { copy } => Some((i, (copy, self.config.key_size_max, false))),
                IteKind::Occupied { dte, .. } => (!use_filter
                    || ite.filter_matches(filter, self.config.filter_bits))
                .then_some((i, (dte, key_len, whole))),
            })
            .collect()
    }

    /// Bytes to read of a DTE: header and `key_len` bytes of key, or the
    /// whole slot when `whole`.
    fn read_len(&self, r: SlotRef, key_len: usize, whole: bool) -> usize {
        if whole {
            self.slot_bytes[usize::from(r.class)]
        } else {
            DTE_HEADER_BYTES + round_up_words(key_len)
        }
    }

    /// Reads DTEs (`(slot, key bytes to read, whole slot?)`) in one batch,
    /// or one at a time when batched reads are off. Returns `None` for a DTE
    /// whose header fails the sanity checks (torn or reused slot).
    pub(crate) fn read_dtes(
        &mut self,
        reqs: &[(SlotRef, usize, bool)],
    ) -> Result<Vec<Option<DteView>>, Error> {
        let mut bufs: Vec<Vec<u8>> = reqs
            .iter()
            .map(|&(r, k, whole)| self.buffer(self.read_len(r, k, whole)))
            .collect();
        if self.config.optimizations.batched_reads {
            let mut batch: Vec<Verb<'_>> = Vec::with_capacity(reqs.len());
            for ((r, _, _), buf) in reqs.iter().zip(bufs.iter_mut()) {
                batch.push(Verb::Read {
                    addr: dte_addr(*r, self.slot_bytes[usize::from(r.class)]),
                    buf,
                });
            }
            self.ep.post(&mut batch)?;
        } else {
            for ((r, _, _), buf) in reqs.iter().zip(bufs.iter_mut()) {
                let addr = self.dte_addr(*r);
                self.ep.read(addr, buf)?;
            }
        }
        Ok(reqs
            .iter()
            .zip(bufs)
            .map(|(&(r, _, _), bytes)| self.view(r, bytes))
            .collect())
    }

    /// Reads one DTE.
    pub(crate) fn read_dte(
        &mut self,
        r: SlotRef,
        key_len: usize,
        whole: bool,
    ) -> Result<Option<DteView>, Error> {
        let len = self.read_len(r, key_len, whole);
        let mut bytes = self.buffer(len);
        let addr = self.dte_addr(r);
        self.ep.read(addr, &mut bytes)?;
        Ok(self.view(r, bytes))
    }

    /// A buffer of `len` bytes (contents unspecified: a READ overwrites
    /// them), from the kept ones if any.
    fn buffer(&mut self, len: usize) -> Vec<u8> {
        let mut b = self.buffers.pop().unwrap_or_default();
        b.resize(len, 0);
        b
    }

    /// Keeps a view's buffer for later READs.
    pub(crate) fn recycle(&mut self, view: DteView) {
        if self.buffers.len() < MAX_KEPT_BUFFERS {
            self.buffers.push(view.bytes);
        }
    }

    /// Decodes and sanity-checks a DTE read: the generation must be the one
    /// the ITE named (else the slot was reused since), lengths must fit.
    fn view(&self, at: SlotRef, bytes: Vec<u8>) -> Option<DteView> {
        let header = DteHeader::decode(&bytes);
        let s = header.state;
        let cap = self
            .class_caps
            .get(usize::from(at.class))
            .copied()
            .unwrap_or(0);
        let sane = s.generation() == at.generation
            && s.key_len() >= 1
            && s.key_len() <= self.config.key_size_max
            && s.value_len() <= cap;
        let complete = bytes.len() >= KEY_OFFSET + s.key_len();
        (sane && complete).then_some(DteView { at, header, bytes })
    }

    /// Reads the value of a DTE whose header and key were read before.
    pub(crate) fn read_value(&mut self, view: &mut DteView) -> Result<(), Error> {
        let s = view.header.state;
        let off = dte::value_offset(s.key_len());
        let need = off + round_up_words(s.value_len());
        if view.bytes.len() >= need {
            return Ok(());
        }
        let have = view.bytes.len();
        view.bytes.resize(need, 0);
        let addr = self.dte_addr(view.at).add(have as u64);
        self.ep.read(addr, &mut view.bytes[have..need])?;
        Ok(())
    }

    /// Marks an unlinked DTE reusable after `expiry` (one WRITE of
    /// `expires_at`, never a CAS'd word).
    pub(crate) fn stage(&mut self, r: SlotRef) -> Result<(), Error> {
        let at = self.data.expires_at(self.clock.now_us());
        let addr = self.dte_addr(r).add(dte::EXPIRES_AT_OFFSET as u64);
        self.ep.write(addr, &at.to_le_bytes())?;
        Ok(())
    }

    /// Allocates a local DTE slot of `class` and writes a complete entry
    /// into it. `None` when the data table has no free slot yet.
    pub(crate) fn write_entry(
        &mut self,
        class: u8,
        header: impl FnOnce(u16) -> DteHeader,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<SlotRef>, Error> {
        let Some(slot) = self.data.allocate(class, self.scan_fabric, self.clock)? else {
            return Ok(None);
        };
        let h = header(slot.generation);
        let mut bytes = vec![0u8; dte::entry_bytes(key.len(), value.len())];
        dte::encode_entry(h, key, value, &mut bytes);
        let addr = self.dte_addr(slot);
        self.ep.write(addr, &bytes)?;
        Ok(Some(slot))
    }
}

/// Builds the contexts of a client's operations.
pub(crate) struct OpEnv<'a> {
    pub(crate) config: &'a Config,
    pub(crate) hasher: &'a KeyHasher,
    pub(crate) clock: &'a Arc<dyn Clock>,
    pub(crate) data: &'a NodeData,
    pub(crate) scan_fabric: &'a dyn Fabric,
    pub(crate) slot_bytes: &'a [usize],
    pub(crate) class_caps: &'a [usize],
}

impl OpEnv<'_> {
    pub(crate) fn ctx<'b>(
        &'b self,
        ep: &'b mut Endpoint,
        cache: &'b mut DteCache,
        buffers: &'b mut Vec<Vec<u8>>,
        rng: &'b mut StdRng,
        stats: &'b mut OpStats,
    ) -> Ctx<'b> {
        let start = self.clock.now_us();
        Ctx {
            config: self.config,
            hasher: self.hasher,
            ep,
            clock: self.clock.as_ref(),
            data: self.data,
            scan_fabric: self.scan_fabric,
            slot_bytes: self.slot_bytes,
            class_caps: self.class_caps,
            cache,
            buffers,
            rng,
            stats,
            start,
            deadline: start + self.config.op_timeout.as_micros() as u64,
            torn: 0,
            backoffs: 0,
            index_read_at: start,
        }
    }
}
