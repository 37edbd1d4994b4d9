//! The scheduler: who runs next, virtual time, and the scripted mode in
//! which a driver thread decides who runs and until when.

use super::host::HostState;
use super::{Crashed, Faults, Injected, PointInfo, Role, SimCounts, StopAt, SIM_ID};
use nessie::fabric::NodeId;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cell::Cell;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Run {
    /// Not yet registered.
    Absent,
    Ready,
    /// Sleeping or stalled until this virtual time.
    Waiting(u64),
    Done,
}

pub(super) struct State {
    pub(super) rng: StdRng,
    /// Draws the order of batches' verbs across nodes, apart from `rng`, so
    /// that adding those draws moved no other choice of a seed.
    pub(super) order_rng: StdRng,
    pub(super) now: u64,
    pub(super) current: Option<usize>,
    pub(super) threads: Vec<Run>,
    pub(super) roles: Vec<Role>,
    /// Yield points each thread passed.
    pub(super) points: Vec<u64>,
    /// Each node's wall-clock offset from virtual time (µs).
    pub(super) offsets: Vec<i64>,
    pub(super) faults: Faults,
    pub(super) counts: SimCounts,
    /// Per-step cap, so a livelock ends the run instead of hanging it.
    pub(super) max_steps: u64,
    /// Thread priorities, when this run schedules by priority.
    pub(super) priorities: Option<Vec<u32>>,
    /// Per thread: verbs left in its window after reading critical state.
    pub(super) hot: Vec<u32>,
    /// Per thread, while it runs a batch's verbs up to its last CAS: the
    /// stall they have drawn so far (see [`Scheduler::batch_order`]).
    pub(super) cas_window: Vec<Option<u64>>,
    /// Scripted mode: a driver thread decides who runs and until when.
    pub(super) scripted: bool,
    /// Scripted mode: a batch holding a CAS runs the verbs to its first
    /// verb's node after all others (see [`Scheduler::batch_order`]).
    pub(super) first_node_last: bool,
    pub(super) stop: Vec<Option<StopAt>>,
    pub(super) crash: Vec<bool>,
    pub(super) last_point: Option<PointInfo>,
    /// Broken invariants the fabric noticed.
    pub(super) violations: Vec<String>,
    /// Scripted mode: a transport error for a client's next verb.
    pub(super) scripted_transport: Vec<Option<Injected>>,
    /// Since when the clock of [`super::faults::ForwardStep`] is ahead.
    pub(super) ahead_since: Option<u64>,
    /// Per thread: the node it runs on, if placed (a lost host takes its
    /// threads with it).
    pub(super) node_of: Vec<Option<NodeId>>,
    /// Per client: when its current operation started (virtual µs).
    pub(super) op_start: Vec<Option<u64>>,
    /// The loss of a host and the view change after it.
    pub(super) host: HostState,
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

/// Mixed into a seed for [`State::order_rng`].
const ORDER_STREAM: u64 = 0x6f72_6465_725f_7631;

/// The seeded scheduler and virtual clock of one simulation run.
#[derive(Debug)]
pub struct Scheduler {
    state: Mutex<State>,
    pub(super) turn: Condvar,
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
                order_rng: StdRng::seed_from_u64(seed ^ ORDER_STREAM),
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
                cas_window: vec![None; threads],
                scripted: false,
                first_node_last: false,
                stop: (0..threads).map(|_| None).collect(),
                crash: vec![false; threads],
                last_point: None,
                violations: Vec::new(),
                scripted_transport: vec![None; threads],
                ahead_since: None,
                node_of: vec![None; threads],
                op_start: vec![None; threads],
                host: HostState::default(),
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

    /// Scripted mode: from now on a batch holding a CAS runs its verbs to
    /// other nodes than its first verb's ahead of that node's, each node's
    /// in batch order (a legal order: a fabric keeps only each node's), so
    /// a script can stop a client at a CAS its batch's other READs
    /// preceded.
    pub fn run_first_node_last(&self) {
        self.lock().first_node_last = true;
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
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

    /// The faults this run injects.
    #[must_use]
    pub fn faults(&self) -> Faults {
        self.lock().faults
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

    /// Steps back a node's clock that the run's forward step left ahead
    /// (the correction comes before an audit).
    pub fn end_forward_step(&self) {
        let mut s = self.lock();
        if let (Some(step), Some(_)) = (s.faults.forward_step, s.ahead_since) {
            s.offsets[step.node] -= step.by_us as i64;
            s.ahead_since = None;
        }
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
    pub(super) fn pick(s: &mut State) {
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
            if let Some(u) = wake {
                s.now = u;
            } else {
                s.current = None;
                return;
            }
        }
    }

    pub(super) fn wait_turn<'a>(
        &'a self,
        mut s: MutexGuard<'a, State>,
        me: usize,
    ) -> MutexGuard<'a, State> {
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
        // A thread that crashed inside a batch left its flag behind.
        s.cas_window[me] = None;
        self.turn.notify_all();
        drop(self.wait_turn(s, me));
        self.crash_if_told(me);
    }

    pub(super) fn crash_if_told(&self, me: usize) {
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
        s.op_start[me] = None;
        if s.current == Some(me) {
            if s.scripted {
                s.current = None;
            } else {
                Self::pick(&mut s);
            }
        }
        self.turn.notify_all();
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

    pub(super) fn count(&self, f: impl FnOnce(&mut SimCounts)) {
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
