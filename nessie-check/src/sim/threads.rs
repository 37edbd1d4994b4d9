//! The simulated threads of a run: clients issuing recorded operations, the
//! nodes' background recyclers and the clock watch.

use super::world::{value, World};
use super::{Crashed, Role, Scenario, Scheduler};
use crate::history::{Call, Recorder};
use nessie::fabric::{FabricError, NodeId};
use nessie::{Client, Clock, Cluster, Error, Stats};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How an operation's error enters the history: `Ok(true)` no effect,
/// `Ok(false)` unknown outcome, `Err` a violation. A verb refused by the
/// host that was lost (`was_lost`) leaves the outcome unknown, as a broken
/// connection does.
fn classify(
    e: &Error,
    transport_faults: bool,
    was_lost: impl Fn(NodeId) -> bool,
) -> Result<bool, String> {
    match e {
        Error::IndexFull | Error::DataTableFull => Ok(true),
        Error::Timeout => Ok(false),
        Error::Fabric(_) if transport_faults => Ok(false),
        Error::Fabric(FabricError::Disconnected { node, .. }) if was_lost(*node) => Ok(false),
        other => Err(format!("unexpected error {other}")),
    }
}

/// What every simulated client of a run shares.
#[derive(Clone)]
pub(super) struct ClientRun {
    pub(super) scenario: Scenario,
    pub(super) sched: Arc<Scheduler>,
    pub(super) recorder: Arc<Recorder>,
    /// Unexpected errors, each a violation.
    pub(super) errors: Arc<Mutex<Vec<String>>>,
    /// Whether transport errors are injected (and so expected).
    pub(super) transport: bool,
}

impl ClientRun {
    /// Starts simulated client `id`: it returns its counters, or `None`
    /// when the scheduler crashed it.
    pub(super) fn spawn_client(
        &self,
        id: usize,
        mut client: Client,
        world: &World,
        seed: u64,
    ) -> JoinHandle<Option<Stats>> {
        let run = self.clone();
        let keys = world.keys.clone();
        let readable: Vec<Vec<u8>> = if self.scenario.read_fillers {
            keys.iter().chain(&world.fillers).cloned().collect()
        } else {
            keys.clone()
        };
        let first = world.first[id].clone();
        let op_seed = seed.wrapping_mul(31).wrapping_add(id as u64);
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(op_seed);
            // Entered inside: a client whose host is lost before its first
            // turn crashes as it gets it.
            let result = catch_unwind(AssertUnwindSafe(|| {
                run.sched.enter(id);
                run.operations(id, &mut client, &mut rng, first, &keys, &readable);
                client.stats()
            }));
            run.sched.leave();
            match result {
                Ok(stats) => Some(stats),
                Err(payload) if payload.downcast_ref::<Crashed>().is_some() => None,
                Err(payload) => std::panic::resume_unwind(payload),
            }
        })
    }

    /// Client `id`'s operations, recorded: its prescribed first ones, then
    /// random ones by the scenario's mix.
    fn operations(
        &self,
        id: usize,
        client: &mut Client,
        rng: &mut StdRng,
        first: Vec<Call>,
        keys: &[Vec<u8>],
        readable: &[Vec<u8>],
    ) {
        let scenario = &self.scenario;
        let mut first = first.into_iter();
        for n in 0..scenario.ops_per_client {
            let k = keys[rng.gen_range(0..keys.len())].clone();
            let reader = id >= scenario.clients - scenario.readers.min(scenario.clients);
            let (puts, deletes) = if reader { (0, 0) } else { scenario.mix };
            // The draws above happen for prescribed operations too, so a
            // prescription does not shift the random ones after it.
            let prescribed = first.next();
            let call = match rng.gen_range(0..100) {
                _ if prescribed.is_some() => prescribed.unwrap_or_else(|| Call::get(k)),
                p if p < puts => {
                    Call::put(k, value(rng, &scenario.value_len, &format!("c{id}v{n}")))
                }
                p if p < puts + deletes => Call::delete(k),
                _ => Call::get(readable[rng.gen_range(0..readable.len())].clone()),
            };
            while self.issue(id, client, &call) {}
        }
    }

    /// Issues `call` once and records it; returns whether to issue it again
    /// (it was refused while the view changes).
    fn issue(&self, id: usize, client: &mut Client, call: &Call) -> bool {
        let pending = self.recorder.invoke(id as u64, call.clone());
        self.sched.op_begins();
        let result = call.apply(client);
        self.sched.op_ends();
        match result {
            Ok(ret) => self.recorder.returned(pending, ret),
            Err(Error::ViewChanging { .. }) => {
                // Nothing was done; the view is active after the drain.
                self.recorder.failed(pending);
                self.sched.count(|c| c.view_changing += 1);
                self.sched
                    .sleep(Duration::from_micros(self.scenario.op_timeout_us / 2));
                return true;
            }
            Err(Error::ClockSkew { .. }) => {
                // Refused before any verb; the clocks may agree again
                // a heartbeat later.
                self.recorder.failed(pending);
                self.sched
                    .sleep(nessie::clock::heartbeat_period(Duration::from_micros(
                        self.scenario.skew_us,
                    )));
            }
            Err(e) => match classify(&e, self.transport, |n| self.sched.was_lost(n)) {
                Ok(true) => self.recorder.failed(pending),
                // Returned: whatever it did, it did by now.
                Ok(false) => self.recorder.undecided(pending),
                Err(msg) => {
                    self.recorder.unknown(pending);
                    self.errors
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(format!("client {id}: {call:?}: {msg}"));
                }
            },
        }
        false
    }
}

