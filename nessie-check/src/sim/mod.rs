//! The deterministic simulator: many simulated threads of one in-process
//! cluster, interleaved one verb (or one piece of a verb) at a time by a
//! seeded scheduler, with virtual clocks and every fault the protocol claims
//! to survive.
//!
//! Each simulated thread runs on its own OS thread, but only one runs at a
//! time: every verb (through [`SimFabric`]) and every back-off sleep (through
//! [`SimClock`]) is a *yield point* where the scheduler picks, with its
//! seeded RNG, which thread runs next. Everything between two yield points is
//! local computation, so a seed fixes the whole run.
//!
//! Faults, decided at yield points ([`Faults`]):
//! * **crash**: a client stops for ever before its next verb (it unwinds with
//!   a [`Crashed`] panic, caught by the runner); its operation's outcome is
//!   unknown. Background threads (the recycler) never crash.
//! * **stall** of a random length: up to `stall_max_us` before a READ, a
//!   WRITE or a back-off (the protocol bounds none of these: a stall between
//!   a CAS and the WRITE after it is one of them), and up to
//!   `cas_stall_max_us` before a client's CAS, whose deadline check came
//!   right before it (the protocol's landing bound). A stall longer than
//!   `op_timeout` makes a *zombie*: others declare it dead, then it resumes.
//! * **torn verbs**: a multi-word READ or WRITE executes in pieces at random
//!   word boundaries, with yield points between them, as shm copies and NICs
//!   do; [`SimCounts::torn_reads`] counts READs that another verb wrote into
//!   while they were in progress.
//! * **transport errors**: a verb fails as a broken `tcp` connection would;
//!   a WRITE or CAS may have executed first (unknown outcome).
//! * **clock steps**: a node's wall clock jumps to a new offset from virtual
//!   time, within `clock_offset_max_us` (monotonic clocks never step); and,
//!   beyond the skew bound, one node's clock stepping far ahead once and
//!   back later ([`ForwardStep`]), for runs that model the clock watch.
//! * scripted **crash** and **stall** at a given yield point of a given
//!   client, for exhaustive enumeration of short schedules.
//! * **host lost** (replicated scenarios, [`HostLoss`]): a node's clients
//!   and background threads crash, its memory is wiped and the fabric
//!   refuses every verb to it; the survivors' view changes at once and the
//!   view without it is activated after the drain (`host.rs`).
//! * **host returns empty** ([`HostReturn`]): once that view is active, a
//!   replacement with the node's id and empty memory joins as a restoring
//!   member, a scheduled thread copies its replicas while the clients go
//!   on, and a view names it active again (`restore.rs`).
//!
//! The machinery (this module, `scheduler.rs`, `fabric.rs`, `clock.rs`,
//! `faults.rs`) runs the scenarios (`scenario.rs`, built by `world.rs`):
//! [`run`] takes a scenario and a seed to a verdict, through the audit
//! (`audit.rs`) and the invariants checked during the run
//! (`invariants.rs`); see `run.rs` for the steps of a run.

mod audit;
mod clock;
mod fabric;
mod faults;
mod host;
mod invariants;
mod mirrors;
mod outcome;
mod restore;
mod run;
mod scenario;
mod scheduler;
mod threads;
mod world;

pub use clock::SimClock;
pub use fabric::{MemoryCheck, SimFabric};
pub use faults::{Faults, ForwardStep, HostLoss, HostReturn, Injected};
pub use invariants::{divergent_duplicates, divergent_duplicates_in};
pub use outcome::SimOutcome;
pub use run::{enumerate_faults, run, run_with, seeds, seeds_from};
pub use scenario::{Clocks, Layout, Scenario, Switches};
pub use scheduler::{Scheduler, SchedulerReport};

use nessie::fabric::RemoteAddr;
use std::cell::Cell;

thread_local! {
    static SIM_ID: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Panic payload of a client the scheduler crashed.
#[derive(Debug, Clone, Copy)]
pub struct Crashed;

/// The kind of a yield point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// Before a READ (or a piece of a torn READ).
    Read,
    /// Before a WRITE (or a piece of a torn WRITE).
    Write,
    /// Before a CAS.
    Cas,
    /// A back-off sleep.
    Sleep,
    /// A point between two steps of a node's bookkeeping that issues no
    /// verb (see [`nessie::fabric::Fabric::yield_point`]).
    Pause,
}

/// The verb (or sleep) a thread is about to perform at a yield point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PointInfo {
    /// What kind of point.
    pub kind: Point,
    /// Target of the verb (none for a sleep).
    pub addr: Option<RemoteAddr>,
    /// A CAS's expected value.
    pub expected: u64,
    /// A CAS's new value.
    pub new: u64,
}

impl PointInfo {
    fn sleep() -> PointInfo {
        PointInfo {
            kind: Point::Sleep,
            addr: None,
            expected: 0,
            new: 0,
        }
    }

