//! Chaos runs: a multi-process `shm` cluster under a mixed workload while a
//! controller injects faults, then a verdict.
//!
//! Faults, at random times:
//! * **kill** — SIGKILL a node process mid-operation (at most all but two);
//! * **stall** — SIGSTOP a node for longer than `expiry`, then SIGCONT;
//!
//! both at a moment when one of the node's workers has an operation in
//! flight ([`stop_mid_operation`]), counted in the report;
//! * **fill** — a node PUTs large values under fresh keys, deleting each
//!   right away (its slot stays staged for `expiry`), until its data table
//!   reports [`Error::DataTableFull`];
//! * **crowd** — a node PUTs small values under fresh keys until the index
//!   reports [`Error::IndexFull`], then deletes them;
//!
//! and, all the time, **migrate and recycle pressure**: the index is tiny
//! and kept three-quarters full by preloaded filler keys, so inserting a hot
//! key again after its deletion MIGRATEs others (recursively), and the data
//! tables are tiny, so slots are recycled as fast as they expire, markers of
//! interrupted MIGRATEs are resolved by the recycler, and writers wait for
//! slots. The report counts migrations, reclaimed slots and resolved
//! markers from every node.
//!
//! Checked afterwards: every process that was not killed exited cleanly (an
//! unexpected error or a panic fails it: full tables must come back as typed
//! errors); the merged history of all processes, audit reads included, is
//! linearizable (killed and timed-out operations have unknown outcomes), so
//! every acknowledged PUT or DELETE is reflected; and after the last fault
//! every key answers within two attempts once dead owners are past
//! `op_timeout + 2·max_clock_skew` (no wedge).

use crate::history::Call;
use crate::process::history::{read_logs, stop_mid_operation, ProcLog};
use crate::process::workload::{logged_call, mark_started, wait_until_started};
use nessie::{Config, Error, FabricConfig, KvClient, Node};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Environment variable telling a process it is a chaos node.
pub const CHILD_ENV: &str = "NESSIE_CHAOS_NODE";
const DIR_ENV: &str = "NESSIE_CHAOS_DIR";
const PLAN_ENV: &str = "NESSIE_CHAOS_PLAN";

/// Shape of a chaos run.
#[derive(Debug, Clone, Copy)]
pub struct ChaosPlan {
    /// Node processes.
    pub nodes: usize,
    /// Worker threads per node.
    pub workers: usize,
    /// Hot keys the workers share.
    pub keys: usize,
    /// How long faults are injected.
    pub duration: Duration,
    /// Mean time between faults.
    pub fault_every: Duration,
    /// Seed of the fault schedule and the workloads.
    pub seed: u64,
}

impl ChaosPlan {
    /// The bounded run of the test suite: about half a minute, ≥ 20 faults.
    #[must_use]
    pub fn quick(seed: u64) -> ChaosPlan {
        ChaosPlan {
            nodes: 4,
            workers: 2,
            keys: 16,
            duration: Duration::from_secs(25),
            fault_every: Duration::from_millis(700),
            seed,
        }
    }

    fn encode(&self) -> String {
        format!(
            "{} {} {} {} {} {}",
            self.nodes,
            self.workers,
            self.keys,
            self.duration.as_millis(),
            self.fault_every.as_millis(),
            self.seed
        )
    }

    fn decode(s: &str) -> Option<ChaosPlan> {
        let v: Vec<u64> = s
            .split(' ')
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        let [nodes, workers, keys, duration, every, seed] = v[..] else {
            return None;
        };
        Some(ChaosPlan {
            nodes: nodes as usize,
            workers: workers as usize,
            keys: keys as usize,
            duration: Duration::from_millis(duration),
            fault_every: Duration::from_millis(every),
            seed,
        })
    }
}

/// Index slots per node: with the hot keys and [`fillers`], the index is
/// about three-quarters full.
const CHAOS_INDEX_SLOTS: usize = 8;

