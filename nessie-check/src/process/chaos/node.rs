//! A chaos node process: a node of the cluster (or, with replicas, a
//! replacement that rejoins under a lost node's id), its logged workers,
//! the fill and crowd bursts the controller asks for, and the audit.

use super::{
    chaos_config, fillers, ChaosPlan, AUDIT_CLIENTS, BURST_CLIENTS, CHILD_ENV, DIR_ENV,
    FILLER_CLIENT, GENERATION_ENV, PLAN_ENV,
};
use crate::history::Call;
use crate::process::history::ProcLog;
use crate::process::replicated::barrier;
use crate::process::workload::mark_started;
use nessie::{Config, Error, KvClient, Node};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pause after a refused call or one of unknown outcome (with replicas).
const BACKOFF: Duration = Duration::from_millis(20);
/// How long the nodes wait for each other around the audit.
const BARRIER_LIMIT: Duration = Duration::from_secs(30);

/// What one process is.
#[derive(Debug, Clone)]
struct Me {
    node: usize,
    generation: u64,
    dir: PathBuf,
    plan: ChaosPlan,
    config: Config,
    /// Calls refused with `ViewChanging` or `NoQuorum`, by every client.
    refused: Arc<AtomicU64>,
}

impl Me {
    fn fail(&self, what: &str) -> ! {
        fail(&self.dir, what)
    }

    fn slot(&self) -> u64 {
        self.generation * self.plan.nodes as u64 + self.node as u64
    }
}

