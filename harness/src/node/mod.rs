//! The `node` subcommand: one node process of a benchmark cluster.
//!
//! It starts its node of the run's system, waits for the harness's
//! `preload` (each node PUTs the keys whose index ≡ node id mod nodes, so
//! every node's data tables start with an equal share), then `run`: worker
//! threads issue the workload for the warm-up and the measured phase, and the
//! node prints one [`NodeReport`] line. It keeps its node up until `exit`,
//! because its peers may still be reading its memory. See [`crate::cluster`]
//! for the protocol.
//!
//! A run measured as a time series ([`RunSpec::timeline`], `failover`)
//! runs its workers until the harness says `stop` and reports its buckets
//! instead; a node started with `--rejoin` replaces a lost one
//! (`Node::rejoin`) and skips the preload.

mod failover;

use crate::error::{HarnessError, Result};
use crate::launcher::SHM_MARKER;
use crate::measure::{NodeReport, OpCounters, PreloadReport, Recorder};
use crate::proc::die_with_parent;
use crate::protocol::{NodeCommand, NodeEvent};
use crate::spec::{Load, RunSpec};
use crate::system;
use crate::tail::{self, OpUsage, UsageReader};
use crate::workload::{self, Arrivals, KeyChooser, OpKind, OpStream};
use nessie::bootstrap::{Launch, Overrides};
use nessie::{Config, FabricConfig, KvClient};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Progress lines per second during the run phase.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);
/// An open-loop operation that starts later than this after its arrival is
/// counted as late.
const LATE: Duration = Duration::from_millis(1);

/// Environment variable naming a node id that aborts at the start of the
/// run phase (used by the tests to check the harness's crash handling).
pub const FAIL_NODE_ENV: &str = "NESSIE_BENCH_FAIL_NODE";

/// Arguments of the `node` subcommand.
#[derive(Clone, Debug, clap::Args)]
pub struct NodeArgs {
    /// The cluster's configuration (TOML; the same file for every node).
    #[arg(long)]
    pub config: PathBuf,
    /// The run's spec (JSON: system, workload, phases).
    #[arg(long)]
    pub spec: PathBuf,
    /// This node's id, 0-based; without it, the id comes from the
    /// launcher's environment (srun, mpirun, …; see `nessie::bootstrap`).
    #[arg(long)]
    pub node_id: Option<usize>,
    /// Do not wait for commands on stdin: preload and run at once (for
    /// starting nodes by hand).
    #[arg(long)]
    pub no_barrier: bool,
    /// Write the report to `DIR/node-<id>.report.json` and print only a short
    /// line naming it (under a launcher, whose merged stdout may tear long
    /// lines apart).
    #[arg(long, value_name = "DIR")]
    pub report_dir: Option<PathBuf>,
    /// Start as the replacement of node `--node-id`, whose host was lost:
    /// rejoin with empty memory, restore the node's copies
    /// (`nessie::Node::rejoin`), then run without a preload (`failover`
    /// starts these itself).
    #[arg(long, requires = "node_id")]
    pub rejoin: bool,
}

/// The longest error message a node prints on stdout (the whole message
/// goes to stderr): event lines stay short, which keeps them whole when a
/// launcher merges many nodes' output.
const MAX_EVENT_MESSAGE: usize = 2000;

/// Runs a node process; returns its exit code. Errors are reported to the
/// harness as an `error` event and on stderr.
#[must_use]
pub fn main(args: &NodeArgs) -> i32 {
    die_with_parent();
    let mut placed = args.node_id;
    match run(args, &mut placed) {
        Ok(()) => 0,
        Err(e) => {
            let mut message = e.to_string();
            let node = placed.unwrap_or_else(|| {
                message.insert_str(0, "a launched node (its id unknown): ");
                0
            });
            eprintln!("nessie-bench node {node}: {message}");
            if let Some((cut, _)) = message.char_indices().nth(MAX_EVENT_MESSAGE) {
                message.truncate(cut);
                message.push_str(" … (the rest on stderr)");
            }
            emit(&NodeEvent::Error { node, message });
            1
        }
    }
}

