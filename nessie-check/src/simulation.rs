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

use crate::history::{Call, Recorder, Ret};
use crate::linearizability::check;
use crate::scripted::reuse_every_free_slot;
use crate::sim::{
    quiet_crashes, Crashed, Faults, Role, Scheduler, SchedulerReport, SimClock, SimCounts,
    SimFabric,
};
use nessie::data::{Geometry, RecycleCounts};
use nessie::index::KeyHasher;
use nessie::layout::dte::{self, DteHeader, DteStatus};
use nessie::layout::{Ite, SlotRef};
use nessie::{ChecksumPolicy, Client, Clock, Cluster, Config, Error, Optimizations, Stats};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashSet;
use std::ops::RangeInclusive;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How a run's index starts out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Keys with random names (and so random candidate slots).
    Random,
    /// Layout A of the model checks and the review, on two nodes of two
    /// index slots: k1 with candidates (s1, s0) sits in s0, k3 in s2; k2 has
    /// (s0, s2) and k4 (s1, s2). Client 0 starts with PUT(k2), which must
    /// MIGRATE k1 from s0 to s1; everything after is random. The ground of
    /// review F3–F5: zombie migrators and their helpers meet on three slots.
    A,
    /// The layout of review F2, on two nodes of two index slots: k1 with
    /// candidates (s0, s1, s2) sits in s0, f3 in s3; kx has (s0, s3) and ky
    /// (s1, s3). Client 0 starts with PUT(kx), which MIGRATEs k1 from s0 to
    /// s1, and client 1 with PUT(ky), which moves that copy on to s2.
    F2,
}

/// A run's keys, the writes that set its index up, and the operations its
/// clients start with.
struct World {
    /// The keys clients write.
    keys: Vec<Vec<u8>>,
    /// Further keys, preloaded (clients read them if `read_fillers`).
    fillers: Vec<Vec<u8>>,
    /// Setup writes, each from node `i % nodes`; `true`: it must succeed
    /// (a prescribed layout), `false`: a full index or table is fine.
    setup: Vec<(Call, bool)>,
    /// Per client, the operation it starts with, if prescribed.
    first: Vec<Option<Call>>,
}

/// Which optimisation switches and checksum policy a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switches {
    /// These.
    Fixed(Optimizations, ChecksumPolicy),
    /// One of the 64 combinations, chosen by the seed (and filter bits of
    /// 8, 2 or 1 when filters are on).
    PerSeed,
}

/// What a simulation run exercises.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Name, for reports.
    pub name: &'static str,
    /// Simulated clients (client `c` runs on node `c % nodes`).
    pub clients: usize,
    /// Nodes.
    pub nodes: usize,
    /// Operations each client issues.
    pub ops_per_client: usize,
    /// Keys the clients fight over.
    pub keys: usize,
    /// Lengths their keys may have (each key's length is drawn per seed).
    pub key_len: RangeInclusive<usize>,
    /// Lengths values may have (two size classes: up to 256 and 512 bytes).
    pub value_len: RangeInclusive<usize>,
    /// Keys preloaded to crowd the index (never written by clients).
    pub fillers: usize,
    /// Whether clients also GET the fillers (so the entries MIGRATEs move
    /// are read, and their copies helped, by others).
    pub read_fillers: bool,
    /// Percentages of PUTs and DELETEs among the clients' operations (the
    /// rest are GETs).
    pub mix: (u32, u32),
    /// How many of the clients (the last ones) only read.
    pub readers: usize,
    /// How the index starts out.
    pub layout: Layout,
    /// ITEs per node.
    pub index_slots_per_node: usize,
    /// DTE slots per node of the larger size class (the smaller gets more).
    pub data_slots_per_node: usize,
    /// DTE expiry (virtual µs).
    pub expiry_us: u64,
    /// Operation deadline (virtual µs).
    pub op_timeout_us: u64,
    /// Tolerated skew (virtual µs).
    pub skew_us: u64,
    /// Optimisation switches and checksum policy.
    pub switches: Switches,
    /// Whether every node's background recycler runs as a scheduled thread.
    pub recycler: bool,
    /// Whether CASes carry land-by times the target enforces (as on `tcp`).
    pub land_by: bool,
    /// Fault injection.
    pub faults: Faults,
}

