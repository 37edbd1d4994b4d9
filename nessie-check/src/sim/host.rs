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
//! same of every CAS as it lands. A replacement's return (`restore.rs`)
//! changes the view twice more, with the same drain and the same checks at
//! each activation.

use super::scheduler::{Run, Scheduler, State};
use super::{HostLoss, Role, SIM_ID};
use nessie::fabric::{NodeId, RemoteAddr};
use nessie::layout::membership::MemberState;
use rand::Rng;
use std::cell::Cell;

/// What the run does when a host is lost or returns and when a view is
/// activated. All run inside a yield point, with the scheduler's state
/// locked: they must not call back into the scheduler.
pub(super) struct HostHooks {
    /// Wipes the node's memory and makes the fabric refuse verbs to it.
    pub(super) lose: Box<dyn Fn(NodeId) + Send>,
    /// Opens the replacement's memory and fills it with the restore's
    /// start values (docs/replication.md#restore); `Err` describes a
    /// failure.
    pub(super) replace: Box<dyn Fn(NodeId) -> Result<(), String> + Send>,
    /// A view was decided: operations are refused until it is activated.
    pub(super) decide: Box<dyn Fn() + Send>,
    /// Activates the next view, with the node in this state.
    pub(super) activate: Box<dyn Fn(NodeId, MemberState) + Send>,
}

/// Where a run stands with the loss of a host and its return.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum Phase {
    /// Every node serves.
    #[default]
    Up,
    /// The node's host is lost; the view without it was decided at this
    /// virtual time and is not active yet.
    Lost(NodeId, u64),
    /// The view without the node is active.
    Gone(NodeId),
    /// A replacement's memory is open; the view naming it restoring was
    /// decided at this time and is not active yet.
    Restoring(NodeId, u64),
    /// The view naming it restoring is active: its replicas are copied.
    Copying(NodeId),
    /// The copy is done; the view naming it active was decided at this
    /// time and is not active yet.
    Returning(NodeId, u64),
    /// The view naming it active is active: the other replicas of its
    /// share catch up with the commits it took first as a mirror
    /// (docs/replication.md#rp3c). Its restore is done, and another host
    /// may be lost, only after that.
    CatchingUp(NodeId),
}

impl Phase {
    /// The pending view change: the node, its state in the next view, and
    /// the time of the decision.
    fn pending(self) -> Option<(NodeId, MemberState, u64)> {
        match self {
            Phase::Lost(n, t) => Some((n, MemberState::Lost, t)),
            Phase::Restoring(n, t) => Some((n, MemberState::Restoring, t)),
            Phase::Returning(n, t) => Some((n, MemberState::Active, t)),
            _ => None,
        }
    }

    /// The phase once the pending change is activated.
    fn activated(self) -> Phase {
        match self {
            Phase::Lost(n, _) => Phase::Gone(n),
            Phase::Restoring(n, _) => Phase::Copying(n),
            Phase::Returning(n, _) => Phase::CatchingUp(n),
            other => other,
        }
    }
}