fn emit(event: &NodeEvent) {
    let line = serde_json::to_string(event).unwrap_or_else(|e| {
        format!(r#"{{"event":"error","node":0,"message":"cannot encode an event: {e}"}}"#)
    });
    // One write of the whole line: a launcher that merges many nodes'
    // output keeps a short line whole only if it arrives at once.
    let line = format!("{line}\n");
    let mut out = std::io::stdout().lock();
    if out
        .write_all(line.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        // The harness is gone: nothing left to report to.
        std::process::exit(3);
    }
}

/// What the harness said within a wait ([`Commands::listen`]).
enum Heard {
    /// Nothing.
    Nothing,
    /// A command.
    Said(NodeCommand),
    /// It closed stdin.
    Gone,
}

/// Commands from the harness (stdin), or none in `--no-barrier` mode.
struct Commands {
    rx: Option<Receiver<Option<NodeCommand>>>,
}

impl Commands {
    fn new(barrier: bool) -> Self {
        if !barrier {
            return Commands { rx: None };
        }
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if let Some(c) = NodeCommand::parse(&line) {
                    if tx.send(Some(c)).is_err() {
                        return;
                    }
                }
            }
            let _ = tx.send(None);
        });
        Commands { rx: Some(rx) }
    }

    /// Waits for `want`; `Ok(false)` if the harness said `exit` instead.
    fn expect(&self, want: NodeCommand) -> Result<bool> {
        let Some(rx) = &self.rx else {
            return Ok(want != NodeCommand::Exit);
        };
        match rx.recv() {
            Ok(Some(c)) if c == want => Ok(true),
            Ok(Some(NodeCommand::Exit)) => Ok(false),
            Ok(Some(c)) => Err(HarnessError::Protocol(format!(
                "expected `{}`, got `{}`",
                want.word(),
                c.word()
            ))),
            Ok(None) | Err(_) => Err(HarnessError::Protocol("the harness closed stdin".into())),
        }
    }

    /// Polls for an abort (stdin closed or `exit`) for up to `wait`.
    fn aborted(&self, wait: Duration) -> bool {
        matches!(
            self.listen(wait),
            Heard::Said(NodeCommand::Exit) | Heard::Gone
        )
    }

    /// Waits up to `wait` for a command.
    fn listen(&self, wait: Duration) -> Heard {
        let Some(rx) = &self.rx else {
            std::thread::sleep(wait);
            return Heard::Nothing;
        };
        match rx.recv_timeout(wait) {
            Ok(Some(c)) => Heard::Said(c),
            Ok(None) | Err(RecvTimeoutError::Disconnected) => Heard::Gone,
            Err(RecvTimeoutError::Timeout) => Heard::Nothing,
        }
    }
}

/// This node's place in its cluster: from `--node-id` (a node the harness
/// started) or from the launcher's environment.
fn launch(args: &NodeArgs, spec: &RunSpec) -> Result<Launch> {
    if let Some(node) = args.node_id.filter(|&n| n >= spec.nodes) {
        return Err(HarnessError::Usage(format!(
            "node id {node} is not below the cluster's {} nodes",
            spec.nodes
        )));
    }
    let overrides = Overrides {
        node: args.node_id,
        nodes: args.node_id.map(|_| spec.nodes),
        rendezvous: None,
    };
    let launch = Launch::detect_with(&overrides)?.ok_or_else(|| {
        HarnessError::Usage(
            "no --node-id, and no launcher (srun, mpirun, …) in the environment".into(),
        )
    })?;
    Ok(launch)
}