/// Value capacity of the larger size class of every scenario.
const VALUE_MAX: usize = 512;
/// Longest key of every scenario.
const KEY_MAX: usize = 24;

impl Scenario {
    /// A small, contended cluster: 4 hot keys, 6 clients on 3 nodes, a
    /// roomy index.
    #[must_use]
    pub fn contended() -> Scenario {
        Scenario {
            name: "contended",
            clients: 6,
            nodes: 3,
            ops_per_client: 6,
            keys: 4,
            key_len: 1..=KEY_MAX,
            value_len: 1..=400,
            fillers: 0,
            read_fillers: false,
            mix: (40, 20),
            readers: 0,
            layout: Layout::Random,
            index_slots_per_node: 16,
            data_slots_per_node: 48,
            expiry_us: 20_000,
            op_timeout_us: 5_000,
            skew_us: 500,
            switches: Switches::PerSeed,
            recycler: false,
            land_by: false,
            faults: Faults::none(),
        }
    }

    /// The index at load ≥ 0.8 (fillers), so PUTs MIGRATE recursively.
    #[must_use]
    pub fn crowded() -> Scenario {
        Scenario {
            name: "crowded",
            index_slots_per_node: 4,
            fillers: 7,
            keys: 3,
            ..Scenario::contended()
        }
    }

    /// Data tables so small that slots are recycled all the time, with the
    /// background recycler running.
    #[must_use]
    pub fn recycling() -> Scenario {
        Scenario {
            name: "recycling",
            data_slots_per_node: 6,
            expiry_us: 3_000,
            op_timeout_us: 1_000,
            skew_us: 100,
            ops_per_client: 8,
            recycler: true,
            ..Scenario::contended()
        }
    }

    /// Tiny index *and* tiny data tables: MIGRATE, recursive MIGRATE and
    /// recycling interleave, with the background recycler running.
    #[must_use]
    pub fn combined() -> Scenario {
        Scenario {
            name: "combined",
            index_slots_per_node: 4,
            fillers: 7,
            keys: 4,
            data_slots_per_node: 8,
            expiry_us: 3_000,
            op_timeout_us: 1_000,
            skew_us: 100,
            ops_per_client: 6,
            recycler: true,
            ..Scenario::contended()
        }
    }

    /// Zombie migrations: an index so full that nearly every PUT migrates,
    /// readers of the migrated entries, many stalls (half of them in the
    /// window where a late CAS races its helpers) and crashes, and the
    /// background recycler: the ground of review F2–F5.
    #[must_use]
    pub fn migrating_zombies() -> Scenario {
        let base = Scenario {
            name: "migrating-zombies",
            clients: 4,
            ops_per_client: 4,
            keys: 4,
            fillers: 8,
            read_fillers: true,
            mix: (50, 30),
            readers: 0,
            layout: Layout::Random,
            index_slots_per_node: 4,
            data_slots_per_node: 8,
            expiry_us: 3_000,
            op_timeout_us: 500,
            skew_us: 50,
            recycler: true,
            ..Scenario::contended()
        };
        let f = Scenario::faulty(base.clone()).faults;
        Scenario {
            faults: Faults {
                crash: 0.004,
                max_crashes: 2,
                stall: 0.02,
                critical_stall: 0.3,
                critical_crash: 0.05,
                tear: 0.1,
                transport: 0.0,
                ..f
            },
            ..base
        }
    }

    /// Layout A ([`Layout::A`]) under zombie stalls and crashes
    /// concentrated at the MIGRATE's critical CASes and after markers are
    /// read: every run starts a MIGRATE that helpers race.
    #[must_use]
    pub fn layout_a_races() -> Scenario {
        let zombies = Scenario::migrating_zombies();
        Scenario {
            name: "layout-a-races",
            nodes: 2,
            clients: 4,
            ops_per_client: 3,
            index_slots_per_node: 2,
            keys: 3,
            fillers: 1,
            read_fillers: true,
            mix: (40, 20),
            layout: Layout::A,
            ..zombies
        }
    }

