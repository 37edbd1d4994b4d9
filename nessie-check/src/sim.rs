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
//!   time, within `clock_offset_max_us` (monotonic clocks never step).
//! * scripted **crash** and **stall** at a given yield point of a given
//!   client, for exhaustive enumeration of short schedules.

use nessie::data::Geometry;
use nessie::fabric::{Fabric, FabricError, NodeId, RegionId, RemoteAddr};
use nessie::layout::dte::{DteState, EXPIRES_AT_OFFSET};
use nessie::layout::region;
use nessie::layout::Ite;
use nessie::Clock;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cell::Cell;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

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

/// Fault injection settings (probabilities per yield point or verb).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Faults {
    /// Probability that a client crashes at a yield point.
    pub crash: f64,
    /// Most clients that may crash in one run.
    pub max_crashes: usize,
    /// Probability that the running thread stalls at a yield point.
    pub stall: f64,
    /// Longest stall before a READ, a WRITE or a back-off (µs).
    pub stall_max_us: u64,
    /// Longest stall before a client's CAS (µs): the landing bound.
    pub cas_stall_max_us: u64,
    /// How long a stall must be to make its thread a zombie (`op_timeout +
    /// 2·max_clock_skew`): half the stall lengths are drawn from just
    /// above it, where a late CAS races its helpers.
    pub dead_after_us: u64,
    /// Probability of a zombie stall (from the zombie window up to the
    /// landing bound) before a *critical* CAS: one that installs, clears or
    /// restores a MIGRATE marker, or commits or aborts a MIGRATE copy. Real
    /// preemption strikes any verb; the simulator strikes these more often
    /// because the recycling rules hinge on them.
    pub critical_stall: f64,
    /// Probability that a client crashes before a critical CAS (within
    /// `max_crashes`).
    pub critical_crash: f64,
    /// After a client *reads* a MIGRATE marker, each of its next few READs
    /// stalls with `critical_stall`: between seeing a marker and acting on
    /// it, a helper races the zombie that installed it and the other
    /// helpers.
    pub watch_reads: bool,
    /// Priority scheduling (after PCT, Burckhardt et al. 2010), chosen per
    /// seed with this probability instead of a uniform pick: every thread
    /// gets a random priority, the highest ready one runs, and at each
    /// point the running thread's priority is redrawn with probability
    /// `priority_change`. It produces long solo runs of one thread while
    /// another waits at an arbitrary verb, the shape of most races.
    pub priority_runs: f64,
    /// See `priority_runs`.
    pub priority_change: f64,
    /// Probability that a READ or WRITE of two words or more executes in
    /// pieces.
    pub tear: f64,
    /// Probability that a verb fails with a transport error.
    pub transport: f64,
    /// Probability per yield point that a random node's wall clock steps.
    pub clock_step: f64,
    /// Largest distance of a node's wall clock from virtual time (µs).
    pub clock_offset_max_us: u64,
    /// Crash client `.0` right before its yield point number `.1`.
    pub crash_at: Option<(usize, u64)>,
    /// Stall client `.0` at its yield point number `.1` for `.2` µs.
    pub stall_at: Option<(usize, u64, u64)>,
}

