//! Runs of the deterministic simulator: a scenario, a seed, a history, and
//! the verdict of the linearizability checker and the audit.

use crate::history::{Call, Recorder, Ret};
use crate::linearizability::check;
use crate::sim::{quiet_crashes, Crashed, Faults, Scheduler, SchedulerReport, SimClock, SimFabric};
use nessie::{Client, Clock, Cluster, Config, Error, Optimizations};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

/// What a simulation run exercises.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Name, for reports.
    pub name: &'static str,
    /// Simulated clients (each on node `client % nodes`).
    pub clients: usize,
    /// Nodes.
    pub nodes: usize,
    /// Operations each client issues.
    pub ops_per_client: usize,
    /// Keys the clients fight over.
    pub keys: usize,
    /// Keys preloaded (and never touched by clients) to crowd the index.
    pub fillers: usize,
    /// ITEs per node.
    pub index_slots_per_node: usize,
    /// DTE slots per node (one size class).
    pub data_slots_per_node: usize,
    /// DTE expiry (virtual µs).
    pub expiry_us: u64,
    /// Operation deadline (virtual µs).
    pub op_timeout_us: u64,
    /// Tolerated skew (virtual µs).
    pub skew_us: u64,
    /// Whether nodes' clocks are offset within the tolerated skew.
    pub skewed: bool,
    /// Fault injection.
    pub faults: Faults,
    /// Optimisation switches.
    pub optimizations: Optimizations,
}

impl Scenario {
    /// A small, contended cluster: 3 hot keys, 4 clients, 2 nodes, a roomy
    /// index.
    #[must_use]
    pub fn contended() -> Scenario {
        Scenario {
            name: "contended",
            clients: 4,
            nodes: 2,
            ops_per_client: 6,
            keys: 3,
            fillers: 0,
            index_slots_per_node: 16,
            data_slots_per_node: 64,
            expiry_us: 20_000,
            op_timeout_us: 5_000,
            skew_us: 500,
            skewed: false,
            faults: Faults::none(),
            optimizations: Optimizations::default(),
        }
    }

    /// The index at load ≥ 0.8 (fillers), so PUTs MIGRATE recursively.
    #[must_use]
    pub fn crowded() -> Scenario {
        Scenario {
            name: "crowded",
            index_slots_per_node: 4,
            fillers: 4,
            keys: 3,
            ..Scenario::contended()
        }
    }

    /// A data table so small that slots are recycled all the time.
    #[must_use]
    pub fn recycling() -> Scenario {
        Scenario {
            name: "recycling",
            data_slots_per_node: 6,
            expiry_us: 3_000,
            op_timeout_us: 1_000,
            skew_us: 100,
            ops_per_client: 8,
            ..Scenario::contended()
        }
    }

    /// Zombies: stalls longer than `op_timeout` (owners declared dead that
    /// resume), some longer than `expiry`, and crashes at any verb.
    #[must_use]
    pub fn faulty(base: Scenario) -> Scenario {
        let dead_after = base.op_timeout_us + 2 * base.skew_us;
        Scenario {
            name: "faulty",
            faults: Faults {
                crash: 0.01,
                max_crashes: 2,
                stall: 0.02,
                stall_us: base.expiry_us * 2,
                short_stall_us: dead_after + 100,
            },
            skewed: true,
            ..base
        }
    }

    fn config(&self) -> Config {
        let key_size_max = 16;
        let value_size_max = 256;
        let slot = nessie::layout::dte::entry_bytes(key_size_max, value_size_max);
        Config {
            cluster: format!("sim-{}", self.name),
            nodes: self.nodes,
            index_slots_per_node: self.index_slots_per_node,
            key_size_max,
            value_size_max,
            data_bytes_per_node: slot * self.data_slots_per_node,
            expiry: Duration::from_micros(self.expiry_us),
            op_timeout: Duration::from_micros(self.op_timeout_us),
            max_clock_skew: Duration::from_micros(self.skew_us),
            cache_entries: 8,
            max_migrate_depth: 4,
            optimizations: self.optimizations,
            ..Config::default()
        }
    }
}

