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
//! With replicas, a run whose host was lost activates the view without it
//! (if the drain has not passed yet) and audits through the survivors,
//! skipping the lost node's own allocator. A run without loss in which
//! every sync finished (no crash, no transport error, no client reporting
//! `mirrors_behind`) ends with the mirror audit: every mirror equals its
//! primary. Any other replicated run loses a host after its clients are
//! done, promoting its mirrors, and audits through the survivors: every
//! acknowledged value must still be read.
//!
//! One invariant is checked throughout, after every CAS that changes memory
//! and again before and after the audit: no two linked committed entries of
//! one key differ ([`divergent_duplicates`]).

use super::audit::audit;
use super::host::HostHooks;
use super::mirrors::audit_mirrors;
use super::restore::spawn_restorer;
use super::threads::{spawn_recyclers, spawn_watch, ClientRun};
use super::world::{world, World};
use super::{
    divergent_duplicates_in, quiet_crashes, Faults, HostLoss, MemoryCheck, Scenario, Scheduler,
    SchedulerReport, SimClock, SimFabric, SimOutcome,
};
use crate::history::Recorder;
use crate::linearizability::check;
use nessie::data::Geometry;
use nessie::{Clock, Cluster, Config, Error, View, Views};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// Runs one seed of `scenario`. `Err` describes a violation: a
/// non-linearizable history, a wedged key, a leaked slot, an unexpected
/// error or a livelock.
///
/// # Errors
/// The violation, with the seed, for replay.
pub fn run(scenario: &Scenario, seed: u64) -> Result<SimOutcome, String> {
    run_with(scenario, seed, scenario.faults)
}

/// The cluster of a run on the simulator's fabric and clocks, and (with
/// replicas) its fabric for the loss of a host.
fn build(
    scenario: &Scenario,
    seed: u64,
    config: &Config,
    sched: &Arc<Scheduler>,
    clocks: &[Arc<dyn Clock>],
) -> Result<(Arc<Cluster>, Weak<SimFabric>), Error> {
    let wrap_sched = Arc::clone(sched);
    let land_by = scenario.land_by;
    let geometry = Geometry::new(config);
    let (check_config, check_geometry) = (config.clone(), geometry.clone());
    // After a loss, the index as the active view serves it.
    let views: Arc<OnceLock<Arc<Views>>> = Arc::new(OnceLock::new());
    let check_views = Arc::clone(&views);
    let duplicates: MemoryCheck = Box::new(move |f| {
        let view = check_views.get().map_or_else(
            || Arc::new(View::first(check_config.nodes)),
            |v| v.current(),
        );
        divergent_duplicates_in(f, &check_config, &check_geometry, &view)
    });
    let fabric = Arc::new(OnceLock::new());
    let keep = Arc::clone(&fabric);
    let cluster = Cluster::builder(config.clone())
        .clocks(clocks.to_vec())
        .wrap_fabric(move |f| {
            let sim = Arc::new(
                SimFabric::new(f, wrap_sched, land_by)
                    .watching_stages(geometry)
                    .checking_after_cas(duplicates),
            );
            let _ = keep.set(Arc::downgrade(&sim));
            sim
        })
        .recycler(false)
        .clock_checks(scenario.watched())
        .seed(seed)
        .build()?;
    let sim = fabric.get().cloned().unwrap_or_default();
    let _ = views.set(Arc::clone(cluster.views()));
    Ok((Arc::new(cluster), sim))
}

/// What the loss of a host, a replacement's start, a decision and an
/// activation do in `cluster` (the fabric and the cluster held weakly: they
/// hold the scheduler that holds these).
fn host_hooks(cluster: &Arc<Cluster>, fabric: Weak<SimFabric>) -> HostHooks {
    let regions = nessie::store_regions(cluster.config());
    let (views, also) = (Arc::clone(cluster.views()), Arc::clone(cluster.views()));
    let (lost, returning) = (fabric.clone(), fabric);
    let weak = Arc::downgrade(cluster);
    HostHooks {
        lose: Box::new(move |node| {
            if let Some(f) = lost.upgrade() {
                f.lose(node, &regions);
            }
        }),
        replace: Box::new(move |node| {
            if let Some(f) = returning.upgrade() {
                f.replace(node);
            }
            let cluster = weak.upgrade().ok_or("the cluster is gone")?;
            cluster.prepare_replacement(node).map_err(|e| e.to_string())
        }),
        decide: Box::new(move || views.begin_change(views.current().epoch() + 1)),
        activate: Box::new(move |node, state| {
            let next = also.current().next_with(node, state);
            also.activate(next);
        }),
    }
}

