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
//! * **One stager per incarnation.** A DTE is staged (`expires_at` set,
//!   reusable after `expiry`) exactly once, by the thread whose successful
//!   CAS removed the ITE value pointing at it: the restorer of an aborted
//!   entry or copy, the committer that replaced or unlinked it, the winner
//!   of a duplicate's clear, or the winner of the clear of `MOVED(copy)`
//!   (for the copy's predecessor, when the copy committed). The restorer of
//!   a marker whose copy aborted (Z1) stages nothing; a `MOVED(copy)` that
//!   may still arrive is resolved by the recycler before the copy's slot is
//!   reused ([`crate::data`]). A second stage could land after the slot's
//!   reuse and stamp its live new occupant.
//! * **Restore only what you saw.** A helper puts back an entry's
//!   `replaced` value only with a CAS from an ITE value it read that points
//!   at that very entry (slot and generation).
//! * **Helping.** Anyone who meets an `ABORTED` entry restores its
//!   `replaced` value (V4); a dead owner's entry is aborted and restored, or,
//!   for a MIGRATE copy whose source holds `MOVED(copy)`, rolled forward
//!   (V2); a marker whose copy is `VALID` is cleared, one whose copy is
//!   `ABORTED` is restored to the copy's `prev` (Z1).
//! * **Two clocks.** Deadlines, stall measurements, back-off and cache ages
//!   use the monotonic clock; only `created_at` and `expires_at`, which
//!   other nodes read, come from the wall clock.
//! * **Landing bound.** Every CAS goes through [`Ctx::cas`], which checks
//!   the deadline, gives fabrics that can enforce it a land-by time, and
//!   reads the clock again afterwards to count and log a CAS that may have
//!   landed later than `Config::landing_bound` after its check.
//!
//! Linearization points: PUT at its commit CAS, DELETE at the commit CAS of
//! its tombstone, GET at the read that decided its answer.

mod get;
mod help;
mod migrate;
mod write;

use crate::cache::DteCache;
use crate::clock::Clock;
use crate::config::micros;
use crate::data::{Geometry, NodeData, TableAccess};
use crate::fabric::{Endpoint, Fabric, FabricError, RemoteAddr, Verb};
use crate::index::{Candidate, KeyHasher};
use crate::layout::dte::{self, DteHeader, DteState, DteStatus, DTE_HEADER_BYTES, KEY_OFFSET};
use crate::layout::{round_up_words, Ite, IteKind, SlotRef};
use crate::stats::OpStats;
use crate::{Config, Error};
use rand::rngs::StdRng;
use rand::Rng;
use std::time::Duration;

pub(crate) use write::WriteKind;

/// Consecutive torn reads of one entry after which an operation reports
/// [`Error::Corrupt`] instead of retrying.
const MAX_TORN: u32 = 64;
/// Read buffers a client keeps between operations.
const MAX_KEPT_BUFFERS: usize = 8;
/// First back-off delay.
const BACKOFF_BASE: Duration = Duration::from_micros(2);
/// Longest back-off delay, jitter included.
const BACKOFF_CAP: Duration = Duration::from_millis(2);

/// The time bounds of a configuration in microseconds, computed once.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    op_timeout_us: u64,
    expiry_us: u64,
    /// An owner is dead once `created_at + dead_after_us < now`
    /// (`op_timeout + 2·max_clock_skew`).
    dead_after_us: u64,
    /// Δ₀, see [`Config::landing_bound`].
    landing_us: u64,
}

impl Timing {
    pub(crate) fn new(config: &Config) -> Timing {
        Timing {
            op_timeout_us: micros(config.op_timeout),
            expiry_us: micros(config.expiry),
            dead_after_us: micros(config.op_timeout + config.max_clock_skew * 2),
            landing_us: micros(config.landing_bound()),
        }
    }
}

