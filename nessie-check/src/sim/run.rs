//! Runs of the deterministic simulator: a scenario, a seed, a history, and
//! the verdict of the linearizability checker and the audit.
//!
//! A run builds an in-process cluster on the simulator's fabric and clocks,
//! preloads filler keys, then lets the clients (and, if the scenario says
//! so, each node's background recycler as a scheduled thread) loose. The
//! **audit** that follows is what makes wedges and lost data visible:
//! 1. time passes until every staged slot has expired;
//! 2. every node allocates every slot it can (recycling, and so resolving
//!    any MIGRATE marker, first) and overwrites it with poison, then frees
//!    it again: every slot whose incarnation is over is reused;
//! 3. slots still in use but unreachable from the index are counted as
//!    leaked (a violation in runs without crashes or transport errors);
//! 4. every key ever used is read, written and read again; a `Timeout` or
//!    `Corrupt` there is a wedge;
//! 5. the whole history, audit included, must be linearizable.
//!
//! One invariant is checked throughout, after every CAS that changes memory
//! and again before and after the audit: no two linked committed entries of
//! one key differ ([`divergent_duplicates`]).

use super::audit::audit;
use super::world::{value, world, World};
use super::{
    divergent_duplicates, quiet_crashes, Crashed, Faults, MemoryCheck, Role, Scenario, Scheduler,
    SchedulerReport, SimClock, SimFabric, SimOutcome,
};
use crate::history::{Call, Recorder};
use crate::linearizability::check;
use nessie::data::Geometry;
use nessie::{Client, Clock, Cluster, Error, Stats};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How an operation's error enters the history: `Ok(true)` no effect,
/// `Ok(false)` unknown outcome, `Err` a violation.
fn classify(e: &Error, transport_faults: bool) -> Result<bool, String> {
    match e {
        Error::IndexFull | Error::DataTableFull => Ok(true),
        Error::Timeout => Ok(false),
        Error::Fabric(_) if transport_faults => Ok(false),
        other => Err(format!("unexpected error {other}")),
    }
}

/// Runs one seed of `scenario`. `Err` describes a violation: a
/// non-linearizable history, a wedged key, a leaked slot, an unexpected
/// error or a livelock.
///
/// # Errors
/// The violation, with the seed, for replay.
pub fn run(scenario: &Scenario, seed: u64) -> Result<SimOutcome, String> {
    run_with(scenario, seed, scenario.faults)
}

