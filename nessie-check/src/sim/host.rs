//! The loss of a host and the view change after it
//! (docs/replication.md#a-view-change-step-by-step), as the scheduler runs
//! them.
//!
//! At a yield point drawn with [`super::HostLoss::p`] (or after the clients
//! are done, [`Scheduler::lose_host_now`]), node n's host is lost: every
//! thread placed on n crashes (the running one at once, the others when
//! they next run), the loss hook wipes n's memory and makes the fabric
//! refuse every verb to n, and the survivors decide the view without n at
//! once: `Views::begin_change`, after which new operations return
//! `ViewChanging`. Detection and agreement are outside the store's
//! protocol here, so the decision is the loss itself. Once virtual time has
//! passed the decision by the drain (`op_timeout` + the landing bound +
//! 2·`max_clock_skew`, RP0), the activation hook activates the view
//! without n. At that instant no client operation that started before the
//! decision may still land a CAS: each one still running must be past its
//! deadline by the landing bound, and [`Scheduler::cas_landed`] checks the
//! same of every CAS as it lands.

use super::scheduler::{Run, Scheduler, State};
use super::{HostLoss, Role, SIM_ID};
use nessie::fabric::{NodeId, RemoteAddr};
use rand::Rng;
use std::cell::Cell;

/// What the run does when a host is lost and when the next view is
/// activated. Both run inside a yield point, with the scheduler's state
/// locked: they must not call back into the scheduler.
pub(super) struct HostHooks {
    /// Wipes the node's memory, makes the fabric refuse verbs to it, and
    /// begins the view change.
    pub(super) lose: Box<dyn Fn(NodeId) + Send>,
    /// Activates the view without the node.
    pub(super) activate: Box<dyn Fn(NodeId) + Send>,
}

/// The loss of a host in one run.
#[derive(Default)]
pub(super) struct HostState {
    /// The node lost, and the virtual time of the loss (the decision).
    pub(super) lost: Option<(NodeId, u64)>,
    /// Whether the view without it is active.
    pub(super) activated: bool,
    /// Views activated so far (each CAS notes the one it was posted in).
    pub(super) epoch: u64,
    pub(super) hooks: Option<HostHooks>,
    /// The drain and the bounds RP0 is checked with.
    pub(super) timing: Option<HostLoss>,
}

impl Scheduler {
    /// Sets what a loss and an activation do (see [`HostHooks`]), and the
    /// drain and bounds of `timing` (its probability is unused: the loss
    /// is drawn with [`super::Faults::host_loss`]'s).
    pub(super) fn set_host_hooks(&self, hooks: HostHooks, timing: HostLoss) {
        let mut s = self.lock();
        s.host.hooks = Some(hooks);
        s.host.timing = Some(timing);
    }

    /// Places thread `me` on node `node`: it is lost with its host.
    pub fn place(&self, me: usize, node: NodeId) {
        self.lock().node_of[me] = Some(node);
    }

    /// The calling client starts an operation.
    pub fn op_begins(&self) {
        if let Some(me) = SIM_ID.with(Cell::get) {
            let mut s = self.lock();
            s.op_start[me] = Some(s.now);
        }
    }

    /// The calling client's operation returned.
    pub fn op_ends(&self) {
        if let Some(me) = SIM_ID.with(Cell::get) {
            self.lock().op_start[me] = None;
        }
    }

    /// The node whose host was lost, if one was.
    #[must_use]
    pub fn lost_node(&self) -> Option<NodeId> {
        self.lock().host.lost.map(|(n, _)| n)
    }

    /// The node whose host was lost, once the view without it is active.
    #[must_use]
    pub fn activated_without(&self) -> Option<NodeId> {
        let s = self.lock();
        s.host.lost.filter(|_| s.host.activated).map(|(n, _)| n)
    }

    /// Views activated so far.
    #[must_use]
    pub fn view_epoch(&self) -> u64 {
        self.lock().host.epoch
    }

