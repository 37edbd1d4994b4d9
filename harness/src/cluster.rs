//! Runs one benchmark on a real multi-process cluster.
//!
//! The harness re-executes its own binary once per node
//! (`nessie-bench node --config … --spec … --node-id i`), each child in its
//! own process group so that a Ctrl-C at the terminal reaches only the
//! harness, which then tears everything down itself. Children talk JSON
//! lines on stdout ([`NodeEvent`]) and take one-word commands on stdin:
//!
//! ```text
//! child → {"event":"ready"}          harness waits for every node
//! harness → preload                  each node PUTs its share of the keys
//! child → {"event":"preloaded",…}
//! harness → run                      warm-up, then the measured phase
//! child → {"event":"progress",…}     every 250 ms
//! child → {"event":"report",…}       one line with all its measurements
//! harness → exit                     nodes stay up until all have reported,
//!                                    since peers still read their memory
//! ```
//!
//! A child that exits early, reports an error or misses a phase deadline
//! fails the run with its stderr tail; [`ClusterGuard`] then kills every
//! child, hog and peer server and removes the cluster's `/dev/shm` files.
//! Children also die with the harness (`PR_SET_PDEATHSIG`) and exit when
//! their stdin closes.

use crate::error::{HarnessError, Result};
use crate::measure::{self, Merged, NodeReport, PowerFigures, PreloadReport, RunFigures};
use crate::peers::PeerServer;
use crate::spec::{Load, RunSpec};
use crate::system::System;
use nix::sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// A line a node process prints on stdout.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum NodeEvent {
    /// The node is up and attached to its peers.
    Ready {
        /// Node id.
        node: usize,
    },
    /// The node wrote its share of the keys.
    Preloaded {
        /// Node id.
        node: usize,
        /// How it went.
        preload: PreloadReport,
    },
    /// Operations completed so far in the run phase (warm-up included).
    Progress {
        /// Node id.
        node: usize,
        /// Operations.
        ops: u64,
    },
    /// The node's measurements.
    Report {
        /// Everything it measured.
        report: Box<NodeReport>,
    },
    /// The node failed.
    Error {
        /// Node id.
        node: usize,
        /// Why.
        message: String,
    },
}

/// A command the harness sends a node process on stdin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeCommand {
    /// Write your share of the keys.
    Preload,
    /// Run the warm-up and measured phase.
    Run,
    /// Drop the node and exit.
    Exit,
}

impl NodeCommand {
    /// The word on the wire.
    #[must_use]
    pub fn word(self) -> &'static str {
        match self {
            NodeCommand::Preload => "preload",
            NodeCommand::Run => "run",
            NodeCommand::Exit => "exit",
        }
    }

    /// Parses a word.
    #[must_use]
    pub fn parse(word: &str) -> Option<Self> {
        match word.trim() {
            "preload" => Some(NodeCommand::Preload),
            "run" => Some(NodeCommand::Run),
            "exit" => Some(NodeCommand::Exit),
            _ => None,
        }
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static CLUSTERS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_signal(_: nix::libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Makes SIGINT and SIGTERM set a flag that every wait loop of the harness
/// checks, so a run is torn down cleanly. A second signal (the handler
/// resets itself) terminates at once; the children die with the harness
/// through their parent-death signal.
pub fn install_signal_handlers() {
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESETHAND,
        SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe, and replaces no handler anyone relies on.
        let _ = unsafe { signal::sigaction(sig, &action) };
    }
}

/// Whether the user asked the harness to stop.
#[must_use]
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Ties a child to the harness: its own process group (so terminal signals
/// reach only the harness, which tears the run down itself) and SIGKILL
/// when the harness dies, set before `exec` so that it also holds for
/// programs that are not ours (peer servers) and leaves no window.
pub fn tie_to_harness(cmd: &mut Command) {
    cmd.process_group(0);
    // SAFETY: the closure runs in the forked child before `exec` and only
    // calls prctl(2), which is async-signal-safe; it allocates nothing and
    // takes no lock.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
}

/// Makes this process die when its parent does, and exits at once if the
/// parent is already gone (node processes and hogs started by hand).
pub fn die_with_parent() {
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    if nix::unistd::getppid() == nix::unistd::Pid::from_raw(1) {
        std::process::exit(3);
    }
}

/// The last `max` bytes of a file, for error messages.
#[must_use]
pub fn tail(path: &Path, max: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let start = text.len().saturating_sub(max);
    let s = String::from_utf8_lossy(&text[start..]).trim().to_owned();
    if s.is_empty() {
        "(no output on stderr)".to_owned()
    } else {
        s
    }
}

/// Removes `/dev/shm` entries of clusters of harness processes that no
/// longer exist (left behind if a harness was killed with SIGKILL).
pub fn sweep_stale_shm() {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // Exactly `nessie-bench-<pid>-<n>`, the names `run` gives clusters.
        let Some(rest) = name.strip_prefix("nessie-bench-") else {
            continue;
        };
        let parts: Vec<&str> = rest.split('-').collect();
        let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if parts.len() != 2 || !parts.iter().all(|p| numeric(p)) {
            continue;
        }
        if !Path::new(&format!("/proc/{}", parts[0])).exists() {
            remove_path(&entry.path());
        }
    }
}

fn remove_path(p: &Path) {
    let _ = if p.is_dir() {
        std::fs::remove_dir_all(p)
    } else {
        std::fs::remove_file(p)
    };
}

/// Removes every `/dev/shm` entry that belongs to cluster `name`.
fn remove_cluster_shm(name: &str, dir: &Path) {
    remove_path(dir);
    if let Ok(entries) = std::fs::read_dir("/dev/shm") {
        for e in entries.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.contains(name)
                && n[n.find(name).unwrap_or(0) + name.len()..]
                    .chars()
                    .next()
                    .is_none_or(|c| !c.is_ascii_digit())
            {
                remove_path(&e.path());
            }
        }
    }
}