/// The filler keys node 0 preloads to crowd the index.
fn fillers(plan: &ChaosPlan) -> Vec<Vec<u8>> {
    let slots = CHAOS_INDEX_SLOTS * plan.nodes;
    let fill = (slots * 3 / 4).saturating_sub(plan.keys);
    (0..fill)
        .map(|i| format!("filler-{i}").into_bytes())
        .collect()
}

/// The configuration every chaos node uses: short timeouts so faults
/// resolve quickly, a tiny index and tiny data tables so MIGRATE and
/// recycling never rest and the fill and crowd faults hit their limits.
#[must_use]
pub fn chaos_config(dir: &Path, nodes: usize) -> Config {
    Config {
        cluster: format!("chaos-{}", xxhash_name(dir)),
        nodes,
        index_slots_per_node: CHAOS_INDEX_SLOTS,
        value_size_max: 4096,
        // About 256 slots of the smallest class, 26 of the largest.
        data_bytes_per_node: 5 * 256 * nessie::layout::dte::entry_bytes(128, 256),
        expiry: Duration::from_millis(300),
        op_timeout: Duration::from_millis(100),
        max_clock_skew: Duration::from_millis(5),
        fabric: FabricConfig::Shm {
            dir: Some(dir.join("regions")),
        },
        attach_timeout: Duration::from_secs(30),
        ..Config::default()
    }
}

