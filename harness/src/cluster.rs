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
//!
//! Under a launcher (`--launcher srun|mpirun`, see [`crate::launcher`]) the
//! harness starts one child, the launcher, instead: the same lines arrive
//! merged on its stdout, each command reaches every node through its stdin,
//! reports arrive as files, and the launcher's exit ends the run as a
//! node's would.

use crate::error::{HarnessError, Result};
use crate::launcher::{Fabric, Launching, RunFiles, RunSecret, LAUNCHER_GRACE, SHM_MARKER};
use crate::measure::{self, Merged, NodeReport, PowerFigures, RunFigures};
use crate::peers::{free_port, PeerServer};
use crate::proc::{failed, interrupted, process_cpu_secs, tail, ChildGuard, Line, Talking};
use crate::protocol::{NodeCommand, NodeEvent};
use crate::spec::{Load, RunSpec};
use nessie::{Config, FabricConfig};
use nessie_examples::StoreKind;
use std::io::Write;
use std::net::Ipv4Addr;
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

/// A fresh cluster name of this harness, `bench-<pid>-<n>` (its shm
/// directory is then `/dev/shm/nessie-bench-<pid>-<n>`, which
/// [`sweep_stale_shm`] removes once this process is gone).
pub(crate) fn cluster_name() -> String {
    let n = CLUSTERS.fetch_add(1, Ordering::Relaxed);
    format!("bench-{}-{n}", std::process::id())
}

