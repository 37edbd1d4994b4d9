//! Three replicas on five node processes (`tcp`, `verbs`): every node
//! writes its share of the keys, then nodes 1 and 2 are killed together
//! with SIGKILL, their memory gone with them. They are neighbours, so share
//! 1 (on nodes 1, 2 and 3) keeps only its last copy; every share keeps one
//! and three of five members are a majority, so the survivors agree on a
//! view without both and must read every key's last written value back
//! (docs/replication.md#what-it-guarantees).
//!
//! A test supplies the configuration ([`Configure`]: it must set `replicas:
//! `[`REPLICAS`] and `nodes: `[`NODES`]) and names the child
//! test that runs [`child`]; [`run`] is the parent and returns a
//! [`Report`] of when the survivors were served again.

use crate::process::replicated::barrier;
use crate::process::workload::{node_vars, ChildGuard, Configure, NodeVars};
use nessie::Error;
use nix::unistd::Pid;
use std::path::Path;
use std::time::{Duration, Instant};

/// Nodes of the scenario.
pub const NODES: usize = 5;
/// Replicas of every entry and index slot.
pub const REPLICAS: usize = 3;
/// The nodes killed together.
pub const KILLED: [usize; 2] = [1, 2];
/// The nodes that stay.
pub const SURVIVORS: [usize; 3] = [0, 3, 4];
/// Keys written, node `k % NODES` writing key `k`.
pub const KEYS: usize = 60;
const VARS: NodeVars = node_vars!("NESSIE_DOUBLE_LOSS");

/// How long the steps may take: hang detectors, not latency claims.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// How long the nodes may take to start, and to write their keys.
    pub start_within: Duration,
    /// How long the survivors may take to read every key after the kill.
    pub serve_within: Duration,
}

/// What a run saw.
#[derive(Clone, Debug)]
pub struct Report {
    /// For each survivor (in the order of [`SURVIVORS`]): ms from the kill
    /// to its first key read back and to its last.
    pub served_ms: Vec<(f64, f64)>,
    /// The survivors' calls refused while the view changed
    /// (`ViewChanging`, `NoQuorum`) or of unknown outcome, in all.
    pub refused: u64,
}

impl Report {
    /// The report as lines of text, each starting with `tag`.
    #[must_use]
    pub fn lines(&self, tag: &str) -> Vec<String> {
        let mut out: Vec<String> = SURVIVORS
            .iter()
            .zip(&self.served_ms)
            .map(|(node, (first, last))| {
                format!("{tag} survivor {node}: first key read back {first:.0} ms after the kill, all {KEYS} by {last:.0} ms")
            })
            .collect();
        out.push(format!(
            "{tag}: nodes {KILLED:?} killed together; {} calls refused or of unknown outcome meanwhile; every key's last value read back by every survivor",
            self.refused
        ));
        out
    }
}

/// The value node processes write to key `k` (and the survivors expect).
fn value(k: usize) -> Vec<u8> {
    vec![(k % 251) as u8; 17 + (k * 97) % 3000]
}

fn key(k: usize) -> Vec<u8> {
    format!("double-loss-{k}").into_bytes()
}

