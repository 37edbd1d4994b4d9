//! A peer that dies, on a fabric between processes (`tcp`, `verbs`): three
//! node processes each write their share of the keys; node 2 is killed
//! with SIGKILL; the two survivors then GET and PUT every key. Every
//! operation returns: the ones that need node 2's memory with a typed
//! error within about `op_timeout`, the others with success. (A restarted
//! node cannot rejoin at r = 1: its share would be lost.) This is
//! r = 1; with r = 2 the survivors serve the dead node's share again from
//! its replicas ([`crate::process::replicated`],
//! `tests/processes/replicated_kill.rs`).
//!
//! A test supplies the configuration ([`Configure`]) and names the child test
//! that runs [`child`]; [`run`] is the parent.

use crate::process::workload::{
    finish_together, mark_started, node_vars, wait_until_started, ChildGuard, Configure, NodeVars,
};
use nessie::{KvClient, Node};
use std::time::{Duration, Instant};

/// Nodes of the scenario; the last one is killed.
pub const NODES: usize = 3;
/// Keys, written round-robin by the three nodes before the kill.
pub const KEYS: usize = 48;
const VARS: NodeVars = node_vars!("NESSIE_PEER_DEATH");

/// What one survivor saw after the kill.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Survivor {
    /// Operations that succeeded.
    pub ok: usize,
    /// Operations that failed (each with a typed error).
    pub failed: usize,
    /// The slowest failure, ms.
    pub slowest_failure_ms: f64,
    /// The slowest operation of all, ms.
    pub slowest_ms: f64,
    /// One message per distinct error.
    pub errors: Vec<String>,
}

impl Survivor {
    fn to_line(&self) -> String {
        format!(
            "{} {} {:.3} {:.3}\n{}",
            self.ok,
            self.failed,
            self.slowest_failure_ms,
            self.slowest_ms,
            self.errors.join("\n")
        )
    }

    fn parse(text: &str) -> Option<Survivor> {
        let mut lines = text.lines();
        let mut head = lines.next()?.split(' ');
        Some(Survivor {
            ok: head.next()?.parse().ok()?,
            failed: head.next()?.parse().ok()?,
            slowest_failure_ms: head.next()?.parse().ok()?,
            slowest_ms: head.next()?.parse().ok()?,
            errors: lines.map(str::to_owned).collect(),
        })
    }
}

fn key(k: usize) -> Vec<u8> {
    format!("peer-death-{k}").into_bytes()
}

fn value(k: usize, round: u8) -> Vec<u8> {
    vec![round ^ k as u8; 200]
}

/// The parent: starts the three node processes (each the child test
/// `child_name` of the calling test binary), kills node 2 once every node
/// has written its keys, and returns what the two survivors saw.
///
/// # Panics
/// If a process cannot be started, a survivor fails or hangs, or a
/// survivor's report is missing.
#[must_use]
pub fn run(child_name: &str, rendezvous: &str) -> Vec<Survivor> {
    let dir = tempfile::tempdir().expect("scratch directory").keep();
    let cluster = format!("peer-death-{}", std::process::id());
    let mut guard = ChildGuard::spawn_nodes(child_name, VARS, NODES, (&dir, &cluster, rendezvous));
    assert!(
        wait_until_started(&dir, NODES, Duration::from_secs(300)),
        "the nodes did not write their keys"
    );
    guard.children[NODES - 1].kill().expect("kill node 2");
    let _ = guard.children[NODES - 1].wait();
    std::fs::write(dir.join("killed"), b"").expect("signal the kill");
    let survivors: Vec<usize> = (0..NODES - 1).collect();
    guard.wait_for(&survivors, Instant::now() + Duration::from_secs(600));
    let mut reports = Vec::new();
    for node in survivors {
        let text = std::fs::read_to_string(dir.join(format!("survivor-{node}")))
            .expect("the survivor's report");
        reports.push(Survivor::parse(&text).expect("a well-formed report"));
    }
    reports
}

/// The body of a node process: returns at once unless spawned by [`run`].
///
/// # Panics
/// If the node cannot start or an operation before the kill fails.
pub fn child(configure: Configure) {
    let Some((node, dir)) = VARS.spawned() else {
        return;
    };
    let n =
        Node::start(VARS.config(configure), node).unwrap_or_else(|e| panic!("node {node}: {e}"));
    let mut client = n
        .client()
        .unwrap_or_else(|e| panic!("node {node}: a client: {e}"));
    for k in (node..KEYS).step_by(NODES) {
        client
            .put(&key(k), &value(k, 1))
            .unwrap_or_else(|e| panic!("node {node} before the kill: {e}"));
    }
    mark_started(&dir, node).expect("mark the keys written");
    if node == NODES - 1 {
        // Killed here.
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    while !dir.join("killed").exists() {
        std::thread::sleep(Duration::from_millis(10));
    }
    let survivor = after_the_kill(&mut client, node);
    std::fs::write(dir.join(format!("survivor-{node}")), survivor.to_line())
        .expect("write the report");
    // Keep this node's memory up until the other survivor is done.
    assert!(
        finish_together(&dir, node, NODES - 1, Duration::from_secs(300)),
        "the other survivor did not finish"
    );
}

fn after_the_kill(client: &mut impl KvClient, node: usize) -> Survivor {
    let mut s = Survivor::default();
    let mut buf = Vec::new();
    for k in 0..KEYS {
        for put in [false, true] {
            let started = Instant::now();
            let result = if put {
                client.put(&key(k), &value(k, 2 + node as u8))
            } else {
                client.get_into(&key(k), &mut buf).map(|_| ())
            };
            let ms = started.elapsed().as_secs_f64() * 1e3;
            s.slowest_ms = s.slowest_ms.max(ms);
            match result {
                Ok(()) => s.ok += 1,
                Err(e) => {
                    s.failed += 1;
                    s.slowest_failure_ms = s.slowest_failure_ms.max(ms);
                    let message = e.to_string();
                    if !s.errors.contains(&message) {
                        s.errors.push(message);
                    }
                }
            }
        }
    }
    s
}

/// Checks the survivors' reports: both kept serving keys that do not need
/// node 2, some operations needed it and failed, and no operation took
/// much longer than `op_timeout` (a hang detector, not a latency claim:
/// the slack covers a slow emulated CPU).
///
/// # Panics
/// If any of that does not hold.
pub fn check(survivors: &[Survivor], op_timeout: Duration, slack: Duration) {
    let bound = (op_timeout + slack).as_secs_f64() * 1e3;
    for (node, s) in survivors.iter().enumerate() {
        assert!(s.ok > 0, "survivor {node} served nothing: {s:?}");
        assert!(
            s.slowest_ms <= bound,
            "survivor {node}: an operation took {:.0} ms (bound {bound:.0} ms): {s:?}",
            s.slowest_ms
        );
    }
    assert!(
        survivors.iter().any(|s| s.failed > 0),
        "no operation needed the dead node: {survivors:?}"
    );
}