/// Everything a client's operations need, borrowed for one operation.
pub(crate) struct Ctx<'a> {
    pub(crate) config: &'a Config,
    pub(crate) hasher: &'a KeyHasher,
    pub(crate) ep: &'a mut Endpoint,
    pub(crate) clock: &'a dyn Clock,
    pub(crate) data: &'a NodeData,
    pub(crate) geometry: &'a Geometry,
    /// The node's own memory without wrappers (allocation scans).
    local: &'a dyn Fabric,
    pub(crate) cache: &'a mut DteCache,
    /// Read buffers kept across operations (no allocation or zeroing of a
    /// whole slot per READ once warm).
    buffers: &'a mut Vec<Vec<u8>>,
    rng: &'a mut StdRng,
    pub(crate) stats: &'a mut OpStats,
    timing: Timing,
    /// `created_at` of the operation: wall-clock µs, which helpers on other
    /// nodes compare with their clocks.
    pub(crate) created_at: u64,
    /// Monotonic µs at which the operation gives up.
    deadline: u64,
    torn: u32,
    backoffs: u32,
    /// Monotonic µs just before the current pass read the index: entries
    /// found linked then cannot be reused before `expiry` has passed.
    pub(crate) index_read_at: u64,
    /// Whether the operation waited for a free DTE slot.
    starved: bool,
}

/// A DTE as read through an ITE value.
#[derive(Debug, Clone)]
pub(crate) struct DteView {
    /// The DTE.
    pub(crate) at: SlotRef,
    /// Its decoded header.
    pub(crate) header: DteHeader,
    /// The bytes read: header, then as much of key and value as was read.
    pub(crate) bytes: Vec<u8>,
}

impl DteView {
    pub(crate) fn state(&self) -> DteState {
        self.header.state
    }

    pub(crate) fn status(&self) -> DteStatus {
        self.header.state.status()
    }

    /// The stored key, if it was read whole. A read sized for a shorter key
    /// stops inside a longer one: that entry holds another key, which is
    /// all a caller looking for the shorter key needs to know (review F1).
    pub(crate) fn key(&self) -> Option<&[u8]> {
        let n = self.header.state.key_len();
        self.bytes.get(KEY_OFFSET..KEY_OFFSET + n)
    }

    /// Whether the entry holds `key` (decided from the header's key length
    /// first, so a longer stored key is a mismatch, never a torn read).
    pub(crate) fn holds(&self, key: &[u8]) -> bool {
        self.header.state.key_len() == key.len() && self.key() == Some(key)
    }

    pub(crate) fn has_value(&self) -> bool {
        let s = self.header.state;
        self.bytes.len() >= dte::value_offset(s.key_len()) + s.value_len()
    }

    /// The value; callers check [`DteView::has_value`] first.
    pub(crate) fn value(&self) -> &[u8] {
        let s = self.header.state;
        let off = dte::value_offset(s.key_len());
        self.bytes.get(off..off + s.value_len()).unwrap_or_default()
    }

    /// Whether key and value were read and match the checksum. Callers
    /// decide when to verify: see [`Ctx::must_verify`].
    pub(crate) fn checksum_ok(&self) -> bool {
        match self.key() {
            Some(key) if self.has_value() => {
                self.header.compute_checksum(key, self.value()) == self.header.checksum
            }
            _ => false,
        }
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

/// How a CAS that links a fresh DTE into an ITE ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Linked {
    /// The ITE now points at the DTE.
    Yes,
    /// The ITE held another value; the DTE's slot is free again.
    Lost,
}

impl<'a> Ctx<'a> {
    /// Whether a committed entry read in this pass must have its checksum
    /// verified (see [`crate::ChecksumPolicy`]): the reader's stall since
    /// its index read, measured on the monotonic clock.
    pub(crate) fn must_verify(&self) -> bool {
        match self.config.verify_checksums {
            crate::ChecksumPolicy::Always => true,
            crate::ChecksumPolicy::AfterStall => {
                self.clock.mono_us().saturating_sub(self.index_read_at) >= self.timing.expiry_us / 2
            }
        }
    }

    /// Dead owner: `created_at + op_timeout + 2·max_clock_skew < now`
    /// (wall clocks: `created_at` comes from the owner's node).
    pub(crate) fn is_dead(&self, created_at: u64) -> bool {
        created_at.saturating_add(self.timing.dead_after_us) < self.clock.now_us()
    }

