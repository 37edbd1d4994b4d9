//! `nessie-bench`: drives the client-driven store and its baselines with the
//! same workloads and reproduces the experiments of the Nessie paper. See
//! the `harness` library for the architecture.

use clap::{Parser, Subcommand};
use harness::experiments::chaos::ChaosArgs;
use harness::experiments::job::{JobArgs, JobTaskArgs};
use harness::experiments::{
    self, BreakdownArgs, CdfArgs, CompareArgs, ContentionArgs, EnergyArgs, FailoverArgs, PeersArgs,
    SweepArgs, ZipfArgs,
};
use harness::node::{self, NodeArgs};
use harness::{proc, HarnessError};

/// Benchmarks for Nessie (CD) and its server-driven (SD) and hybrid (HY)
/// baselines: each subcommand reproduces one experiment of the paper on a
/// cluster of node processes on this host (or, with --launcher srun|mpirun,
/// on the hosts of a job). Reports go to
/// `results/<subcommand>-<timestamp>/` (results.json, CSV, SVG/PNG, report.md).
#[derive(Debug, Parser)]
#[command(name = "nessie-bench", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// CD vs SD vs HY (with --with-peers also Redis and memcached) on the
    /// default workload (16 KiB values, 90% GETs, uniform keys, 3 nodes):
    /// table and plots.
    Compare(CompareArgs),
    /// Fig. 4: throughput as background CPU hogs are added.
    Contention(ContentionArgs),
    /// Figs. 5–7 and Table 1: value sizes 256 B … 128 KiB × 50/90/99% GETs.
    Sweep(SweepArgs),
    /// Figs. 8–11: CDFs of verbs and bytes per GET and PUT.
    Cdf(CdfArgs),
    /// Fig. 12: Zipf keys, CD goodput relative to SD.
    Zipf(ZipfArgs),
    /// Fig. 13: CD with its optimisations switched on one by one.
    Breakdown(BreakdownArgs),
    /// Fig. 14: power (RAPL/IPMI where the host allows) and CPU cost at
    /// fractions of peak load.
    Energy(EnergyArgs),
    /// CD beside Redis and memcached (on loopback, or on `--peer-host`
    /// under a launcher) and LMDB (one environment in /dev/shm shared by the
    /// node processes), on the same workload.
    Peers(PeersArgs),
    /// A replicated CD cluster loses a node mid-run and gets it back: the
    /// time series of throughput, latency and refusals, and the times to
    /// detect the loss, serve again and restore the copies.
    Failover(FailoverArgs),
    /// Faults on a multi-process cluster: kills, stalls longer than expiry,
    /// full data tables, a crowded index; checks linearizability and wedges.
    Chaos(ChaosArgs),
    /// Run one node of a cluster (the harness starts these itself).
    Node(NodeArgs),
    /// One node of a chaos run (the `chaos` subcommand starts these).
    #[command(hide = true)]
    ChaosNode,
    /// A distributed sort (or word count) through each store: time and
    /// bytes per phase, CPU per node.
    Job(JobArgs),
    /// One task process of `job` (the harness starts these itself).
    #[command(hide = true)]
    JobTask(JobTaskArgs),
    /// A busy loop until stdin closes (background CPU hog).
    #[command(hide = true)]
    Hog,
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Node(args) => std::process::exit(node::main(&args)),
        Cmd::Hog => std::process::exit(node::hog()),
        Cmd::ChaosNode => std::process::exit(experiments::chaos::node_main()),
        Cmd::JobTask(args) => std::process::exit(experiments::job::task::main(&args)),
        command => {
            proc::install_signal_handlers();
            match command {
                Cmd::Compare(a) => experiments::compare::run(a),
                Cmd::Contention(a) => experiments::contention::run(a),
                Cmd::Sweep(a) => experiments::sweep::run(a),
                Cmd::Cdf(a) => experiments::cdf::run(a),
                Cmd::Zipf(a) => experiments::zipf::run(a),
                Cmd::Breakdown(a) => experiments::breakdown::run(a),
                Cmd::Energy(a) => experiments::energy::run(a),
                Cmd::Peers(a) => experiments::peers::run(a),
                Cmd::Chaos(a) => experiments::chaos::run(a),
                Cmd::Failover(a) => experiments::failover::run(a),
                Cmd::Job(a) => experiments::job::run(a),
                Cmd::Node(_) | Cmd::Hog | Cmd::ChaosNode | Cmd::JobTask(_) => {
                    unreachable!("handled above")
                }
            }
        }
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(HarnessError::Interrupted) => {
            eprintln!(
                "nessie-bench: interrupted; every node process and shared-memory file was removed"
            );
            std::process::exit(130);
        }
        Err(e @ (HarnessError::Usage(_) | HarnessError::Replicas { .. })) => {
            eprintln!("nessie-bench: {e}");
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("nessie-bench: {e}");
            std::process::exit(1);
        }
    }
}
