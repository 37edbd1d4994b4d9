//! `job`: the workload the paper was designed for (§1–3) — the processes of
//! a compute job exchanging partitions through the store — as a distributed
//! sort (or word count, `--app wordcount`) from `nessie-examples`, on CD,
//! SD, HY and Redis.
//!
//! For each store the harness starts one process per node on the `shm`
//! fabric (`nessie-bench job-task`, each a node of the store and one task
//! of the job; Redis runs as one server process and the tasks are its
//! clients), waits for them, and reports job time per phase, bytes moved
//! over the fabric and into local memory per phase (from the clients'
//! [`nessie::Stats`]), and CPU seconds per node. `--in-process` runs the
//! tasks as threads of the harness on the `local` fabric instead.
//!
//! This module does not use the node-process protocol of
//! [`crate::cluster`]: a job has no preload or measured phase, and its
//! tasks coordinate through the store itself, so a task process only
//! prints one JSON line when it is done ([`task::TaskOutcome`]).

mod tables;
pub mod task;

pub use task::{App, JobTaskArgs};

use crate::cluster;
use crate::error::{HarnessError, Result};
use crate::experiments::{parse_size, OutputArgs};
use crate::peers::PeerServer;
use crate::proc::{failed, interrupted, process_cpu_secs, ChildGuard, Line, Talking};
use crate::report::Report;
use nessie::fabric::VerbCounts;
use nessie::{Config, FabricConfig};
use nessie_examples::{
    job_config, run_threads, Input, JobReport, JobSpec, LocalCluster, Sizing, StoreKind,
};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};
use task::{TaskOutcome, TaskPlan};

/// Flags of `job`.
#[derive(Clone, Debug, clap::Args)]
pub struct JobArgs {
    /// Output flags (`--quick`: 64 MiB of input instead of 512 MiB).
    #[command(flatten)]
    pub output: OutputArgs,
    /// Stores to run (cd, sd, hy, redis).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "STORE,...",
        default_value = "cd,sd,hy,redis"
    )]
    pub stores: Vec<StoreKind>,
    /// The job.
    #[arg(long, value_enum, default_value = "sort")]
    pub app: App,
    /// Node processes (= map tasks = reduce tasks).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub nodes: u16,
    /// Total input (default 512 MiB, 64 MiB with --quick).
    #[arg(long, value_parser = parse_size)]
    pub input_size: Option<usize>,
    /// Largest value PUT (the store's `value_size_max`); larger partitions
    /// are chunked.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    pub max_value: usize,
    /// Seed of the generated input.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Server worker threads per node of SD and HY.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub server_workers: u16,
    /// Run the tasks as threads of this process on the `local` fabric
    /// (no CPU time per node then, only per task thread).
    #[arg(long)]
    pub in_process: bool,
    /// Give up on a store's run after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_s: u64,
    /// Copies of every CD entry and index slot (r > 1 needs --nodes 3 or
    /// more and at most that many copies); SD, HY and Redis keep one.
    #[arg(long, value_name = "N", value_parser = crate::experiments::parse_replicas)]
    pub replicas: Option<usize>,
}

/// How one store's run ended.
#[derive(Clone, Debug, Serialize)]
pub struct StoreRun {
    /// The store.
    pub store: StoreKind,
    /// `ok`, `skipped` or `failed`.
    pub status: &'static str,
    /// Why it was skipped or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The tasks' reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<JobReport>,
    /// Seconds from spawning the processes until the last one exited
    /// (node start-up and attach included).
    pub wall_secs: f64,
    /// Longest node start-up (regions created, peers attached), seconds.
    pub startup_secs: f64,
    /// CPU seconds of the Redis server over the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu_secs: Option<f64>,
    /// Where its plan and logs are.
    pub dir: PathBuf,
}

impl StoreRun {
    fn not_run(store: StoreKind, status: &'static str, reason: String, dir: PathBuf) -> Self {
        StoreRun {
            store,
            status,
            reason: Some(reason),
            report: None,
            wall_secs: 0.0,
            startup_secs: 0.0,
            server_cpu_secs: None,
            dir,
        }
    }
}

