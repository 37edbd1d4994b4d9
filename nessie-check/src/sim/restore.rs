//! A host that returns empty (docs/replication.md#restore), as the
//! scheduler runs it: once the view without a lost node is active, at a
//! yield point drawn with [`super::HostReturn::p`] (or, once the clients
//! are done, at once), a replacement with the node's id opens its memory
//! filled with the restore's start values and the survivors decide the
//! view naming it restoring. The memory is ready before that view can be
//! activated, and the view is activated only after the drain, as every
//! view is (RP0). Then the restorer, a scheduled thread of its own, copies
//! every replica the node holds ([`nessie::Cluster::copy_replicas`]):
//! each of its READs of a primary, and the point between a READ and the
//! copy's WRITEs, is a yield point where the clients, the recyclers and
//! every fault go on. When the copy is done the view naming the node
//! active is decided, and activated after another drain; then the restorer
//! brings the other replicas of the node's share up to the commits the node
//! took first as a mirror ([`nessie::Cluster::catch_up_replicas`],
//! docs/replication.md#rp3c), and only then is the node restored: another
//! loss may strike from there on.

use super::host::Phase;
use super::scheduler::{Scheduler, State};
use super::{Crashed, Role};
use nessie::fabric::NodeId;
use nessie::{Cluster, Error, RestoreFigures};
use rand::Rng;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What the restorer does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Copy the replicas of this node.
    Copy(NodeId),
    /// Catch the other replicas of this node's share up with it.
    CatchUp(NodeId),
    /// Wait (a view change drains, or no host is lost).
    Wait,
    /// Stop: the clients are done and no host is out of service.
    Stop,
}

impl Scheduler {
    /// Draws the start of a lost host's return at this point.
    pub(super) fn draw_host_return(s: &mut State) {
        let Some(ret) = s.faults.host_return else {
            return;
        };
        let Phase::Gone(node) = s.host.phase else {
            return;
        };
        if s.host.hooks.is_some() && s.rng.gen_bool(ret.p) {
            Self::start_return(s, node);
        }
    }

    /// A replacement for node `node` opens its memory, filled with the
    /// restore's start values, and the view naming it restoring is
    /// decided.
    fn start_return(s: &mut State, node: NodeId) {
        s.host.phase = Phase::Restoring(node, s.now);
        s.counts.returns += 1;
        if let Some(h) = &s.host.hooks {
            if let Err(e) = (h.replace)(node) {
                s.violations.push(format!(
                    "the replacement of node {node} failed to start: {e}"
                ));
            }
            (h.decide)();
        }
    }

    /// The restorer's next step; once the clients are done, a host still
    /// lost returns at once.
    fn restore_step(&self) -> Step {
        let done = self.clients_done();
        let mut s = self.lock();
        match s.host.phase {
            Phase::Copying(node) => Step::Copy(node),
            Phase::CatchingUp(node) => Step::CatchUp(node),
            Phase::Gone(node) if done => {
                Self::start_return(&mut s, node);
                Step::Wait
            }
            Phase::Up if done => Step::Stop,
            _ => Step::Wait,
        }
    }

    /// The restorer copied every replica of node `node`: the view naming
    /// it active is decided.
    fn copied(&self, node: NodeId, figures: &RestoreFigures) {
        let mut s = self.lock();
        let c = &mut s.counts;
        c.slots_copied += figures.index_slots + figures.data_slots;
        c.recopies += figures.recopies;
        c.entries_adopted += figures.entries_adopted;
        s.host.phase = Phase::Returning(node, s.now);
        if let Some(h) = &s.host.hooks {
            (h.decide)();
        }
    }

    /// The other replicas of node `node`'s share caught up with it: the
    /// node is restored.
    fn caught_up(&self, moved: u64) {
        let mut s = self.lock();
        s.counts.caught_up += moved;
        s.host.phase = Phase::Up;
    }

    /// Counts a client operation begun while a restore copies.
    pub(super) fn note_op_during_copy(s: &mut State) {
        if matches!(s.host.phase, Phase::Copying(_)) {
            s.counts.ops_during_copy += 1;
        }
    }
}

/// Starts the restorer as scheduled background thread `id`: it waits
/// (every `period`) for a view naming a returning node restoring, copies
/// that node's replicas with `cluster`'s hook, begins the copy again after
/// a verb failed (a transport error), catches the node's share up once the
/// view naming it active is active (again after a failed verb), and stops
/// once the clients are done and every node is restored.
pub(super) fn spawn_restorer(
    sched: &Arc<Scheduler>,
    cluster: &Arc<Cluster>,
    id: usize,
    period: Duration,
) -> JoinHandle<()> {
    let sched = Arc::clone(sched);
    let cluster = Arc::clone(cluster);
    std::thread::spawn(move || {
        let result = catch_unwind(AssertUnwindSafe(|| {
            sched.enter_as(id, Role::Background);
            loop {
                match sched.restore_step() {
                    Step::Copy(node) => match cluster.copy_replicas(node) {
                        Ok(figures) => sched.copied(node, &figures),
                        Err(Error::Fabric(_)) => {
                            sched.count(|c| c.restore_retries += 1);
                            sched.sleep(period);
                        }
                        Err(e) => {
                            sched.violation(format!("the restore of node {node} failed: {e}"));
                            break;
                        }
                    },
                    Step::CatchUp(node) => match cluster.catch_up_replicas(node) {
                        Ok(moved) => sched.caught_up(moved),
                        Err(Error::Fabric(_)) => {
                            sched.count(|c| c.restore_retries += 1);
                            sched.sleep(period);
                        }
                        Err(e) => {
                            let what = format!("the catch-up after node {node}'s restore: {e}");
                            sched.violation(what);
                            break;
                        }
                    },
                    Step::Wait => sched.sleep(period),
                    Step::Stop => break,
                }
            }
        }));
        sched.leave();
        if let Err(payload) = result {
            if payload.downcast_ref::<Crashed>().is_none() {
                std::panic::resume_unwind(payload);
            }
        }
    })
}