    /// The layout of review F2 ([`Layout::F2`]) under the same faults:
    /// every run migrates k1 twice, and a crash or a passed deadline between
    /// a copy's commit and its marker's clear leaves a marker behind.
    #[must_use]
    pub fn layout_f2_races() -> Scenario {
        Scenario {
            name: "layout-f2-races",
            layout: Layout::F2,
            clients: 3,
            ops_per_client: 2,
            ..Scenario::layout_a_races()
        }
    }

    /// `base` with every fault within the protocol's stated bounds: up to 4
    /// crashes at any verb; stalls of any length before READs, WRITEs and
    /// back-offs and up to the landing bound before CASes (zombies); torn
    /// READs and WRITEs; transport errors with unknown outcome; wall-clock
    /// steps within `max_clock_skew`.
    #[must_use]
    pub fn faulty(base: Scenario) -> Scenario {
        let config = base.config_with(Optimizations::default(), ChecksumPolicy::AfterStall, 8);
        let landing = config.landing_bound().as_micros() as u64;
        Scenario {
            name: match base.name {
                "contended" => "contended+faults",
                "crowded" => "crowded+faults",
                "recycling" => "recycling+faults",
                "combined" => "combined+faults",
                other => other,
            },
            faults: Faults {
                crash: 0.004,
                max_crashes: 4,
                stall: 0.03,
                stall_max_us: base.expiry_us * 3,
                // A little under the bound: the scheduler may run other
                // threads for a few µs before the stalled one resumes.
                cas_stall_max_us: landing - landing / 10,
                dead_after_us: dead_after_us(&config),
                critical_stall: 0.05,
                critical_crash: 0.01,
                watch_reads: true,
                priority_runs: 0.5,
                priority_change: 0.02,
                tear: 0.3,
                transport: 0.002,
                clock_step: 0.01,
                clock_offset_max_us: base.skew_us / 2,
                crash_at: None,
                stall_at: None,
            },
            ..base
        }
    }

    /// The configuration of a run with these switches.
    #[must_use]
    pub fn config_with(
        &self,
        optimizations: Optimizations,
        verify_checksums: ChecksumPolicy,
        filter_bits: u32,
    ) -> Config {
        let large_slot = dte::entry_bytes(KEY_MAX, VALUE_MAX);
        Config {
            cluster: format!("sim-{}", self.name),
            nodes: self.nodes,
            index_slots_per_node: self.index_slots_per_node,
            hashes: 3,
            filter_bits,
            key_size_max: KEY_MAX,
            value_size_max: VALUE_MAX,
            // Two classes share it equally: the larger gets
            // `data_slots_per_node` slots.
            data_bytes_per_node: 2 * large_slot * self.data_slots_per_node,
            expiry: Duration::from_micros(self.expiry_us),
            op_timeout: Duration::from_micros(self.op_timeout_us),
            max_clock_skew: Duration::from_micros(self.skew_us),
            cache_entries: 8,
            max_migrate_depth: 4,
            optimizations,
            verify_checksums,
            ..Config::default()
        }
    }

    /// The configuration of `seed`.
    #[must_use]
    pub fn config(&self, seed: u64) -> Config {
        match self.switches {
            Switches::Fixed(o, c) => self.config_with(o, c, 8),
            Switches::PerSeed => {
                let bits = seed % 64;
                let on = |b: u64| bits & (1 << b) == 0;
                let o = Optimizations {
                    filter: on(0),
                    cache: on(1),
                    prev_versions: on(2),
                    multi_read: on(3),
                    batched_reads: on(4),
                };
                let policy = if on(5) {
                    ChecksumPolicy::AfterStall
                } else {
                    ChecksumPolicy::Always
                };
                let filter_bits = [8, 2, 1][((seed / 64) % 3) as usize];
                self.config_with(o, policy, filter_bits)
            }
        }
    }
}

/// How long after its start an operation's owner counts as dead to its
/// helpers (µs): a stall this long makes a zombie.
fn dead_after_us(config: &Config) -> u64 {
    (config.op_timeout + config.max_clock_skew * 2).as_micros() as u64 + 1
}