/// The body of a chaos node process. Returns normally when told to stop;
/// exits the process with status 1 on an unexpected error.
///
/// # Panics
/// When started without the environment [`run`] sets (a caller bug).
///
/// [`run`]: super::run
pub fn child_main() {
    let node: usize = std::env::var(CHILD_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .expect(CHILD_ENV);
    let dir = PathBuf::from(std::env::var(DIR_ENV).expect(DIR_ENV));
    let plan = ChaosPlan::decode(&std::env::var(PLAN_ENV).expect(PLAN_ENV)).expect("plan");
    let generation: u64 = std::env::var(GENERATION_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    record_panics(&dir, node, generation);
    let me = Me {
        node,
        generation,
        config: chaos_config(&dir, &plan),
        dir,
        plan,
        refused: Arc::new(AtomicU64::new(0)),
    };
    let n = if generation == 0 {
        let n = Node::start(me.config.clone(), node)
            .unwrap_or_else(|e| me.fail(&format!("node {node} did not start: {e}")));
        if node == 0 {
            preload_fillers(&n, &me);
        }
        mark_started(&me.dir, node).expect("marker");
        n
    } else {
        rejoin(&me)
    };
    let workers: Vec<_> = (0..plan.workers)
        .map(|w| {
            let mut client = n.client().expect("client");
            let me = me.clone();
            std::thread::spawn(move || worker(&mut client, &me, w))
        })
        .collect();
    let mut stats = run_bursts(&n, &me);
    for w in workers {
        match w.join() {
            Ok(s) => stats += s,
            Err(_) => me.fail(&format!("a worker of node {node} panicked")),
        }
    }
    if plan.replicated_run() {
        audit_together(&n, &me);
    } else if node == 0 {
        audit(&n, &me);
    }
    let t = stats.total();
    let r = n.recycle_counts();
    let pressure = format!(
        "migrations {}\nrecoveries {}\nreclaimed {}\nmarkers_resolved {}\nwaited_for_slots {}\nrefused {}\n",
        t.migrations,
        t.recoveries,
        r.reclaimed,
        r.markers_cleared + r.markers_restored,
        t.retries.no_free_slot,
        me.refused.load(Ordering::Relaxed),
    );
    let _ = std::fs::write(
        me.dir.join(format!("pressure-{node}-{generation}")),
        pressure,
    );
}

/// A replacement: `Node::rejoin`, then the `rejoined-` file the controller
/// waits for (the call's ms, index slots, data slots, bytes restored).
fn rejoin(me: &Me) -> Node {
    let started = Instant::now();
    let n = Node::rejoin(me.config.clone(), me.node).unwrap_or_else(|e| {
        me.fail(&format!(
            "the replacement of node {} (generation {}) did not rejoin: {e}",
            me.node, me.generation
        ))
    });
    let f = n.restore_figures().unwrap_or_default();
    let text = format!(
        "{} {} {} {}\n",
        started.elapsed().as_millis(),
        f.index_slots,
        f.data_slots,
        f.bytes_read
    );
    // Written whole, then renamed: the controller must never read it half
    // written (it would see the rejoin without its figures).
    let name = format!("rejoined-{}-{}", me.node, me.generation);
    let partial = me.dir.join(format!(".{name}"));
    std::fs::write(&partial, text).expect("the rejoined marker");
    std::fs::rename(&partial, me.dir.join(name)).expect("the rejoined marker");
    n
}

/// Runs the fill and crowd bursts the controller asks `me` for (files
/// `fill-<node>-<n>`, `crowd-<node>-<n>`) until told to stop; returns the
/// burst client's stats. A burst in progress is marked `bursting-<node>`.
fn run_bursts(n: &Node, me: &Me) -> nessie::Stats {
    let mut bursts = n.client().expect("client");
    let stop = me.dir.join("stop");
    let path = me.dir.join(format!("hist-burst-{}", me.slot()));
    let mut log = ProcLog::create(&path, BURST_CLIENTS + me.slot()).expect("log");
    let busy = me.dir.join(format!("bursting-{}", me.node));
    while !stop.exists() {
        for entry in std::fs::read_dir(&me.dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let mine = |kind: &str| name.starts_with(&format!("{kind}-{}-", me.node));
            if mine("fill") || mine("crowd") {
                let _ = std::fs::write(&busy, b"");
                let _ = std::fs::remove_file(entry.path());
                let fill = mine("fill");
                if burst_until_full(&mut bursts, &mut log, me, &name, fill) {
                    let _ = std::fs::write(me.dir.join(format!("done-{name}")), b"");
                }
                let _ = std::fs::remove_file(&busy);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bursts.stats()
}

/// How a logged call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// It returned; the log has its result.
    Done,
    /// Refused with `ViewChanging` or `NoQuorum` (replicas only): nothing
    /// was done, and the log says so.
    Refused,
    /// `Timeout`, or with replicas a fabric error: its outcome is unknown.
    Unknown,
}

/// Runs and logs one call. A full table comes back as the error (and stays
/// an unknown outcome in the log: conservative, the checker need not know
/// that it changed nothing); so does any error this kind of cluster must
/// not return.
fn call(
    client: &mut dyn KvClient,
    log: &mut ProcLog,
    me: &Me,
    call: &Call,
) -> Result<Ended, Error> {
    let id = log.invoke(call).map_err(Error::Io)?;
    let replicated = me.plan.replicated_run();
    match call.apply(client) {
        Ok(ret) => {
            log.returned(id, &ret).map_err(Error::Io)?;
            Ok(Ended::Done)
        }
        Err(Error::Timeout) => Ok(Ended::Unknown),
        Err(Error::ViewChanging { .. } | Error::NoQuorum { .. }) if replicated => {
            log.refused(id).map_err(Error::Io)?;
            me.refused.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(BACKOFF);
            Ok(Ended::Refused)
        }
        Err(Error::Fabric(_)) if replicated => {
            std::thread::sleep(BACKOFF);
            Ok(Ended::Unknown)
        }
        Err(e) => Err(e),
    }
}

/// Node 0 PUTs the filler keys that keep the index crowded (logged, so the
/// audit's reads of them are checked too).
fn preload_fillers(n: &Node, me: &Me) {
    let mut client = n.client().expect("client");
    let mut log = ProcLog::create(&me.dir.join("hist-fillers"), FILLER_CLIENT).expect("log");
    for key in fillers(&me.plan) {
        let put = Call::put(key, b"filler".to_vec());
        loop {
            match call(&mut client, &mut log, me, &put) {
                Ok(Ended::Done) | Err(Error::IndexFull | Error::DataTableFull) => break,
                // Peers may still be attaching their clocks, or the first
                // lease may still be on its way: try again.
                Ok(Ended::Refused | Ended::Unknown) | Err(Error::ClockSkew { .. }) => {}
                Err(e) => me.fail(&format!("preloading {put:?}: {e}")),
            }
        }
    }
}

fn fail(dir: &Path, what: &str) -> ! {
    record_violation(dir, what);
    eprintln!("chaos node: {what}");
    std::process::exit(1);
}

/// Leaves a violation for the controller: a file `violation-<pid>-<n>`
/// holding `what`, written before the process goes on (or is killed).
fn record_violation(dir: &Path, what: &str) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!("violation-{}-{n}", std::process::id()));
    let _ = std::fs::write(path, what);
}

/// Makes a panic on any thread of this process a violation, also when
/// the thread's process is killed before anyone joins the thread.
fn record_panics(dir: &Path, node: usize, generation: u64) {
    let dir = dir.to_path_buf();
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        record_violation(
            &dir,
            &format!("node {node} (generation {generation}) panicked: {info}"),
        );
        default(info);
    }));
}

