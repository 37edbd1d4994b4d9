//! The deterministic simulator: many simulated clients of one in-process
//! cluster, interleaved one verb at a time by a seeded scheduler, with a
//! virtual clock, crashes, stalls and clock skew.
//!
//! Each simulated client runs on its own OS thread, but only one thread runs
//! at a time: every verb (through [`SimFabric`]) and every back-off sleep
//! (through [`SimClock`]) is a *yield point* where the scheduler picks, with
//! its seeded RNG, which client runs next. Everything the store does between
//! two yield points is local computation, so a seed fixes the whole run.
//!
//! Faults, decided at yield points:
//! * **crash**: the client stops forever before its next verb (it unwinds
//!   with a [`Crashed`] panic, caught by the runner); its operation's
//!   outcome is unknown;
//! * **stall**: the client is descheduled for a virtual duration longer than
//!   `op_timeout` (a zombie: others may declare it dead, then it resumes and
//!   lands at most one late CAS). Stalls longer than `expiry` are injected
//!   only before READ and WRITE verbs: before a CAS, the deadline check that
//!   precedes every CAS catches any stall that happened earlier, and the
//!   protocol's stated bound is that no thread stalls for longer than
//!   `expiry − op_timeout` between that check and its CAS;
//! * **skew**: each node's clock is offset by a fixed amount within
//!   `max_clock_skew`.

use nessie::fabric::{Fabric, FabricError, NodeId, RegionId, RemoteAddr};
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
    /// Before a READ.
    Read,
    /// Before a WRITE.
    Write,
    /// Before a CAS.
    Cas,
    /// A back-off sleep.
    Sleep,
}

/// The verb (or sleep) a client is about to perform at a yield point.
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
}

/// A predicate on the next point of a scripted client: where to stop it.
pub type StopAt = Box<dyn Fn(&PointInfo) -> bool + Send>;

/// Fault injection settings (probabilities per yield point).
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    /// Probability that the running client crashes at a yield point.
    pub crash: f64,
    /// Most clients that may crash in one run.
    pub max_crashes: usize,
    /// Probability that the running client stalls at a yield point.
    pub stall: f64,
    /// Stall length when it stalls (µs); a stall longer than `expiry` is
    /// shortened to `short_stall_us` before a CAS (see the module docs).
    pub stall_us: u64,
    /// Stall length used instead of `stall_us` before a CAS when `stall_us`
    /// exceeds the bound.
    pub short_stall_us: u64,
}

impl Faults {
    /// No faults.
    #[must_use]
    pub fn none() -> Faults {
        Faults {
            crash: 0.0,
            max_crashes: 0,
            stall: 0.0,
            stall_us: 0,
            short_stall_us: 0,
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

struct State {
    rng: StdRng,
    now: u64,
    steps: u64,
    current: Option<usize>,
    threads: Vec<Run>,
    faults: Faults,
    crashes: usize,
    stalls: usize,
    /// Per-step cap, so a livelock ends the run instead of hanging it.
    max_steps: u64,
    /// Scripted mode: a driver thread decides who runs and until when.
    scripted: bool,
    stop: Vec<Option<StopAt>>,
    crash: Vec<bool>,
    last_point: Option<PointInfo>,
}

impl std::fmt::Debug for StopAtList<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} stop predicates", self.0.iter().flatten().count())
    }
}

struct StopAtList<'a>(&'a [Option<StopAt>]);

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("now", &self.now)
            .field("steps", &self.steps)
            .field("current", &self.current)
            .field("threads", &self.threads)
            .field("scripted", &self.scripted)
            .field("stop", &StopAtList(&self.stop))
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
    /// Yield points passed.
    pub steps: u64,
    /// Clients crashed.
    pub crashes: usize,
    /// Stalls injected.
    pub stalls: usize,
    /// Virtual time at the end (µs).
    pub now_us: u64,
    /// Whether the step cap was hit.
    pub exhausted: bool,
}

impl Scheduler {
    /// A scheduler for `clients` clients, starting at virtual time
    /// `start_us`.
    #[must_use]
    pub fn new(
        seed: u64,
        clients: usize,
        start_us: u64,
        faults: Faults,
        max_steps: u64,
    ) -> Arc<Scheduler> {
        Arc::new(Scheduler {
            state: Mutex::new(State {
                rng: StdRng::seed_from_u64(seed),
                now: start_us,
                steps: 0,
                current: None,
                threads: vec![Run::Absent; clients],
                faults,
                crashes: 0,
                stalls: 0,
                max_steps,
                scripted: false,
                stop: (0..clients).map(|_| None).collect(),
                crash: vec![false; clients],
                last_point: None,
            }),
            turn: Condvar::new(),
        })
    }

