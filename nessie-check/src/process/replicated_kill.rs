//! A replicated cluster (r = 2) of three node processes on a fabric between
//! processes (`tcp`, `verbs`) runs concurrent logged workers on shared
//! keys; node 2 is killed with SIGKILL in the middle of an operation while
//! they run. The survivors suspect it, agree on a view without it and
//! drain; meanwhile their calls are refused (`ViewChanging`, `NoQuorum`:
//! nothing done) or end with an unknown outcome (`Timeout`, a fabric
//! error). They go on until each worker has done its operations after the
//! kill, then each survivor reads every key. The merged history, those
//! reads included, must be linearizable: every key holds its latest
//! acknowledged value or one of the unknown-outcome writes after it.
//!
//! A test supplies the configuration ([`Configure`]), the [`Pace`] of the
//! run, and names the child test that runs [`child`]; [`run`] is the
//! parent and returns a [`Report`] of what the survivors saw, whose
//! [`Report::check`] asserts what holds on every fabric (counts only).
//!
//! With [`Pace::rejoin_within`], a replacement process then takes node 2's
//! id ([`Node::rejoin`]): it restores its copies while the survivors wait,
//! and then every node, the replacement too, reads every key, those reads
//! in the history as well. With [`Pace::second_loss`] as well, node 1 is
//! then killed: node 0 and the replacement agree on a view without it and
//! read every key again (two losses one after another, the first restored
//! before the second).
//!
//! (r = 1, where the dead node's share is gone and its keys fail with typed
//! errors, is [`crate::process::peer_death`].)

use crate::process::history::{now_ns, read_logs, stop_mid_operation};
use crate::process::replicated::{
    audit, audit_into, barrier, run_fault_workers, serving_gap, FaultWork, Tally,
};
use crate::process::workload::{
    child_test, client_id, node_vars, wait_until_started, ChildGuard, Configure, NodeVars,
};
use nessie::{Config, Node};
use nix::unistd::Pid;
use std::path::Path;
use std::time::{Duration, Instant};

/// Nodes of the scenario.
pub const NODES: usize = 3;
/// The node killed.
pub const KILLED: usize = 2;
/// The nodes that stay.
pub const SURVIVORS: [usize; 2] = [0, 1];
/// Keys shared by every worker.
pub const KEYS: usize = 12;
/// Worker threads per node.
pub const THREADS: usize = 2;
/// Client ids of the survivors' audits are this plus the node id.
const AUDIT_CLIENT: u64 = 1000;
/// Client ids of every node's audit after a rejoin: this plus the node id.
const REJOIN_AUDIT_CLIENT: u64 = 2000;
/// The node killed second, after the rejoin ([`Pace::second_loss`]).
pub const KILLED_SECOND: usize = 1;
/// The nodes that stay after the second loss.
pub const SECOND_SURVIVORS: [usize; 2] = [0, KILLED];
/// Client ids of the audit after the second loss: this plus the node id.
const SECOND_AUDIT_CLIENT: u64 = 3000;
/// Set (to anything) for the replacement's process.
const REPLACEMENT_ENV: &str = "NESSIE_REPLICATED_KILL_REPLACEMENT";
const VARS: NodeVars = node_vars!("NESSIE_REPLICATED_KILL");

/// How long the steps of a run may take and how much work they do: a
/// fabric under an emulated CPU needs more time than one on the host's.
/// Every bound here is a hang detector, not a claim about latency.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// Successful operations each survivor's worker does after the kill.
    pub after_kill: usize,
    /// How long the workers run before the kill.
    pub warm_up: Duration,
    /// How long the nodes may take to start.
    pub start_within: Duration,
    /// How long the survivors may take to finish once node 2 is killed.
    pub survivors_within: Duration,
    /// A worker not done after this long gives up (and the run fails).
    pub worker_limit: Duration,
    /// How long a survivor retries its read of one key in the audit.
    pub audit_limit: Duration,
    /// With `Some`, a replacement of node 2 rejoins once the survivors
    /// have read every key, within this long, and then every node reads
    /// every key; with `None`, the run ends with the survivors' reads.
    pub rejoin_within: Option<Duration>,
    /// With a rejoin: once every node has read every key, node
    /// [`KILLED_SECOND`] is killed, and node 0 and the replacement read
    /// every key again within `rejoin_within`.
    pub second_loss: bool,
}

