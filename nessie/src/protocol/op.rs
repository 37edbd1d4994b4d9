//! The state one operation keeps for itself: its timestamps, its retries
//! and back-off, and its counters.

use super::Ctx;
use crate::stats::OpStats;
use crate::Error;
use rand::rngs::StdRng;
use rand::Rng;
use std::time::Duration;

/// Consecutive torn reads of one entry after which an operation reports
/// [`Error::Corrupt`] instead of retrying.
const MAX_TORN: u32 = 64;
/// First back-off delay.
const BACKOFF_BASE: Duration = Duration::from_micros(2);
/// Longest back-off delay, jitter included.
const BACKOFF_CAP: Duration = Duration::from_millis(2);

/// Why a pass over the candidates ended without an answer: the store's
/// retry taxonomy (declared once, with its counters, in `stats.rs`).
pub(crate) use crate::stats::RetryCause as Retry;

/// Per-operation state (the deadline lives in the operation's
/// [`super::gate::Gate`]).
pub(crate) struct Op<'a> {
    /// `created_at` of the operation: wall-clock µs, which helpers on other
    /// nodes compare with their clocks.
    pub(crate) created_at: u64,
    /// Monotonic µs just before the current pass read the index: entries
    /// found linked then cannot be reused before `expiry` has passed.
    pub(crate) index_read_at: u64,
    torn: u32,
    /// The entry whose read was torn last (named by a `Corrupt` error).
    pub(crate) torn_at: Option<crate::layout::SlotRef>,
    /// What this operation linked and staged so far, for the assertions
    /// that it links an entry once and stages an incarnation once
    /// (docs/design.md#f4-rule-i-one-stager-per-incarnation). Debug builds
    /// only: an assertion never issues a verb.
    #[cfg(debug_assertions)]
    pub(crate) linked: Vec<crate::layout::SlotRef>,
    #[cfg(debug_assertions)]
    pub(crate) staged: Vec<crate::layout::SlotRef>,
    backoffs: u32,
    /// The linked ITE value whose committed entry decided this GET's
    /// current pass: the key's next location hint.
    pub(crate) decided_by: Option<crate::layout::Ite>,
    /// Whether the answer's checksum is verified, where decided already
    /// (an answer from a hinted read, docs/design.md#location-hints);
    /// `None`: by [`crate::ChecksumPolicy`] (see `Ctx::must_verify`).
    pub(crate) verify_answer: Option<bool>,
    /// Whether the operation's last attempt ended waiting for a free DTE
    /// slot (and no later one got a slot): what makes a missed deadline
    /// `DataTableFull` rather than `Timeout`.
    starved: bool,
    pub(crate) stats: &'a mut OpStats,
}

impl<'a> Op<'a> {
    /// An operation created at wall time `created_at` whose first index
    /// read starts at monotonic time `started_us`.
    pub(super) fn new(created_at: u64, started_us: u64, stats: &'a mut OpStats) -> Op<'a> {
        Op {
            created_at,
            index_read_at: started_us,
            torn: 0,
            torn_at: None,
            #[cfg(debug_assertions)]
            linked: Vec::new(),
            #[cfg(debug_assertions)]
            staged: Vec::new(),
            backoffs: 0,
            decided_by: None,
            verify_answer: None,
            starved: false,
            stats,
        }
    }

    /// Counts `why` (also for steps that do not end the attempt, such as a
    /// torn read inside a MIGRATE).
    pub(crate) fn note(&mut self, why: Retry) {
        *self.stats.retries.get_mut(why) += 1;
    }

    /// The operation got a data slot: a later missed deadline is not for
    /// want of one.
    pub(crate) fn got_slot(&mut self) {
        self.starved = false;
    }

    /// Accounts a retry, turning too many torn reads in a row into
    /// [`Error::Corrupt`].
    fn count_retry(&mut self, why: Retry) -> Result<(), Error> {
        self.note(why);
        self.starved = why == Retry::NoFreeSlot;
        if why == Retry::Torn {
            self.torn += 1;
            if self.torn > MAX_TORN {
                return Err(Error::Corrupt {
                    entry: self.torn_at,
                    what: format!(
                        "reads failed their checksum or generation check {MAX_TORN} times in a row"
                    ),
                });
            }
        } else {
            self.torn = 0;
        }
        Ok(())
    }

    /// The next back-off delay: drawn from the upper half of a ceiling that
    /// doubles per back-off up to [`BACKOFF_CAP`].
    fn next_backoff(&mut self, rng: &mut StdRng) -> Duration {
        let ceiling = BACKOFF_BASE
            .saturating_mul(1 << self.backoffs.min(16))
            .min(BACKOFF_CAP);
        self.backoffs += 1;
        ceiling.mul_f64(rng.gen_range(0.5..=1.0))
    }

    /// The error of a write whose deadline passed: `DataTableFull` if its last
    /// attempt waited for a free slot, else `Timeout`. A write takes effect
    /// only at its own commit CAS, and a deadline error is returned only when
    /// that CAS was never issued (a commit with an unknown outcome returns the
    /// fabric's error at once), so `DataTableFull` truthfully means that
    /// nothing changed (docs/design.md#f8-a-full-table-is-reported-as-full).
    pub(crate) fn deadline_error(&self) -> Error {
        if self.starved {
            Error::DataTableFull
        } else {
            Error::Timeout
        }
    }
}

impl Ctx<'_> {
    /// Accounts a retry and backs off (after every kind: two writers that
    /// abort each other must not retry in lock step), turning too many torn
    /// reads in a row into [`Error::Corrupt`].
    pub(crate) fn retry(&mut self, why: Retry) -> Result<(), Error> {
        self.op.count_retry(why)?;
        self.backoff();
        Ok(())
    }

    /// Exponential back-off with jitter, never past the deadline.
    fn backoff(&mut self) {
        let delay = self.op.next_backoff(&mut self.kept.rng);
        let left = self.gate.left_us();
        let delay = delay.min(Duration::from_micros(left));
        self.op.stats.backoff_us += delay.as_micros() as u64;
        self.env.clock.sleep(delay);
    }
}
