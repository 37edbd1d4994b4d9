//! The workload every multi-process linearizability test runs in its node
//! processes (`shm`, `tcp` across network namespaces, `verbs` in a VM):
//! worker threads issuing a random mix on shared keys and logging every
//! call with [`ProcLog`], so the parent can merge and check the histories.

use crate::history::Call;
use crate::process::history::ProcLog;
use crate::process::stress::{stress_key, unique_value};
use nessie::{Config, Error, KvClient, Node};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Shape of one node process's work.
#[derive(Debug, Clone, Copy)]
pub struct NodeWork {
    /// This node.
    pub node: usize,
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Worker threads.
    pub threads: usize,
    /// Operations per thread at most.
    pub ops_per_thread: usize,
    /// Keys shared by every node.
    pub keys: usize,
    /// Largest value, bytes.
    pub max_value: usize,
    /// Pause between a thread's operations (zero: none).
    pub pause: Duration,
    /// Mixed into every thread's seed.
    pub salt: u64,
}

/// The client id of `thread` on `node` (unique across the cluster).
#[must_use]
pub fn client_id(node: usize, threads: usize, thread: usize) -> u64 {
    (node * threads + thread) as u64
}

/// The full name of test `name` of the module at `module_path` (pass
/// `module_path!()`), as the test harness knows it: the module path without
/// the test binary's own crate name. A test in a module of a test binary
/// that folds several files names its child test with it.
#[must_use]
pub fn test_name(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_owned(),
    }
}

/// The arguments that make a test binary run only its ignored test `name`,
/// with output shown: how a test starts its node processes (each one the
/// test binary itself, running a child test).
#[must_use]
pub fn child_test_args(name: &str) -> [&str; 5] {
    [
        "--exact",
        name,
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]
}

/// This test binary, set to run only its ignored test `name` (see
/// [`child_test_args`]).
///
/// # Panics
/// If the running executable cannot be found.
#[must_use]
pub fn child_test(name: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("the test binary"));
    cmd.args(child_test_args(name));
    cmd
}

/// In a node process a test spawned: its node id (from the variable
/// `node_var`) and the run's shared directory (from `dir_var`). `None` when
/// the test binary runs the child's test on its own, which then does
/// nothing.
///
/// # Panics
/// If the variables are set but malformed (the parent sets both).
#[must_use]
pub fn spawned_node(node_var: &str, dir_var: &str) -> Option<(usize, PathBuf)> {
    let node = std::env::var(node_var).ok()?;
    let node = node
        .parse()
        .unwrap_or_else(|_| panic!("{node_var} is not a node id: {node:?}"));
    let dir = std::env::var(dir_var).unwrap_or_else(|_| panic!("{dir_var} is not set"));
    Some((node, PathBuf::from(dir)))
}

/// Marks node `node` of the processes sharing `dir` as started.
///
/// # Errors
/// I/O errors.
pub fn mark_started(dir: &Path, node: usize) -> std::io::Result<()> {
    std::fs::write(dir.join(format!("started-{node}")), b"")
}