    /// Whether the operation's deadline has passed now.
    pub(crate) fn past_deadline(&self) -> bool {
        self.past_deadline_at(self.clock.mono_us())
    }

    /// Whether the deadline has passed at monotonic time `at`: the deadline
    /// itself is the last instant at which the operation may issue a CAS.
    fn past_deadline_at(&self, at: u64) -> bool {
        at > self.deadline
    }

    /// Fails with [`Error::Timeout`] once the deadline passed.
    pub(crate) fn check_deadline(&self) -> Result<(), Error> {
        if self.past_deadline() {
            Err(Error::Timeout)
        } else {
            Ok(())
        }
    }

    /// The only way the protocol issues a CAS: checks the deadline right
    /// before it (a failed check issues nothing and returns
    /// [`Error::Timeout`]), hands fabrics that can refuse a late CAS its
    /// land-by time (a refused CAS also returns `Timeout`: it did not
    /// execute), and reads the clock afterwards: a CAS that may have landed
    /// later than the landing bound after its check breaks the time
    /// assumption every recycling rule rests on, so it is counted and logged
    /// loudly.
    pub(crate) fn cas(&mut self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, Error> {
        let checked = self.clock.mono_us();
        if self.past_deadline_at(checked) {
            return Err(Error::Timeout);
        }
        let result = if self.ep.enforces_land_by() {
            let land_by = self.clock.now_us().saturating_add(self.timing.landing_us);
            self.ep.cas_by(addr, expected, new, land_by)
        } else {
            self.ep.cas(addr, expected, new)
        };
        let took = self.clock.mono_us().saturating_sub(checked);
        if took > self.timing.landing_us {
            self.stats.late_cas += 1;
            tracing::error!(
                target: "nessie::landing_bound",
                %addr,
                took_us = took,
                bound_us = self.timing.landing_us,
                "a CAS returned later than the landing bound after its deadline check; \
                 if it landed that late, slot recycling is unsafe (raise expiry or fix the stall)"
            );
        }
        match result {
            Ok(old) => Ok(old),
            Err(FabricError::LateCas { .. }) => Err(Error::Timeout),
            Err(e) => Err(e.into()),
        }
    }

    /// CAS on a DTE's state word from `from` to the same word with `to`
    /// status; returns the state found.
    pub(crate) fn cas_state(
        &mut self,
        at: SlotRef,
        from: DteState,
        to: DteStatus,
    ) -> Result<DteState, Error> {
        let Some(addr) = self.geometry.dte_addr(at) else {
            return Err(Error::Corrupt(format!("no DTE slot {at:?}")));
        };
        let expected = from.with_status(DteStatus::Invalid);
        Ok(DteState(self.cas(
            addr,
            expected.0,
            expected.with_status(to).0,
        )?))
    }

    /// CASes the ITE at `at` from `expected` to `new`, which links the fresh
    /// DTE `mine`. A CAS that lost or was refused frees `mine` at once (it
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
        match self.cas(at, expected.0, new.0) {
            Ok(old) if old == expected.0 => Ok(Linked::Yes),
            Ok(_) => {
                self.data.release_unpublished(mine);
                Ok(Linked::Lost)
            }
            Err(Error::Timeout) => {
                self.data.release_unpublished(mine);
                Err(Error::Timeout)
            }
            Err(Error::Fabric(e)) if !e.may_have_executed() => {
                self.data.release_unpublished(mine);
                Err(Error::Fabric(e))
            }
            Err(e) => {
                self.data.note_in_doubt(mine, at, new.0);
                Err(e)
            }
        }
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
        if why == Retry::NoFreeSlot {
            self.starved = true;
        }
    }