/// The shared parameters of every store's run.
#[derive(Clone, Debug, Serialize)]
struct Plan {
    app: App,
    nodes: usize,
    input: Input,
    input_bytes: u64,
    max_value: usize,
    server_workers: usize,
    in_process: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    replicas: Option<usize>,
    #[serde(skip)]
    timeout: Duration,
}

/// Runs `job`; returns the exit code (1 if a store's run failed).
///
/// # Errors
/// Ctrl-C, bad flags ([`HarnessError::Replicas`] for `--replicas` the
/// nodes cannot hold), or a report that cannot be written.
pub fn run(args: JobArgs) -> Result<i32> {
    let out = args.output.dir("job");
    cluster::sweep_stale_shm();
    let exe =
        std::env::current_exe().map_err(HarnessError::io("locating", "the nessie-bench binary"))?;
    let input_bytes = args.input_size.map_or(
        if args.output.quick {
            64 << 20
        } else {
            512 << 20
        },
        |b| b as u64,
    );
    if args.max_value < nessie_examples::job::MIN_VALUE
        || args.max_value > nessie_examples::job::MAX_VALUE
    {
        return Err(HarnessError::Usage(format!(
            "--max-value must be between {} KiB and {} MiB",
            nessie_examples::job::MIN_VALUE >> 10,
            nessie_examples::job::MAX_VALUE >> 20
        )));
    }
    if let Some(r) = args.replicas {
        crate::spec::check_replicas(r, usize::from(args.nodes))?;
        if !args.stores.contains(&StoreKind::Cd) {
            return Err(HarnessError::Usage(
                "--replicas sets the client-driven store's copies, and --stores leaves CD out"
                    .into(),
            ));
        }
    }
    let plan = Plan {
        app: args.app,
        nodes: usize::from(args.nodes),
        input: Input::Generated {
            bytes: input_bytes,
            seed: args.seed,
        },
        input_bytes,
        max_value: args.max_value,
        server_workers: usize::from(args.server_workers),
        in_process: args.in_process,
        replicas: args.replicas,
        timeout: Duration::from_secs(args.timeout_s.max(1)),
    };
    let mut stores: Vec<StoreKind> = Vec::new();
    for &s in &args.stores {
        if !s.runs_jobs() {
            return Err(HarnessError::Usage(format!(
                "--stores: jobs do not run on {s} (cd, sd, hy or redis)"
            )));
        }
        if !stores.contains(&s) {
            stores.push(s);
        }
    }
    let mut runs = Vec::new();
    for (i, &store) in stores.iter().enumerate() {
        let dir = out
            .join("runs")
            .join(format!("{:03}-{}", i + 1, store.label()));
        if !args.output.json {
            eprintln!(
                "job: {} of {} on {store} ({} tasks)…",
                crate::report::bytes_label(input_bytes as f64),
                args.app.name(),
                plan.nodes
            );
        }
        let run = match run_store(&exe, &plan, store, i, &dir) {
            Ok(r) => r,
            Err(HarnessError::Interrupted) => return Err(HarnessError::Interrupted),
            Err(e @ HarnessError::NotAvailable { .. }) => {
                StoreRun::not_run(store, "skipped", e.to_string(), dir)
            }
            Err(e) => {
                eprintln!("nessie-bench: job on {store} failed: {e}");
                StoreRun::not_run(store, "failed", e.to_string(), dir)
            }
        };
        if !args.output.json {
            if let Some(r) = &run.report {
                eprintln!("job: {store} done, {:.2} s", r.wall_secs);
            }
        }
        runs.push(run);
    }
    let report = tables::report(&plan, &runs);
    finish(report, &runs, &out, args.output.json)
}

impl App {
    fn name(self) -> &'static str {
        match self {
            App::Sort => "sort",
            App::Wordcount => "wordcount",
        }
    }
}