/// The losses of hosts and their returns in one run.
#[derive(Default)]
pub(super) struct HostState {
    pub(super) phase: Phase,
    /// Every node lost so far (a verb it refused leaves an outcome
    /// unknown, even once it is back).
    pub(super) ever_lost: Vec<NodeId>,
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
            Self::note_op_during_copy(&mut s);
        }
    }

    /// The calling client's operation returned.
    pub fn op_ends(&self) {
        if let Some(me) = SIM_ID.with(Cell::get) {
            self.lock().op_start[me] = None;
        }
    }

    /// The node whose host is lost and not restored yet (lost, or
    /// returning but not yet active again or not yet caught up), if any.
    #[must_use]
    pub fn lost_node(&self) -> Option<NodeId> {
        match self.lock().host.phase {
            Phase::Up => None,
            Phase::Lost(n, _)
            | Phase::Gone(n)
            | Phase::Restoring(n, _)
            | Phase::Copying(n)
            | Phase::Returning(n, _)
            | Phase::CatchingUp(n) => Some(n),
        }
    }

    /// Whether node `node`'s host was lost at some point of the run.
    #[must_use]
    pub fn was_lost(&self, node: NodeId) -> bool {
        self.lock().host.ever_lost.contains(&node)
    }

    /// Views activated so far.
    #[must_use]
    pub fn view_epoch(&self) -> u64 {
        self.lock().host.epoch
    }

    /// Draws the loss of a host at this point; returns whether the calling
    /// thread was on it (it crashes at once). Only while every node serves,
    /// and for as many losses as the run's faults allow.
    pub(super) fn draw_host_loss(s: &mut State, me: usize) -> bool {
        let Some(loss) = s.faults.host_loss else {
            return false;
        };
        let most = s.faults.host_return.map_or(1, |r| r.losses);
        if s.host.phase != Phase::Up
            || s.counts.hosts_lost >= most
            || s.host.hooks.is_none()
            || !s.rng.gen_bool(loss.p)
        {
            return false;
        }
        let node = s.rng.gen_range(0..s.offsets.len());
        Self::lose(s, node);
        s.crash[me]
    }

    /// Loses node `node`'s host now: its threads are told to crash, its
    /// memory goes, the view change begins.
    fn lose(s: &mut State, node: NodeId) {
        s.host.phase = Phase::Lost(node, s.now);
        s.host.ever_lost.push(node);
        s.counts.hosts_lost += 1;
        for t in 0..s.threads.len() {
            if s.node_of[t] == Some(node) && s.threads[t] != Run::Done {
                s.crash[t] = true;
                s.counts.host_crashes += 1;
            }
        }
        if let Some(h) = &s.host.hooks {
            (h.lose)(node);
            (h.decide)();
        }
    }

    /// Activates the pending view once the drain has passed since its
    /// decision, checking RP0 first.
    pub(super) fn activate_if_due(s: &mut State) {
        let (Some((node, state, decided)), Some(loss)) = (s.host.phase.pending(), s.host.timing)
        else {
            return;
        };
        if s.now < decided + loss.drain_us {
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
                     at {decided} µs, may still land a CAS when the view with node {node} \
                     {state:?} is activated at {} µs",
                    s.now
                );
                s.violations.push(v);
            }
        }
        s.host.phase = s.host.phase.activated();
        s.host.epoch += 1;
        s.counts.activations += 1;
        if state == MemberState::Active {
            s.counts.restores += 1;
        }
        if let Some(h) = &s.host.hooks {
            (h.activate)(node, state);
        }
    }

    /// After the clients are done: loses node `node`'s host now (the
    /// promotion of its mirrors) unless a host was lost already, then
    /// activates the view without the lost node once the drain has passed.
    /// Returns the lost node.
    pub fn lose_host_now(&self, node: NodeId) -> Option<NodeId> {
        let mut s = self.lock();
        s.host.hooks.as_ref()?;
        if s.host.phase == Phase::Up {
            Self::lose(&mut s, node);
        }
        Self::settle_locked(&mut s)
    }

    /// After the clients are done: activates the view without a host lost
    /// during the run, letting virtual time pass to the end of the drain if
    /// needed. Returns the lost node, if one is out of service.
    pub fn settle_host_loss(&self) -> Option<NodeId> {
        let mut s = self.lock();
        Self::settle_locked(&mut s)
    }

    fn settle_locked(s: &mut State) -> Option<NodeId> {
        match s.host.phase {
            Phase::Lost(node, decided) => {
                if let Some(loss) = s.host.timing {
                    s.now = s.now.max(decided + loss.drain_us);
                }
                Self::activate_if_due(s);
                Some(node)
            }
            Phase::Gone(node) => Some(node),
            _ => None,
        }
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