    /// Accounts a retry and backs off (after every kind: two writers that
    /// abort each other must not retry in lock step), turning too many torn
    /// reads in a row into [`Error::Corrupt`].
    pub(crate) fn retry(&mut self, why: Retry) -> Result<(), Error> {
        self.note(why);
        if why == Retry::Torn {
            self.torn += 1;
            if self.torn > MAX_TORN {
                return Err(Error::Corrupt(format!(
                    "an entry failed its checksum or generation check {MAX_TORN} times in a row"
                )));
            }
        } else {
            self.torn = 0;
        }
        self.backoff();
        Ok(())
    }

    /// Exponential back-off with jitter: a delay drawn from the upper half
    /// of a ceiling that doubles per back-off up to [`BACKOFF_CAP`], never
    /// past the deadline.
    fn backoff(&mut self) {
        let ceiling = BACKOFF_BASE
            .saturating_mul(1 << self.backoffs.min(16))
            .min(BACKOFF_CAP);
        self.backoffs += 1;
        let delay = ceiling.mul_f64(self.rng.gen_range(0.5..=1.0));
        let left = self.deadline.saturating_sub(self.clock.mono_us());
        self.clock.sleep(delay.min(Duration::from_micros(left)));
    }

    /// The error of a write whose deadline passed: `DataTableFull` if it
    /// waited for a free slot, else `Timeout`. A write takes effect only at
    /// its own commit CAS, and a deadline error is returned only when that
    /// CAS was never issued (a commit with an unknown outcome returns the
    /// fabric's error at once), so `DataTableFull` truthfully means that
    /// nothing changed (review F8).
    pub(crate) fn deadline_error(&self) -> Error {
        if self.starved {
            Error::DataTableFull
        } else {
            Error::Timeout
        }
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
            self.geometry.slot_bytes(r.class)
        } else {
            DTE_HEADER_BYTES + round_up_words(key_len)
        }
    }

    /// Reads DTEs (`(slot, key bytes to read, whole slot?)`) in one batch,
    /// or one at a time when batched reads are off. Returns `None` for a DTE
    /// that does not exist or whose header fails the sanity checks (torn or
    /// reused slot).
    pub(crate) fn read_dtes(
        &mut self,
        reqs: &[(SlotRef, usize, bool)],
    ) -> Result<Vec<Option<DteView>>, Error> {
        let addrs: Vec<Option<RemoteAddr>> = reqs
            .iter()
            .map(|&(r, _, _)| self.geometry.dte_addr(r))
            .collect();
        let mut bufs: Vec<Vec<u8>> = reqs
            .iter()
            .zip(&addrs)
            .map(|(&(r, k, whole), addr)| {
                let len = if addr.is_some() {
                    self.read_len(r, k, whole)
                } else {
                    0
                };
                self.buffer(len)
            })
            .collect();
        if self.config.optimizations.batched_reads {
            let mut batch: Vec<Verb<'_>> = Vec::with_capacity(reqs.len());
            for (addr, buf) in addrs.iter().zip(bufs.iter_mut()) {
                if let Some(addr) = *addr {
                    batch.push(Verb::Read { addr, buf });
                }
            }
            self.ep.post(&mut batch)?;
        } else {
            for (addr, buf) in addrs.iter().zip(bufs.iter_mut()) {
                if let Some(addr) = *addr {
                    self.ep.read(addr, buf)?;
                }
            }
        }
        Ok(reqs
            .iter()
            .zip(bufs)
            .map(|(&(r, _, _), bytes)| self.view(r, bytes))
            .collect())
    }