/// [`run`] with other faults (the enumeration of crash points uses it).
///
/// # Errors
/// As [`run`].
pub fn run_with(scenario: &Scenario, seed: u64, faults: Faults) -> Result<SimOutcome, String> {
    quiet_crashes();
    let fail = |msg: String| format!("seed {seed}: {msg}");
    let config = scenario.config(seed);
    let recyclers = match (scenario.recycler, scenario.replicas > 1) {
        (false, _) => 0,
        (true, false) => 1,
        (true, true) => scenario.nodes,
    };
    let restorer = scenario.replicas > 1 && faults.host_return.is_some();
    let threads =
        scenario.clients + recyclers + usize::from(scenario.watched()) + usize::from(restorer);
    let sched = Scheduler::new(seed, threads, scenario.nodes, 1_000_000, faults, 400_000);
    let clocks: Vec<Arc<dyn Clock>> = (0..scenario.nodes)
        .map(|n| Arc::new(SimClock::new(Arc::clone(&sched), n)) as Arc<dyn Clock>)
        .collect();
    let (cluster, sim) = build(scenario, seed, &config, &sched, &clocks)
        .map_err(|e| fail(format!("building the cluster: {e}")))?;
    if scenario.replicas > 1 {
        // The scenario's drain, or (no loss drawn during the run) RP0's.
        let timing = faults
            .host_loss
            .unwrap_or_else(|| HostLoss::for_config(&config, 0.0));
        sched.set_host_hooks(host_hooks(&cluster, sim), timing);
    }
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
        let node = id % scenario.nodes;
        let client = cluster.client(node).map_err(|e| e.to_string())?;
        sched.place(id, node);
        handles.push(run.spawn_client(id, client, &world, seed));
    }
    let mut background = Vec::new();
    if scenario.recycler {
        background = spawn_recyclers(&sched, &cluster, scenario, scenario.clients, &clocks);
    }
    if scenario.watched() {
        let id = scenario.clients + recyclers;
        background.push(spawn_watch(&sched, &cluster, id, Arc::clone(&clocks[0])));
    }
    if restorer {
        let id = scenario.clients + recyclers + usize::from(scenario.watched());
        let period = Duration::from_micros(scenario.op_timeout_us / 2);
        background.push(spawn_restorer(&sched, &cluster, id, period));
    }
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
    for h in background {
        h.join()
            .map_err(|_| fail("a background thread panicked".into()))?;
    }
    let during = sched.report().counts.hosts_lost > 0;
    let lost = after_the_clients(scenario, seed, &sched, &outcome);
    if lost.is_some() && !during {
        outcome.end_losses += 1;
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
    finish(
        scenario,
        (&cluster, &sched, &recorder),
        &world,
        lost,
        outcome,
    )
    .map_err(fail)
}

/// With replicas, once the clients are done: the view without a host lost
/// during the run (and not restored) is activated; a run whose nodes all
/// serve in which a sync may have been cut short (a crash, a transport
/// error, a client's `mirrors_behind`), or that was to lose a host and
/// restored none, loses one now, so that its mirrors are promoted. Returns
/// the lost node.
fn after_the_clients(
    scenario: &Scenario,
    seed: u64,
    sched: &Scheduler,
    outcome: &SimOutcome,
) -> Option<usize> {
    if scenario.replicas < 2 {
        return None;
    }
    if let Some(n) = sched.settle_host_loss() {
        return Some(n);
    }
    let c = sched.report().counts;
    let behind = outcome.stats.total().mirrors_behind;
    let cut_short = c.crashes > 0 || c.transport_errors > 0 || behind > 0;
    if cut_short || (sched.faults().host_loss.is_some() && c.restores == 0) {
        return sched.lose_host_now((seed % scenario.nodes as u64) as usize);
    }
    None
}

/// The audit, the mirror audit where it applies, and the linearizability
/// check of the whole history.
fn finish(
    scenario: &Scenario,
    (cluster, sched, recorder): (&Cluster, &Scheduler, &Recorder),
    world: &World,
    lost: Option<usize>,
    mut outcome: SimOutcome,
) -> Result<SimOutcome, String> {
    let all_keys: Vec<Vec<u8>> = world.keys.iter().chain(&world.fillers).cloned().collect();
    if let Some(v) = sched.violations().first() {
        return Err(v.clone());
    }
    let f = sched.faults();
    let lossy = f.crash > 0.0
        || f.crash_at.is_some()
        || f.transport > 0.0
        || sched.report().counts.hosts_lost > 0;
    audit(
        scenario,
        (cluster, sched, recorder),
        &all_keys,
        (lossy, lost),
        &mut outcome,
    )?;
    if let Some(v) = sched.violations().first() {
        return Err(format!("in the audit: {v}"));
    }
    if scenario.replicas > 1 {
        if lost.is_some() {
            outcome.promotions += 1;
        } else {
            outcome.mirror_audits += 1;
            outcome.mirrored_entries += audit_mirrors(cluster)?;
        }
    }
    let history = recorder.history();
    outcome.ops = history.len();
    outcome.failed = recorder.failed_count();
    outcome.unknown = history.unknown_outcomes();
    check(&history).map_err(|e| e.to_string())?;
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