    fn pause() -> PointInfo {
        PointInfo {
            kind: Point::Pause,
            addr: None,
            expected: 0,
            new: 0,
        }
    }

    fn verb(kind: Point, addr: RemoteAddr) -> PointInfo {
        PointInfo {
            kind,
            addr: Some(addr),
            expected: 0,
            new: 0,
        }
    }
}

/// A predicate on the next point of a scripted client: where to stop it.
pub type StopAt = Box<dyn Fn(&PointInfo) -> bool + Send>;

/// What a simulated thread is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A client issuing operations: may crash; its CASes follow deadline
    /// checks, so stalls before them are bounded by the landing bound.
    Client,
    /// A node's background thread (the recycler): never crashes; its CASes
    /// need no deadline, so stalls before them are unbounded.
    Background,
}

/// What a run's scheduler and fabric did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimCounts {
    /// Yield points passed.
    pub steps: u64,
    /// Clients crashed.
    pub crashes: usize,
    /// Stalls injected.
    pub stalls: u64,
    /// Stalls before a CAS.
    pub cas_stalls: u64,
    /// Zombie stalls before a critical CAS (see [`Faults::critical_stall`]).
    pub critical_stalls: u64,
    /// READs and WRITEs executed in pieces.
    pub split_verbs: u64,
    /// Batches holding a CAS whose verbs ran in another order than posted
    /// (a fabric keeps only each node's order; the simulator draws the
    /// interleaving of the nodes').
    pub reordered_batches: u64,
    /// READs into whose range another verb wrote while they were in
    /// progress.
    pub torn_reads: u64,
    /// Verbs failed with a transport error.
    pub transport_errors: u64,
    /// Wall-clock steps.
    pub clock_steps: u64,
    /// CASes a land-by time refused.
    pub late_cas_refused: u64,
    /// Hosts lost (at most one per run).
    pub hosts_lost: u64,
    /// Threads (clients and background threads) that crashed with their
    /// host.
    pub host_crashes: u64,
    /// Verbs refused because their target's host was lost.
    pub refused_lost: u64,
    /// Views activated after a loss.
    pub activations: u64,
    /// Operations refused with `ViewChanging` (and issued again).
    pub view_changing: u64,
    /// Client operations of the old view still running (stalled past their
    /// deadline) when the new view was activated.
    pub stale_ops_at_activation: u64,
    /// CASes of a background thread posted in one view that landed after
    /// the next was activated (the recycler is not fenced by the drain).
    pub late_background_cas: u64,
    /// Replacements of a lost host started (its memory opened and filled
    /// with the restore's start values, the restoring view decided).
    pub returns: u64,
    /// Restores finished: every replica copied, the view naming the node
    /// active again activated.
    pub restores: u64,
    /// Copies of a restore begun again after a verb failed.
    pub restore_retries: u64,
    /// Index and data slots the restores copied.
    pub slots_copied: u64,
    /// Chunks copied again because a slot changed under the copy.
    pub recopies: u64,
    /// Data slots the restored allocators took back as in use.
    pub entries_adopted: u64,
    /// Client operations begun while a restore was copying.
    pub ops_during_copy: u64,
    /// State words the restored nodes' catch-ups moved forward on their
    /// shares' other replicas (docs/replication.md#rp3c).
    pub caught_up: u64,
}

impl std::ops::AddAssign for SimCounts {
    fn add_assign(&mut self, o: SimCounts) {
        self.steps += o.steps;
        self.crashes += o.crashes;
        self.stalls += o.stalls;
        self.cas_stalls += o.cas_stalls;
        self.critical_stalls += o.critical_stalls;
        self.split_verbs += o.split_verbs;
        self.reordered_batches += o.reordered_batches;
        self.torn_reads += o.torn_reads;
        self.transport_errors += o.transport_errors;
        self.clock_steps += o.clock_steps;
        self.late_cas_refused += o.late_cas_refused;
        self.hosts_lost += o.hosts_lost;
        self.host_crashes += o.host_crashes;
        self.refused_lost += o.refused_lost;
        self.activations += o.activations;
        self.view_changing += o.view_changing;
        self.stale_ops_at_activation += o.stale_ops_at_activation;
        self.late_background_cas += o.late_background_cas;
        self.returns += o.returns;
        self.restores += o.restores;
        self.restore_retries += o.restore_retries;
        self.slots_copied += o.slots_copied;
        self.recopies += o.recopies;
        self.entries_adopted += o.entries_adopted;
        self.ops_during_copy += o.ops_during_copy;
        self.caught_up += o.caught_up;
    }
}

/// Silences the panic message of [`Crashed`] unwinds (other panics still
/// print). Call once per test process.
pub fn quiet_crashes() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<Crashed>().is_none() {
                default(info);
            }
        }));
    });
}