    /// Reads one DTE (`None`: it does not exist, or the read was torn).
    pub(crate) fn read_dte(
        &mut self,
        r: SlotRef,
        key_len: usize,
        whole: bool,
    ) -> Result<Option<DteView>, Error> {
        let Some(addr) = self.geometry.dte_addr(r) else {
            return Ok(None);
        };
        let len = self.read_len(r, key_len, whole);
        let mut bytes = self.buffer(len);
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
    /// The key need not have been read whole (see [`DteView::key`]).
    fn view(&self, at: SlotRef, bytes: Vec<u8>) -> Option<DteView> {
        if bytes.len() < DTE_HEADER_BYTES {
            return None;
        }
        let header = DteHeader::decode(&bytes);
        let s = header.state;
        let sane = s.generation() == at.generation
            && s.key_len() >= 1
            && s.key_len() <= self.config.key_size_max
            && s.value_len() <= self.geometry.capacity(at.class);
        sane.then_some(DteView { at, header, bytes })
    }

    /// Reads the value of a DTE whose header and key were read before.
    pub(crate) fn read_value(&mut self, view: &mut DteView) -> Result<(), Error> {
        let s = view.header.state;
        let off = dte::value_offset(s.key_len());
        let need = off + round_up_words(s.value_len());
        if view.bytes.len() >= need {
            return Ok(());
        }
        let Some(addr) = self.geometry.dte_addr(view.at) else {
            return Ok(());
        };
        let have = view.bytes.len();
        view.bytes.resize(need, 0);
        self.ep
            .read(addr.add(have as u64), &mut view.bytes[have..need])?;
        Ok(())
    }

    /// Stages an unlinked DTE: one WRITE of `expires_at = now + expiry`
    /// (never a CAS'd word). Only the thread whose CAS unlinked the DTE
    /// calls this, once (see the module docs). The operation's outcome no
    /// longer depends on it, so a failed WRITE is logged and counted (the
    /// slot leaks), not returned.
    pub(crate) fn stage(&mut self, r: SlotRef) {
        let Some(addr) = self.geometry.dte_addr(r) else {
            return;
        };
        let at = self.data.expires_at(self.clock.now_us());
        let addr = addr.add(dte::EXPIRES_AT_OFFSET as u64);
        if let Err(e) = self.ep.write(addr, &at.to_le_bytes()) {
            self.stats.stage_failures += 1;
            tracing::warn!(%addr, "staging an unlinked entry failed ({e}); its slot leaks");
        }
    }

    fn tables(&self) -> TableAccess<'_> {
        TableAccess {
            local: self.local,
            cluster: self.ep.fabric().as_ref(),
            clock: self.clock,
        }
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
        let Some(slot) = self.data.allocate(class, self.tables())? else {
            return Ok(None);
        };
        let Some(addr) = self.geometry.dte_addr(slot) else {
            return Err(Error::Corrupt(format!(
                "the allocator returned a slot outside the tables: {slot:?}"
            )));
        };
        let h = header(slot.generation);
        let mut bytes = vec![0u8; dte::entry_bytes(key.len(), value.len())];
        dte::encode_entry(h, key, value, &mut bytes);
        if let Err(e) = self.ep.write(addr, &bytes) {
            // Never linked: the slot is free again whatever the WRITE did.
            self.data.release_unpublished(slot);
            return Err(e.into());
        }
        Ok(Some(slot))
    }
}

/// Builds the contexts of a client's operations.
pub(crate) struct OpEnv<'a> {
    pub(crate) config: &'a Config,
    pub(crate) timing: Timing,
    pub(crate) hasher: &'a KeyHasher,
    pub(crate) clock: &'a dyn Clock,
    pub(crate) data: &'a NodeData,
    pub(crate) local: &'a dyn Fabric,
}

impl OpEnv<'_> {
    /// The context of an operation starting now. `writes` says whether it
    /// may write (and so needs a `created_at` stamp from the wall clock).
    pub(crate) fn ctx<'b>(
        &'b self,
        ep: &'b mut Endpoint,
        cache: &'b mut DteCache,
        buffers: &'b mut Vec<Vec<u8>>,
        rng: &'b mut StdRng,
        stats: &'b mut OpStats,
        writes: bool,
    ) -> Ctx<'b> {
        let started = self.clock.mono_us();
        Ctx {
            config: self.config,
            hasher: self.hasher,
            ep,
            clock: self.clock,
            data: self.data,
            geometry: self.data.geometry(),
            local: self.local,
            cache,
            buffers,
            rng,
            stats,
            timing: self.timing,
            created_at: if writes { self.clock.now_us() } else { 0 },
            deadline: started.saturating_add(self.timing.op_timeout_us),
            torn: 0,
            backoffs: 0,
            index_read_at: started,
            starved: false,
        }
    }
}