/// CPU seconds (user + system) a process has used so far, from
/// `/proc/<pid>/stat`.
#[must_use]
pub fn process_cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&h| h > 0)
        .unwrap_or(100);
    Some(ticks / hz as f64)
}

/// Owns every process and file of one run; dropping it kills what still
/// runs and removes the cluster's shared-memory files.
#[derive(Debug, Default)]
pub struct ClusterGuard {
    nodes: Vec<Child>,
    hogs: Vec<Child>,
    peer: Option<PeerServer>,
    shm: Option<(String, PathBuf)>,
}

impl ClusterGuard {
    fn kill_all(&mut self) {
        for c in self.nodes.iter_mut().chain(self.hogs.iter_mut()) {
            let _ = c.kill();
        }
        for c in self.nodes.iter_mut().chain(self.hogs.iter_mut()) {
            let _ = c.wait();
        }
        self.nodes.clear();
        self.hogs.clear();
        self.peer = None;
    }
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        self.kill_all();
        if let Some((name, dir)) = &self.shm {
            remove_cluster_shm(name, dir);
        }
    }
}

/// Starts `n` background CPU hogs: unpinned busy processes (this binary's
/// `hog` subcommand) that exit when their stdin closes.
fn start_hogs(exe: &Path, n: usize, guard: &mut ClusterGuard) -> Result<()> {
    for _ in 0..n {
        let mut cmd = Command::new(exe);
        cmd.arg("hog")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        tie_to_harness(&mut cmd);
        guard.hogs.push(
            cmd.spawn()
                .map_err(HarnessError::io("starting a CPU hog", exe))?,
        );
    }
    Ok(())
}

/// What the caller sees of a run in progress.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Phase: "start", "preload", "run" or "stop".
    pub phase: &'static str,
    /// Time into the run phase.
    pub run_elapsed: Duration,
    /// Operations completed so far, all nodes.
    pub ops: u64,
}

/// The outcome of one completed run.
#[derive(Debug)]
pub struct RunOutput {
    /// The run's figures.
    pub figures: RunFigures,
    /// Merged histograms (for distribution plots).
    pub merged: Merged,
    /// The nodes' raw reports.
    pub reports: Vec<NodeReport>,
}

enum Msg {
    Line(usize, String),
    Closed(usize),
}

struct Running {
    spec: RunSpec,
    guard: ClusterGuard,
    stdins: Vec<Option<ChildStdin>>,
    events: Receiver<Msg>,
    logs: Vec<PathBuf>,
    closed: Vec<bool>,
    progress_ops: Vec<u64>,
}