/// Waits until nodes `0..nodes` have all marked themselves started;
/// returns `false` if `timeout` passed first.
#[must_use]
pub fn wait_until_started(dir: &Path, nodes: usize, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while !(0..nodes).all(|n| dir.join(format!("started-{n}")).exists()) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Runs and logs one call. `Ok(true)`: it returned; `Ok(false)`: it timed
/// out (an unknown outcome in the log). A failed call also stays unknown in
/// the log (conservative: full tables change nothing, but the checker need
/// not know).
///
/// # Errors
/// The store's error other than a timeout, or a log write.
pub fn logged_call(
    client: &mut dyn KvClient,
    log: &mut ProcLog,
    call: &Call,
) -> Result<bool, Error> {
    let id = log.invoke(call).map_err(Error::Io)?;
    match call.apply(client) {
        Ok(ret) => {
            log.returned(id, &ret).map_err(Error::Io)?;
            Ok(true)
        }
        Err(Error::Timeout) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Runs `work` on `node`'s clients, logging into `dir/hist-<client>`,
/// until each thread did its operations or `dir/stop` appears.
///
/// # Panics
/// On an unexpected store error (the test fails through the process's
/// exit status).
pub fn run_node_workers(node: &Node, dir: &Path, work: NodeWork) {
    let threads: Vec<_> = (0..work.threads)
        .map(|t| {
            let mut client = node.client().expect("client");
            let dir = dir.to_path_buf();
            std::thread::spawn(move || {
                let id = client_id(work.node, work.threads, t);
                let mut log = ProcLog::create(&dir.join(format!("hist-{id}")), id).expect("log");
                let mut rng = StdRng::seed_from_u64(id ^ work.salt);
                let stop = dir.join("stop");
                for i in 0..work.ops_per_thread {
                    if stop.exists() {
                        break;
                    }
                    let key = stress_key(rng.gen_range(0..work.keys));
                    let call = match rng.gen_range(0..10) {
                        0..=3 => {
                            Call::put(key, unique_value(id, i, rng.gen_range(0..=work.max_value)))
                        }
                        4 => Call::delete(key),
                        _ => Call::get(key),
                    };
                    match logged_call(&mut client, &mut log, &call) {
                        Ok(_) | Err(Error::DataTableFull | Error::IndexFull) => {}
                        Err(e) => panic!("node {} client {id}: {call:?}: {e}", work.node),
                    }
                    if !work.pause.is_zero() {
                        std::thread::sleep(work.pause);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a worker panicked");
    }
}

/// Marks this node done, then keeps it (and its memory) up until every
/// node is done or `timeout` passes. Returns whether all finished.
pub fn finish_together(dir: &Path, node: usize, nodes: usize, timeout: Duration) -> bool {
    let done = |n: usize| -> PathBuf { dir.join(format!("done-{n}")) };
    let _ = std::fs::write(done(node), b"");
    let deadline = Instant::now() + timeout;
    while !(0..nodes).all(|n| done(n).exists()) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Node processes of a test and their scratch directory: killed, reaped and
/// removed when dropped, also when the test fails half-way.
#[derive(Debug)]
pub struct ChildGuard {
    /// The node processes, in node order.
    pub children: Vec<std::process::Child>,
    /// The directory removed on drop.
    pub dir: PathBuf,
}

impl ChildGuard {
    /// A guard for processes yet to be pushed, owning `dir`.
    #[must_use]
    pub fn new(dir: PathBuf) -> ChildGuard {
        ChildGuard {
            children: Vec::new(),
            dir,
        }
    }
}

/// Builds a scenario's cluster configuration from its name and rendezvous
/// address (the same in every process of a run).
pub type Configure = fn(cluster: &str, rendezvous: &str) -> Config;

/// The [`NodeVars`] of a scenario whose variables start with `$prefix`
/// (`<prefix>_NODE`, `_DIR`, `_CLUSTER`, `_RENDEZVOUS`).
macro_rules! node_vars {
    ($prefix:literal) => {
        $crate::process::workload::NodeVars {
            node: concat!($prefix, "_NODE"),
            dir: concat!($prefix, "_DIR"),
            cluster: concat!($prefix, "_CLUSTER"),
            rendezvous: concat!($prefix, "_RENDEZVOUS"),
        }
    };
}
pub(crate) use node_vars;

/// The names of the variables a scenario's node processes read: their node
/// id, the scratch directory, the cluster name and the rendezvous address.
#[derive(Debug, Clone, Copy)]
pub struct NodeVars {
    /// The node id's variable.
    pub node: &'static str,
    /// The scratch directory's variable.
    pub dir: &'static str,
    /// The cluster name's variable.
    pub cluster: &'static str,
    /// The rendezvous address's variable.
    pub rendezvous: &'static str,
}

impl NodeVars {
    /// In a node process a scenario spawned: its node id and the run's
    /// shared directory ([`spawned_node`]).
    ///
    /// # Panics
    /// As [`spawned_node`].
    #[must_use]
    pub fn spawned(&self) -> Option<(usize, PathBuf)> {
        spawned_node(self.node, self.dir)
    }

    /// In a node process: starts node `node` of `nodes` with the run's
    /// configuration, marks it started in `dir` and waits until every node
    /// has.
    ///
    /// # Panics
    /// If the node cannot start, or another does not within `within`.
    #[must_use]
    pub fn start_together(
        &self,
        configure: Configure,
        (node, nodes): (usize, usize),
        dir: &Path,
        within: Duration,
    ) -> Node {
        let n = Node::start(self.config(configure), node)
            .unwrap_or_else(|e| panic!("node {node}: {e}"));
        mark_started(dir, node).expect("mark the node started");
        assert!(
            wait_until_started(dir, nodes, within),
            "node {node}: the other nodes did not start"
        );
        n
    }

    /// In a node process: the run's configuration, from `configure` and
    /// the cluster name and rendezvous address the parent passed.
    #[must_use]
    pub fn config(&self, configure: Configure) -> Config {
        let var = |name| std::env::var(name).unwrap_or_default();
        configure(&var(self.cluster), &var(self.rendezvous))
    }
}

impl ChildGuard {
    /// Waits until each process of `nodes` (indices into `children`) has
    /// ended successfully.
    ///
    /// # Panics
    /// If one fails, or is still running at `deadline`.
    pub fn wait_for(&mut self, nodes: &[usize], deadline: Instant) {
        for &node in nodes {
            let child = &mut self.children[node];
            loop {
                if let Some(status) = child.try_wait().expect("wait for a node process") {
                    assert!(status.success(), "process {node} failed: {status}");
                    break;
                }
                assert!(Instant::now() < deadline, "process {node} hangs");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Spawns `nodes` processes of the child test `child_name`, node `i`
    /// told its id, `dir`, `cluster` and `rendezvous` through `vars`;
    /// the guard owns `dir`.
    ///
    /// # Panics
    /// If a process cannot be spawned.
    #[must_use]
    pub fn spawn_nodes(
        child_name: &str,
        vars: NodeVars,
        nodes: usize,
        (dir, cluster, rendezvous): (&Path, &str, &str),
    ) -> ChildGuard {
        let mut guard = ChildGuard::new(dir.to_path_buf());
        for node in 0..nodes {
            guard.children.push(
                child_test(child_name)
                    .env(vars.node, node.to_string())
                    .env(vars.dir, dir)
                    .env(vars.cluster, cluster)
                    .env(vars.rendezvous, rendezvous)
                    .spawn()
                    .expect("spawn a node process"),
            );
        }
        guard
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