/// The result of one seed (or, summed, of many).
#[derive(Debug, Clone, Default)]
pub struct SimOutcome {
    /// Runs summed.
    pub runs: u64,
    /// Operations in the history.
    pub ops: usize,
    /// Operations with an unknown outcome.
    pub unknown: usize,
    /// Operations that failed without effect (`IndexFull`, `DataTableFull`).
    pub failed: usize,
    /// The clients' counters (the auditor's excluded).
    pub stats: Stats,
    /// Every node's recycling counters (audit churn included).
    pub recycling: RecycleCounts,
    /// Slots neither reusable nor reachable from the index after the audit
    /// churn.
    pub leaked: u64,
    /// What the scheduler and fabric did.
    pub sim: SimCounts,
    /// Yield points each client passed (of the last run only).
    pub points: Vec<u64>,
}

impl SimOutcome {
    /// Adds another outcome to this one.
    pub fn add(&mut self, o: &SimOutcome) {
        self.runs += o.runs;
        self.ops += o.ops;
        self.unknown += o.unknown;
        self.failed += o.failed;
        self.stats += o.stats;
        let (r, s) = (&mut self.recycling, &o.recycling);
        r.scans += s.scans;
        r.reclaimed += s.reclaimed;
        r.markers_cleared += s.markers_cleared;
        r.markers_restored += s.markers_restored;
        r.in_doubt_freed += s.in_doubt_freed;
        r.kept_after_error += s.kept_after_error;
        self.leaked += o.leaked;
        self.sim += o.sim;
    }

    /// A one-paragraph summary of what the runs exercised.
    #[must_use]
    pub fn summary(&self) -> String {
        let t = self.stats.total();
        let r = &self.recycling;
        let s = &self.sim;
        format!(
            "{} runs, {} ops ({} unknown, {} failed without effect); migrations {}, \
             recoveries {}, Z1 marker restores {}, CV markers left {}, cache hits {}, \
             torn retries {}, late CAS {}; slots reclaimed {}, markers cleared/restored by \
             the recycler {}/{}, in-doubt slots freed {}, leaked {}; sim: {} steps, {} crashes, \
             {} stalls ({} before CAS), {} split verbs, {} torn reads, {} transport errors, \
             {} clock steps, {} late CASes refused, {} zombie stalls at critical CASes",
            self.runs,
            self.ops,
            self.unknown,
            self.failed,
            t.migrations,
            t.recoveries,
            t.marker_restores,
            t.markers_left,
            t.cache_hits,
            t.retries.torn,
            t.late_cas,
            r.reclaimed,
            r.markers_cleared,
            r.markers_restored,
            r.in_doubt_freed,
            self.leaked,
            s.steps,
            s.crashes,
            s.stalls,
            s.cas_stalls,
            s.split_verbs,
            s.torn_reads,
            s.transport_errors,
            s.clock_steps,
            s.late_cas_refused,
            s.critical_stalls,
        )
    }
}

/// A key of exactly `len` bytes (or the shortest that is unique), distinct
/// for every `(prefix, i)`: the index in hex, then `.` and padding.
fn name(prefix: char, i: usize, len: usize) -> Vec<u8> {
    let base = format!("{prefix}{i:x}");
    if len <= base.len() {
        return base.into_bytes();
    }
    let mut k = base.into_bytes();
    k.push(b'.');
    k.resize(len, b'y');
    k
}