/// The cluster's configuration completed with what `launch` knows (the
/// tcp and verbs fabrics' rendezvous and secret) and checked; a launch of another size than the run's is
/// refused, and a launched node on `shm` checks that it runs on the
/// harness's host.
fn configure(args: &NodeArgs, launch: &Launch, spec: &RunSpec) -> Result<Config> {
    if launch.nodes != spec.nodes {
        return Err(HarnessError::Usage(format!(
            "{} started {} tasks for a cluster of {} nodes",
            launch.launcher, launch.nodes, spec.nodes
        )));
    }
    let path = &args.config;
    let text = std::fs::read_to_string(path).map_err(HarnessError::io("reading", path))?;
    // Parsed without `Config::from_file`'s check, which the launch's
    // settings must complete first.
    let mut config: Config = toml::from_str(&text).map_err(|e| {
        HarnessError::Store(nessie::Error::Config(format!("{}: {e}", path.display())))
    })?;
    let launched = args.node_id.is_none();
    let marker = config.shm_dir().join(SHM_MARKER);
    match &mut config.fabric {
        FabricConfig::Shm { .. } if launched && !marker.exists() => {
            return Err(HarnessError::Usage(format!(
                "node {} runs on another host than the harness ({} is missing): the shm fabric \
                 reaches only processes of one host; use --fabric tcp",
                launch.node,
                marker.display()
            )));
        }
        _ => {}
    }
    launch.configure(&mut config)?;
    config.validate()?;
    Ok(config)
}

/// Writes `report` to `dir/node-<i>.report.json` (whole or not at all);
/// returns the file.
fn write_report(dir: &Path, report: &NodeReport) -> Result<PathBuf> {
    let file = dir.join(format!("node-{}.report.json", report.node));
    let partial = dir.join(format!(".node-{}.report.json.partial", report.node));
    std::fs::write(&partial, serde_json::to_vec(report)?)
        .map_err(HarnessError::io("writing", &partial))?;
    std::fs::rename(&partial, &file).map_err(HarnessError::io("renaming", &partial))?;
    Ok(file)
}

fn run(args: &NodeArgs, placed: &mut Option<usize>) -> Result<()> {
    // Open-loop workers sleep between arrivals: make those sleeps precise
    // (the default timer slack adds 50 µs).
    let _ = nix::sys::prctl::set_timerslack(1_000);
    let text = std::fs::read(&args.spec).map_err(HarnessError::io("reading", &args.spec))?;
    let spec: RunSpec = serde_json::from_slice(&text)?;
    spec.validate()?;
    let launch = launch(args, &spec)?;
    let node_id = launch.node;
    *placed = Some(node_id);
    let config = configure(args, &launch, &spec)?;
    let commands = Commands::new(!args.no_barrier);
    let node = if args.rejoin {
        failover::rejoin(&spec, &config, node_id)?
    } else {
        let (peer, lmdb) = (spec.peer.as_ref(), spec.lmdb.as_ref());
        system::start_run_node(spec.system, &config, node_id, peer, lmdb)?
    };
    let mut clients = (0..spec.clients_per_node)
        .map(|_| node.client())
        .collect::<Result<Vec<_>>>()?;
    emit(&NodeEvent::Ready { node: node_id });

    // A replacement holds the restored copies of its keys already.
    let preload = if args.rejoin {
        PreloadReport::default()
    } else {
        if !commands.expect(NodeCommand::Preload)? {
            return Ok(());
        }
        let preload = preload(&spec, node_id, &mut clients);
        emit(&NodeEvent::Preloaded {
            node: node_id,
            preload: preload.clone(),
        });
        preload
    };

    if !commands.expect(NodeCommand::Run)? {
        return Ok(());
    }
    // Test hook: the tests make one node crash to check the teardown.
    if std::env::var(FAIL_NODE_ENV)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        == Some(node_id)
    {
        eprintln!("{FAIL_NODE_ENV}={node_id}: crashing on purpose");
        std::process::abort();
    }
    if let Some(timeline) = spec.timeline {
        let t = failover::phase(
            &spec,
            timeline,
            node_id,
            args.rejoin,
            &mut clients,
            &commands,
        )?;
        emit(&NodeEvent::Timeline {
            timeline: Box::new(t),
        });
    } else {
        let mut report = measure(&spec, node_id, &mut clients, &commands, preload)?;
        report.tables = node
            .data_tables()
            .into_iter()
            .filter(|t| t.peak_in_use > 0)
            .collect();
        match &args.report_dir {
            None => emit(&NodeEvent::Report {
                report: Box::new(report),
            }),
            Some(dir) => emit(&NodeEvent::ReportFile {
                node: node_id,
                file: write_report(dir, &report)?,
            }),
        }
    }

    // Stay up until every node has finished: peers read our memory.
    let _ = commands.expect(NodeCommand::Exit);
    drop(clients);
    drop(node);
    Ok(())
}

