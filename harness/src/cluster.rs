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
//! child, hog and peer server (each a [`ChildGuard`]) and removes the
//! cluster's `/dev/shm` files. Children also die with the harness
//! (`PR_SET_PDEATHSIG`) and exit when their stdin closes. The protocol's
//! messages are in [`crate::protocol`].

use crate::error::{HarnessError, Result};
use crate::measure::{self, Merged, NodeReport, PowerFigures, RunFigures};
use crate::peers::PeerServer;
use crate::proc::{failed, interrupted, process_cpu_secs, ChildGuard, Line, Talking};
use crate::protocol::{NodeCommand, NodeEvent};
use crate::spec::{Load, RunSpec};
use nessie::Config;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

static CLUSTERS: AtomicU64 = AtomicU64::new(0);

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

/// Owns every process and file of one run; dropping it kills what still
/// runs and removes the cluster's shared-memory files.
#[derive(Debug, Default)]
pub struct ClusterGuard {
    nodes: Vec<ChildGuard>,
    hogs: Vec<ChildGuard>,
    peer: Option<PeerServer>,
    shm: Option<(String, PathBuf)>,
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        // Processes first: the files go only once nobody maps them.
        self.nodes.clear();
        self.hogs.clear();
        self.peer = None;
        if let Some((name, dir)) = &self.shm {
            remove_cluster_shm(name, dir);
        }
    }
}

