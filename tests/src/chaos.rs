//! Chaos runs: a multi-process `shm` cluster under a mixed workload while a
//! controller injects faults, then a verdict.
//!
//! Faults, at random times:
//! * **kill** — SIGKILL a node process mid-operation (at most all but two);
//! * **stall** — SIGSTOP a node for longer than `expiry`, then SIGCONT;
//! * **fill** — a node PUTs large values under fresh keys until its data
//!   table reports [`Error::DataTableFull`], then deletes them;
//! * **crowd** — a node PUTs small values under fresh keys until the index
//!   reports [`Error::IndexFull`], then deletes them.
//!
//! Checked afterwards: every process that was not killed exited cleanly (an
//! unexpected error or a panic fails it: full tables must come back as typed
//! errors); the merged history of all processes, audit reads included, is
//! linearizable (killed and timed-out operations have unknown outcomes), so
//! every acknowledged PUT or DELETE is reflected; and after the last fault
//! every key answers within two attempts once dead owners are past
//! `op_timeout + 2·max_clock_skew` (no wedge).

use crate::history::Call;
use crate::proc_history::{read_logs, ProcLog};
use crate::proc_workload::logged_call;
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

/// The configuration every chaos node uses: short timeouts so faults
/// resolve quickly, a small index and small data tables so the fill and
/// crowd faults hit their limits.
#[must_use]
pub fn chaos_config(dir: &Path, nodes: usize) -> Config {
    Config {
        cluster: format!("chaos-{}", xxhash_name(dir)),
        nodes,
        index_slots_per_node: 256,
        value_size_max: 4096,
        data_bytes_per_node: 4 << 20,
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
    /// Data-table fills that reached `DataTableFull`.
    pub fills: usize,
    /// Index crowdings that reached `IndexFull`.
    pub crowds: usize,
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
            "chaos: {} operations ({} unknown), {} faults injected ({} kills, {} stalls > expiry, {} data-table fills, {} index crowdings), {} violations",
            self.operations,
            self.unknown,
            self.faults(),
            self.kills,
            self.stalls,
            self.fills,
            self.crowds,
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
    let started = |n: usize| dir.join(format!("started-{n}")).exists();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !(0..plan.nodes).all(started) {
        if Instant::now() > deadline {
            return Err(std::io::Error::other("chaos nodes did not start"));
        }
        std::thread::sleep(Duration::from_millis(20));
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
        match rng.gen_range(0..10) {
            0 if alive.len() > 2 && node != 0 => {
                if let Some(mut c) = procs.0[node].take() {
                    let _ = c.kill();
                    let _ = c.wait();
                    report.kills += 1;
                }
            }
            0..=3 => {
                let pid = Pid::from_raw(procs.0[node].as_ref().map_or(0, |c| c.id() as i32));
                if kill(pid, Signal::SIGSTOP).is_ok() {
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
        }
    }
    let history = read_logs(&dir)?;
    report.operations = history.len();
    report.unknown = history
        .ops()
        .iter()
        .filter(|o| o.responded().is_none())
        .count();
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
    std::fs::write(dir.join(format!("started-{node}")), b"").expect("marker");
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
    for w in workers {
        if w.join().is_err() {
            fail(&dir, &format!("a worker of node {node} panicked"));
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

/// PUTs fresh keys until the wanted limit is hit, then deletes them.
/// Returns whether the limit (DataTableFull for a fill, IndexFull for a
/// crowd) was reached.
fn burst_until_full(client: &mut dyn KvClient, log: &mut ProcLog, name: &str, fill: bool) -> bool {
    let value = vec![0x5au8; if fill { 4000 } else { 16 }];
    let mut keys = Vec::new();
    let mut reached = false;
    for i in 0..4000 {
        let key = format!("{name}/{i}").into_bytes();
        match logged_call(client, log, &Call::put(key.clone(), value.clone())) {
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

fn worker(client: &mut dyn KvClient, dir: &Path, node: usize, w: usize, plan: ChaosPlan) {
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
        for k in 0..plan.keys {
            let call = Call::get(format!("hot-{k}").into_bytes());
            let mut attempts = 0;
            loop {
                attempts += 1;
                match logged_call(client, &mut log, &call) {
                    Ok(true) => break,
                    Ok(false) if attempts < 2 => {}
                    other => fail(
                        dir,
                        &format!("key hot-{k} wedged: {other:?} after {attempts} attempts"),
                    ),
                }
            }
        }
    }
}