    /// A scheduler driven by a script: clients run only when the driver
    /// says, until a predicate on their next point holds.
    #[must_use]
    pub fn scripted(clients: usize, start_us: u64) -> Arc<Scheduler> {
        let sched = Scheduler::new(0, clients, start_us, Faults::none(), u64::MAX);
        sched.lock().scripted = true;
        sched
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

    /// Scripted mode: crashes client `me` where it stands (before the verb
    /// it stopped at).
    pub fn crash(&self, me: usize) {
        self.lock().crash[me] = true;
        self.run_to_end(me);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Virtual time (µs).
    #[must_use]
    pub fn now(&self) -> u64 {
        self.lock().now
    }

    /// Lets `us` microseconds of virtual time pass (between runs).
    pub fn advance(&self, us: u64) {
        self.lock().now += us;
    }

    /// Global step counter (a timestamp for histories).
    #[must_use]
    pub fn steps(&self) -> u64 {
        self.lock().steps
    }

    /// What happened so far.
    #[must_use]
    pub fn report(&self) -> SchedulerReport {
        let s = self.lock();
        SchedulerReport {
            steps: s.steps,
            crashes: s.crashes,
            stalls: s.stalls,
            now_us: s.now,
            exhausted: s.steps >= s.max_steps,
        }
    }

    /// Picks the next client to run (seeded); advances virtual time to the
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
                s.current = Some(ready[s.rng.gen_range(0..ready.len())]);
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
    /// turn. Call [`Scheduler::start`] once every client is registered.
    pub fn enter(&self, me: usize) {
        SIM_ID.with(|c| c.set(Some(me)));
        let mut s = self.lock();
        s.threads[me] = Run::Ready;
        self.turn.notify_all();
        drop(self.wait_turn(s, me));
        self.crash_if_told(me);
    }

    fn crash_if_told(&self, me: usize) {
        let crash = self.lock().crash[me];
        if crash {
            self.lock().crashes += 1;
            std::panic::panic_any(Crashed);
        }
    }

    /// Starts the run once `clients` threads have entered.
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

    /// The calling client finished (normally or by crashing).
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

    /// A yield point of the calling client. Panics with [`Crashed`] when the
    /// scheduler crashes the client here.
    pub fn point(&self, info: PointInfo) {
        let Some(me) = SIM_ID.with(Cell::get) else {
            return;
        };
        let kind = info.kind;
        let mut s = self.lock();
        if s.scripted {
            s.steps += 1;
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
        s.steps += 1;
        let tick = s.rng.gen_range(1..=4);
        s.now += tick;
        if s.steps >= s.max_steps {
            // Out of budget: crash everyone so the run ends; the test
            // reports the exhaustion.
            drop(s);
            std::panic::panic_any(Crashed);
        }
        let f = s.faults;
        if kind != Point::Sleep && s.crashes < f.max_crashes && s.rng.gen_bool(f.crash) {
            s.crashes += 1;
            drop(s);
            std::panic::panic_any(Crashed);
        }
        if kind != Point::Sleep && f.stall > 0.0 && s.rng.gen_bool(f.stall) {
            let len = if kind == Point::Cas {
                f.short_stall_us
            } else {
                f.stall_us
            };
            s.stalls += 1;
            let until = s.now + len;
            s.threads[me] = Run::Waiting(until);
        }
        Self::pick(&mut s);
        self.turn.notify_all();
        drop(self.wait_turn(s, me));
    }

    /// A back-off sleep of the calling client.
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

/// A node's clock in the simulation: virtual time plus a fixed skew.
#[derive(Debug)]
pub struct SimClock {
    sched: Arc<Scheduler>,
    offset_us: i64,
}

impl SimClock {
    /// A clock `offset_us` away from virtual time.
    #[must_use]
    pub fn new(sched: Arc<Scheduler>, offset_us: i64) -> SimClock {
        SimClock { sched, offset_us }
    }
}

impl Clock for SimClock {
    fn now_us(&self) -> u64 {
        (self.sched.now() as i64 + self.offset_us).max(0) as u64
    }

    fn sleep(&self, d: Duration) {
        self.sched.sleep(d);
    }
}

/// A fabric that yields to the scheduler before every verb.
#[derive(Debug)]
pub struct SimFabric {
    inner: Arc<dyn Fabric>,
    sched: Arc<Scheduler>,
}

impl SimFabric {
    /// Wraps `inner`.
    #[must_use]
    pub fn new(inner: Arc<dyn Fabric>, sched: Arc<Scheduler>) -> SimFabric {
        SimFabric { inner, sched }
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
        self.sched.point(PointInfo {
            kind: Point::Read,
            addr: Some(addr),
            expected: 0,
            new: 0,
        });
        self.inner.read(addr, buf)
    }

    fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
        self.sched.point(PointInfo {
            kind: Point::Write,
            addr: Some(addr),
            expected: 0,
            new: 0,
        });
        self.inner.write(addr, data)
    }

    fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
        self.sched.point(PointInfo {
            kind: Point::Cas,
            addr: Some(addr),
            expected,
            new,
        });
        self.inner.cas(addr, expected, new)
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