impl Running {
    fn send(&mut self, cmd: NodeCommand) -> Result<()> {
        for (node, stdin) in self.stdins.iter_mut().enumerate() {
            if let Some(s) = stdin {
                if writeln!(s, "{}", cmd.word())
                    .and_then(|()| s.flush())
                    .is_err()
                {
                    return Err(self.failure(node, "its stdin closed (it exited)".into()));
                }
            }
        }
        Ok(())
    }

    fn failure(&mut self, node: usize, what: String) -> HarnessError {
        let status = self
            .guard
            .nodes
            .get_mut(node)
            .and_then(|c| {
                // Give a dying child a moment so its exit status is known.
                for _ in 0..20 {
                    if let Ok(Some(s)) = c.try_wait() {
                        return Some(s);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                None
            })
            .map_or_else(String::new, |s| format!(" ({s})"));
        HarnessError::NodeFailed {
            node,
            why: format!(
                "{what}{status}; stderr ({}): {}",
                self.logs[node].display(),
                tail(&self.logs[node], 1200)
            ),
        }
    }

    /// Waits until `done` returns true, feeding it every event; fails on a
    /// node that closes, reports an error, or on the deadline.
    fn wait<F>(&mut self, phase: &'static str, timeout: Duration, mut on_event: F) -> Result<()>
    where
        F: FnMut(&mut Self, NodeEvent) -> Result<bool>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            if interrupted() {
                return Err(HarnessError::Interrupted);
            }
            match self.events.recv_timeout(Duration::from_millis(50)) {
                Ok(Msg::Line(node, line)) => {
                    let event: NodeEvent = serde_json::from_str(&line).map_err(|e| {
                        HarnessError::Protocol(format!("node {node} printed {line:?}: {e}"))
                    })?;
                    if let NodeEvent::Error { node, message } = event {
                        return Err(self.failure(node, format!("reported: {message}")));
                    }
                    if on_event(self, event)? {
                        return Ok(());
                    }
                }
                Ok(Msg::Closed(node)) => {
                    self.closed[node] = true;
                    return Err(self.failure(node, format!("exited during {phase}")));
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(HarnessError::Protocol("all node pipes closed".into()));
                }
            }
            if Instant::now() > deadline {
                return Err(HarnessError::NodeFailed {
                    node: self.closed.iter().position(|c| !c).unwrap_or(0),
                    why: format!("the cluster did not finish {phase} within {timeout:?}"),
                });
            }
        }
    }
}

fn power_figures(o: power_ipmi::Outcome, ops: u64) -> PowerFigures {
    let mut f = PowerFigures {
        sampler: o.sampler,
        ..PowerFigures::default()
    };
    match o.measurement {
        power_ipmi::Measurement::Measured(report) => {
            f.joules = report.joules();
            f.watts = f.joules.map(|j| j / report.elapsed_s().max(1e-9));
            f.joules_per_op = report.per_operation(ops).and_then(|p| p.joules);
            if let power_ipmi::EnergyReport::Ipmi(ipmi) = &report {
                f.watts = Some(ipmi.mean_watts);
                f.above_idle_watts = ipmi.above_idle_watts;
            }
        }
        power_ipmi::Measurement::Unavailable(why) => f.unavailable = Some(why),
    }
    f
}

/// Starts node process `node` with its stderr in `log`; a thread forwards
/// its stdout lines to `events`.
fn spawn_node(
    exe: &Path,
    node: usize,
    config: &Path,
    spec: &Path,
    log: &Path,
    events: mpsc::Sender<Msg>,
) -> Result<Child> {
    let log_file = std::fs::File::create(log).map_err(HarnessError::io("creating", log))?;
    let mut cmd = Command::new(exe);
    cmd.arg("node")
        .arg("--config")
        .arg(config)
        .arg("--spec")
        .arg(spec)
        .arg("--node-id")
        .arg(node.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log_file);
    tie_to_harness(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(HarnessError::io("starting a node process", exe))?;
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                match line {
                    Ok(l) if l.trim().is_empty() => {}
                    Ok(l) => {
                        if events.send(Msg::Line(node, l)).is_err() {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = events.send(Msg::Closed(node));
        });
    }
    Ok(child)
}

/// Runs `spec` on a fresh cluster of node processes of this binary (`exe`),
/// keeping its files in `run_dir`, and reports progress to `progress`.
///
/// # Errors
/// [`HarnessError::NotAvailable`] for a system this build or machine lacks;
/// [`HarnessError::NodeFailed`] when a node exits, errs or hangs;
/// [`HarnessError::Interrupted`] on Ctrl-C. Everything is torn down either way.
pub fn run(
    exe: &Path,
    spec: &RunSpec,
    run_dir: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<RunOutput> {
    spec.validate()?;
    spec.system.check_available()?;
    std::fs::create_dir_all(run_dir).map_err(HarnessError::io("creating", run_dir))?;
    let n = CLUSTERS.fetch_add(1, Ordering::Relaxed);
    let cluster = format!("bench-{}-{n}", std::process::id());
    let config = spec.config(&cluster)?;
    let mut guard = ClusterGuard::default();
    let mut spec = spec.clone();
    if spec.system.uses_shm() {
        let dir = config.shm_dir();
        remove_cluster_shm(&cluster, &dir);
        guard.shm = Some((cluster.clone(), dir));
    }
    if matches!(spec.system, System::Redis | System::Memcached) {
        let bytes = spec.workload.keys * (spec.workload.value_size + spec.workload.key_size) as u64;
        let server = PeerServer::start(
            spec.system,
            spec.nodes,
            bytes * 2,
            &run_dir.join("peer.log"),
        )?;
        spec.peer = Some(server.target.clone());
        guard.peer = Some(server);
    }
    let config_path = run_dir.join("config.toml");
    let spec_path = run_dir.join("spec.json");
    std::fs::write(&config_path, config.to_toml()?)
        .map_err(HarnessError::io("writing", &config_path))?;
    std::fs::write(&spec_path, serde_json::to_vec_pretty(&spec)?)
        .map_err(HarnessError::io("writing", &spec_path))?;

    let (tx, rx) = mpsc::channel();
    let mut stdins = Vec::new();
    let mut logs = Vec::new();
    for node in 0..spec.nodes {
        let log = run_dir.join(format!("node-{node}.stderr"));
        let mut child = spawn_node(exe, node, &config_path, &spec_path, &log, tx.clone())?;
        stdins.push(child.stdin.take());
        guard.nodes.push(child);
        logs.push(log);
    }
    drop(tx);
    let mut r = Running {
        closed: vec![false; spec.nodes],
        progress_ops: vec![0; spec.nodes],
        spec,
        guard,
        stdins,
        events: rx,
        logs,
    };
    let nodes = r.spec.nodes;

    progress(Progress {
        phase: "start",
        run_elapsed: Duration::ZERO,
        ops: 0,
    });
    let mut ready = 0;
    let attach = config.attach_timeout + Duration::from_secs(15);
    r.wait("start-up", attach, |_, e| {
        if let NodeEvent::Ready { .. } = e {
            ready += 1;
        }
        Ok(ready == nodes)
    })?;

    progress(Progress {
        phase: "preload",
        run_elapsed: Duration::ZERO,
        ops: 0,
    });
    r.send(NodeCommand::Preload)?;
    let mut preloaded = 0;
    r.wait("the preload", Duration::from_secs(600), |_, e| {
        if let NodeEvent::Preloaded { .. } = e {
            preloaded += 1;
        }
        Ok(preloaded == nodes)
    })?;

    let mut meters = r.spec.measure_power.then(|| {
        power_ipmi::MeterSet::new()
            .with(power_ipmi::RaplSampler::system())
            .with(power_ipmi::IpmiSampler::new(power_ipmi::IpmiConfig::local()))
    });
    let external: Vec<u32> = r
        .guard
        .peer
        .as_ref()
        .map(PeerServer::pid)
        .into_iter()
        .collect();
    let external_cpu = || {
        external
            .iter()
            .filter_map(|&p| process_cpu_secs(p))
            .sum::<f64>()
    };
    // Hogs compete with the measured phase only, not with start-up and
    // preload (which they would merely slow down).
    start_hogs(exe, r.spec.hogs, &mut r.guard)?;
    r.send(NodeCommand::Run)?;
    let started = Instant::now();
    let warmup = Duration::from_millis(r.spec.warmup_ms);
    let mut cpu_at_warm: Option<f64> = None;
    let mut reports: Vec<Option<NodeReport>> = (0..nodes).map(|_| None).collect();
    let deadline = r.spec.run_time() + Duration::from_secs(60);
    r.wait("the run", deadline, |r, e| {
        if cpu_at_warm.is_none() && started.elapsed() >= warmup {
            cpu_at_warm = Some(external_cpu());
            if let Some(m) = meters.as_mut() {
                m.start();
            }
        }
        match e {
            NodeEvent::Progress { node, ops } => {
                if let Some(p) = r.progress_ops.get_mut(node) {
                    *p = ops;
                }
                progress(Progress {
                    phase: "run",
                    run_elapsed: started.elapsed(),
                    ops: r.progress_ops.iter().sum(),
                });
            }
            NodeEvent::Report { report } => {
                let node = report.node;
                let slot = reports.get_mut(node).ok_or_else(|| {
                    HarnessError::Protocol(format!("report from unknown node {node}"))
                })?;
                *slot = Some(*report);
            }
            _ => {}
        }
        Ok(reports.iter().all(Option::is_some))
    })?;
    let cpu_external = external_cpu() - cpu_at_warm.unwrap_or(0.0);
    let power = meters
        .as_mut()
        .map(power_ipmi::MeterSet::stop)
        .unwrap_or_default();
    progress(Progress {
        phase: "stop",
        run_elapsed: started.elapsed(),
        ops: r.progress_ops.iter().sum(),
    });

    // Orderly shutdown: every node drops its regions and exits 0.
    r.send(NodeCommand::Exit)?;
    let deadline = Instant::now() + Duration::from_secs(15);
    for node in 0..nodes {
        loop {
            let child = &mut r.guard.nodes[node];
            match child.try_wait() {
                Ok(Some(status)) if status.success() => break,
                Ok(Some(status)) => {
                    return Err(r.failure(node, format!("exited with {status} at shutdown")));
                }
                _ if Instant::now() > deadline => {
                    return Err(r.failure(node, "did not exit within 15 s of `exit`".into()));
                }
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
    drop(r.guard);

    let reports: Vec<NodeReport> = reports.into_iter().flatten().collect();
    let offered = match r.spec.load {
        Load::Closed => 0.0,
        Load::Open { ops_per_sec } => ops_per_sec,
    };
    let (mut figures, merged) = measure::summarize(
        &reports,
        r.spec.workload.value_size,
        offered,
        cpu_external.max(0.0),
    )?;
    figures.power = power
        .into_iter()
        .map(|o| power_figures(o, figures.all.ok))
        .collect();
    Ok(RunOutput {
        figures,
        merged,
        reports,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip() {
        for c in [NodeCommand::Preload, NodeCommand::Run, NodeCommand::Exit] {
            assert_eq!(NodeCommand::parse(c.word()), Some(c));
        }
        assert_eq!(NodeCommand::parse("bogus"), None);
    }

    #[test]
    fn own_cpu_time_is_readable() {
        // Spin until the kernel has accounted some CPU time to this process
        // (ticks of 10 ms; on a loaded host 30 ms of wall time may bring
        // none); a reader that always says 0 fails after 10 s.
        let spin = Instant::now();
        let cpu = loop {
            let cpu = process_cpu_secs(std::process::id()).unwrap();
            if cpu > 0.0 {
                break cpu;
            }
            assert!(
                spin.elapsed() < Duration::from_secs(10),
                "no CPU time accounted"
            );
            let busy = Instant::now();
            while busy.elapsed() < Duration::from_millis(5) {}
        };
        assert!(cpu.is_finite());
    }

    #[test]
    fn stale_clusters_of_dead_harnesses_are_swept() {
        // No process has a pid above pid_max (at most 2^22).
        let dead = Path::new("/dev/shm/nessie-bench-99999999-7");
        let other = Path::new("/dev/shm/nessie-bench-sd-99999999");
        std::fs::create_dir_all(dead).unwrap();
        std::fs::create_dir_all(other).unwrap();
        sweep_stale_shm();
        let (dead_left, other_left) = (dead.exists(), other.exists());
        let _ = std::fs::remove_dir_all(other);
        assert!(!dead_left, "a dead harness's cluster is removed");
        assert!(other_left, "names the harness does not make are left alone");
    }

    #[test]
    fn events_are_json_lines() {
        let line = serde_json::to_string(&NodeEvent::Progress { node: 2, ops: 7 }).unwrap();
        assert_eq!(line, r#"{"event":"progress","node":2,"ops":7}"#);
    }
}
