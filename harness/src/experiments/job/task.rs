//! The task process of `nessie-bench job`: one node of the store and one
//! task of the job (`nessie-bench job-task --plan plan.json --task i`).
//!
//! It starts its node (waiting for its peers), runs
//! [`nessie_examples::run_task`] with one client, prints one JSON line, a
//! [`TaskOutcome`], on stdout, and then keeps its node up until the harness
//! closes its stdin. It must not exit earlier: other tasks may still be
//! polling the job's last barrier, whose keys can live in this node's
//! memory (SD and HY place keys on home nodes by hash; CD in the writer's
//! memory, which on `shm` outlives the process but on `tcp` does not), and
//! SD's and HY's server workers must keep answering. The harness closes the
//! tasks' stdin once every task has reported.

use crate::error::{HarnessError, Result};
use crate::proc::die_with_parent;
use nessie::fabric::VerbCounts;
use nessie::Config;
use nessie_examples::{
    run_task, Input, JobSpec, MapReduce, Sort, StoreKind, StoreNode, TaskReport, WordCount,
};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Which job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum App {
    /// The distributed sort (100-byte records).
    Sort,
    /// Word count.
    Wordcount,
}

impl App {
    /// The job over `input`.
    #[must_use]
    pub fn job(self, input: Input) -> Box<dyn MapReduce> {
        match self {
            App::Sort => Box::new(Sort { input }),
            App::Wordcount => Box::new(WordCount { input }),
        }
    }
}

/// Everything a task process needs, written by the harness as JSON.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TaskPlan {
    /// The store.
    pub store: StoreKind,
    /// The job.
    pub app: App,
    /// Its input.
    pub input: Input,
    /// The job's parameters.
    pub spec: JobSpec,
    /// The store's configuration (shm fabric).
    pub config: Config,
    /// The Redis server, for [`StoreKind::Redis`].
    pub redis: Option<SocketAddr>,
}

impl TaskPlan {
    /// Reads a plan.
    ///
    /// # Errors
    /// [`HarnessError::Io`] or [`HarnessError::Json`].
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read(path).map_err(HarnessError::io("reading", path))?;
        Ok(serde_json::from_slice(&text)?)
    }
}

/// The line a task process prints.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "outcome")]
pub enum TaskOutcome {
    /// The task completed and validated the job.
    Done {
        /// What it measured (with `process_cpu_secs`).
        report: Box<TaskReport>,
        /// Verbs of the node's server workers during the task (SD, HY).
        server_verbs: Option<VerbCounts>,
        /// Seconds from process start until the node had attached to
        /// every peer.
        startup_secs: f64,
    },
    /// It failed.
    Failed {
        /// Why.
        error: String,
    },
}

/// Flags of the hidden `job-task` subcommand.
#[derive(Debug, clap::Args)]
pub struct JobTaskArgs {
    /// The plan the harness wrote.
    #[arg(long)]
    pub plan: PathBuf,
    /// This process's task (and node) index.
    #[arg(long)]
    pub task: usize,
}

/// Runs one task process; returns its exit code.
#[must_use]
pub fn main(args: &JobTaskArgs) -> i32 {
    die_with_parent();
    match run(args) {
        Ok(TaskOutcome::Done { .. }) => 0,
        Ok(TaskOutcome::Failed { .. }) => 1,
        Err(e) => {
            // Before the node was up: report, and exit at once.
            let outcome = TaskOutcome::Failed {
                error: e.to_string(),
            };
            if let Ok(line) = serde_json::to_string(&outcome) {
                println!("{line}");
            }
            1
        }
    }
}

/// Blocks until the harness closes stdin (the node stays up meanwhile).
fn linger() {
    let mut sink = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
}

fn run(args: &JobTaskArgs) -> Result<TaskOutcome> {
    let started = std::time::Instant::now();
    let plan = TaskPlan::read(&args.plan)?;
    let job = plan.app.job(plan.input.clone());
    let node = StoreNode::start(plan.store, plan.config.clone(), args.task, plan.redis)
        .map_err(|e| HarnessError::Usage(e.to_string()))?;
    let mut client = node
        .client()
        .map_err(|e| HarnessError::Usage(e.to_string()))?;
    let startup_secs = started.elapsed().as_secs_f64();
    let server_before = node.server_verbs();
    let cpu_secs = || power_ipmi::own_process_cpu_times().map_or(0.0, |t| t.cpu_s());
    let cpu_before = cpu_secs();
    let result = run_task(client.as_mut(), job.as_ref(), &plan.spec, args.task);
    let cpu = cpu_secs() - cpu_before;
    let server_verbs = node
        .server_verbs()
        .zip(server_before)
        .map(|(after, before)| after - before);
    let outcome = match result {
        Ok(mut report) => {
            report.process_cpu_secs = Some(cpu);
            TaskOutcome::Done {
                report: Box::new(report),
                server_verbs,
                startup_secs,
            }
        }
        Err(e) => TaskOutcome::Failed {
            error: e.to_string(),
        },
    };
    if let Ok(line) = serde_json::to_string(&outcome) {
        println!("{line}");
    }
    linger();
    drop(node);
    Ok(outcome)
}