/// The result of one seed.
#[derive(Debug, Clone, Default)]
pub struct SimOutcome {
    /// Operations in the history.
    pub ops: usize,
    /// Operations with an unknown outcome.
    pub unknown: usize,
    /// Migrations the clients performed.
    pub migrations: u64,
    /// Entries of others the clients recovered.
    pub recoveries: u64,
    /// What the scheduler did.
    pub scheduler: SchedulerReport,
}

fn key(i: usize) -> Vec<u8> {
    format!("key{i}").into_bytes()
}

fn filler(i: usize) -> Vec<u8> {
    format!("fill{i}").into_bytes()
}

/// Runs one seed of `scenario`. `Err` describes a violation: a
/// non-linearizable history, a wedged key, an unexpected error or a
/// livelock.
///
/// # Errors
/// The violation, with the seed, for replay.
pub fn run(scenario: &Scenario, seed: u64) -> Result<SimOutcome, String> {
    quiet_crashes();
    let config = scenario.config();
    let start_us = 1_000_000;
    let sched = Scheduler::new(seed, scenario.clients, start_us, scenario.faults, 200_000);
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let clocks: Vec<Arc<dyn Clock>> = (0..scenario.nodes)
        .map(|_| {
            let skew = if scenario.skewed {
                rng.gen_range(-(scenario.skew_us as i64) / 2..=(scenario.skew_us as i64) / 2)
            } else {
                0
            };
            Arc::new(SimClock::new(Arc::clone(&sched), skew)) as Arc<dyn Clock>
        })
        .collect();
    let wrap_sched = Arc::clone(&sched);
    let cluster = Cluster::builder(config)
        .clocks(clocks)
        .wrap_fabric(move |f| Arc::new(SimFabric::new(f, wrap_sched)))
        .recycler(false)
        .seed(seed)
        .build()
        .map_err(|e| format!("seed {seed}: building the cluster: {e}"))?;
    let recorder = Arc::new(Recorder::new());

    // Preload fillers (outside the simulation: no yields, no faults).
    let mut loader = cluster.client(0).map_err(|e| e.to_string())?;
    for i in 0..scenario.fillers {
        let p = recorder.invoke(u64::MAX, Call::put(filler(i), b"filler".to_vec()));
        match loader.put(&filler(i), b"filler") {
            Ok(()) => recorder.returned(p, Ret::Put),
            Err(Error::IndexFull) => recorder.unknown(p),
            Err(e) => return Err(format!("seed {seed}: preload: {e}")),
        }
    }

    let mut clients: Vec<Client> = Vec::new();
    for c in 0..scenario.clients {
        clients.push(
            cluster
                .client(c % scenario.nodes)
                .map_err(|e| e.to_string())?,
        );
    }
    let errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut handles = Vec::new();
    for (id, mut client) in clients.into_iter().enumerate() {
        let sched = Arc::clone(&sched);
        let recorder = Arc::clone(&recorder);
        let errors = Arc::clone(&errors);
        let scenario = scenario.clone();
        let op_seed = seed.wrapping_mul(31).wrapping_add(id as u64);
        handles.push(std::thread::spawn(move || {
            sched.enter(id);
            let mut rng = StdRng::seed_from_u64(op_seed);
            let result = catch_unwind(AssertUnwindSafe(|| {
                for n in 0..scenario.ops_per_client {
                    let k = key(rng.gen_range(0..scenario.keys));
                    let call = match rng.gen_range(0..10) {
                        0..=3 => Call::put(k, format!("c{id}v{n}").into_bytes()),
                        4 | 5 => Call::delete(k),
                        _ => Call::get(k),
                    };
                    let pending = recorder.invoke(id as u64, call.clone());
                    let result = call.apply(&mut client);
                    match result {
                        Ok(ret) => recorder.returned(pending, ret),
                        Err(Error::Timeout | Error::IndexFull | Error::DataTableFull) => {
                            recorder.unknown(pending)
                        }
                        Err(e) => {
                            recorder.unknown(pending);
                            errors
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .push(format!("client {id}: {call:?}: unexpected error {e}"));
                        }
                    }
                }
                client.stats()
            }));
            sched.leave();
            match result {
                Ok(stats) => Some(stats),
                Err(payload) if payload.downcast_ref::<Crashed>().is_some() => None,
                Err(payload) => std::panic::resume_unwind(payload),
            }
        }));
    }
    sched.start();
    let mut outcome = SimOutcome::default();
    for h in handles {
        match h.join() {
            Ok(Some(stats)) => {
                let t = stats.total();
                outcome.migrations += t.migrations;
                outcome.recoveries += t.recoveries;
            }
            Ok(None) => {}
            Err(_) => return Err(format!("seed {seed}: a client panicked")),
        }
    }
    outcome.scheduler = sched.report();
    if outcome.scheduler.exhausted {
        return Err(format!("seed {seed}: livelock: the step budget ran out"));
    }
    if let Some(e) = errors
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .first()
    {
        return Err(format!("seed {seed}: {e}"));
    }

    // Audit: once every crashed owner is dead, every key must be readable
    // within one op_timeout (no wedge), and the reads join the history.
    sched.advance(scenario.op_timeout_us + 2 * scenario.skew_us + 1);
    let mut auditor = cluster
        .client(1 % scenario.nodes)
        .map_err(|e| e.to_string())?;
    let keys: Vec<Vec<u8>> = (0..scenario.keys)
        .map(key)
        .chain((0..scenario.fillers).map(filler))
        .collect();
    for k in keys {
        let p = recorder.invoke(u64::MAX - 1, Call::get(k.clone()));
        match auditor.get(&k) {
            Ok(v) => recorder.returned(p, Ret::Get(v)),
            Err(e) => {
                return Err(format!(
                    "seed {seed}: key {} wedged after its owners died: {e} (auditor: {:?})\n{}",
                    String::from_utf8_lossy(&k),
                    auditor.stats().get,
                    dump_key(&cluster, &k)
                ))
            }
        }
    }
    let history = recorder.history();
    outcome.ops = history.len();
    outcome.unknown = history
        .ops()
        .iter()
        .filter(|o| o.responded().is_none())
        .count();
    check(&history).map_err(|e| format!("seed {seed}: {e}"))?;
    Ok(outcome)
}