/// Writes the report, adds every store's run to results.json, and prints
/// the tables (or results.json).
fn finish(mut report: Report, runs: &[StoreRun], out: &Path, json: bool) -> Result<i32> {
    report.write(out)?;
    let path = out.join("results.json");
    let mut value = serde_json::to_value(&report)?;
    if let Some(map) = value.as_object_mut() {
        map.insert("jobs".into(), serde_json::to_value(runs)?);
    }
    let text = serde_json::to_vec_pretty(&value)?;
    std::fs::write(&path, &text).map_err(HarnessError::io("writing", &path))?;
    if json {
        println!("{}", String::from_utf8_lossy(&text));
    } else {
        report.print(out);
    }
    Ok(i32::from(runs.iter().any(|r| r.status == "failed")))
}

/// Kills the task processes and the Redis server and removes the shm files
/// when dropped.
#[derive(Debug, Default)]
struct Guard {
    children: Vec<ChildGuard>,
    redis: Option<PeerServer>,
    shm_dir: Option<PathBuf>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        // Processes first: the files go only once nobody maps them.
        self.children.clear();
        self.redis = None;
        if let Some(dir) = &self.shm_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The configuration of `store` for this plan: shm fabric (or local),
/// tables sized for the job, and CD's replicas when the plan has them.
fn store_config(plan: &Plan, store: StoreKind, cluster_name: String) -> Result<Config> {
    let replicas = match (store, plan.replicas) {
        (StoreKind::Cd, Some(r)) => r,
        _ => 1,
    };
    let base = Config {
        replicas,
        cluster: cluster_name,
        nodes: plan.nodes,
        server_workers: plan.server_workers,
        fabric: if plan.in_process {
            FabricConfig::Local
        } else {
            FabricConfig::Shm { dir: None }
        },
        ..Config::default()
    };
    job_config(
        &base,
        &Sizing {
            tasks: plan.nodes,
            shuffle_bytes: plan.input_bytes,
            max_value: plan.max_value,
            output_in_store: false,
        },
    )
    .map_err(|e| HarnessError::Usage(e.to_string()))
}

fn run_store(
    exe: &Path,
    plan: &Plan,
    store: StoreKind,
    index: usize,
    dir: &Path,
) -> Result<StoreRun> {
    std::fs::create_dir_all(dir).map_err(HarnessError::io("creating", dir))?;
    if store == StoreKind::Redis {
        crate::system::check_available(StoreKind::Redis)?;
    }
    // Named like the harness's other clusters, so that a killed harness's
    // leftovers are swept by `cluster::sweep_stale_shm`.
    let name = format!("bench-{}-{}", std::process::id(), 9000 + index);
    let config = store_config(plan, store, name)?;
    let stage = format!("{}-{}", plan.app.name(), std::process::id());
    let spec = JobSpec {
        max_value: plan.max_value,
        ..JobSpec::new(stage, plan.nodes)
    };
    let mut guard = Guard::default();
    let mut redis = None;
    if store == StoreKind::Redis {
        let server = PeerServer::start(
            StoreKind::Redis,
            std::net::Ipv4Addr::LOCALHOST.into(),
            1,
            plan.input_bytes * 3,
            &dir.join("redis.log"),
        )?;
        redis = Some(server.target.addr);
        guard.redis = Some(server);
    }
    let task_plan = TaskPlan {
        store,
        app: plan.app,
        input: plan.input.clone(),
        spec,
        config,
        redis,
    };
    let plan_path = dir.join("plan.json");
    std::fs::write(&plan_path, serde_json::to_vec_pretty(&task_plan)?)
        .map_err(HarnessError::io("writing", &plan_path))?;
    let server_pid = guard.redis.as_ref().map(PeerServer::pid);
    let server_cpu_before = server_pid.and_then(process_cpu_secs);
    let started = Instant::now();
    let (report, startup_secs) = if plan.in_process {
        run_threaded(&task_plan)?
    } else {
        if store.is_nessie() {
            let shm = task_plan.config.shm_dir();
            let _ = std::fs::remove_dir_all(&shm);
            guard.shm_dir = Some(shm);
        }
        run_processes(exe, plan, &task_plan, &plan_path, dir, &mut guard)?
    };
    let wall_secs = started.elapsed().as_secs_f64();
    let server_cpu_secs = server_pid
        .and_then(process_cpu_secs)
        .zip(server_cpu_before)
        .map(|(after, before)| after - before);
    Ok(StoreRun {
        store,
        status: "ok",
        reason: None,
        report: Some(report),
        wall_secs,
        startup_secs,
        server_cpu_secs,
        dir: dir.to_owned(),
    })
}

fn run_threaded(plan: &TaskPlan) -> Result<(JobReport, f64)> {
    let started = Instant::now();
    let cluster = LocalCluster::start(plan.store, plan.config.clone(), plan.redis)
        .map_err(|e| HarnessError::Usage(e.to_string()))?;
    let startup = started.elapsed().as_secs_f64();
    let job = plan.app.job(plan.input.clone());
    let report = run_threads(&cluster, job.as_ref(), &plan.spec, &plan.config).map_err(|e| {
        HarnessError::NodeFailed {
            node: 0,
            why: e.to_string(),
        }
    })?;
    Ok((report, startup))
}

fn run_processes(
    exe: &Path,
    plan: &Plan,
    task_plan: &TaskPlan,
    plan_path: &Path,
    dir: &Path,
    guard: &mut Guard,
) -> Result<(JobReport, f64)> {
    let talking = Talking::spawn(
        exe,
        plan.nodes,
        "starting a task process",
        |task| {
            vec![
                "job-task".into(),
                "--plan".into(),
                plan_path.into(),
                "--task".into(),
                task.to_string().into(),
            ]
        },
        |task| dir.join(format!("task-{task}.stderr")),
    )?;
    let Talking {
        children,
        lines: rx,
        logs,
    } = talking;
    guard.children = children;
    let failed = |task: usize, what: String| failed(task, &what, &logs[task]);
    let started = Instant::now();
    let deadline = started + plan.timeout;
    let mut outcomes: Vec<Option<TaskOutcome>> = (0..plan.nodes).map(|_| None).collect();
    // Every task reports before any may exit: until the last has passed the
    // job's final barrier, its polls may read any node's memory.
    while outcomes.iter().any(Option::is_none) {
        if interrupted() {
            return Err(HarnessError::Interrupted);
        }
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(Line::Text(task, line)) => match serde_json::from_str::<TaskOutcome>(&line) {
                Ok(TaskOutcome::Failed { error }) => return Err(failed(task, error)),
                Ok(done) => outcomes[task] = Some(done),
                Err(e) => {
                    return Err(HarnessError::Protocol(format!(
                        "task {task} printed {line:?}: {e}"
                    )))
                }
            },
            Ok(Line::Closed(task)) if outcomes[task].is_none() => {
                return Err(failed(task, "exited without a report".into()));
            }
            Ok(Line::Closed(_)) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return Err(HarnessError::Protocol("every task's stdout closed".into()));
            }
        }
        if Instant::now() > deadline {
            return Err(HarnessError::NodeFailed {
                node: outcomes.iter().position(Option::is_none).unwrap_or(0),
                why: format!("the job did not finish within {:?}", plan.timeout),
            });
        }
    }
    let wall_secs = started.elapsed().as_secs_f64();
    // Everyone is done: let the nodes go (stdin closes), then reap them.
    for c in &mut guard.children {
        c.close_stdin();
    }
    let exit_by = Instant::now() + Duration::from_secs(10);
    for c in &mut guard.children {
        c.wait_for(exit_by.saturating_duration_since(Instant::now()));
    }
    let mut tasks = Vec::new();
    let mut server = None::<VerbCounts>;
    let mut startup: f64 = 0.0;
    for o in outcomes.into_iter().flatten() {
        if let TaskOutcome::Done {
            report,
            server_verbs,
            startup_secs,
        } = o
        {
            tasks.push(*report);
            startup = startup.max(startup_secs);
            if let Some(v) = server_verbs {
                server = Some(server.unwrap_or_default() + v);
            }
        }
    }
    Ok((
        JobReport {
            store: task_plan.store.label().to_owned(),
            tasks,
            wall_secs,
            server_verbs: server,
        },
        startup,
    ))
}
