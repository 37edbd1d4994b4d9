//! GET, PUT, DELETE and MIGRATE on the distributed cuckoo index, using only
//! READ, WRITE and CAS (docs/design.md#protocol).
//!
//! # Invariants this module keeps
//!
//! * **Publish once, fully written.** A DTE is written in full into the
//!   client's own node before any ITE points at it; afterwards only its
//!   `state` (by CAS) and `expires_at` (one WRITE, by whoever unlinks it)
//!   change.
//! * **CAS'd words are only CAS'd.** ITEs and DTE state words are modified
//!   only through the fabric's CAS ([`Gate::cas`]), never written.
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
//! * **Landing bound.** Every CAS goes through [`Gate::cas`], which checks
//!   the deadline, gives fabrics that can enforce it a land-by time, and
//!   reads the clock again afterwards to count and log a CAS that may have
//!   landed later than `Config::landing_bound` after its check.
//!
//! Linearization points: PUT at its commit CAS, DELETE at the commit CAS of
//! its tombstone, GET at the read that decided its answer.

//! # Modules
//!
//! * `gate` — [`Gate`]: the operation's verbs and deadline; its CAS is the
//!   only one the protocol can issue, and it checks the deadline first.
//! * `env` — [`Env`]: what operations borrow from the node (configuration,
//!   hasher, data tables, clock) and [`Timing`].
//! * `op` — [`Op`]: one operation's own state, retries and back-off.
//! * `view`, `reads` — reading ITEs and DTEs ([`DteView`]).
//! * `entries` — writing, linking, committing and staging one's own DTEs.
//! * `mirror` — the steps the mirrors of a share must see, in the order
//!   replication's rules require (nothing with one replica).
//! * `get`, `write`, `migrate`, `help` — the operations and helping.
//! * `hinted` — a GET's read of the entry its location hint names, in the
//!   batch of the key's ITEs.

mod entries;
mod env;
mod gate;
mod get;
mod help;
mod hinted;
mod migrate;
mod mirror;
mod op;
mod reads;
mod view;
mod write;

use crate::cache::hints::LocationHints;
use crate::cache::DteCache;
use crate::data::Stagings;
use crate::fabric::{Endpoint, Fabric};
use crate::stats::OpStats;
use rand::rngs::StdRng;

pub(crate) use entries::Linked;
pub(crate) use env::{Env, Timing};
pub(crate) use gate::Gate;
pub(crate) use get::SliceOut;
pub(crate) use op::{Op, Retry};
pub(crate) use view::DteView;
pub(crate) use write::WriteKind;

/// What a client keeps from one operation to the next.
#[derive(Debug)]
pub(crate) struct Kept {
    /// Committed remote entries, keyed by ITE value.
    cache: DteCache,
    /// The ITE value last seen linked per key (docs/design.md#location-hints).
    hints: LocationHints,
    /// Read buffers (no allocation or zeroing of a whole slot per READ
    /// once warm).
    buffers: Vec<Vec<u8>>,
    /// Back-off jitter.
    rng: StdRng,
    /// Slots of its own node the client staged, for its allocations.
    stagings: Stagings,
    /// The figures of the data table behind this client's last
    /// `DataTableFull`.
    pub(crate) table_full: Option<crate::data::DataTableFigures>,
}

impl Kept {
    pub(crate) fn new(
        cache: DteCache,
        hints: LocationHints,
        rng: StdRng,
        stagings: Stagings,
    ) -> Kept {
        Kept {
            cache,
            hints,
            buffers: Vec::new(),
            rng,
            stagings,
            table_full: None,
        }
    }
}

/// One operation: the node's resources, its verbs behind the CAS gate, its
/// own state, and what the client keeps between operations.
pub(crate) struct Ctx<'a> {
    pub(crate) env: Env<'a>,
    pub(crate) gate: Gate<'a>,
    pub(crate) op: Op<'a>,
    kept: &'a mut Kept,
}

impl<'a> Ctx<'a> {
    /// The context of an operation that started at `started` (the
    /// clock's monotonic µs, read by the caller). `writes` says whether it
    /// may write (and so needs a `created_at` stamp from the wall clock).
    /// `local` is the node's own memory without wrappers (allocation scans).
    pub(crate) fn start(
        env: Env<'a>,
        (ep, local): (&'a mut Endpoint, &'a dyn Fabric),
        kept: &'a mut Kept,
        stats: &'a mut OpStats,
        writes: bool,
        started: u64,
    ) -> Ctx<'a> {
        let created_at = if writes { env.clock.now_us() } else { 0 };
        Ctx {
            gate: Gate::new(
                ep,
                (local, env.clock),
                &env.timing,
                (started, writes.then_some(created_at)),
                env.views.lease_until(),
            ),
            op: Op::new(created_at, started, stats),
            env,
            kept,
        }
    }
}

impl Drop for Ctx<'_> {
    /// The gate counts late CASes; they belong to the operation's counters.
    fn drop(&mut self) {
        self.gate.settle();
        self.op.stats.late_cas += self.gate.late_cas;
    }
}