/// PUTs this node's share of the keys (index ≡ node mod nodes; every key
/// for a store private to each process), split over the node's clients; a
/// failed PUT is retried once.
fn preload(spec: &RunSpec, node: usize, clients: &mut [Box<dyn KvClient>]) -> PreloadReport {
    let started = Instant::now();
    let w = &spec.workload;
    let workers = clients.len();
    let (node, nodes) = if spec.system.shares_data() {
        (node, spec.nodes)
    } else {
        (0, 1)
    };
    let results: Vec<(u64, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter_mut()
            .enumerate()
            .map(|(i, client)| {
                s.spawn(move || {
                    let mut key = vec![0; w.key_size];
                    let mut value = vec![0; w.value_size];
                    let (mut done, mut errors) = (0, 0);
                    let mut index = (node + i * nodes) as u64;
                    while index < w.keys {
                        workload::write_key(index, &mut key);
                        workload::fill_value(index, 0, &mut value);
                        if client.put(&key, &value).is_err() && client.put(&key, &value).is_err() {
                            errors += 1;
                        }
                        done += 1;
                        index += (workers * nodes) as u64;
                    }
                    (done, errors)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or((0, 1)))
            .collect()
    });
    PreloadReport {
        keys: results.iter().map(|r| r.0).sum(),
        errors: results.iter().map(|r| r.1).sum(),
        secs: started.elapsed().as_secs_f64(),
    }
}

/// CPU seconds (user + system) of this process so far (0 where unknown:
/// a report figure, not worth failing a run for).
fn cpu_secs() -> f64 {
    power_ipmi::own_process_cpu_times().map_or(0.0, |t| t.cpu_s())
}

struct Phase<'a> {
    spec: &'a RunSpec,
    node: usize,
    keys: KeyChooser,
    start: Instant,
    warm_end: Instant,
    end: Instant,
    stop: &'a AtomicBool,
    ops: &'a AtomicU64,
    /// Reads the worker thread's context switches and page faults.
    usage: UsageReader,
}

struct WorkerOut {
    rec: Recorder,
    /// When the last measured operation ended.
    last: Option<Instant>,
}

fn store_op(kind: OpKind) -> nessie::OpKind {
    match kind {
        OpKind::Get => nessie::OpKind::Get,
        OpKind::Put => nessie::OpKind::Put,
    }
}

/// A worker's arrival times under an open-loop load (its share of the
/// offered rate), or `None` for a closed loop.
fn worker_arrivals(spec: &RunSpec, node: usize, worker: usize) -> Result<Option<Arrivals>> {
    Ok(match spec.load {
        Load::Closed => None,
        Load::Open { ops_per_sec } => {
            let workers = (spec.nodes * spec.clients_per_node) as f64;
            Some(Arrivals::new(
                ops_per_sec / workers,
                spec.workload.seed,
                node,
                worker,
            )?)
        }
    })
}

/// One worker's run phase (closed or open loop).
fn work(p: &Phase<'_>, worker: usize, client: &mut dyn KvClient) -> Result<WorkerOut> {
    let w = &p.spec.workload;
    let mut stream = OpStream::new(w, p.keys.clone(), p.node, worker);
    let mut arrivals = worker_arrivals(p.spec, p.node, worker)?;
    let mut key = vec![0; w.key_size];
    let mut value = vec![0; w.value_size];
    workload::fill_value(worker as u64, p.node as u64, &mut value);
    let mut out = Vec::with_capacity(w.value_size);
    let mut rec = Recorder::default();
    let mut base: Option<nessie::Stats> = None;
    let mut last_stats = client.stats();
    let mut last = None;
    let mut version = 0u64;
    let mut unflushed = 0u64;
    let mut next = p.start;
    // The reading after the previous measured operation (closed loop only).
    let mut chained = None;
    loop {
        if let Some(a) = arrivals.as_mut() {
            next += Duration::from_secs_f64(a.next_gap());
            if next >= p.end || !wait_until(next, p.stop) {
                break;
            }
        }
        let now = Instant::now();
        if now >= p.end || p.stop.load(Ordering::Relaxed) {
            break;
        }
        let measuring = now >= p.warm_end;
        if measuring && base.is_none() {
            base = Some(last_stats);
        }
        if measuring && arrivals.is_some() && now.duration_since(next) > LATE {
            rec.late += 1;
        }
        let (kind, index) = stream.next_op();
        workload::write_key(index, &mut key);
        // Read right around the timed window, not inside it (each reading
        // is a system call, about 0.2 µs). In the closed loop the previous
        // operation's end reading serves as this one's start: only the
        // bookkeeping runs in between, so a preemption there is counted
        // against this operation (a fast one, which leaves the slowest
        // slices alone), and a worker makes one system call per operation
        // instead of two. In the open loop the worker sleeps until the
        // arrival, so it reads afresh.
        let usage_before = match (measuring, arrivals.is_some(), chained) {
            (false, ..) => None,
            (true, false, Some(u)) => Some(u),
            (true, ..) => (p.usage)(),
        };
        let t0 = Instant::now();
        let result = match kind {
            OpKind::Get => client.get_into(&key, &mut out),
            OpKind::Put => {
                version += 1;
                stamp(&mut value, index, version);
                client.put(&key, &value).map(|()| true)
            }
        };
        let done = Instant::now();
        let usage_after = if measuring { (p.usage)() } else { None };
        chained = usage_after;
        let stats = client.stats();
        if measuring {
            match result {
                Ok(found) => {
                    let op = store_op(kind);
                    let cost = OpCounters::delta(stats.of(op), last_stats.of(op));
                    let usage = OpUsage::between(usage_before, usage_after);
                    rec.ok(kind, done - t0, found, usage, &cost);
                }
                Err(e) => rec.error(kind, &e),
            }
            last = Some(done);
        }
        last_stats = stats;
        unflushed += 1;
        if unflushed == 64 {
            p.ops.fetch_add(unflushed, Ordering::Relaxed);
            unflushed = 0;
        }
    }
    p.ops.fetch_add(unflushed, Ordering::Relaxed);
    let base = base.unwrap_or(last_stats);
    for kind in OpKind::ALL {
        let op = store_op(kind);
        rec.kinds[kind.index()].counters = OpCounters::delta(last_stats.of(op), base.of(op));
    }
    Ok(WorkerOut { rec, last })
}

/// Puts the key index and a version into the first 16 bytes of a value.
fn stamp(value: &mut [u8], index: u64, version: u64) {
    let stamp = [index.to_le_bytes(), version.to_le_bytes()].concat();
    let n = stamp.len().min(value.len());
    value[..n].copy_from_slice(&stamp[..n]);
}

/// Sleeps until `at` (open loop: idle workers must not burn CPU, or the
/// energy experiment measures the harness), spinning only for the last few
/// microseconds; false if told to stop meanwhile. Arrival times are
/// absolute, so a late wake-up shortens the next wait and the offered rate
/// holds on average.
fn wait_until(at: Instant, stop: &AtomicBool) -> bool {
    const SPIN: Duration = Duration::from_micros(20);
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= at {
            return true;
        }
        let left = at - now;
        if left > SPIN {
            std::thread::sleep(
                left.checked_sub(SPIN / 2)
                    .unwrap()
                    .min(Duration::from_millis(50)),
            );
        } else {
            std::hint::spin_loop();
        }
    }
}