/// Runs `body` as scheduled background thread `id` until the clients are
/// done (or its host is lost), every `period` on `clock`.
fn background(
    sched: &Arc<Scheduler>,
    id: usize,
    clock: Arc<dyn Clock>,
    period: Duration,
    body: impl Fn() + Send + 'static,
) -> JoinHandle<()> {
    let sched = Arc::clone(sched);
    std::thread::spawn(move || {
        let result = catch_unwind(AssertUnwindSafe(|| {
            sched.enter_as(id, Role::Background);
            while !sched.clients_done() {
                body();
                clock.sleep(period);
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

/// Starts the background recyclers as scheduled threads from `first_id`
/// on, each running [`nessie::data::NodeData::recycle_period`] every
/// `period`: with one replica, one thread for every node (on node 0's
/// clock); with more, one per node on its own clock and host, so that a
/// lost host takes its recycler with it. Returns the threads.
pub(super) fn spawn_recyclers(
    sched: &Arc<Scheduler>,
    cluster: &Arc<Cluster>,
    scenario: &Scenario,
    first_id: usize,
    clocks: &[Arc<dyn Clock>],
) -> Vec<JoinHandle<()>> {
    let period = Duration::from_micros((scenario.expiry_us / 10).max(1));
    let per_node = scenario.replicas > 1;
    let groups: Vec<Vec<NodeId>> = if per_node {
        (0..scenario.nodes).map(|n| vec![n]).collect()
    } else {
        vec![(0..scenario.nodes).collect()]
    };
    groups
        .into_iter()
        .enumerate()
        .map(|(i, nodes)| {
            let id = first_id + i;
            if per_node {
                sched.place(id, nodes[0]);
            }
            let cluster = Arc::clone(cluster);
            let clock = Arc::clone(&clocks[nodes[0]]);
            background(sched, id, clock, period, move || {
                for &node in &nodes {
                    if let Some(data) = cluster.node_data(node) {
                        data.recycle_period(cluster.table_access(node));
                    }
                }
            })
        })
        .collect()
}

/// Starts the clock watch of every node as scheduled thread `id`: one
/// check of every node's clock per heartbeat period, as the watch thread
/// does, until the clients are done.
pub(super) fn spawn_watch(
    sched: &Arc<Scheduler>,
    cluster: &Arc<Cluster>,
    id: usize,
    clock: Arc<dyn Clock>,
) -> JoinHandle<()> {
    let period = nessie::clock::heartbeat_period(cluster.config().max_clock_skew);
    let cluster = Arc::clone(cluster);
    background(sched, id, clock, period, move || cluster.check_clocks())
}