    /// Draws the loss of a host at this point; returns whether the calling
    /// thread was on it (it crashes at once).
    pub(super) fn draw_host_loss(s: &mut State, me: usize) -> bool {
        let Some(loss) = s.faults.host_loss else {
            return false;
        };
        if s.host.lost.is_some() || s.host.hooks.is_none() || !s.rng.gen_bool(loss.p) {
            return false;
        }
        let node = s.rng.gen_range(0..s.offsets.len());
        Self::lose(s, node);
        s.crash[me]
    }

    /// Loses node `node`'s host now: its threads are told to crash, its
    /// memory goes, the view change begins.
    fn lose(s: &mut State, node: NodeId) {
        s.host.lost = Some((node, s.now));
        s.counts.hosts_lost += 1;
        for t in 0..s.threads.len() {
            if s.node_of[t] == Some(node) && s.threads[t] != Run::Done {
                s.crash[t] = true;
                s.counts.host_crashes += 1;
            }
        }
        if let Some(h) = &s.host.hooks {
            (h.lose)(node);
        }
    }

    /// Activates the view without the lost node once the drain has passed
    /// since the decision, checking RP0 first.
    pub(super) fn activate_if_due(s: &mut State) {
        let (Some((node, decided)), Some(loss)) = (s.host.lost, s.host.timing) else {
            return;
        };
        if s.host.activated || s.now < decided + loss.drain_us {
            return;
        }
        for t in 0..s.threads.len() {
            let Some(started) = s.op_start[t] else {
                continue;
            };
            if started > decided {
                continue;
            }
            s.counts.stale_ops_at_activation += 1;
            if s.now <= started + loss.op_timeout_us + loss.landing_us {
                let v = format!(
                    "RP0: client {t}'s operation started at {started} µs, before the decision \
                     at {decided} µs, may still land a CAS when the view without node {node} is \
                     activated at {} µs",
                    s.now
                );
                s.violations.push(v);
            }
        }
        s.host.activated = true;
        s.host.epoch += 1;
        s.counts.activations += 1;
        if let Some(h) = &s.host.hooks {
            (h.activate)(node);
        }
    }

    /// After the clients are done: loses node `node`'s host now (the
    /// promotion of its mirrors) unless a host was lost already, then
    /// activates the view without the lost node once the drain has passed.
    /// Returns the lost node.
    pub fn lose_host_now(&self, node: NodeId) -> Option<NodeId> {
        let mut s = self.lock();
        s.host.hooks.as_ref()?;
        if s.host.lost.is_none() {
            Self::lose(&mut s, node);
        }
        Self::settle_locked(&mut s)
    }

    /// After the clients are done: activates the view without a host lost
    /// during the run, letting virtual time pass to the end of the drain if
    /// needed. Returns the lost node, if any.
    pub fn settle_host_loss(&self) -> Option<NodeId> {
        let mut s = self.lock();
        Self::settle_locked(&mut s)
    }

    fn settle_locked(s: &mut State) -> Option<NodeId> {
        let (node, decided) = s.host.lost?;
        if let Some(loss) = s.host.timing {
            s.now = s.now.max(decided + loss.drain_us);
        }
        Self::activate_if_due(s);
        Some(node)
    }

    /// A CAS posted in view `posted_in` (see [`Scheduler::view_epoch`])
    /// lands now at `addr`: landing after the next view was activated, a
    /// client's breaks RP0 (a violation); a background thread's is
    /// counted, as the recycler is not fenced by the drain.
    pub fn cas_landed(&self, posted_in: u64, addr: RemoteAddr) {
        let mut s = self.lock();
        if s.host.epoch == posted_in {
            return;
        }
        let me = SIM_ID.with(Cell::get);
        match me.map(|t| s.roles[t]) {
            Some(Role::Client) => {
                let v = format!(
                    "RP0: a CAS posted in view {posted_in} landed at {addr} after view {} was \
                     activated",
                    s.host.epoch
                );
                s.violations.push(v);
            }
            _ => s.counts.late_background_cas += 1,
        }
    }
}