/// The run phase: warm-up, then the measured phase; merges the workers'
/// measurements into the node's report.
fn measure(
    spec: &RunSpec,
    node: usize,
    clients: &mut [Box<dyn KvClient>],
    commands: &Commands,
    preload: PreloadReport,
) -> Result<NodeReport> {
    measure_with(spec, node, clients, commands, preload, tail::thread_usage)
}

/// [`measure`] with the reader of the workers' context switches and page faults
/// given (the tests script it).
fn measure_with(
    spec: &RunSpec,
    node: usize,
    clients: &mut [Box<dyn KvClient>],
    commands: &Commands,
    preload: PreloadReport,
    usage: UsageReader,
) -> Result<NodeReport> {
    let stop = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    let start = Instant::now();
    let warm_end = start + Duration::from_millis(spec.warmup_ms);
    let phase = Phase {
        spec,
        node,
        keys: KeyChooser::new(&spec.workload),
        start,
        warm_end,
        end: warm_end + Duration::from_millis(spec.duration_ms),
        stop: &stop,
        ops: &ops,
        usage,
    };
    let mut cpu_at_warm = None;
    let mut aborted = false;
    let outs: Vec<Result<WorkerOut>> = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter_mut()
            .enumerate()
            .map(|(i, c)| {
                let phase = &phase;
                s.spawn(move || work(phase, i, c.as_mut()))
            })
            .collect();
        let mut next_progress = start + PROGRESS_EVERY;
        while !handles
            .iter()
            .all(std::thread::ScopedJoinHandle::is_finished)
        {
            let now = Instant::now();
            if cpu_at_warm.is_none() && now >= warm_end {
                cpu_at_warm = Some(cpu_secs());
            }
            if now >= next_progress {
                emit(&NodeEvent::Progress {
                    node,
                    ops: ops.load(Ordering::Relaxed),
                });
                next_progress += PROGRESS_EVERY;
            }
            let mut wake = next_progress.min(phase.end + Duration::from_millis(5));
            if cpu_at_warm.is_none() {
                wake = wake.min(warm_end);
            }
            let wait = wake
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(1), PROGRESS_EVERY);
            if commands.aborted(wait) {
                aborted = true;
                stop.store(true, Ordering::Relaxed);
            }
        }
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(HarnessError::Protocol("a worker thread panicked".into()))
                })
            })
            .collect()
    });
    let cpu_end = cpu_secs();
    if aborted {
        return Err(HarnessError::Protocol("the harness aborted the run".into()));
    }
    let mut rec = Recorder::default();
    let mut last = None;
    for out in outs {
        let out = out?;
        rec.add(&out.rec);
        last = last.max(out.last);
    }
    let elapsed = last.map_or(spec.duration_ms as f64 / 1e3, |l| {
        l.saturating_duration_since(warm_end).as_secs_f64()
    });
    let cpu = cpu_end - cpu_at_warm.unwrap_or(cpu_end);
    emit(&NodeEvent::Progress {
        node,
        ops: ops.load(Ordering::Relaxed),
    });
    Ok(NodeReport::new(node, rec, elapsed, cpu, preload))
}

/// The `hog` subcommand: a busy loop until stdin closes (or the harness
/// dies), unpinned, emulating another tenant's CPU load.
pub fn hog() -> i32 {
    die_with_parent();
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&done);
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        flag.store(true, Ordering::Relaxed);
    });
    let mut x = 1u64;
    while !done.load(Ordering::Relaxed) {
        for _ in 0..100_000 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
    }
    0
}

#[cfg(test)]
mod tests;