/// What a run saw, from the survivors' tallies and the merged history.
#[derive(Clone, Debug)]
pub struct Report {
    /// Each survivor's tally (in the order of [`SURVIVORS`]).
    pub tallies: Vec<Tally>,
    /// Operations in the merged history (the audits' reads included).
    pub operations: usize,
    /// Of those, the ones whose outcome is unknown.
    pub unknown: usize,
    /// The survivors' audit reads that returned.
    pub audited: usize,
    /// Whether node 2 was stopped (then killed) inside an operation.
    pub caught: bool,
    /// When node 2 was killed (wall-clock ns since the Unix epoch), to
    /// compare with the times the nodes log.
    pub killed_at_ns: u64,
    /// From the kill to the first call refused with `ViewChanging` (a view
    /// without node 2 decided and learnt), ms; `None` if none was refused.
    pub to_view_change_ms: Option<f64>,
    /// The longest stretch without a successful survivor call after the
    /// kill: its start and end, ms after the kill.
    pub gap_ms: (f64, f64),
    /// How long the linearizability check took, s.
    pub check_s: f64,
    /// The whole run, s.
    pub total_s: f64,
    /// How long the replacement's `Node::rejoin` took, ms (`None`: no
    /// rejoin in this run).
    pub rejoin_ms: Option<f64>,
    /// After the second loss: from the kill of node [`KILLED_SECOND`] to
    /// the first key read back, and to the last, ms (`None`: no second
    /// loss in this run).
    pub second_served_ms: Option<(f64, f64)>,
}

fn ms_between(from_ns: u64, to_ns: u64) -> f64 {
    to_ns.saturating_sub(from_ns) as f64 / 1e6
}

impl Report {
    /// The report as lines of text, each starting with `tag`.
    #[must_use]
    pub fn lines(&self, tag: &str) -> Vec<String> {
        let mut out: Vec<String> = SURVIVORS
            .iter()
            .zip(&self.tallies)
            .map(|(node, t)| {
                format!(
                    "{tag} survivor {node}: {} ok ({} after the kill), refused {} ViewChanging + {} NoQuorum, {} unknown, {} full, slowest call {:.1} ms; errors: {:?}",
                    t.ok, t.ok_after_marker, t.view_changing, t.no_quorum, t.unknown, t.full, t.slowest_ms, t.errors
                )
            })
            .collect();
        let detected = self
            .to_view_change_ms
            .map_or_else(|| "none".to_owned(), |ms| format!("{ms:.0} ms"));
        if let Some(ms) = self.rejoin_ms {
            out.push(format!(
                "{tag}: a replacement of node 2 rejoined in {ms:.0} ms; then every node read every key"
            ));
        }
        if let Some((first, last)) = self.second_served_ms {
            out.push(format!(
                "{tag}: then node {KILLED_SECOND} was killed; node 0 and the replacement read their first key {first:.0} ms after, every key {last:.0} ms after"
            ));
        }
        out.push(format!(
            "{tag}: node 2 killed at {:.3} s (Unix time); first ViewChanging after the kill {detected}; longest time without a successful operation {:.0} ms (kill + {:.0} ms to kill + {:.0} ms); {} operations, {} of unknown outcome, {} keys audited, linearizable (checked in {:.1} s); node 2 caught mid-operation: {}; {:.1} s in all",
            self.killed_at_ns as f64 / 1e9,
            self.gap_ms.1 - self.gap_ms.0,
            self.gap_ms.0,
            self.gap_ms.1,
            self.operations,
            self.unknown,
            self.audited,
            self.check_s,
            self.caught,
            self.total_s
        ));
        out
    }