/// Removes every `/dev/shm` entry that belongs to cluster `name`: its
/// directory `dir` and the files named after it.
pub(crate) fn remove_cluster_shm(name: &str, dir: &Path) {
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
/// runs and removes the cluster's shared-memory files and its secret.
#[derive(Debug, Default)]
pub struct ClusterGuard {
    /// The node processes, or the one launcher that started them all.
    nodes: Vec<ChildGuard>,
    hogs: Vec<ChildGuard>,
    peer: Option<PeerServer>,
    shm: Option<(String, PathBuf)>,
    secret: RunSecret,
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

/// The launcher that started every node of a run.
#[derive(Debug)]
struct Launched {
    /// Its name (`srun`, `mpirun`).
    name: &'static str,
    /// Its stderr file.
    log: PathBuf,
    /// Where lines on its stdout that are no event go.
    stray: PathBuf,
}

impl Launched {
    /// Keeps a line that is no event (launcher chatter, or a line torn
    /// apart on its way).
    fn keep_stray(&self, line: &str) {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.stray)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

struct Running<'p> {
    spec: RunSpec,
    guard: ClusterGuard,
    events: Receiver<Line>,
    /// Each node's stderr file.
    logs: Vec<PathBuf>,
    launched: Option<Launched>,
    closed: Vec<bool>,
    progress_ops: Vec<u64>,
    progress: &'p mut dyn FnMut(Progress),
}

impl Running<'_> {
    fn send(&mut self, cmd: NodeCommand) -> Result<()> {
        for child in 0..self.guard.nodes.len() {
            if let Some(s) = self.guard.nodes[child].stdin() {
                if writeln!(s, "{}", cmd.word())
                    .and_then(|()| s.flush())
                    .is_err()
                {
                    return Err(self.closed_failure(child, "its stdin closed (it exited)"));
                }
            }
        }
        Ok(())
    }

    /// The exit status of child `child` if it exits within a moment, as
    /// " (status)".
    fn status_of(&mut self, child: usize) -> String {
        // Give a dying child a moment so its exit status is known.
        let status = self
            .guard
            .nodes
            .get_mut(child)
            .and_then(|c| c.wait_for(Duration::from_millis(200)));
        match (status, &self.launched) {
            (None, _) => String::new(),
            (Some(s), None) => format!(" ({s})"),
            (Some(s), Some(l)) => format!(" ({}: {s})", l.name),
        }
    }

    fn failure(&mut self, node: usize, what: String) -> HarnessError {
        let child = if self.launched.is_some() { 0 } else { node };
        let status = self.status_of(child);
        match self.logs.get(node).or(self.logs.first()) {
            Some(log) => failed(node, &format!("{what}{status}"), log),
            None => HarnessError::NodeFailed {
                node,
                why: format!("{what}{status}"),
            },
        }
    }

    /// Child `child` (a node, or the launcher) is gone or deaf: `what`.
    fn closed_failure(&mut self, child: usize, what: &str) -> HarnessError {
        let Some(launched) = &self.launched else {
            return self.failure(child, what.to_owned());
        };
        let (name, log) = (launched.name, launched.log.clone());
        let status = self.status_of(child);
        let mut why = format!(
            "{what}{status}; its stderr ({}): {}",
            log.display(),
            tail(&log, 1200)
        );
        for node_log in self.logs.iter().filter(|l| **l != log) {
            if std::fs::metadata(node_log).is_ok_and(|m| m.len() > 0) {
                why.push_str(&format!(
                    "; {}: {}",
                    node_log.display(),
                    tail(node_log, 400)
                ));
            }
        }
        HarnessError::LauncherFailed {
            launcher: name,
            why,
        }
    }

    /// The event on line `line`, `None` for a launcher's line that is none.
    fn parse(&self, child: usize, line: &str) -> Result<Option<NodeEvent>> {
        match (serde_json::from_str(line), &self.launched) {
            (Ok(event), _) => Ok(Some(event)),
            (Err(_), Some(launched)) => {
                launched.keep_stray(line);
                Ok(None)
            }
            (Err(e), None) => Err(HarnessError::Protocol(format!(
                "node {child} printed {line:?}: {e}"
            ))),
        }
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
                Ok(Line::Text(child, line)) => {
                    if let Some(event) = self.parse(child, &line)? {
                        if let NodeEvent::Error { node, message } = event {
                            return Err(self.failure(node, format!("reported: {message}")));
                        }
                        if on_event(self, event)? {
                            return Ok(());
                        }
                    }
                }
                Ok(Line::Closed(child)) => {
                    if let Some(c) = self.closed.get_mut(child) {
                        *c = true;
                    }
                    return Err(self.closed_failure(child, &format!("exited during {phase}")));
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(HarnessError::Protocol("all node pipes closed".into()));
                }
            }
            if Instant::now() > deadline {
                let what = format!("the cluster did not finish {phase} within {timeout:?}");
                if self.launched.is_some() {
                    // The launcher's stderr says why (waiting for an
                    // allocation, a node that cannot start, …).
                    return Err(self.closed_failure(0, &what));
                }
                return Err(HarnessError::NodeFailed {
                    node: self.closed.iter().position(|c| !c).unwrap_or(0),
                    why: what,
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
                NodeEvent::ReportFile { node, file } => {
                    let report = read_report(node, &file)?;
                    let slot = reports.get_mut(node).ok_or_else(|| {
                        HarnessError::Protocol(format!("report from unknown node {node}"))
                    })?;
                    *slot = Some(report);
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

    /// Orderly shutdown: every node drops its regions and exits 0 (and
    /// then the launcher, if any).
    fn shut_down(&mut self) -> Result<()> {
        self.send(NodeCommand::Exit)?;
        if self.launched.is_some() {
            let limit = Duration::from_secs(15) + LAUNCHER_GRACE;
            return match self.guard.nodes[0].wait_for(limit) {
                Some(status) if status.success() => Ok(()),
                Some(status) => {
                    Err(self.closed_failure(0, &format!("exited with {status} at shutdown")))
                }
                None => {
                    Err(self.closed_failure(0, &format!("did not exit within {limit:?} of `exit`")))
                }
            };
        }
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

/// Node `node`'s report from the file it named.
fn read_report(node: usize, file: &Path) -> Result<NodeReport> {
    let bytes = std::fs::read(file).map_err(HarnessError::io("reading the report", file))?;
    let report: NodeReport = serde_json::from_slice(&bytes)?;
    if report.node != node {
        return Err(HarnessError::Protocol(format!(
            "node {node} named {} as its report, which is node {}'s",
            file.display(),
            report.node
        )));
    }
    Ok(report)
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

/// Whether `spec` can run on this machine under `launching`: its system
/// is available ([`crate::system::check_available`]) and, for LMDB, every
/// node runs on this host and its keys fit.
///
/// # Errors
/// [`HarnessError::NotAvailable`] saying why not.
pub fn check_runnable(spec: &RunSpec, launching: &Launching) -> Result<()> {
    crate::system::check_available(spec.system)?;
    if spec.system == StoreKind::Lmdb {
        crate::lmdb::check_keys(spec.workload.key_size)?;
        crate::lmdb::check_host(launching.program().map(|_| launching.peer_host()))?;
    }
    Ok(())
}

/// Prepares run `spec` with `files`: the cluster's name and
/// configuration, its shm files (with the marker launched nodes look for)
/// or its tcp/verbs secret and (for nodes of this host) rendezvous, a peer server
/// for Redis and memcached on `launching`'s peer host, LMDB's environment
/// in a fresh `/dev/shm` directory of the cluster's name, and the config and
/// spec files the node processes read. Returns the spec the nodes get (with
/// the peer's address), the configuration, and the guard.
fn prepare(
    spec: &RunSpec,
    launching: &Launching,
    files: &RunFiles,
) -> Result<(RunSpec, Config, ClusterGuard)> {
    spec.validate()?;
    check_runnable(spec, launching)?;
    let run_dir = &files.dir;
    std::fs::create_dir_all(run_dir).map_err(HarnessError::io("creating", run_dir))?;
    let cluster = cluster_name();
    let mut config = spec.config(&cluster)?;
    let mut guard = ClusterGuard::default();
    let mut spec = spec.clone();
    let launched = launching.program().is_some();
    match spec.fabric {
        // Stores without regions (Redis, memcached, null) need no fabric.
        _ if !spec.system.is_nessie() => config.fabric = FabricConfig::Local,
        Fabric::Shm => {
            let dir = config.shm_dir();
            remove_cluster_shm(&cluster, &dir);
            guard.shm = Some((cluster.clone(), dir.clone()));
            if launched {
                use std::os::unix::fs::DirBuilderExt;
                let marker = dir.join(SHM_MARKER);
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&dir)
                    .and_then(|()| std::fs::write(&marker, b""))
                    .map_err(HarnessError::io("creating", &marker))?;
            }
        }
        Fabric::Tcp | Fabric::Verbs => {
            guard.secret = RunSecret::prepare(run_dir, |v| std::env::var(v).ok())?;
            if let (Some((_, rendezvous, _)), false) = (config.fabric.meeting_mut(), launched) {
                let port = free_port(Ipv4Addr::LOCALHOST.into())?;
                *rendezvous = Some(format!("127.0.0.1:{port}"));
            }
        }
    }
    if spec.system == StoreKind::Lmdb {
        // Named like a cluster's shm directory, so the guard removes it and
        // a killed harness's is swept.
        let dir = config.shm_dir();
        remove_cluster_shm(&cluster, &dir);
        guard.shm = Some((cluster.clone(), dir.clone()));
        let threads = spec.nodes * spec.clients_per_node;
        spec.lmdb = Some(crate::lmdb::prepare(&spec.workload, threads, &dir)?);
    }
    if spec.system.is_peer() {
        let bytes = spec.workload.keys * (spec.workload.value_size + spec.workload.key_size) as u64;
        let server = PeerServer::start(
            spec.system,
            launching.peer_host()?,
            spec.nodes,
            bytes * 2,
            &run_dir.join("peer.log"),
        )?;
        spec.peer = Some(server.target.clone());
        guard.peer = Some(server);
    }
    std::fs::write(&files.config, config.to_toml()?)
        .map_err(HarnessError::io("writing", &files.config))?;
    std::fs::write(&files.spec, serde_json::to_vec_pretty(&spec)?)
        .map_err(HarnessError::io("writing", &files.spec))?;
    Ok((spec, config, guard))
}

/// Starts the node processes of `spec` with `files`: this binary (`exe`)
/// once per node, or the launcher once.
fn start_nodes(
    exe: &Path,
    spec: &RunSpec,
    launching: &Launching,
    files: &RunFiles,
    secret: &RunSecret,
) -> Result<(Talking, Option<Launched>)> {
    let logs = |node| launching.node_log(&files.dir, node);
    let Some(program) = launching.program() else {
        let talking = Talking::spawn_with(
            exe,
            spec.nodes,
            "starting a node process",
            |node| files.node_args(Some(node)),
            logs,
            secret.env(),
        )?;
        return Ok((talking, None));
    };
    let launched = Launched {
        name: launching.kind.program().unwrap_or("the launcher"),
        log: files.dir.join("launcher.stderr"),
        stray: files.dir.join("launcher.stdout"),
    };
    let replicated = spec.system == StoreKind::Cd && spec.replicas.is_some_and(|r| r > 1);
    let args = launching.launcher_args(exe, spec.nodes, files, secret, replicated, |v| {
        std::env::var(v).ok()
    });
    let mut talking = Talking::spawn_launcher(
        program,
        &args,
        launched.log.clone(),
        secret.env(),
        LAUNCHER_GRACE,
    )?;
    talking.logs = (0..spec.nodes).map(logs).collect();
    Ok((talking, Some(launched)))
}

/// Runs `spec` on a fresh cluster of node processes of this binary (`exe`)
/// placed by `launching`, keeping its files in `run_dir`, and reports
/// progress to `progress`.
///
/// # Errors
/// [`HarnessError::NotAvailable`] for a system this build or machine lacks;
/// [`HarnessError::NodeFailed`] when a node exits, errs or hangs;
/// [`HarnessError::LauncherFailed`] when the launcher exits early or fails;
/// [`HarnessError::Interrupted`] on Ctrl-C. Everything is torn down either way.
pub fn run(
    exe: &Path,
    spec: &RunSpec,
    launching: &Launching,
    run_dir: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<RunOutput> {
    let files = RunFiles::in_dir(run_dir)?;
    let (spec, config, mut guard) = prepare(spec, launching, &files)?;
    let (talking, launched) = start_nodes(exe, &spec, launching, &files, &guard.secret)?;
    guard.nodes = talking.children;
    let mut r = Running {
        closed: vec![false; guard.nodes.len()],
        progress_ops: vec![0; spec.nodes],
        spec,
        guard,
        events: talking.lines,
        logs: talking.logs,
        launched,
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