/// The keys, setup and first operations of `scenario`'s run of `seed`.
fn world(scenario: &Scenario, seed: u64) -> World {
    let config = scenario.config(seed);
    let hasher = KeyHasher::new(&config);
    let per_node = config.index_slots_per_node as u64;
    let at = |g: u64| nessie::index::Candidate {
        node: (g / per_node) as usize,
        slot: g % per_node,
    };
    // A key named `{prefix}{i}` whose candidates are exactly the global
    // slots `exact`, or whose first candidate is `first`.
    let find = |prefix: &str, exact: &[u64], first: Option<u64>| -> Vec<u8> {
        let want: Vec<_> = exact.iter().map(|&g| at(g)).collect();
        (0..1_000_000)
            .map(|i| format!("{prefix}{i}").into_bytes())
            .find(|k| {
                let c = hasher.candidates(k);
                match first {
                    Some(f) => c[0] == at(f),
                    None => c == want,
                }
            })
            .unwrap_or_default()
    };
    let put = |k: &Vec<u8>, v: &str| (Call::put(k.clone(), v.as_bytes().to_vec()), true);
    let mut first = vec![None; scenario.clients];
    match scenario.layout {
        Layout::A => {
            let (k1, k2, k4) = (
                find("k1-", &[1, 0], None),
                find("k2-", &[0, 2], None),
                find("k4-", &[1, 2], None),
            );
            let (k3, parker) = (find("k3-", &[], Some(2)), find("t-", &[], Some(1)));
            first[0] = Some(Call::put(k2.clone(), b"v4".to_vec()));
            World {
                setup: vec![
                    put(&parker, "parked"),
                    put(&k1, "v1"),
                    put(&k3, "v3"),
                    (Call::delete(parker.clone()), true),
                ],
                keys: vec![k1, k2, k4],
                fillers: vec![parker, k3],
                first,
            }
        }
        Layout::F2 => {
            let k1 = find("k1-", &[0, 1, 2], None);
            let (kx, ky) = (find("kx-", &[0, 3], None), find("ky-", &[1, 3], None));
            let f3 = find("f3-", &[], Some(3));
            first[0] = Some(Call::put(kx.clone(), b"x".to_vec()));
            if let Some(f) = first.get_mut(1) {
                *f = Some(Call::put(ky.clone(), b"y".to_vec()));
            }
            World {
                setup: vec![put(&k1, "v1"), put(&f3, "v9")],
                keys: vec![k1, kx, ky],
                fillers: vec![f3],
                first,
            }
        }
        Layout::Random => {
            let mut rng = StdRng::seed_from_u64(seed ^ 0x6b65_7973);
            let keys = (0..scenario.keys)
                .map(|i| name('k', i, rng.gen_range(scenario.key_len.clone())))
                .collect();
            let fillers: Vec<Vec<u8>> = (0..scenario.fillers)
                .map(|i| name('f', i, rng.gen_range(scenario.key_len.clone())))
                .collect();
            World {
                setup: fillers
                    .iter()
                    .map(|f| (Call::put(f.clone(), b"filler".to_vec()), false))
                    .collect(),
                keys,
                fillers,
                first,
            }
        }
    }
}