    /// Asserts what every fabric must show, by counts: no survivor's
    /// worker gave up, each did its `pace.after_kill` operations after the
    /// kill, some call met the view change, and every key was read back by
    /// both survivors (the history's linearizability is checked by
    /// [`run`]).
    ///
    /// # Panics
    /// If any of that does not hold.
    pub fn check(&self, pace: &Pace) {
        assert!(
            self.tallies.iter().all(|t| t.gave_up == 0),
            "a survivor's worker gave up: {:?}",
            self.tallies
        );
        assert!(
            self.tallies
                .iter()
                .all(|t| t.ok_after_marker >= THREADS * pace.after_kill),
            "a survivor did not finish its work after the kill: {:?}",
            self.tallies
        );
        assert!(
            self.tallies.iter().any(|t| t.view_changing > 0),
            "no call met the view change: {:?}",
            self.tallies
        );
        let after_rejoin = if pace.rejoin_within.is_some() {
            NODES * KEYS
        } else {
            0
        };
        let after_second = if self.second_served_ms.is_some() {
            SECOND_SURVIVORS.len() * KEYS
        } else {
            0
        };
        assert_eq!(
            self.audited,
            SURVIVORS.len() * KEYS + after_rejoin + after_second,
            "the survivors' reads of every key (and every node's after the rejoin, and the last two's after the second loss)"
        );
        assert_eq!(self.rejoin_ms.is_some(), pace.rejoin_within.is_some());
        assert_eq!(
            self.second_served_ms.is_some(),
            pace.second_loss && pace.rejoin_within.is_some()
        );
    }
}