/// [`run`] with other faults (the enumeration of crash points uses it).
///
/// # Errors
/// As [`run`].
pub fn run_with(scenario: &Scenario, seed: u64, faults: Faults) -> Result<SimOutcome, String> {
    quiet_crashes();
    let fail = |msg: String| format!("seed {seed}: {msg}");
    let config = scenario.config(seed);
    let threads =
        scenario.clients + usize::from(scenario.recycler) + usize::from(scenario.watched());
    let sched = Scheduler::new(seed, threads, scenario.nodes, 1_000_000, faults, 400_000);
    let clocks: Vec<Arc<dyn Clock>> = (0..scenario.nodes)
        .map(|n| Arc::new(SimClock::new(Arc::clone(&sched), n)) as Arc<dyn Clock>)
        .collect();
    let wrap_sched = Arc::clone(&sched);
    let land_by = scenario.land_by;
    let geometry = Geometry::new(&config);
    let (check_config, check_geometry) = (config.clone(), geometry.clone());
    let duplicates: MemoryCheck =
        Box::new(move |f| divergent_duplicates(f, &check_config, &check_geometry));
    let cluster = Arc::new(
        Cluster::builder(config.clone())
            .clocks(clocks.clone())
            .wrap_fabric(move |f| {
                Arc::new(
                    SimFabric::new(f, wrap_sched, land_by)
                        .watching_stages(geometry)
                        .checking_after_cas(duplicates),
                )
            })
            .recycler(false)
            .clock_checks(scenario.watched())
            .seed(seed)
            .build()
            .map_err(|e| fail(format!("building the cluster: {e}")))?,
    );
    let recorder = Arc::new(Recorder::new());
    let world = world(scenario, seed);
    load_setup(scenario, &cluster, &recorder, &world).map_err(fail)?;

    let run = ClientRun {
        scenario: scenario.clone(),
        sched: Arc::clone(&sched),
        recorder: Arc::clone(&recorder),
        errors: Arc::new(Mutex::new(Vec::new())),
        transport: faults.transport > 0.0,
    };
    let mut handles = Vec::new();
    for id in 0..scenario.clients {
        let client = cluster
            .client(id % scenario.nodes)
            .map_err(|e| e.to_string())?;
        handles.push(run.spawn_client(id, client, &world, seed));
    }
    let recycler = scenario.recycler.then(|| {
        let period = Duration::from_micros((scenario.expiry_us / 10).max(1));
        spawn_recycler(&sched, &cluster, scenario, Arc::clone(&clocks[0]), period)
    });
    let watch = scenario.watched().then(|| {
        let id = scenario.clients + usize::from(scenario.recycler);
        spawn_watch(&sched, &cluster, id, Arc::clone(&clocks[0]))
    });
    sched.start();
    let mut outcome = SimOutcome {
        runs: 1,
        ..SimOutcome::default()
    };
    for h in handles {
        match h.join() {
            Ok(Some(stats)) => outcome.stats += stats,
            Ok(None) => {}
            Err(_) => return Err(fail("a client panicked".into())),
        }
    }
    if let Some(h) = recycler {
        h.join().map_err(|_| fail("the recycler panicked".into()))?;
    }
    if let Some(h) = watch {
        h.join()
            .map_err(|_| fail("the clock watch panicked".into()))?;
    }
    let report: SchedulerReport = sched.report();
    outcome.sim = report.counts;
    outcome.points = (0..scenario.clients).map(|c| sched.points_of(c)).collect();
    if report.exhausted {
        return Err(fail("livelock: the step budget ran out".into()));
    }
    if let Some(e) = run
        .errors
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .first()
    {
        return Err(fail(e.clone()));
    }

    let all_keys: Vec<Vec<u8>> = world.keys.iter().chain(&world.fillers).cloned().collect();
    if let Some(v) = sched.violations().first() {
        return Err(fail(v.clone()));
    }
    let lossy = faults.crash > 0.0 || faults.crash_at.is_some() || run.transport;
    audit(
        scenario,
        &cluster,
        &sched,
        &recorder,
        &all_keys,
        lossy,
        &mut outcome,
    )
    .map_err(fail)?;
    let history = recorder.history();
    outcome.ops = history.len();
    outcome.failed = recorder.failed_count();
    outcome.unknown = history.unknown_outcomes();
    check(&history).map_err(|e| fail(e.to_string()))?;
    Ok(outcome)
}

/// Sets the index up, from every node in turn (outside the simulation: no
/// yields, no faults).
fn load_setup(
    scenario: &Scenario,
    cluster: &Cluster,
    recorder: &Recorder,
    world: &World,
) -> Result<(), String> {
    for (i, (call, must)) in world.setup.iter().enumerate() {
        let mut loader = cluster
            .client(i % scenario.nodes)
            .map_err(|e| e.to_string())?;
        let p = recorder.invoke(u64::MAX, call.clone());
        match call.apply(&mut loader) {
            Ok(ret) => recorder.returned(p, ret),
            Err(Error::IndexFull | Error::DataTableFull) if !must => recorder.failed(p),
            Err(e) => return Err(format!("setup {call:?}: {e}")),
        }
    }
    Ok(())
}

/// What every simulated client of a run shares.
#[derive(Clone)]
struct ClientRun {
    scenario: Scenario,
    sched: Arc<Scheduler>,
    recorder: Arc<Recorder>,
    /// Unexpected errors, each a violation.
    errors: Arc<Mutex<Vec<String>>>,
    /// Whether transport errors are injected (and so expected).
    transport: bool,
}