fn xxhash_name(dir: &Path) -> u64 {
    dir.to_string_lossy()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// What a chaos run did and found.
#[derive(Debug, Clone, Default)]
pub struct ChaosReport {
    /// Operations in the merged history.
    pub operations: usize,
    /// Operations with an unknown outcome.
    pub unknown: usize,
    /// Processes killed.
    pub kills: usize,
    /// Stalls longer than `expiry`.
    pub stalls: usize,
    /// Kills and stalls that caught a worker inside an operation.
    pub faults_mid_operation: u64,
    /// Data-table fills that reached `DataTableFull`.
    pub fills: usize,
    /// Index crowdings that reached `IndexFull`.
    pub crowds: usize,
    /// MIGRATEs the nodes' clients performed.
    pub migrations: u64,
    /// Entries of dead or aborted owners the clients recovered.
    pub recoveries: u64,
    /// Slots the nodes' recyclers returned to the free lists.
    pub reclaimed: u64,
    /// MIGRATE markers the recyclers resolved before reusing a copy's slot.
    pub markers_resolved: u64,
    /// Writes that waited for a free slot.
    pub waited_for_slots: u64,
    /// Violations found (linearizability, wedges, failed processes).
    pub violations: Vec<String>,
}

impl ChaosReport {
    /// Faults injected in all.
    #[must_use]
    pub fn faults(&self) -> usize {
        self.kills + self.stalls + self.fills + self.crowds
    }

    /// The one-line summary.
    #[must_use]
    pub fn summary(&self) -> String {
        format!(
            "chaos: {} operations ({} unknown), {} faults injected ({} kills, {} stalls > expiry, {} of those inside an operation, {} data-table fills, {} index crowdings); pressure: {} migrations, {} recoveries, {} slots reclaimed, {} markers resolved by recyclers, {} writes waited for a slot; {} violations",
            self.operations,
            self.unknown,
            self.faults(),
            self.kills,
            self.stalls,
            self.faults_mid_operation,
            self.fills,
            self.crowds,
            self.migrations,
            self.recoveries,
            self.reclaimed,
            self.markers_resolved,
            self.waited_for_slots,
            self.violations.len()
        )
    }
}

struct Procs(Vec<Option<Child>>, PathBuf);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in self.0.iter_mut().flatten() {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

/// Runs a chaos plan. `child` builds the command that starts one node
/// process (the caller's own binary, told by [`CHILD_ENV`] to call
/// [`child_main`]); this function adds the environment.
///
/// # Errors
/// Failing to set up the run (directories, spawning); violations are in the
/// report, not errors.
pub fn run(plan: ChaosPlan, child: impl Fn() -> Command) -> std::io::Result<ChaosReport> {
    let dir =
        std::env::temp_dir().join(format!("nessie-chaos-{}-{}", std::process::id(), plan.seed));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let mut procs = Procs(Vec::new(), dir.clone());
    for node in 0..plan.nodes {
        let mut cmd = child();
        cmd.env(CHILD_ENV, node.to_string())
            .env(DIR_ENV, &dir)
            .env(PLAN_ENV, plan.encode());
        procs.0.push(Some(cmd.spawn()?));
    }
    if !wait_until_started(&dir, plan.nodes, Duration::from_secs(120)) {
        return Err(std::io::Error::other("chaos nodes did not start"));
    }
    let config = chaos_config(&dir, plan.nodes);
    let mut report = ChaosReport::default();
    let mut rng = StdRng::seed_from_u64(plan.seed);
    let end = Instant::now() + plan.duration;
    let mut burst = 0u64;
    while Instant::now() < end {
        let gap = plan.fault_every.mul_f64(rng.gen_range(0.5..1.5));
        std::thread::sleep(gap);
        let alive: Vec<usize> = (0..plan.nodes).filter(|&n| procs.0[n].is_some()).collect();
        let node = alive[rng.gen_range(0..alive.len())];
        // Kills and stalls land inside an operation of the node's workers
        // when they can: they spend most of their time pausing between
        // operations, and a fault there leaves nothing for others to help.
        let logs: Vec<PathBuf> = (0..plan.workers)
            .map(|w| dir.join(format!("hist-{}", node * plan.workers + w)))
            .collect();
        let pid = Pid::from_raw(procs.0[node].as_ref().map_or(0, |c| c.id() as i32));
        match rng.gen_range(0..10) {
            0 if alive.len() > 2 && node != 0 => {
                if let Some(mut c) = procs.0[node].take() {
                    if stop_mid_operation(pid, &logs, 500, Duration::from_micros(200)) == Ok(true) {
                        report.faults_mid_operation += 1;
                    }
                    let _ = c.kill();
                    let _ = c.wait();
                    report.kills += 1;
                }
            }
            0..=3 => {
                if let Ok(mid) = stop_mid_operation(pid, &logs, 500, Duration::from_micros(200)) {
                    report.faults_mid_operation += u64::from(mid);
                    std::thread::sleep(config.expiry + Duration::from_millis(150));
                    let _ = kill(pid, Signal::SIGCONT);
                    report.stalls += 1;
                }
            }
            kind => {
                burst += 1;
                let what = if kind < 7 { "fill" } else { "crowd" };
                let _ = std::fs::write(dir.join(format!("{what}-{node}-{burst}")), b"");
            }
        }
    }
    std::fs::write(dir.join("stop"), b"")?;
    for (node, slot) in procs.0.iter_mut().enumerate() {
        if let Some(c) = slot.as_mut() {
            let status = c.wait()?;
            if !status.success() {
                report
                    .violations
                    .push(format!("node {node} exited with {status}"));
            }
            *slot = None;
        }
    }
    for entry in std::fs::read_dir(&dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with("done-fill") {
            report.fills += 1;
        } else if name.starts_with("done-crowd") {
            report.crowds += 1;
        } else if let Some(v) = name.strip_prefix("violation-") {
            report.violations.push(v.replace('_', " "));
        } else if name.starts_with("pressure-") {
            let text = std::fs::read_to_string(dir.join(&name))?;
            for line in text.lines() {
                let Some((what, n)) = line.split_once(' ') else {
                    continue;
                };
                let n: u64 = n.parse().unwrap_or(0);
                match what {
                    "migrations" => report.migrations += n,
                    "recoveries" => report.recoveries += n,
                    "reclaimed" => report.reclaimed += n,
                    "markers_resolved" => report.markers_resolved += n,
                    "waited_for_slots" => report.waited_for_slots += n,
                    _ => {}
                }
            }
        }
    }
    let history = read_logs(&dir)?;
    report.operations = history.len();
    report.unknown = history.unknown_outcomes();
    if let Err(e) = crate::linearizability::check(&history) {
        report.violations.push(e.to_string());
    }
    Ok(report)
}

/// The body of a chaos node process. Returns normally when told to stop;
/// exits the process with status 1 on an unexpected error.
///
/// # Panics
/// When started without the environment [`run`] sets (a caller bug).
pub fn child_main() {
    let node: usize = std::env::var(CHILD_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .expect(CHILD_ENV);
    let dir = PathBuf::from(std::env::var(DIR_ENV).expect(DIR_ENV));
    let plan = ChaosPlan::decode(&std::env::var(PLAN_ENV).expect(PLAN_ENV)).expect("plan");
    let config = chaos_config(&dir, plan.nodes);
    let n = match Node::start(config.clone(), node) {
        Ok(n) => n,
        Err(e) => fail(&dir, &format!("node {node} did not start: {e}")),
    };
    if node == 0 {
        preload_fillers(&n, &dir, &plan);
    }
    mark_started(&dir, node).expect("marker");
    let workers: Vec<_> = (0..plan.workers)
        .map(|w| {
            let mut client = n.client().expect("client");
            let dir = dir.clone();
            std::thread::spawn(move || worker(&mut client, &dir, node, w, plan))
        })
        .collect();
    let mut bursts = n.client().expect("client");
    let stop = dir.join("stop");
    let mut log = ProcLog::create(
        &dir.join(format!("hist-burst-{node}")),
        (1000 + node) as u64,
    )
    .expect("log");
    while !stop.exists() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let mine = |kind: &str| name.starts_with(&format!("{kind}-{node}-"));
            if mine("fill") || mine("crowd") {
                let _ = std::fs::remove_file(entry.path());
                let fill = mine("fill");
                if burst_until_full(&mut bursts, &mut log, &name, fill) {
                    let _ = std::fs::write(dir.join(format!("done-{name}")), b"");
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut stats = bursts.stats();
    for w in workers {
        match w.join() {
            Ok(s) => stats += s,
            Err(_) => fail(&dir, &format!("a worker of node {node} panicked")),
        }
    }
    let t = stats.total();
    let r = n.recycle_counts();
    let pressure = format!(
        "migrations {}\nrecoveries {}\nreclaimed {}\nmarkers_resolved {}\nwaited_for_slots {}\n",
        t.migrations,
        t.recoveries,
        r.reclaimed,
        r.markers_cleared + r.markers_restored,
        t.retries.no_free_slot,
    );
    let _ = std::fs::write(dir.join(format!("pressure-{node}")), pressure);
}

/// Node 0 PUTs the filler keys that keep the index crowded (logged, so the
/// audit's reads of them are checked too).
fn preload_fillers(n: &Node, dir: &Path, plan: &ChaosPlan) {
    let mut client = n.client().expect("client");
    let mut log = ProcLog::create(&dir.join("hist-fillers"), 999).expect("log");
    for key in fillers(plan) {
        let call = Call::put(key, b"filler".to_vec());
        loop {
            match logged_call(&mut client, &mut log, &call) {
                Ok(true) | Err(Error::IndexFull | Error::DataTableFull) => break,
                // Peers may still be attaching their clocks: try again.
                Ok(false) | Err(Error::ClockSkew { .. }) => {}
                Err(e) => fail(dir, &format!("preloading {call:?}: {e}")),
            }
        }
    }
}

fn fail(dir: &Path, what: &str) -> ! {
    let _ = std::fs::write(
        dir.join(format!("violation-{}", what.replace([' ', '/'], "_"))),
        b"",
    );
    eprintln!("chaos node: {what}");
    std::process::exit(1);
}

/// PUTs fresh keys until the wanted limit is hit, then deletes them (a
/// fill deletes each key right after its PUT, so that it exhausts data
/// slots, not index slots). Returns whether the limit (`DataTableFull` for a
/// fill, `IndexFull` for a crowd) was reached.
fn burst_until_full(client: &mut dyn KvClient, log: &mut ProcLog, name: &str, fill: bool) -> bool {
    let value = vec![0x5au8; if fill { 4000 } else { 16 }];
    let mut keys = Vec::new();
    let mut reached = false;
    for i in 0..4000 {
        let key = format!("{name}/{i}").into_bytes();
        match logged_call(client, log, &Call::put(key.clone(), value.clone())) {
            Ok(_) if fill => {
                if let Err(e) = logged_call(client, log, &Call::delete(key.clone())) {
                    if !matches!(e, Error::DataTableFull | Error::IndexFull) {
                        eprintln!("burst {name}: unexpected {e}");
                        std::process::exit(1);
                    }
                    keys.push(key);
                }
            }
            Ok(_) => keys.push(key),
            Err(Error::DataTableFull) if fill => {
                reached = true;
                break;
            }
            Err(Error::IndexFull) if !fill => {
                reached = true;
                break;
            }
            // The other limit may come first; both are typed, both end it.
            Err(Error::DataTableFull | Error::IndexFull) => break,
            Err(e) => {
                eprintln!("burst {name}: unexpected {e}");
                std::process::exit(1);
            }
        }
    }
    for key in keys {
        loop {
            match logged_call(client, log, &Call::delete(key.clone())) {
                Ok(true) | Err(Error::DataTableFull | Error::IndexFull) => break,
                Ok(false) => {}
                Err(e) => {
                    eprintln!("burst {name}: unexpected {e}");
                    std::process::exit(1);
                }
            }
        }
    }
    reached
}

fn worker(
    client: &mut dyn KvClient,
    dir: &Path,
    node: usize,
    w: usize,
    plan: ChaosPlan,
) -> nessie::Stats {
    let id = (node * plan.workers + w) as u64;
    let mut log = ProcLog::create(&dir.join(format!("hist-{id}")), id).expect("log");
    let mut rng = StdRng::seed_from_u64(plan.seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let stop = dir.join("stop");
    let mut n = 0usize;
    while !stop.exists() {
        n += 1;
        let key = format!("hot-{}", rng.gen_range(0..plan.keys)).into_bytes();
        let call = match rng.gen_range(0..10) {
            0..=3 => Call::put(key, format!("n{id}-{n}").into_bytes()),
            4 => Call::delete(key),
            _ => Call::get(key),
        };
        match logged_call(client, &mut log, &call) {
            Ok(_) | Err(Error::DataTableFull | Error::IndexFull) => {}
            Err(e) => fail(dir, &format!("node {node} worker {w}: {call:?}: {e}")),
        }
        std::thread::sleep(Duration::from_micros(300));
    }
    // Audit (node 0's first worker): once every dead owner is past its
    // deadline plus skew, each key must answer within two attempts.
    if node == 0 && w == 0 {
        let config = chaos_config(dir, plan.nodes);
        std::thread::sleep(config.op_timeout + config.max_clock_skew * 2);
        let hot = (0..plan.keys).map(|k| format!("hot-{k}").into_bytes());
        for key in hot.chain(fillers(&plan)) {
            let call = Call::get(key);
            let mut attempts = 0;
            loop {
                attempts += 1;
                match logged_call(client, &mut log, &call) {
                    Ok(true) => break,
                    Ok(false) if attempts < 2 => {}
                    other => fail(
                        dir,
                        &format!("{call:?} wedged: {other:?} after {attempts} attempts"),
                    ),
                }
            }
        }
    }
    client.stats()
}