/// The parent: starts the three node processes (each the child test
/// `child_name` of the calling test binary), kills node 2 inside an
/// operation once the workers have run for `pace.warm_up`, waits for the
/// survivors, and checks the merged history for linearizability.
///
/// # Panics
/// If a process cannot be started, the nodes do not start, a survivor
/// fails or hangs, a tally is missing, or the history is not linearizable.
#[must_use]
pub fn run(child_name: &str, configure: Configure, rendezvous: &str, pace: &Pace) -> Report {
    let began = Instant::now();
    let cluster = format!("replicated-kill-{}", std::process::id());
    configure(&cluster, rendezvous)
        .validate()
        .expect("a valid configuration");
    let dir = tempfile::tempdir().expect("scratch directory").keep();
    let mut guard = ChildGuard::spawn_nodes(child_name, VARS, NODES, (&dir, &cluster, rendezvous));
    assert!(
        wait_until_started(&dir, NODES, pace.start_within),
        "the nodes did not start"
    );
    std::thread::sleep(pace.warm_up);
    // Kill node 2 inside an operation (see linearizable_processes.rs).
    let pid = Pid::from_raw(guard.children[KILLED].id() as i32);
    let logs: Vec<_> = (0..THREADS)
        .map(|t| dir.join(format!("hist-{}", client_id(KILLED, THREADS, t))))
        .collect();
    let caught = stop_mid_operation(pid, &logs, 200, Duration::from_millis(2)).unwrap();
    let killed_at = now_ns();
    guard.children[KILLED].kill().unwrap();
    let _ = guard.children[KILLED].wait();
    std::fs::write(dir.join("killed"), b"").unwrap();
    let mut deadline = Instant::now() + pace.survivors_within;
    let mut waited: Vec<usize> = SURVIVORS.to_vec();
    if let Some(within) = pace.rejoin_within {
        // Once both survivors have read every key, a replacement rejoins.
        let audited = |n: usize| dir.join(format!("audited-{n}")).exists();
        while !SURVIVORS.iter().all(|&n| audited(n)) {
            for &n in &SURVIVORS {
                if let Some(status) = guard.children[n].try_wait().unwrap() {
                    panic!("survivor {n} ended before the rejoin: {status}");
                }
            }
            assert!(
                Instant::now() < deadline,
                "the survivors did not read every key"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        guard.children.push(
            child_test(child_name)
                .env(VARS.node, KILLED.to_string())
                .env(REPLACEMENT_ENV, "1")
                .env(VARS.dir, &dir)
                .env(VARS.cluster, &cluster)
                .env(VARS.rendezvous, rendezvous)
                .spawn()
                .expect("spawn the replacement's process"),
        );
        waited.push(NODES);
        deadline = Instant::now() + within;
    }
    let second_killed_at = (pace.second_loss && pace.rejoin_within.is_some())
        .then(|| lose_another(&mut guard, &dir, &mut waited, deadline));
    guard.wait_for(&waited, deadline);
    let tallies: Vec<Tally> = SURVIVORS
        .iter()
        .map(|&n| Tally::read(&dir, n).expect("a survivor's tally"))
        .collect();
    let history = read_logs(&dir).unwrap();
    let audited = history
        .ops()
        .iter()
        .filter(|op| op.client >= AUDIT_CLIENT && op.responded().is_some())
        .count();
    let checked = Instant::now();
    crate::linearizability::check(&history).unwrap_or_else(|e| panic!("{e}"));
    let check_s = checked.elapsed().as_secs_f64();
    let clients: Vec<u64> = SURVIVORS
        .iter()
        .flat_map(|&n| (0..THREADS).map(move |t| client_id(n, THREADS, t)))
        .collect();
    let (from, to) = serving_gap(&history, &clients, killed_at).expect("served after the kill");
    let first_refusal = tallies
        .iter()
        .map(|t| t.first_view_changing_ns)
        .filter(|&t| t > 0)
        .min();
    let rejoin_ms = pace.rejoin_within.map(|_| {
        std::fs::read_to_string(dir.join("rejoin-ms"))
            .ok()
            .and_then(|ms| ms.trim().parse().ok())
            .expect("the replacement's rejoin time")
    });
    let second_served_ms = second_killed_at.map(|at| second_reads(&history, at));
    Report {
        rejoin_ms,
        second_served_ms,
        operations: history.len(),
        unknown: history.unknown_outcomes(),
        audited,
        caught,
        killed_at_ns: killed_at,
        to_view_change_ms: first_refusal.map(|t| ms_between(killed_at, t)),
        gap_ms: (ms_between(killed_at, from), ms_between(killed_at, to)),
        check_s,
        total_s: began.elapsed().as_secs_f64(),
        tallies,
    }
}

/// Once every node has read every key after the rejoin, kills node
/// [`KILLED_SECOND`] (node 0 and the replacement must then serve every key
/// alone) and drops it from `waited`; returns when it was killed.
fn lose_another(
    guard: &mut ChildGuard,
    dir: &std::path::Path,
    waited: &mut Vec<usize>,
    deadline: Instant,
) -> u64 {
    let all_audited = || (0..NODES).all(|n| dir.join(format!("rejoin-audited-{n}")).exists());
    while !all_audited() {
        for &n in waited.iter() {
            if let Some(status) = guard.children[n].try_wait().unwrap() {
                panic!("process {n} ended before the second loss: {status}");
            }
        }
        assert!(Instant::now() < deadline, "the rejoin's reads did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
    let at = now_ns();
    guard.children[KILLED_SECOND].kill().unwrap();
    let _ = guard.children[KILLED_SECOND].wait();
    std::fs::write(dir.join("second-killed"), b"").unwrap();
    waited.retain(|&n| n != KILLED_SECOND);
    at
}

/// From the second kill (`at`, wall-clock ns) to the first and the last
/// read of the audit after it, ms.
fn second_reads(history: &crate::history::History, at: u64) -> (f64, f64) {
    let reads: Vec<u64> = history
        .ops()
        .iter()
        .filter(|op| op.client >= SECOND_AUDIT_CLIENT)
        .filter_map(crate::history::Operation::responded)
        .collect();
    let first = reads.iter().min().expect("a read after the second loss");
    let last = reads.iter().max().expect("a read after the second loss");
    (ms_between(at, *first), ms_between(at, *last))
}

/// The body of a node process: returns at once unless spawned by [`run`].
/// Node 2 works until it is killed; the survivors work until each worker
/// has done `pace.after_kill` operations after the kill, then each reads
/// every key.
///
/// # Panics
/// If the node cannot start, a call returns an error a replicated store
/// must not return, or the other survivor does not keep up.
pub fn child(configure: Configure, pace: &Pace) {
    let Some((node, dir)) = VARS.spawned() else {
        return;
    };
    if std::env::var_os(REPLACEMENT_ENV).is_some() {
        replacement(VARS.config(configure), &dir, pace);
        return;
    }
    let n = VARS.start_together(configure, (node, NODES), &dir, pace.start_within);
    let work = FaultWork {
        node,
        threads: THREADS,
        keys: KEYS,
        max_value: 2000,
        // Node 2 works without pauses, so that the kill finds it mid-call.
        pause: if node == KILLED {
            Duration::ZERO
        } else {
            Duration::from_millis(2)
        },
        backoff: Duration::from_millis(50),
        salt: 0x6b69_6c6c,
        marker: "killed",
        after_marker: if node == KILLED {
            usize::MAX
        } else {
            pace.after_kill
        },
        limit: pace.worker_limit,
    };
    run_fault_workers(&n, &dir, work);
    if node == KILLED {
        // Killed before it gets here.
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    let timeout = pace.worker_limit;
    assert!(
        barrier(&dir, "workers-done", node, &SURVIVORS, timeout),
        "the other survivor's workers did not finish"
    );
    audit(
        &n,
        &dir,
        node,
        KEYS,
        AUDIT_CLIENT + node as u64,
        pace.audit_limit,
    );
    // Keep this node's memory up until the other survivor has read too.
    assert!(
        barrier(&dir, "audited", node, &SURVIVORS, timeout),
        "the other survivor did not finish its reads"
    );
    if let Some(within) = pace.rejoin_within {
        after_rejoin(&n, &dir, node, pace, within);
    }
}

/// After the rejoin, with [`Pace::second_loss`]: node [`KILLED_SECOND`]
/// waits to be killed; the others wait for the kill, read every key, and
/// keep their memory up until the other has read too.
fn after_second_loss(n: &Node, dir: &std::path::Path, node: usize, pace: &Pace, within: Duration) {
    if node == KILLED_SECOND {
        // Killed while it waits here.
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    let killed = dir.join("second-killed");
    let deadline = Instant::now() + within;
    while !killed.exists() {
        assert!(
            Instant::now() < deadline,
            "node {node}: no second loss came"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let client = (format!("hist-second-audit-{node}"), SECOND_AUDIT_CLIENT);
    audit_together(
        n,
        dir,
        node,
        client,
        ("second-audited", &SECOND_SURVIVORS),
        pace,
    );
}

/// Reads every key as client `client.1` plus `node` into the log
/// `client.0`, then keeps this node's memory up until every node of
/// `nodes` has done the same (step `step`).
fn audit_together(
    n: &Node,
    dir: &Path,
    node: usize,
    client: (String, u64),
    (step, nodes): (&str, &[usize]),
    pace: &Pace,
) {
    audit_into(
        n,
        dir,
        &client.0,
        (node, KEYS),
        client.1 + node as u64,
        pace.audit_limit,
    );
    let within = pace.rejoin_within.unwrap_or(pace.worker_limit);
    assert!(
        barrier(dir, step, node, nodes, within),
        "node {node}: a node of {nodes:?} did not read every key ({step})"
    );
}

/// Every node once the replacement has rejoined: reads every key, then
/// keeps its memory up until every other node has read too.
fn after_rejoin(n: &Node, dir: &std::path::Path, node: usize, pace: &Pace, within: Duration) {
    let all: Vec<usize> = (0..NODES).collect();
    assert!(
        barrier(dir, "rejoined", node, &all, within),
        "node {node}: the replacement did not rejoin"
    );
    let client = (format!("hist-rejoin-audit-{node}"), REJOIN_AUDIT_CLIENT);
    audit_together(n, dir, node, client, ("rejoin-audited", &all), pace);
    if pace.second_loss {
        after_second_loss(n, dir, node, pace, within);
    }
}

/// The replacement's process: rejoins as node 2, then as every node.
fn replacement(config: Config, dir: &std::path::Path, pace: &Pace) {
    let within = pace
        .rejoin_within
        .expect("a replacement runs only to rejoin");
    let started = Instant::now();
    let n = Node::rejoin(config, KILLED).unwrap_or_else(|e| panic!("the replacement: {e}"));
    let ms = started.elapsed().as_secs_f64() * 1e3;
    std::fs::write(dir.join("rejoin-ms"), format!("{ms:.0}")).unwrap();
    if let Some(f) = n.restore_figures() {
        println!("REJOIN-FIGURES {f:?}");
    }
    after_rejoin(&n, dir, KILLED, pace, within);
}