impl Faults {
    /// No faults.
    #[must_use]
    pub fn none() -> Faults {
        Faults {
            crash: 0.0,
            max_crashes: 0,
            stall: 0.0,
            stall_max_us: 0,
            cas_stall_max_us: 0,
            dead_after_us: 0,
            critical_stall: 0.0,
            critical_crash: 0.0,
            watch_reads: false,
            priority_runs: 0.0,
            priority_change: 0.0,
            tear: 0.0,
            transport: 0.0,
            clock_step: 0.0,
            clock_offset_max_us: 0,
            crash_at: None,
            stall_at: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    /// Not yet registered.
    Absent,
    Ready,
    /// Sleeping or stalled until this virtual time.
    Waiting(u64),
    Done,
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
    /// READs into whose range another verb wrote while they were in
    /// progress.
    pub torn_reads: u64,
    /// Verbs failed with a transport error.
    pub transport_errors: u64,
    /// Wall-clock steps.
    pub clock_steps: u64,
    /// CASes a land-by time refused.
    pub late_cas_refused: u64,
}

impl std::ops::AddAssign for SimCounts {
    fn add_assign(&mut self, o: SimCounts) {
        self.steps += o.steps;
        self.crashes += o.crashes;
        self.stalls += o.stalls;
        self.cas_stalls += o.cas_stalls;
        self.critical_stalls += o.critical_stalls;
        self.split_verbs += o.split_verbs;
        self.torn_reads += o.torn_reads;
        self.transport_errors += o.transport_errors;
        self.clock_steps += o.clock_steps;
        self.late_cas_refused += o.late_cas_refused;
    }
}

struct State {
    rng: StdRng,
    now: u64,
    current: Option<usize>,
    threads: Vec<Run>,
    roles: Vec<Role>,
    /// Yield points each thread passed.
    points: Vec<u64>,
    /// Each node's wall-clock offset from virtual time (µs).
    offsets: Vec<i64>,
    faults: Faults,
    counts: SimCounts,
    /// Per-step cap, so a livelock ends the run instead of hanging it.
    max_steps: u64,
    /// Thread priorities, when this run schedules by priority.
    priorities: Option<Vec<u32>>,
    /// Per thread: verbs left in its window after reading critical state.
    hot: Vec<u32>,
    /// Scripted mode: a driver thread decides who runs and until when.
    scripted: bool,
    stop: Vec<Option<StopAt>>,
    crash: Vec<bool>,
    last_point: Option<PointInfo>,
    /// Broken invariants the fabric noticed.
    violations: Vec<String>,
    /// Scripted mode: a transport error for a client's next verb.
    scripted_transport: Vec<Option<Injected>>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("now", &self.now)
            .field("current", &self.current)
            .field("threads", &self.threads)
            .field("counts", &self.counts)
            .field("scripted", &self.scripted)
            .finish_non_exhaustive()
    }
}

/// The seeded scheduler and virtual clock of one simulation run.
#[derive(Debug)]
pub struct Scheduler {
    state: Mutex<State>,
    turn: Condvar,
}

/// What a run's scheduler did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedulerReport {
    /// Everything counted.
    pub counts: SimCounts,
    /// Virtual time at the end (µs).
    pub now_us: u64,
    /// Whether the step cap was hit.
    pub exhausted: bool,
}

/// How a verb fails with a transport error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Injected {
    /// Before it executed.
    Before,
    /// After it executed (the caller cannot tell).
    After,
}

impl Scheduler {
    /// A scheduler for `threads` simulated threads and `nodes` node clocks,
    /// starting at virtual time `start_us`. Initial clock offsets are drawn
    /// within `faults.clock_offset_max_us`.
    #[must_use]
    pub fn new(
        seed: u64,
        threads: usize,
        nodes: usize,
        start_us: u64,
        faults: Faults,
        max_steps: u64,
    ) -> Arc<Scheduler> {
        let mut rng = StdRng::seed_from_u64(seed);
        let max = faults.clock_offset_max_us as i64;
        let offsets = (0..nodes).map(|_| rng.gen_range(-max..=max)).collect();
        let priorities = (faults.priority_runs > 0.0 && rng.gen_bool(faults.priority_runs))
            .then(|| (0..threads).map(|_| rng.gen()).collect());
        Arc::new(Scheduler {
            state: Mutex::new(State {
                rng,
                now: start_us,
                current: None,
                threads: vec![Run::Absent; threads],
                roles: vec![Role::Client; threads],
                points: vec![0; threads],
                offsets,
                faults,
                counts: SimCounts::default(),
                max_steps,
                priorities,
                hot: vec![0; threads],
                scripted: false,
                stop: (0..threads).map(|_| None).collect(),
                crash: vec![false; threads],
                last_point: None,
                violations: Vec::new(),
                scripted_transport: vec![None; threads],
            }),
            turn: Condvar::new(),
        })
    }