/// The parent: starts the five node processes (each the child test
/// `child_name` of the calling test binary), kills nodes 1 and 2 once every
/// node has written its keys, and waits for the survivors' reads.
///
/// # Panics
/// If a process cannot be started or fails, or a step overruns its pace.
#[must_use]
pub fn run(child_name: &str, configure: Configure, rendezvous: &str, pace: &Pace) -> Report {
    let cluster = format!("double-loss-{}", std::process::id());
    configure(&cluster, rendezvous)
        .validate()
        .expect("a valid configuration");
    let dir = tempfile::tempdir().expect("scratch directory").keep();
    let mut guard = ChildGuard::spawn_nodes(child_name, VARS, NODES, (&dir, &cluster, rendezvous));
    let deadline = Instant::now() + pace.start_within;
    while !(0..NODES).all(|n| dir.join(format!("written-{n}")).exists()) {
        for (n, child) in guard.children.iter_mut().enumerate() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("node {n} ended before the kill: {status}");
            }
        }
        assert!(
            Instant::now() < deadline,
            "the nodes did not write their keys"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let killed_at = crate::process::history::now_ns();
    for n in KILLED {
        nix::sys::signal::kill(
            Pid::from_raw(guard.children[n].id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
    }
    for n in KILLED {
        let _ = guard.children[n].wait();
    }
    std::fs::write(dir.join("killed"), killed_at.to_string()).unwrap();
    guard.wait_for(&SURVIVORS, Instant::now() + pace.serve_within);
    let mut refused = 0;
    let served_ms = SURVIVORS
        .iter()
        .map(|n| {
            let text = std::fs::read_to_string(dir.join(format!("figures-{n}")))
                .expect("a survivor's figures");
            let mut words = text.split_whitespace();
            let mut next = || -> f64 { words.next().and_then(|w| w.parse().ok()).unwrap() };
            let (first, last) = (next(), next());
            refused += next() as u64;
            (first, last)
        })
        .collect();
    Report { served_ms, refused }
}

/// The body of a node process: returns at once unless spawned by [`run`].
/// Every node writes its share of the keys; the killed ones then wait to
/// be killed; the survivors read every key back.
///
/// # Panics
/// If the node cannot start, a write fails, a survivor reads a wrong value
/// or an error a replicated store must not return, or a step overruns.
pub fn child(configure: Configure, pace: &Pace) {
    let Some((node, dir)) = VARS.spawned() else {
        return;
    };
    let n = VARS.start_together(configure, (node, NODES), &dir, pace.start_within);
    let mut client = n.client().expect("client");
    for k in (node..KEYS).step_by(NODES) {
        client
            .put(&key(k), &value(k))
            .unwrap_or_else(|e| panic!("node {node}: put of key {k}: {e}"));
    }
    let all: Vec<usize> = (0..NODES).collect();
    assert!(
        barrier(&dir, "written", node, &all, pace.start_within),
        "node {node}: another node did not write its keys"
    );
    if KILLED.contains(&node) {
        // Killed while it waits here, its memory with it.
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    let killed_at = wait_for_kill(&dir, node, pace.serve_within);
    let (mut first, mut refused) = (None, 0u64);
    let deadline = Instant::now() + pace.serve_within;
    for k in 0..KEYS {
        loop {
            match client.get(&key(k)) {
                Ok(got) => {
                    assert_eq!(got, Some(value(k)), "node {node}: key {k}");
                    first.get_or_insert_with(crate::process::history::now_ns);
                    break;
                }
                Err(
                    Error::ViewChanging { .. }
                    | Error::NoQuorum { .. }
                    | Error::Timeout
                    | Error::Fabric(_),
                ) => {
                    refused += 1;
                    assert!(Instant::now() < deadline, "node {node}: key {k} not served");
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("node {node}: get of key {k}: {e}"),
            }
        }
    }
    let last = crate::process::history::now_ns();
    let ms = |t: u64| t.saturating_sub(killed_at) as f64 / 1e6;
    std::fs::write(
        dir.join(format!("figures-{node}")),
        format!("{:.1} {:.1} {refused}", ms(first.unwrap_or(last)), ms(last)),
    )
    .unwrap();
    // Keep this node's memory up until every survivor has read.
    assert!(
        barrier(&dir, "served", node, &SURVIVORS, pace.serve_within),
        "node {node}: another survivor did not read every key"
    );
}

/// Waits until the parent has killed nodes 1 and 2; returns when (ns).
fn wait_for_kill(dir: &Path, node: usize, within: Duration) -> u64 {
    let deadline = Instant::now() + within;
    loop {
        if let Some(at) = std::fs::read_to_string(dir.join("killed"))
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return at;
        }
        assert!(Instant::now() < deadline, "node {node}: no kill came");
        std::thread::sleep(Duration::from_millis(10));
    }
}