/// Starts `n` background CPU hogs: unpinned busy processes (this binary's
/// `hog` subcommand) that exit when their stdin closes.
fn start_hogs(exe: &Path, n: usize, guard: &mut ClusterGuard) -> Result<()> {
    for _ in 0..n {
        let mut cmd = ChildGuard::command(exe);
        cmd.arg("hog")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        guard
            .hogs
            .push(ChildGuard::spawn(&mut cmd, "starting a CPU hog")?);
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

struct Running<'p> {
    spec: RunSpec,
    guard: ClusterGuard,
    events: Receiver<Line>,
    logs: Vec<PathBuf>,
    closed: Vec<bool>,
    progress_ops: Vec<u64>,
    progress: &'p mut dyn FnMut(Progress),
}

impl Running<'_> {
    fn send(&mut self, cmd: NodeCommand) -> Result<()> {
        for node in 0..self.guard.nodes.len() {
            if let Some(s) = self.guard.nodes[node].stdin() {
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
        // Give a dying child a moment so its exit status is known.
        let status = self
            .guard
            .nodes
            .get_mut(node)
            .and_then(|c| c.wait_for(Duration::from_millis(200)))
            .map_or_else(String::new, |s| format!(" ({s})"));
        failed(node, &format!("{what}{status}"), &self.logs[node])
    }

    fn report_progress(&mut self, phase: &'static str, run_elapsed: Duration) {
        let ops = self.progress_ops.iter().sum();
        (self.progress)(Progress {
            phase,
            run_elapsed,
            ops,
        });
    }

    /// Waits until `on_event` returns true, feeding it every event; fails
    /// on a node that closes, reports an error, or on the deadline.
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
                Ok(Line::Text(node, line)) => {
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
                Ok(Line::Closed(node)) => {
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

    /// Waits until every node has sent an event `counts` accepts.
    fn wait_all(
        &mut self,
        phase: &'static str,
        timeout: Duration,
        counts: fn(&NodeEvent) -> bool,
    ) -> Result<()> {
        let (nodes, mut seen) = (self.spec.nodes, 0);
        self.wait(phase, timeout, |_, e| {
            seen += usize::from(counts(&e));
            Ok(seen == nodes)
        })
    }

    /// Start-up and preload: every node attached, then every node's keys
    /// written.
    fn start_and_preload(&mut self, config: &Config) -> Result<()> {
        self.report_progress("start", Duration::ZERO);
        let attach = config.attach_timeout + Duration::from_secs(15);
        self.wait_all("start-up", attach, |e| matches!(e, NodeEvent::Ready { .. }))?;
        self.report_progress("preload", Duration::ZERO);
        self.send(NodeCommand::Preload)?;
        self.wait_all("the preload", Duration::from_secs(600), |e| {
            matches!(e, NodeEvent::Preloaded { .. })
        })
    }

    /// The warm-up and measured phase, with the hogs, the power meters and
    /// the CPU time of processes outside the nodes (a peer server).
    fn measure(&mut self, exe: &Path) -> Result<Measured> {
        let mut meters = self.spec.measure_power.then(|| {
            power_ipmi::MeterSet::new()
                .with(power_ipmi::RaplSampler::system())
                .with(power_ipmi::IpmiSampler::new(power_ipmi::IpmiConfig::local()))
        });
        let external: Vec<u32> = self.guard.peer.iter().map(PeerServer::pid).collect();
        let external_cpu = || {
            external
                .iter()
                .filter_map(|&p| process_cpu_secs(p))
                .sum::<f64>()
        };
        // Hogs compete with the measured phase only, not with start-up and
        // preload (which they would merely slow down).
        start_hogs(exe, self.spec.hogs, &mut self.guard)?;
        self.send(NodeCommand::Run)?;
        let started = Instant::now();
        let warmup = Duration::from_millis(self.spec.warmup_ms);
        let mut cpu_at_warm: Option<f64> = None;
        let mut reports: Vec<Option<NodeReport>> = (0..self.spec.nodes).map(|_| None).collect();
        let deadline = self.spec.run_time() + Duration::from_secs(60);
        self.wait("the run", deadline, |r, e| {
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
                    r.report_progress("run", started.elapsed());
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
        self.report_progress("stop", started.elapsed());
        Ok(Measured {
            reports: reports.into_iter().flatten().collect(),
            cpu_external,
            power,
        })
    }

    /// Orderly shutdown: every node drops its regions and exits 0.
    fn shut_down(&mut self) -> Result<()> {
        self.send(NodeCommand::Exit)?;
        let deadline = Instant::now() + Duration::from_secs(15);
        for node in 0..self.guard.nodes.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.guard.nodes[node].wait_for(left) {
                Some(status) if status.success() => {}
                Some(status) => {
                    return Err(self.failure(node, format!("exited with {status} at shutdown")));
                }
                None => {
                    return Err(self.failure(node, "did not exit within 15 s of `exit`".into()));
                }
            }
        }
        Ok(())
    }
}

/// What the measured phase gave, before summarizing.
struct Measured {
    reports: Vec<NodeReport>,
    cpu_external: f64,
    power: Vec<power_ipmi::Outcome>,
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

/// Prepares run `spec` in `run_dir`: the cluster's name and configuration,
/// its shm files, a peer server for Redis and memcached, and the config
/// and spec files the node processes read. Returns the spec the nodes get
/// (with the peer's address), the configuration, and the guard.
fn prepare(spec: &RunSpec, run_dir: &Path) -> Result<(RunSpec, Config, ClusterGuard)> {
    spec.validate()?;
    crate::system::check_available(spec.system)?;
    std::fs::create_dir_all(run_dir).map_err(HarnessError::io("creating", run_dir))?;
    let n = CLUSTERS.fetch_add(1, Ordering::Relaxed);
    let cluster = format!("bench-{}-{n}", std::process::id());
    let config = spec.config(&cluster)?;
    let mut guard = ClusterGuard::default();
    let mut spec = spec.clone();
    if spec.system.is_nessie() {
        let dir = config.shm_dir();
        remove_cluster_shm(&cluster, &dir);
        guard.shm = Some((cluster.clone(), dir));
    }
    if spec.system.is_peer() {
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
    Ok((spec, config, guard))
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
    let (spec, config, mut guard) = prepare(spec, run_dir)?;
    let config_path = run_dir.join("config.toml");
    let spec_path = run_dir.join("spec.json");
    std::fs::write(&config_path, config.to_toml()?)
        .map_err(HarnessError::io("writing", &config_path))?;
    std::fs::write(&spec_path, serde_json::to_vec_pretty(&spec)?)
        .map_err(HarnessError::io("writing", &spec_path))?;
    let talking = Talking::spawn(
        exe,
        spec.nodes,
        "starting a node process",
        |node| {
            vec![
                "node".into(),
                "--config".into(),
                config_path.clone().into(),
                "--spec".into(),
                spec_path.clone().into(),
                "--node-id".into(),
                node.to_string().into(),
            ]
        },
        |node| run_dir.join(format!("node-{node}.stderr")),
    )?;
    guard.nodes = talking.children;
    let mut r = Running {
        closed: vec![false; spec.nodes],
        progress_ops: vec![0; spec.nodes],
        spec,
        guard,
        events: talking.lines,
        logs: talking.logs,
        progress,
    };
    r.start_and_preload(&config)?;
    let measured = r.measure(exe)?;
    r.shut_down()?;
    drop(r.guard);

    let offered = match r.spec.load {
        Load::Closed => 0.0,
        Load::Open { ops_per_sec } => ops_per_sec,
    };
    let (mut figures, merged) = measure::summarize(
        &measured.reports,
        r.spec.workload.value_size,
        offered,
        measured.cpu_external.max(0.0),
    )?;
    figures.power = measured
        .power
        .into_iter()
        .map(|o| power_figures(o, figures.all.ok))
        .collect();
    Ok(RunOutput {
        figures,
        merged,
        reports: measured.reports,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