    /// A scheduler driven by a script: clients run only when the driver
    /// says, until a predicate on their next point holds.
    #[must_use]
    pub fn scripted(clients: usize, nodes: usize, start_us: u64) -> Arc<Scheduler> {
        let sched = Scheduler::new(0, clients, nodes, start_us, Faults::none(), u64::MAX);
        sched.lock().scripted = true;
        sched
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Scripted mode: waits until client `me` has entered.
    fn wait_entered(&self, me: usize) {
        let mut s = self.lock();
        while s.threads[me] == Run::Absent {
            s = self
                .turn
                .wait(s)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Scripted mode: runs client `me` until it is about to perform a point
    /// for which `stop` holds (it stops *before* that verb), or finishes.
    /// Returns the point it stopped at, `None` if it finished.
    pub fn run_until(
        &self,
        me: usize,
        stop: impl Fn(&PointInfo) -> bool + Send + 'static,
    ) -> Option<PointInfo> {
        self.wait_entered(me);
        let mut s = self.lock();
        if s.threads[me] == Run::Done {
            return None;
        }
        s.stop[me] = Some(Box::new(stop));
        s.current = Some(me);
        s.threads[me] = Run::Ready;
        self.turn.notify_all();
        while s.current.is_some() {
            s = self
                .turn
                .wait(s)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        s.stop[me] = None;
        let stopped = s.last_point.take();
        if s.threads[me] == Run::Done {
            None
        } else {
            stopped
        }
    }

    /// Scripted mode: runs client `me` to the end of its work.
    pub fn run_to_end(&self, me: usize) {
        let _ = self.run_until(me, |_| false);
    }

    /// Scripted mode: the verb client `me` stopped at fails with a transport
    /// error, before or after it executed, when the client goes on.
    pub fn fail_next_verb(&self, me: usize, how: Injected) {
        self.lock().scripted_transport[me] = Some(how);
    }

    /// Scripted mode: crashes client `me` where it stands (before the verb
    /// it stopped at).
    pub fn crash(&self, me: usize) {
        self.lock().crash[me] = true;
        self.run_to_end(me);
    }

    /// Virtual time (µs).
    #[must_use]
    pub fn now(&self) -> u64 {
        self.lock().now
    }

    /// Node `node`'s wall clock (µs).
    #[must_use]
    pub fn wall(&self, node: NodeId) -> u64 {
        let s = self.lock();
        (s.now as i64 + s.offsets.get(node).copied().unwrap_or(0)).max(0) as u64
    }

    /// Sets node `node`'s wall-clock offset (scripted clock steps).
    pub fn set_offset(&self, node: NodeId, offset_us: i64) {
        self.lock().offsets[node] = offset_us;
    }

    /// Lets `us` microseconds of virtual time pass (between runs).
    pub fn advance(&self, us: u64) {
        self.lock().now += us;
    }

    /// Global step counter (a timestamp for histories).
    #[must_use]
    pub fn steps(&self) -> u64 {
        self.lock().counts.steps
    }

    /// Yield points thread `me` has passed so far.
    #[must_use]
    pub fn points_of(&self, me: usize) -> u64 {
        self.lock().points[me]
    }

    /// Whether every client has finished (background threads poll this to
    /// stop at a point fixed by the schedule).
    #[must_use]
    pub fn clients_done(&self) -> bool {
        let s = self.lock();
        s.threads
            .iter()
            .zip(&s.roles)
            .all(|(t, r)| *r == Role::Background || *t == Run::Done)
    }

    /// What happened so far.
    #[must_use]
    pub fn report(&self) -> SchedulerReport {
        let s = self.lock();
        SchedulerReport {
            counts: s.counts,
            now_us: s.now,
            exhausted: s.counts.steps >= s.max_steps,
        }
    }

    /// Picks the next thread to run (seeded); advances virtual time to the
    /// earliest wake-up if everyone waits.
    fn pick(s: &mut State) {
        loop {
            let now = s.now;
            for t in &mut s.threads {
                if matches!(*t, Run::Waiting(until) if until <= now) {
                    *t = Run::Ready;
                }
            }
            let ready: Vec<usize> = (0..s.threads.len())
                .filter(|&i| s.threads[i] == Run::Ready)
                .collect();
            if !ready.is_empty() {
                s.current = Some(match &s.priorities {
                    Some(p) => *ready.iter().max_by_key(|&&i| p[i]).unwrap_or(&ready[0]),
                    None => ready[s.rng.gen_range(0..ready.len())],
                });
                return;
            }
            let wake = s
                .threads
                .iter()
                .filter_map(|t| match t {
                    Run::Waiting(u) => Some(*u),
                    _ => None,
                })
                .min();
            match wake {
                Some(u) => s.now = u,
                None => {
                    s.current = None;
                    return;
                }
            }
        }
    }

    fn wait_turn<'a>(&'a self, mut s: MutexGuard<'a, State>, me: usize) -> MutexGuard<'a, State> {
        while s.current != Some(me) {
            s = self
                .turn
                .wait(s)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        s
    }

    /// Registers the calling thread as client `me` and waits for its first
    /// turn. Call [`Scheduler::start`] once every thread is registered.
    pub fn enter(&self, me: usize) {
        self.enter_as(me, Role::Client);
    }

    /// Registers the calling thread as thread `me` in `role`.
    pub fn enter_as(&self, me: usize, role: Role) {
        SIM_ID.with(|c| c.set(Some(me)));
        let mut s = self.lock();
        s.threads[me] = Run::Ready;
        s.roles[me] = role;
        self.turn.notify_all();
        drop(self.wait_turn(s, me));
        self.crash_if_told(me);
    }

    fn crash_if_told(&self, me: usize) {
        let mut s = self.lock();
        if s.crash[me] {
            s.counts.crashes += 1;
            drop(s);
            std::panic::panic_any(Crashed);
        }
    }

    /// Starts the run once every thread has entered.
    pub fn start(&self) {
        loop {
            {
                let mut s = self.lock();
                if s.threads.iter().all(|t| *t == Run::Ready) {
                    Self::pick(&mut s);
                    self.turn.notify_all();
                    return;
                }
            }
            std::thread::yield_now();
        }
    }

    /// The calling thread finished (normally or by crashing).
    pub fn leave(&self) {
        let Some(me) = SIM_ID.with(Cell::get) else {
            return;
        };
        let mut s = self.lock();
        s.threads[me] = Run::Done;
        if s.current == Some(me) {
            if s.scripted {
                s.current = None;
            } else {
                Self::pick(&mut s);
            }
        }
        self.turn.notify_all();
    }

    /// A yield point of the calling thread. Panics with [`Crashed`] when the
    /// scheduler crashes the client here.
    pub fn point(&self, info: PointInfo) {
        let Some(me) = SIM_ID.with(Cell::get) else {
            return;
        };
        let mut s = self.lock();
        s.points[me] += 1;
        if s.scripted {
            s.counts.steps += 1;
            s.now += 1;
            if let Run::Waiting(until) = s.threads[me] {
                // A back-off sleep: time passes, the client goes on.
                s.now = s.now.max(until);
                s.threads[me] = Run::Ready;
            }
            if s.stop[me].as_ref().is_some_and(|stop| stop(&info)) {
                s.last_point = Some(info);
                s.current = None;
                self.turn.notify_all();
                drop(self.wait_turn(s, me));
                self.crash_if_told(me);
            }
            return;
        }
        s.counts.steps += 1;
        let tick = s.rng.gen_range(1..=4);
        s.now += tick;
        if s.counts.steps >= s.max_steps {
            // Out of budget: crash everyone so the run ends; the runner
            // reports the exhaustion.
            drop(s);
            std::panic::panic_any(Crashed);
        }
        let f = s.faults;
        let client = s.roles[me] == Role::Client;
        let at = s.points[me];
        let hot = s.hot[me] > 0;
        if hot {
            s.hot[me] -= 1;
        }
        let critical_cas = client && is_critical(&info);
        let critical = critical_cas || (client && hot && info.kind == Point::Read);
        let crash_p = if critical_cas {
            f.crash.max(f.critical_crash)
        } else {
            f.crash
        };
        let scripted_crash = client && f.crash_at == Some((me, at));
        if scripted_crash
            || (client
                && info.kind != Point::Sleep
                && s.counts.crashes < f.max_crashes
                && crash_p > 0.0
                && s.rng.gen_bool(crash_p))
        {
            s.counts.crashes += 1;
            drop(s);
            std::panic::panic_any(Crashed);
        }
        let mut stall = match f.stall_at {
            // Before a client's CAS, within the landing bound.
            Some((c, p, len)) if c == me && p == at && info.kind == Point::Cas && client => {
                if f.cas_stall_max_us > 0 {
                    len.min(f.cas_stall_max_us)
                } else {
                    len
                }
            }
            Some((c, p, len)) if c == me && p == at => len,
            _ => 0,
        };
        if stall == 0 && critical && f.critical_stall > 0.0 && s.rng.gen_bool(f.critical_stall) {
            let max = if info.kind == Point::Cas {
                f.cas_stall_max_us
            } else {
                f.stall_max_us
            };
            let zombie = f.dead_after_us.min(max);
            stall = s.rng.gen_range(zombie..=max);
            s.counts.critical_stalls += 1;
        }
        if stall == 0 && f.stall > 0.0 && s.rng.gen_bool(f.stall) {
            let max = if info.kind == Point::Cas && client {
                f.cas_stall_max_us
            } else {
                f.stall_max_us
            };
            // Half short, half from the zombie window up to the bound.
            let zombie = f.dead_after_us.min(max);
            stall = if s.rng.gen_bool(0.5) {
                s.rng.gen_range(0..=zombie)
            } else {
                s.rng.gen_range(zombie..=max)
            };
        }
        if stall > 0 {
            s.counts.stalls += 1;
            if info.kind == Point::Cas {
                s.counts.cas_stalls += 1;
            }
            let until = match s.threads[me] {
                // A back-off sleep that also stalls ends at the later time.
                Run::Waiting(u) => u.max(s.now + stall),
                _ => s.now + stall,
            };
            s.threads[me] = Run::Waiting(until);
        }
        if s.priorities.is_some() && f.priority_change > 0.0 && s.rng.gen_bool(f.priority_change) {
            let p: u32 = s.rng.gen();
            if let Some(ps) = s.priorities.as_mut() {
                ps[me] = p;
            }
        }
        if f.clock_step > 0.0 && s.rng.gen_bool(f.clock_step) {
            let nodes = s.offsets.len();
            let node = s.rng.gen_range(0..nodes);
            let max = f.clock_offset_max_us as i64;
            s.offsets[node] = s.rng.gen_range(-max..=max);
            s.counts.clock_steps += 1;
        }
        Self::pick(&mut s);
        self.turn.notify_all();
        drop(self.wait_turn(s, me));
    }

    /// Whether the calling thread's next verb of `kind` fails with a
    /// transport error, and how.
    fn transport_fault(&self, kind: Point) -> Option<Injected> {
        let me = SIM_ID.with(Cell::get)?;
        let mut s = self.lock();
        if let Some(fault) = s.scripted_transport[me].take() {
            s.counts.transport_errors += 1;
            return Some(fault);
        }
        let p = s.faults.transport;
        if s.scripted || p <= 0.0 || !s.rng.gen_bool(p) {
            return None;
        }
        s.counts.transport_errors += 1;
        Some(if kind != Point::Read && s.rng.gen_bool(0.5) {
            Injected::After
        } else {
            Injected::Before
        })
    }

    /// Where to cut a verb of `words` words (word offsets of the pieces
    /// after the first); empty: it executes whole.
    fn cuts(&self, words: usize) -> Vec<usize> {
        if words < 2 || SIM_ID.with(Cell::get).is_none() {
            return Vec::new();
        }
        let mut s = self.lock();
        let p = s.faults.tear;
        if s.scripted || p <= 0.0 || !s.rng.gen_bool(p) {
            return Vec::new();
        }
        s.counts.split_verbs += 1;
        let pieces = s.rng.gen_range(1..=3.min(words - 1));
        let mut cuts: Vec<usize> = (0..pieces).map(|_| s.rng.gen_range(1..words)).collect();
        cuts.sort_unstable();
        cuts.dedup();
        cuts
    }

    /// The calling client read critical state: its next verbs are a window
    /// worth stalling in (see [`Faults::watch_reads`]).
    fn saw_critical(&self) {
        let Some(me) = SIM_ID.with(Cell::get) else {
            return;
        };
        let mut s = self.lock();
        if s.faults.watch_reads && !s.scripted && s.roles[me] == Role::Client {
            s.hot[me] = 10;
        }
    }

    /// Records a broken invariant (the run fails at its end).
    pub fn violation(&self, what: String) {
        self.lock().violations.push(what);
    }

    /// The broken invariants recorded so far.
    #[must_use]
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    fn count(&self, f: impl FnOnce(&mut SimCounts)) {
        f(&mut self.lock().counts);
    }

    /// A back-off sleep of the calling thread.
    pub fn sleep(&self, d: Duration) {
        let Some(me) = SIM_ID.with(Cell::get) else {
            // A thread outside the simulation (setup, audit) lets virtual
            // time pass so that its deadlines and back-offs still work.
            self.lock().now += d.as_micros() as u64 + 1;
            return;
        };
        let mut s = self.lock();
        let until = s.now + d.as_micros() as u64 + 1;
        s.threads[me] = Run::Waiting(until);
        drop(s);
        self.point(PointInfo::sleep());
    }
}

/// Whether a point is a CAS the recycling rules hinge on: one whose
/// expected or new value is a MIGRATE marker, or a state CAS of a MIGRATE
/// copy.
fn is_critical(info: &PointInfo) -> bool {
    if info.kind != Point::Cas {
        return false;
    }
    match info.addr {
        Some(a) if a.region == region::INDEX => {
            Ite(info.expected).is_moved() || Ite(info.new).is_moved()
        }
        Some(_) => DteState(info.expected).is_migrated(),
        None => false,
    }
}

/// A node's clocks in the simulation: virtual time plus the node's current
/// wall-clock offset, and virtual time itself as the monotonic clock.
#[derive(Debug)]
pub struct SimClock {
    sched: Arc<Scheduler>,
    node: NodeId,
}

impl SimClock {
    /// Node `node`'s clock.
    #[must_use]
    pub fn new(sched: Arc<Scheduler>, node: NodeId) -> SimClock {
        SimClock { sched, node }
    }
}

impl Clock for SimClock {
    fn now_us(&self) -> u64 {
        self.sched.wall(self.node)
    }

    fn mono_us(&self) -> u64 {
        self.sched.now()
    }

    fn sleep(&self, d: Duration) {
        self.sched.sleep(d);
    }
}

/// A READ in progress in pieces.
#[derive(Debug)]
struct Inflight {
    id: u64,
    addr: RemoteAddr,
    len: u64,
    torn: bool,
}

/// A fabric that yields to the scheduler before every verb and every piece
/// of a torn verb, and injects transport errors. Given the tables'
/// geometry, it also watches every stage WRITE: an `expires_at` written
/// over a non-zero one stages an incarnation twice, which the recycling
/// rules forbid (a second stage can land after the slot's reuse and stamp
/// its next occupant: review F4).
#[derive(Debug)]
pub struct SimFabric {
    inner: Arc<dyn Fabric>,
    sched: Arc<Scheduler>,
    land_by: bool,
    geometry: Option<Geometry>,
    inflight: Mutex<(u64, Vec<Inflight>)>,
}

/// Takes a torn READ out of the in-flight list when it ends, however.
struct InflightGuard<'a> {
    fabric: &'a SimFabric,
    id: u64,
}

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        let torn = {
            let mut list = self.fabric.inflight();
            let i = list.1.iter().position(|r| r.id == self.id);
            i.is_some_and(|i| list.1.swap_remove(i).torn)
        };
        if torn {
            self.fabric.sched.count(|c| c.torn_reads += 1);
        }
    }
}

fn overlaps(a: RemoteAddr, a_len: u64, b: RemoteAddr, b_len: u64) -> bool {
    a.node == b.node
        && a.region == b.region
        && a.offset < b.offset + b_len
        && b.offset < a.offset + a_len
}

fn injected(node: NodeId) -> FabricError {
    FabricError::Disconnected {
        node,
        source: std::io::Error::other("simulated transport error"),
    }
}

impl SimFabric {
    /// Wraps `inner`. With `land_by`, CASes carry a land-by time that the
    /// target checks on its wall clock, as the `tcp` fabric does.
    #[must_use]
    pub fn new(inner: Arc<dyn Fabric>, sched: Arc<Scheduler>, land_by: bool) -> SimFabric {
        SimFabric {
            inner,
            sched,
            land_by,
            geometry: None,
            inflight: Mutex::new((0, Vec::new())),
        }
    }

    /// Watches stage WRITEs on tables of this geometry (see the type's
    /// docs).
    #[must_use]
    pub fn watching_stages(mut self, geometry: Geometry) -> SimFabric {
        self.geometry = Some(geometry);
        self
    }

    /// Tells the scheduler when a READ of the index returned a MIGRATE
    /// marker.
    fn note_critical(&self, addr: RemoteAddr, buf: &[u8]) {
        let word = |w: &[u8]| u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
        if addr.region == region::INDEX && buf.chunks_exact(8).any(|w| Ite(word(w)).is_moved()) {
            self.sched.saw_critical();
        }
    }

    /// Reports a WRITE that stages an already staged DTE.
    fn check_stage(&self, addr: RemoteAddr, data: &[u8]) {
        let Some(g) = &self.geometry else { return };
        let Some(class) = region::data_class(addr.region) else {
            return;
        };
        let slot_bytes = g.slot_bytes(class) as u64;
        if data.len() != 8
            || slot_bytes == 0
            || addr.offset % slot_bytes != EXPIRES_AT_OFFSET as u64
        {
            return;
        }
        let mut w = [0u8; 8];
        if self.inner.read(addr, &mut w).is_ok() && u64::from_le_bytes(w) != 0 {
            self.sched.violation(format!(
                "DOUBLE-STAGE: the DTE at {addr} (slot {}) is staged again (expires_at was {})",
                addr.offset / slot_bytes,
                u64::from_le_bytes(w)
            ));
        }
    }

    fn inflight(&self) -> MutexGuard<'_, (u64, Vec<Inflight>)> {
        self.inflight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks every READ in progress over `addr..addr+len` as torn.
    fn wrote(&self, addr: RemoteAddr, len: u64) {
        for r in &mut self.inflight().1 {
            if overlaps(r.addr, r.len, addr, len) {
                r.torn = true;
            }
        }
    }

    fn do_cas(
        &self,
        addr: RemoteAddr,
        expected: u64,
        new: u64,
        land_by: Option<u64>,
    ) -> Result<u64, FabricError> {
        self.sched.point(PointInfo {
            kind: Point::Cas,
            addr: Some(addr),
            expected,
            new,
        });
        let fault = self.sched.transport_fault(Point::Cas);
        if fault == Some(Injected::Before) {
            return Err(injected(addr.node));
        }
        if let Some(by) = land_by {
            let now = self.sched.wall(addr.node);
            if now > by {
                self.sched.count(|c| c.late_cas_refused += 1);
                return Err(FabricError::LateCas {
                    node: addr.node,
                    late_us: now - by,
                });
            }
        }
        let old = self.inner.cas(addr, expected, new)?;
        if old == expected {
            self.wrote(addr, 8);
        }
        if fault == Some(Injected::After) {
            return Err(injected(addr.node));
        }
        Ok(old)
    }
}

impl Fabric for SimFabric {
    fn nodes(&self) -> usize {
        self.inner.nodes()
    }

    fn region_len(&self, node: NodeId, region: RegionId) -> Option<u64> {
        self.inner.region_len(node, region)
    }

    fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
        self.sched.point(PointInfo::verb(Point::Read, addr));
        if self.sched.transport_fault(Point::Read).is_some() {
            return Err(injected(addr.node));
        }
        let cuts = self.sched.cuts(buf.len() / 8);
        if cuts.is_empty() {
            self.inner.read(addr, buf)?;
            self.note_critical(addr, buf);
            return Ok(());
        }
        let id = {
            let mut list = self.inflight();
            list.0 += 1;
            let id = list.0;
            list.1.push(Inflight {
                id,
                addr,
                len: buf.len() as u64,
                torn: false,
            });
            id
        };
        let _guard = InflightGuard { fabric: self, id };
        let mut from = 0;
        for end in cuts.into_iter().map(|w| w * 8).chain([buf.len()]) {
            if from > 0 {
                self.sched
                    .point(PointInfo::verb(Point::Read, addr.add(from as u64)));
            }
            self.inner
                .read(addr.add(from as u64), &mut buf[from..end])?;
            from = end;
        }
        self.note_critical(addr, buf);
        Ok(())
    }

    fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
        self.sched.point(PointInfo::verb(Point::Write, addr));
        let fault = self.sched.transport_fault(Point::Write);
        if fault == Some(Injected::Before) {
            return Err(injected(addr.node));
        }
        self.check_stage(addr, data);
        let cuts = self.sched.cuts(data.len() / 8);
        let mut from = 0;
        for end in cuts.into_iter().map(|w| w * 8).chain([data.len()]) {
            if from > 0 {
                self.sched
                    .point(PointInfo::verb(Point::Write, addr.add(from as u64)));
            }
            self.inner.write(addr.add(from as u64), &data[from..end])?;
            self.wrote(addr.add(from as u64), (end - from) as u64);
            from = end;
        }
        if fault == Some(Injected::After) {
            return Err(injected(addr.node));
        }
        Ok(())
    }

    fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
        self.do_cas(addr, expected, new, None)
    }

    fn cas_by(
        &self,
        addr: RemoteAddr,
        expected: u64,
        new: u64,
        land_by_us: u64,
    ) -> Result<u64, FabricError> {
        self.do_cas(addr, expected, new, self.land_by.then_some(land_by_us))
    }

    fn enforces_land_by(&self) -> bool {
        self.land_by
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
