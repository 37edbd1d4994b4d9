//! What can go wrong at a yield point, and the scheduler's draws of it.

use super::scheduler::{Run, Scheduler, State};
use super::{Crashed, Point, PointInfo, Role, SIM_ID};
use nessie::fabric::NodeId;
use nessie::layout::dte::DteState;
use nessie::layout::region;
use nessie::layout::Ite;
use rand::Rng;
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::MutexGuard;

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
    /// One node's wall clock stepping far ahead once (beyond
    /// `max_clock_skew`, unlike `clock_step`), and back later.
    pub forward_step: Option<ForwardStep>,
    /// Crash client `.0` right before its yield point number `.1`.
    pub crash_at: Option<(usize, u64)>,
    /// Stall client `.0` at its yield point number `.1` for `.2` µs.
    pub stall_at: Option<(usize, u64, u64)>,
    /// The loss of one node's host, at a yield point the scheduler draws
    /// (replicated scenarios only).
    pub host_loss: Option<HostLoss>,
    /// A replacement for a lost host that comes back with empty memory and
    /// restores its replicas, at a yield point the scheduler draws
    /// (with `host_loss`).
    pub host_return: Option<HostReturn>,
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
            forward_step: None,
            crash_at: None,
            stall_at: None,
            host_loss: None,
            host_return: None,
        }
    }
}

/// The loss of a host (docs/replication.md#a-view-change-step-by-step): at
/// a yield point drawn with probability `p` (at most once per run), a
/// random node's clients and background threads crash, its memory is
/// wiped and every verb to it is refused; the survivors decide the view
/// without it at once and activate it `drain_us` later (RP0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostLoss {
    /// Probability per yield point.
    pub p: f64,
    /// From the decision to the activation (µs): `op_timeout` + the
    /// landing bound + 2·`max_clock_skew`.
    pub drain_us: u64,
    /// `op_timeout` (µs): an operation's last CAS is checked by then.
    pub op_timeout_us: u64,
    /// The landing bound (µs): a CAS checked in time lands by then.
    pub landing_us: u64,
}

impl HostLoss {
    /// The loss with probability `p` per yield point in a cluster of
    /// `config`, its drain as RP0 says.
    #[must_use]
    pub fn for_config(config: &nessie::Config, p: f64) -> HostLoss {
        let us = |d: std::time::Duration| d.as_micros() as u64;
        let landing_us = us(config.landing_bound());
        HostLoss {
            p,
            drain_us: us(config.op_timeout + config.max_clock_skew * 2) + landing_us + 1,
            op_timeout_us: us(config.op_timeout),
            landing_us,
        }
    }
}

/// A host that returns empty (docs/replication.md#restore): once the view
/// without a lost node is active, at a yield point drawn with probability
/// `p`, a replacement with the node's id and empty memory opens its memory
/// filled with the restore's start values and the survivors decide the
/// view naming it restoring; after the drain that view is activated, a
/// scheduled thread copies its replicas while the clients go on, then the
/// view naming it active is decided and, after another drain, activated.
/// Up to `losses` hosts are lost in a run, each restored before the next
/// loss may strike.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostReturn {
    /// Probability per yield point, while the view without the lost node
    /// is active.
    pub p: f64,
    /// Losses (each followed by its return) at most in one run.
    pub losses: u64,
}