impl ClientRun {
    /// Starts simulated client `id`: it returns its counters, or `None`
    /// when the scheduler crashed it.
    fn spawn_client(
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
            run.sched.enter(id);
            let mut rng = StdRng::seed_from_u64(op_seed);
            let result = catch_unwind(AssertUnwindSafe(|| {
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
            let pending = self.recorder.invoke(id as u64, call.clone());
            match call.apply(client) {
                Ok(ret) => self.recorder.returned(pending, ret),
                Err(Error::ClockSkew { .. }) => {
                    // Refused before any verb; the clocks may agree again
                    // a heartbeat later.
                    self.recorder.failed(pending);
                    self.sched
                        .sleep(nessie::clock::heartbeat_period(Duration::from_micros(
                            scenario.skew_us,
                        )));
                }
                Err(e) => match classify(&e, self.transport) {
                    Ok(true) => self.recorder.failed(pending),
                    Ok(false) => self.recorder.unknown(pending),
                    Err(msg) => {
                        self.recorder.unknown(pending);
                        self.errors
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push(format!("client {id}: {call:?}: {msg}"));
                    }
                },
            }
        }
    }
}

/// Starts every node's background recycler as one scheduled thread, which
/// runs [`nessie::data::NodeData::recycle_period`] every `period` until the
/// clients are done.
fn spawn_recycler(
    sched: &Arc<Scheduler>,
    cluster: &Arc<Cluster>,
    scenario: &Scenario,
    clock: Arc<dyn Clock>,
    period: Duration,
) -> JoinHandle<()> {
    let sched = Arc::clone(sched);
    let cluster = Arc::clone(cluster);
    let id = scenario.clients;
    let nodes = scenario.nodes;
    std::thread::spawn(move || {
        sched.enter_as(id, Role::Background);
        let result = catch_unwind(AssertUnwindSafe(|| {
            while !sched.clients_done() {
                for node in 0..nodes {
                    if let Some(data) = cluster.node_data(node) {
                        data.recycle_period(cluster.table_access(node));
                    }
                }
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

/// Starts the clock watch of every node as scheduled thread `id`: one
/// check of every node's clock per heartbeat period, as the watch thread
/// does, until the clients are done.
fn spawn_watch(
    sched: &Arc<Scheduler>,
    cluster: &Arc<Cluster>,
    id: usize,
    clock: Arc<dyn Clock>,
) -> JoinHandle<()> {
    let sched = Arc::clone(sched);
    let cluster = Arc::clone(cluster);
    let period = nessie::clock::heartbeat_period(cluster.config().max_clock_skew);
    std::thread::spawn(move || {
        sched.enter_as(id, Role::Background);
        let result = catch_unwind(AssertUnwindSafe(|| {
            while !sched.clients_done() {
                cluster.check_clocks();
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

/// Seeds to run: `NESSIE_SIM_SEED` replays one; `NESSIE_SIM_SEEDS` sets how
/// many (default `default`), from `NESSIE_SIM_FIRST_SEED` (default 0).
#[must_use]
pub fn seeds(default: u64) -> Vec<u64> {
    seeds_from("NESSIE_SIM_SEEDS", default)
}

/// Like [`seeds`], with the count from the variable `count_var`.
#[must_use]
pub fn seeds_from(count_var: &str, default: u64) -> Vec<u64> {
    let var = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    if let Some(seed) = var("NESSIE_SIM_SEED") {
        return vec![seed];
    }
    let first = var("NESSIE_SIM_FIRST_SEED").unwrap_or(0);
    let n = var(count_var).unwrap_or(default);
    (first..first + n).collect()
}

/// Runs `scenario` once per yield point of a fault-free run of `seed`,
/// crashing one client there, then once per yield point stalling one
/// client there long enough to be declared dead (a zombie). Returns the
/// number of runs.
///
/// # Errors
/// The first violation, naming the fault that caused it.
pub fn enumerate_faults(scenario: &Scenario, seed: u64) -> Result<u64, String> {
    // The scenario's random faults stay, but for random crashes: one fault
    // is placed systematically, the others land where the seed puts them.
    let base = Faults {
        crash: 0.0,
        critical_crash: 0.0,
        ..scenario.faults
    };
    let expiry = scenario.expiry_us;
    let points = run_with(scenario, seed, base)?.points;
    let mut runs = 0;
    for (client, &n) in points.iter().enumerate() {
        for at in 1..=n {
            let crash = Faults {
                crash_at: Some((client, at)),
                ..base
            };
            run_with(scenario, seed, crash)
                .map_err(|e| format!("crash of client {client} at point {at}: {e}"))?;
            // Long enough to be declared dead (within the landing bound
            // before a CAS): a zombie.
            let zombie = Faults {
                stall_at: Some((client, at, expiry)),
                ..base
            };
            run_with(scenario, seed, zombie)
                .map_err(|e| format!("stall of client {client} at point {at}: {e}"))?;
            runs += 2;
        }
    }
    Ok(runs)
}
