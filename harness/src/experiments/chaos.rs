//! `chaos`: a multi-process cluster under a mixed workload while faults are
//! injected (SIGKILL, SIGSTOP longer than expiry, full data tables, a
//! crowded index; with `--replicas 2`, kill-and-wipes whose replacements
//! rejoin), then the linearizability and wedge verdicts. The engine
//! is `nessie_check::process::chaos`, shared with the bounded run of the test suite.

use super::OutputArgs;
use crate::{HarnessError, Result};
use clap::Args;
use nessie_check::process::chaos::{run as run_chaos, ChaosPlan};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Flags of `chaos`.
#[derive(Debug, Args)]
pub struct ChaosArgs {
    /// Output flags (`--quick`: the bounded run of the test suite, about
    /// half a minute).
    #[command(flatten)]
    pub output: OutputArgs,
    /// Seconds of fault injection (default 120; with --quick 25, or 35
    /// with --replicas 2).
    #[arg(long)]
    pub seconds: Option<u64>,
    /// Node processes (at least 3: all but two may be killed; default 4,
    /// or 3 with --replicas 2).
    #[arg(long, value_parser = clap::value_parser!(u16).range(3..=16))]
    pub nodes: Option<u16>,
    /// Copies of everything: 1 (kills), or 2 (kill-and-wipes: the host
    /// declared lost, a replacement rejoins under its id).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=2))]
    pub replicas: u16,
    /// Seed of the fault schedule and the workloads.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
}

/// Runs `chaos`; returns the exit code (1 if any violation was found).
///
/// # Errors
/// Setting up the run or writing the report failed.
pub fn run(args: ChaosArgs) -> Result<i32> {
    let mut plan = if args.replicas > 1 {
        ChaosPlan::replicated(args.seed)
    } else {
        ChaosPlan::quick(args.seed)
    };
    if let Some(nodes) = args.nodes {
        plan.nodes = usize::from(nodes);
    }
    let quick_seconds = plan.duration.as_secs();
    plan.duration = Duration::from_secs(args.seconds.unwrap_or(if args.output.quick {
        quick_seconds
    } else {
        120
    }));
    let exe = std::env::current_exe()
        .map_err(|e| HarnessError::Usage(format!("cannot find this binary: {e}")))?;
    let report = run_chaos(plan, || {
        let mut c = Command::new(&exe);
        c.arg("chaos-node");
        c
    })
    .map_err(|e| HarnessError::Usage(format!("chaos run failed to start: {e}")))?;
    let out = args.output.out.unwrap_or_else(|| {
        PathBuf::from(format!(
            "results/chaos-{}",
            chrono::Utc::now().format("%Y%m%d-%H%M%S")
        ))
    });
    std::fs::create_dir_all(&out)
        .map_err(|e| HarnessError::Usage(format!("{}: {e}", out.display())))?;
    let json = serde_json::json!({
        "experiment": "chaos",
        "nodes": plan.nodes,
        "replicas": plan.replicas,
        "workers_per_node": plan.workers,
        "keys": plan.keys,
        "seconds": plan.duration.as_secs(),
        "seed": plan.seed,
        "operations": report.operations,
        "unknown_outcomes": report.unknown,
        "faults": report.faults(),
        "kills": report.kills,
        "kill_and_wipes": report.wipes,
        "rejoins": report.rejoins,
        "slowest_rejoin_s": report.slowest_rejoin.as_secs_f64(),
        "longest_loss_s": report.longest_loss.as_secs_f64(),
        "restored_slots": report.restored_slots,
        "restored_bytes": report.restored_bytes,
        "replacement_operations": report.replacement_operations,
        "refused_calls": report.refused,
        "audit_reads": report.audited,
        "stalls": report.stalls,
        "faults_mid_operation": report.faults_mid_operation,
        "data_table_fills": report.fills,
        "index_crowdings": report.crowds,
        "migrations": report.migrations,
        "recoveries": report.recoveries,
        "slots_reclaimed": report.reclaimed,
        "markers_resolved": report.markers_resolved,
        "writes_waited_for_slots": report.waited_for_slots,
        "violations": report.violations,
    });
    let text = serde_json::to_string_pretty(&json).unwrap_or_default();
    let write = |name: &str, body: &str| {
        std::fs::write(out.join(name), body)
            .map_err(|e| HarnessError::Usage(format!("{}: {e}", out.display())))
    };
    write("results.json", &text)?;
    let mut md = format!("# chaos\n\n{}\n", report.summary());
    for v in &report.violations {
        md.push_str(&format!("\n* violation: {v}"));
    }
    write("report.md", &md)?;
    if args.output.json {
        println!("{text}");
    } else {
        println!("{}", report.summary());
        println!("report: {}", out.join("report.md").display());
    }
    Ok(i32::from(!report.violations.is_empty()))
}

/// The body of a chaos node process.
pub fn node_main() -> i32 {
    nessie_check::process::chaos::child_main();
    0
}