/// Seeds to run: `NESSIE_SIM_SEED` replays one; `NESSIE_SIM_SEEDS` sets how
/// many (default `default`).
#[must_use]
pub fn seeds(default: u64) -> Vec<u64> {
    if let Some(seed) = std::env::var("NESSIE_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![seed];
    }
    let n = std::env::var("NESSIE_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    (0..n).collect()
}

/// The key's candidate ITEs and the headers they point at, for diagnostics.
fn dump_key(cluster: &Cluster, key: &[u8]) -> String {
    use nessie::index::KeyHasher;
    use nessie::layout::{dte::DteHeader, Ite};
    let config = cluster.config();
    let fabric = cluster.fabric();
    let mut out = String::new();
    for c in KeyHasher::new(config).candidates(key) {
        let mut w = [0u8; 8];
        let _ = fabric.read(c.addr(), &mut w);
        let ite = Ite(u64::from_le_bytes(w));
        out.push_str(&format!("  {c:?}: {:?}\n", ite.kind()));
        if let Some(t) = ite.target() {
            let bytes = config.class_slot_bytes(usize::from(t.class));
            let mut buf = vec![0u8; bytes];
            let _ = fabric.read(nessie::data::dte_addr(t, bytes), &mut buf);
            let h = DteHeader::decode(&buf);
            out.push_str(&format!(
                "    -> gen {} status {:?} migrated {} tomb {} key {:?} created {} expires {} prev {:?} replaced {:?}\n",
                h.state.generation(),
                h.state.status(),
                h.state.is_migrated(),
                h.state.is_tombstone(),
                String::from_utf8_lossy(&buf[56..56 + h.state.key_len().min(16)]),
                h.created_at,
                h.expires_at,
                Ite(h.prev).kind(),
                Ite(h.replaced).kind()
            ));
        }
    }
    out
}