fn value(rng: &mut StdRng, range: &RangeInclusive<usize>, tag: &str) -> Vec<u8> {
    let mut v = tag.as_bytes().to_vec();
    let len = rng.gen_range(range.clone()).max(v.len());
    v.resize(len, b'.');
    v
}

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
    let threads = scenario.clients + usize::from(scenario.recycler);
    let sched = Scheduler::new(seed, threads, scenario.nodes, 1_000_000, faults, 400_000);
    let clocks: Vec<Arc<dyn Clock>> = (0..scenario.nodes)
        .map(|n| Arc::new(SimClock::new(Arc::clone(&sched), n)) as Arc<dyn Clock>)
        .collect();
    let wrap_sched = Arc::clone(&sched);
    let land_by = scenario.land_by;
    let geometry = Geometry::new(&config);
    let cluster = Arc::new(
        Cluster::builder(config.clone())
            .clocks(clocks.clone())
            .wrap_fabric(move |f| {
                Arc::new(SimFabric::new(f, wrap_sched, land_by).watching_stages(geometry))
            })
            .recycler(false)
            .seed(seed)
            .build()
            .map_err(|e| fail(format!("building the cluster: {e}")))?,
    );
    let recorder = Arc::new(Recorder::new());
    let World {
        keys,
        fillers,
        setup,
        first,
    } = world(scenario, seed);
    // Set the index up, from every node in turn (outside the simulation:
    // no yields, no faults).
    for (i, (call, must)) in setup.iter().enumerate() {
        let mut loader = cluster
            .client(i % scenario.nodes)
            .map_err(|e| e.to_string())?;
        let p = recorder.invoke(u64::MAX, call.clone());
        match call.apply(&mut loader) {
            Ok(ret) => recorder.returned(p, ret),
            Err(Error::IndexFull | Error::DataTableFull) if !must => recorder.failed(p),
            Err(e) => return Err(fail(format!("setup {call:?}: {e}"))),
        }
    }

    let transport = faults.transport > 0.0;
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut handles = Vec::new();
    for id in 0..scenario.clients {
        let mut client = cluster
            .client(id % scenario.nodes)
            .map_err(|e| e.to_string())?;
        let sched = Arc::clone(&sched);
        let recorder = Arc::clone(&recorder);
        let errors = Arc::clone(&errors);
        let keys = keys.clone();
        let readable: Vec<Vec<u8>> = if scenario.read_fillers {
            keys.iter().chain(&fillers).cloned().collect()
        } else {
            keys.clone()
        };
        let scenario = scenario.clone();
        let mut first = first[id].clone();
        let op_seed = seed.wrapping_mul(31).wrapping_add(id as u64);
        handles.push(std::thread::spawn(move || {
            sched.enter(id);
            let mut rng = StdRng::seed_from_u64(op_seed);
            let result = catch_unwind(AssertUnwindSafe(|| {
                for n in 0..scenario.ops_per_client {
                    let k = keys[rng.gen_range(0..keys.len())].clone();
                    let reader = id >= scenario.clients - scenario.readers.min(scenario.clients);
                    let (puts, deletes) = if reader { (0, 0) } else { scenario.mix };
                    let call = match rng.gen_range(0..100) {
                        _ if first.is_some() => first.take().unwrap_or_else(|| Call::get(k)),
                        p if p < puts => Call::put(
                            k,
                            value(&mut rng, &scenario.value_len, &format!("c{id}v{n}")),
                        ),
                        p if p < puts + deletes => Call::delete(k),
                        _ => Call::get(readable[rng.gen_range(0..readable.len())].clone()),
                    };
                    let pending = recorder.invoke(id as u64, call.clone());
                    match call.apply(&mut client) {
                        Ok(ret) => recorder.returned(pending, ret),
                        Err(e) => match classify(&e, transport) {
                            Ok(true) => recorder.failed(pending),
                            Ok(false) => recorder.unknown(pending),
                            Err(msg) => {
                                recorder.unknown(pending);
                                errors
                                    .lock()
                                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                                    .push(format!("client {id}: {call:?}: {msg}"));
                            }
                        },
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
    let recycler = scenario.recycler.then(|| {
        let sched = Arc::clone(&sched);
        let cluster = Arc::clone(&cluster);
        let id = scenario.clients;
        let nodes = scenario.nodes;
        let classes = config.size_classes().len() as u8;
        let period = Duration::from_micros((scenario.expiry_us / 10).max(1));
        let clock = Arc::clone(&clocks[0]);
        std::thread::spawn(move || {
            sched.enter_as(id, Role::Background);
            let result = catch_unwind(AssertUnwindSafe(|| {
                while !sched.clients_done() {
                    for node in 0..nodes {
                        let Some(data) = cluster.node_data(node) else {
                            continue;
                        };
                        for class in 0..classes {
                            if data.available(class) * 4 < data.capacity(class) {
                                let _ = data.recycle(class, cluster.table_access(node));
                            }
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
    let report: SchedulerReport = sched.report();
    outcome.sim = report.counts;
    outcome.points = (0..scenario.clients).map(|c| sched.points_of(c)).collect();
    if report.exhausted {
        return Err(fail("livelock: the step budget ran out".into()));
    }
    if let Some(e) = errors
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .first()
    {
        return Err(fail(e.clone()));
    }

    let all_keys: Vec<Vec<u8>> = keys.iter().chain(&fillers).cloned().collect();
    let check_invariants = |sched: &Scheduler| match sched.violations().first() {
        Some(v) => Err(fail(v.clone())),
        None => Ok(()),
    };
    check_invariants(&sched)?;
    let lossy = faults.crash > 0.0 || faults.crash_at.is_some() || transport;
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
    outcome.unknown = history
        .ops()
        .iter()
        .filter(|o| o.responded().is_none())
        .count();
    check(&history).map_err(|e| fail(e.to_string()))?;
    Ok(outcome)
}

/// Steps 1–4 of the audit (see the module docs).
fn audit(
    scenario: &Scenario,
    cluster: &Cluster,
    sched: &Scheduler,
    recorder: &Recorder,
    keys: &[Vec<u8>],
    lossy: bool,
    outcome: &mut SimOutcome,
) -> Result<(), String> {
    let config = cluster.config();
    // 1. Every owner is dead, every CAS landed, every staged slot expired;
    // 2. every slot that may be reused is reused. Resolving a copy's marker
    //    stages the copy's predecessor, which a later round reuses.
    let landing = config.landing_bound().as_micros() as u64;
    let wait = scenario.expiry_us + scenario.op_timeout_us + landing + 4 * scenario.skew_us + 1;
    for _round in 0..2 + config.max_migrate_depth {
        sched.advance(wait);
        for node in 0..config.nodes {
            reuse_every_free_slot(cluster, node)
                .map_err(|e| format!("audit reuse on node {node}: {e}"))?;
        }
        if staged(cluster).is_empty() {
            break;
        }
    }
    for node in 0..config.nodes {
        if let Some(data) = cluster.node_data(node) {
            let c = data.recycle_counts();
            let r = &mut outcome.recycling;
            r.scans += c.scans;
            r.reclaimed += c.reclaimed;
            r.markers_cleared += c.markers_cleared;
            r.markers_restored += c.markers_restored;
            r.in_doubt_freed += c.in_doubt_freed;
            r.kept_after_error += c.kept_after_error;
        }
    }
    let left = staged(cluster);
    if !left.is_empty() {
        let shown: String = left.iter().map(|r| describe_dte(cluster, *r)).collect();
        return Err(format!("staged slots were never reused:\n{shown}"));
    }
    // 3. Leaks.
    let leaks = leaked(cluster);
    outcome.leaked = leaks.len() as u64;
    if !leaks.is_empty() && !lossy {
        let shown: String = leaks.iter().map(|r| describe_dte(cluster, *r)).collect();
        return Err(format!(
            "{} DTE slots leaked in a run without crashes or transport errors:\n{shown}index:\n{}",
            leaks.len(),
            dump_index(cluster)
        ));
    }
    // 4. Read, write and read again every key.
    let mut auditor = cluster
        .client(1 % config.nodes)
        .map_err(|e| e.to_string())?;
    let wedged = |k: &[u8], what: &str, e: &Error, auditor: &Client| {
        format!(
            "key {} wedged after the run ({what}): {e} (auditor: {:?})\n{}",
            String::from_utf8_lossy(k),
            auditor.stats().total().retries,
            dump_key(cluster, k)
        )
    };
    for k in keys {
        let p = recorder.invoke(u64::MAX - 1, Call::get(k.clone()));
        match auditor.get(k) {
            Ok(v) => recorder.returned(p, Ret::Get(v)),
            Err(e) => return Err(wedged(k, "GET", &e, &auditor)),
        }
    }
    for k in keys {
        let v = format!("audit-{}", String::from_utf8_lossy(k)).into_bytes();
        let p = recorder.invoke(u64::MAX - 1, Call::put(k.clone(), v.clone()));
        match auditor.put(k, &v) {
            Ok(()) => recorder.returned(p, Ret::Put),
            Err(Error::IndexFull | Error::DataTableFull) => recorder.failed(p),
            Err(e) => return Err(wedged(k, "PUT", &e, &auditor)),
        }
        let p = recorder.invoke(u64::MAX - 1, Call::get(k.clone()));
        match auditor.get(k) {
            Ok(v) => recorder.returned(p, Ret::Get(v)),
            Err(e) => return Err(wedged(k, "GET after PUT", &e, &auditor)),
        }
    }
    Ok(())
}

/// Every ITE of every node.
fn all_ites(cluster: &Cluster) -> Vec<(usize, u64, Ite)> {
    let config = cluster.config();
    let fabric = cluster.fabric();
    let mut out = Vec::new();
    for node in 0..config.nodes {
        for slot in 0..config.index_slots_per_node as u64 {
            let c = nessie::index::Candidate { node, slot };
            let mut w = [0u8; 8];
            let _ = fabric.read(c.addr(), &mut w);
            out.push((node, slot, Ite(u64::from_le_bytes(w))));
        }
    }
    out
}

/// Slots in use that nothing in the index can reach. Reachable: linked
/// entries, the `prev` and `replaced` of linked entries not committed
/// (a helper may restore them), the copies behind markers and those copies'
/// predecessors (the marker's clearer stages them).
fn leaked(cluster: &Cluster) -> Vec<SlotRef> {
    let config = cluster.config();
    let fabric = cluster.fabric();
    let mut reachable: HashSet<(u16, u8, u32)> = HashSet::new();
    let key = |r: SlotRef| (r.node, r.class, r.slot);
    let header = |t: SlotRef| {
        let addr = cluster.node_data(0)?.geometry().dte_addr(t)?;
        let mut h = [0u8; dte::DTE_HEADER_BYTES];
        fabric.read(addr, &mut h).ok()?;
        let h = DteHeader::decode(&h);
        (h.state.generation() == t.generation).then_some(h)
    };
    for (_, _, ite) in all_ites(cluster) {
        let Some(t) = ite.target() else { continue };
        reachable.insert(key(t));
        let Some(h) = header(t) else { continue };
        let mut also = Vec::new();
        if ite.is_moved() {
            also.push(h.prev);
        } else if h.state.status() != DteStatus::Valid {
            also.extend([h.prev, h.replaced]);
        }
        for v in also {
            if let Some(r) = Ite(v).target() {
                reachable.insert(key(r));
            }
        }
    }
    (0..config.nodes)
        .filter_map(|n| cluster.node_data(n))
        .flat_map(|d| (0..d.classes() as u8).flat_map(move |c| d.in_use_slots(c)))
        .filter(|r| !reachable.contains(&key(*r)))
        .collect()
}

/// The slots in use that are staged (waiting for their expiry).
fn staged(cluster: &Cluster) -> Vec<SlotRef> {
    let fabric = cluster.fabric();
    let mut out = Vec::new();
    for node in 0..cluster.config().nodes {
        let Some(data) = cluster.node_data(node) else {
            continue;
        };
        for class in 0..data.classes() as u8 {
            for r in data.in_use_slots(class) {
                let Some(addr) = data.geometry().dte_addr(r) else {
                    continue;
                };
                let mut w = [0u8; 8];
                let at = addr.add(dte::EXPIRES_AT_OFFSET as u64);
                if fabric.read(at, &mut w).is_ok() && u64::from_le_bytes(w) != 0 {
                    out.push(r);
                }
            }
        }
    }
    out
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

/// The key's candidate ITEs and the headers they point at, for diagnostics.
fn dump_key(cluster: &Cluster, key: &[u8]) -> String {
    let config = cluster.config();
    let mut out = String::new();
    for c in KeyHasher::new(config).candidates(key) {
        let mut w = [0u8; 8];
        let _ = cluster.fabric().read(c.addr(), &mut w);
        out.push_str(&describe(
            cluster,
            c.node,
            c.slot,
            Ite(u64::from_le_bytes(w)),
        ));
    }
    out
}

/// Every non-empty ITE of the cluster, for diagnostics.
fn dump_index(cluster: &Cluster) -> String {
    all_ites(cluster)
        .into_iter()
        .filter(|(_, _, ite)| !ite.is_empty())
        .map(|(node, slot, ite)| describe(cluster, node, slot, ite))
        .collect()
}

fn describe(cluster: &Cluster, node: usize, slot: u64, ite: Ite) -> String {
    let out = format!("  node {node} slot {slot}: {:?}\n", ite.kind());
    match ite.target() {
        Some(t) => out + &describe_dte(cluster, t),
        None => out,
    }
}

fn describe_dte(cluster: &Cluster, t: SlotRef) -> String {
    let mut out = String::new();
    let Some(data) = cluster.node_data(0) else {
        return out;
    };
    let Some(addr) = data.geometry().dte_addr(t) else {
        return out;
    };
    let mut buf = vec![0u8; data.slot_bytes(t.class)];
    let _ = cluster.fabric().read(addr, &mut buf);
    let h = DteHeader::decode(&buf);
    let key_len = h.state.key_len().min(KEY_MAX);
    out.push_str(&format!(
        "    -> {t:?}: gen {} status {:?} migrated {} tomb {} key {:?} created {} expires {} prev {:?} replaced {:?}\n",
        h.state.generation(),
        h.state.status(),
        h.state.is_migrated(),
        h.state.is_tombstone(),
        String::from_utf8_lossy(&buf[dte::KEY_OFFSET..dte::KEY_OFFSET + key_len]),
        h.created_at,
        h.expires_at,
        Ite(h.prev).kind(),
        Ite(h.replaced).kind()
    ));
    out
}