/// PUTs fresh keys until the wanted limit is hit, then deletes them (a
/// fill deletes each key right after its PUT, so that it exhausts data
/// slots, not index slots). Returns whether the limit (`DataTableFull` for a
/// fill, `IndexFull` for a crowd) was reached. A refused PUT is skipped; a
/// key whose PUT or DELETE may have taken effect is deleted at the end.
fn burst_until_full(
    client: &mut dyn KvClient,
    log: &mut ProcLog,
    me: &Me,
    name: &str,
    fill: bool,
) -> bool {
    let value = vec![0x5au8; if fill { 4000 } else { 16 }];
    let unexpected = |e: Error| -> ! { me.fail(&format!("burst {name}: unexpected {e}")) };
    let mut keys = Vec::new();
    let mut reached = false;
    for i in 0..4000 {
        let key = format!("{name}/{i}").into_bytes();
        match call(client, log, me, &Call::put(key.clone(), value.clone())) {
            Ok(Ended::Refused) => {}
            Ok(Ended::Done) if fill => match call(client, log, me, &Call::delete(key.clone())) {
                Ok(Ended::Done | Ended::Refused) => {}
                Ok(Ended::Unknown) | Err(Error::DataTableFull | Error::IndexFull) => {
                    keys.push(key);
                }
                Err(e) => unexpected(e),
            },
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
            Err(e) => unexpected(e),
        }
    }
    for key in keys {
        loop {
            match call(client, log, me, &Call::delete(key.clone())) {
                Ok(Ended::Done) | Err(Error::DataTableFull | Error::IndexFull) => break,
                Ok(Ended::Refused | Ended::Unknown) => {}
                Err(e) => unexpected(e),
            }
        }
    }
    reached
}

fn worker(client: &mut dyn KvClient, me: &Me, w: usize) -> nessie::Stats {
    let plan = &me.plan;
    let id = plan.worker_client(me.node, me.generation, w);
    let path = plan.worker_log(&me.dir, me.node, me.generation, w);
    let mut log = ProcLog::create(&path, id).expect("log");
    let mut rng = StdRng::seed_from_u64(plan.seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let stop = me.dir.join("stop");
    let mut n = 0usize;
    while !stop.exists() {
        n += 1;
        let key = format!("hot-{}", rng.gen_range(0..plan.keys)).into_bytes();
        let op = match rng.gen_range(0..10) {
            0..=3 => Call::put(key, format!("n{id}-{n}").into_bytes()),
            4 => Call::delete(key),
            _ => Call::get(key),
        };
        match call(client, &mut log, me, &op) {
            Ok(_) | Err(Error::DataTableFull | Error::IndexFull) => {}
            Err(e) => me.fail(&format!(
                "node {} (generation {}) worker {w}: {op:?}: {e}",
                me.node, me.generation
            )),
        }
        std::thread::sleep(Duration::from_micros(300));
    }
    client.stats()
}

/// With replicas: once every node's workers are done (the last rejoin
/// returned before the stop), each node reads every key through its own
/// client, and stays up until all have.
fn audit_together(n: &Node, me: &Me) {
    let nodes: Vec<usize> = (0..me.plan.nodes).collect();
    if !barrier(&me.dir, "workers-done", me.node, &nodes, BARRIER_LIMIT) {
        me.fail(&format!(
            "node {}: the others' workers did not finish",
            me.node
        ));
    }
    audit(n, me);
    if !barrier(&me.dir, "audited", me.node, &nodes, BARRIER_LIMIT) {
        me.fail(&format!(
            "node {}: the others did not finish their audit",
            me.node
        ));
    }
}

/// Reads every hot key and filler once every dead owner is past its
/// deadline plus skew: each must answer within two timed-out attempts, and
/// (with replicas) within two leases of refusals. Anything else is a wedge.
fn audit(n: &Node, me: &Me) {
    let mut client = n.client().expect("client");
    let path = me.dir.join(format!("hist-audit-{}", me.slot()));
    let mut log = ProcLog::create(&path, AUDIT_CLIENTS + me.slot()).expect("log");
    let config = &me.config;
    std::thread::sleep(config.op_timeout + config.max_clock_skew * 2);
    let refusals_until = config.effective_lease() * 3;
    let hot = (0..me.plan.keys).map(|k| format!("hot-{k}").into_bytes());
    for key in hot.chain(fillers(&me.plan)) {
        let get = Call::get(key);
        let began = Instant::now();
        let mut attempts = 0;
        loop {
            match call(&mut client, &mut log, me, &get) {
                Ok(Ended::Done) => break,
                Ok(Ended::Unknown) if attempts < 1 => attempts += 1,
                Ok(Ended::Refused) if began.elapsed() < refusals_until => {}
                other => me.fail(&format!(
                    "node {}: {get:?} wedged: {other:?} after {} timed-out attempts and {:?}",
                    me.node,
                    attempts + 1,
                    began.elapsed()
                )),
            }
        }
    }
}