/// A node's wall clock stepping ahead by `by_us`, with probability `p` at
/// each yield point while it is not ahead, and back by as much
/// `back_after_us` of virtual time later (an NTP correction).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ForwardStep {
    /// The node whose clock steps.
    pub node: usize,
    /// How far ahead (µs).
    pub by_us: u64,
    /// Probability per yield point of a step ahead.
    pub p: f64,
    /// How long the clock stays ahead (virtual µs).
    pub back_after_us: u64,
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
    /// A yield point of the calling thread. Panics with [`Crashed`] when the
    /// scheduler crashes the client here.
    pub fn point(&self, info: PointInfo) {
        let Some(me) = SIM_ID.with(Cell::get) else {
            return;
        };
        let mut s = self.lock();
        s.points[me] += 1;
        if s.scripted {
            self.scripted_point(s, me, info);
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
        if Self::draw_host_loss(&mut s, me) {
            drop(s);
            std::panic::panic_any(Crashed);
        }
        Self::activate_if_due(&mut s);
        Self::draw_host_return(&mut s);
        let client = s.roles[me] == Role::Client;
        let hot = s.hot[me] > 0;
        if hot {
            s.hot[me] -= 1;
        }
        let critical_cas = client && is_critical(&info);
        // A scan paused between its stamp reads and its verdicts is in the
        // window where another thread reallocates a slot it read.
        let critical = critical_cas
            || (client && hot && info.kind == Point::Read)
            || info.kind == Point::Pause;
        if Self::draw_crash(&mut s, me, &info, critical_cas) {
            s.counts.crashes += 1;
            drop(s);
            std::panic::panic_any(Crashed);
        }
        let stall = Self::draw_stall(&mut s, me, &info, critical);
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
        Self::draw_schedule_changes(&mut s, me);
        Self::pick(&mut s);
        self.turn.notify_all();
        let s = self.wait_turn(s, me);
        if s.crash[me] {
            // Its host was lost while it waited.
            drop(s);
            std::panic::panic_any(Crashed);
        }
    }

    /// A yield point in scripted mode: one step of virtual time, and a stop
    /// where the driver asked for one.
    fn scripted_point(&self, mut s: MutexGuard<'_, State>, me: usize, info: PointInfo) {
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
    }

    /// Whether thread `me` crashes at this point: scripted, or drawn (for
    /// clients, within the crash budget).
    fn draw_crash(s: &mut State, me: usize, info: &PointInfo, critical_cas: bool) -> bool {
        let f = s.faults;
        let client = s.roles[me] == Role::Client;
        let crash_p = if critical_cas {
            f.crash.max(f.critical_crash)
        } else {
            f.crash
        };
        let scripted_crash = client && f.crash_at == Some((me, s.points[me]));
        scripted_crash
            || (client
                && info.kind != Point::Sleep
                && s.counts.crashes < f.max_crashes
                && crash_p > 0.0
                && s.rng.gen_bool(crash_p))
    }

    /// How long thread `me` stalls at this point (µs; 0: not at all). A
    /// point in a batch at or ahead of one of its CASes stalls as a CAS
    /// does, and all such points of the batch together stall no longer
    /// than a CAS may (see [`Scheduler::batch_order`]).
    fn draw_stall(s: &mut State, me: usize, info: &PointInfo, critical: bool) -> u64 {
        let f = s.faults;
        let client = s.roles[me] == Role::Client;
        let window = s.cas_window[me];
        let cas_like = info.kind == Point::Cas || window.is_some();
        let at = s.points[me];
        let mut stall = match f.stall_at {
            // Before a client's CAS, within the landing bound.
            Some((c, p, len)) if c == me && p == at && cas_like && client => {
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
            let max = if cas_like {
                f.cas_stall_max_us
            } else {
                f.stall_max_us
            };
            let zombie = f.dead_after_us.min(max);
            stall = s.rng.gen_range(zombie..=max);
            s.counts.critical_stalls += 1;
        }
        if stall == 0 && f.stall > 0.0 && s.rng.gen_bool(f.stall) {
            let max = if cas_like && client {
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
        if let (Some(used), true) = (window, client && f.cas_stall_max_us > 0) {
            stall = stall.min(f.cas_stall_max_us.saturating_sub(used));
            s.cas_window[me] = Some(used + stall);
        }
        stall
    }

    /// Redraws thread `me`'s priority and steps a node's wall clock, each
    /// with its probability.
    fn draw_schedule_changes(s: &mut State, me: usize) {
        let f = s.faults;
        if s.priorities.is_some() && f.priority_change > 0.0 && s.rng.gen_bool(f.priority_change) {
            let p: u32 = s.rng.gen();
            if let Some(ps) = s.priorities.as_mut() {
                ps[me] = p;
            }
        }
        if let Some(step) = f.forward_step {
            let by = step.by_us as i64;
            match s.ahead_since {
                None if s.rng.gen_bool(step.p) => {
                    s.offsets[step.node] += by;
                    s.ahead_since = Some(s.now);
                    s.counts.clock_steps += 1;
                }
                Some(since) if s.now >= since + step.back_after_us => {
                    s.offsets[step.node] -= by;
                    s.ahead_since = None;
                    s.counts.clock_steps += 1;
                }
                _ => {}
            }
        }
        if f.clock_step > 0.0 && s.rng.gen_bool(f.clock_step) {
            let nodes = s.offsets.len();
            let node = s.rng.gen_range(0..nodes);
            let max = f.clock_offset_max_us as i64;
            s.offsets[node] = s.rng.gen_range(-max..=max);
            s.counts.clock_steps += 1;
        }
    }

    /// The order in which a batch whose verbs target `nodes` runs them:
    /// each node's in batch order (all that
    /// [`Fabric::keeps_batch_order`](nessie::fabric::Fabric::keeps_batch_order)
    /// promises), the nodes' interleaved at random, as replies from several
    /// peers arrive; in scripted runs batch order, or the first verb's
    /// node last ([`Scheduler::run_first_node_last`]). While the caller runs
    /// the verbs up to a batch's last CAS it says so
    /// ([`Scheduler::set_cas_window`]): on every fabric a CAS lands within
    /// the landing bound of its deadline check
    /// (docs/design.md#the-landing-bound), so the stalls of those points
    /// together stay within what one CAS's may be.
    pub(super) fn batch_order(&self, nodes: &[NodeId]) -> Vec<usize> {
        let mut s = self.lock();
        if s.scripted {
            if !s.first_node_last {
                return (0..nodes.len()).collect();
            }
            let first = nodes.first().copied();
            let (mut order, mut last): (Vec<usize>, Vec<usize>) =
                (0..nodes.len()).partition(|&i| Some(nodes[i]) != first);
            order.append(&mut last);
            return order;
        }
        let mut queues: Vec<(NodeId, VecDeque<usize>)> = Vec::new();
        for (i, &node) in nodes.iter().enumerate() {
            match queues.iter_mut().find(|(n, _)| *n == node) {
                Some((_, q)) => q.push_back(i),
                None => queues.push((node, VecDeque::from([i]))),
            }
        }
        let mut order = Vec::with_capacity(nodes.len());
        while !queues.is_empty() {
            let q = s.order_rng.gen_range(0..queues.len());
            order.extend(queues[q].1.pop_front());
            if queues[q].1.is_empty() {
                queues.swap_remove(q);
            }
        }
        if order.iter().zip(0..).any(|(&i, k)| i != k) {
            s.counts.reordered_batches += 1;
        }
        order
    }

    /// Whether the calling thread runs the verbs of a batch up to its last
    /// CAS (see [`Scheduler::batch_order`]); the stall budget of a window
    /// starts when it opens.
    pub(super) fn set_cas_window(&self, open: bool) {
        if let Some(me) = SIM_ID.with(Cell::get) {
            let mut s = self.lock();
            s.cas_window[me] = match (open, s.cas_window[me]) {
                (true, Some(used)) => Some(used),
                (true, None) => Some(0),
                (false, _) => None,
            };
        }
    }

    /// Whether the calling thread's next verb of `kind` fails with a
    /// transport error, and how.
    pub(super) fn transport_fault(&self, kind: Point) -> Option<Injected> {
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
    pub(super) fn cuts(&self, words: usize) -> Vec<usize> {
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
    pub(super) fn saw_critical(&self) {
        let Some(me) = SIM_ID.with(Cell::get) else {
            return;
        };
        let mut s = self.lock();
        if s.faults.watch_reads && !s.scripted && s.roles[me] == Role::Client {
            s.hot[me] = 10;
        }
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
