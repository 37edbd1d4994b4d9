//! `failover`: a replicated CD cluster of node processes under a steady
//! open-loop workload loses a node mid-run and gets it back: at `--kill-at`
//! the victim is lost (on `shm` its regions are declared lost first, as a
//! host's memory would be; then its process gets SIGKILL), at `--rejoin-at`
//! a replacement process starts with `Node::rejoin` under the same id, and
//! the run goes on until `--end-at` (and at least `--after-restore` past
//! the restore). Every node records per time bucket what its operations
//! ended with; the report gives the time series (`timeline.csv`), a plot of
//! throughput and p99 with the events marked (`failover.svg`), and three
//! times: **detect** (the loss → the first `ViewChanging` a survivor saw),
//! **serve again** (the loss → the first bucket after the detection with no
//! refusal and at least half the median throughput before the loss) and
//! **restore** (the replacement's start → its `Node::rejoin` returned),
//! with what the restore copied.

mod analysis;
mod driver;
mod tables;

use super::{Common, Ctx, PointArgs};
use crate::error::{HarnessError, Result};
use crate::launcher::{Fabric, LauncherKind};
use crate::measure::timeline::merge;
use crate::report::{load_average, num, Report, RunRecord, RunStatus};
use crate::spec::{check_replicas, size_tables_for_rate, Load, RunSpec, TimelineSpec};
use crate::workload::{KeyDistribution, WorkloadSpec};
use analysis::Clock;
use driver::{Outcome, Schedule};
use nessie::{Config, FabricConfig};
use nessie_examples::StoreKind;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// Flags of `failover`.
#[derive(Clone, Debug, clap::Args)]
pub struct FailoverArgs {
    /// Common flags (`--rate`: the open loop's offered operations per
    /// second over the cluster, default 10000, with --quick 4000).
    #[command(flatten)]
    pub common: Common,
    /// The workload point.
    #[command(flatten)]
    pub point: PointArgs,
    /// Copies of every entry and index slot (at least 2: the lost node's
    /// share must survive it).
    #[arg(long, default_value_t = 2, value_parser = super::parse_replicas)]
    pub replicas: usize,
    /// The node that is lost and replaced.
    #[arg(long, default_value_t = 1)]
    pub victim: usize,
    /// Seconds from the start of the run to the loss (default 3, with
    /// --quick 1).
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    pub kill_at: Option<f64>,
    /// Seconds from the start of the run to the start of the replacement
    /// (default 10, with --quick 5).
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    pub rejoin_at: Option<f64>,
    /// Seconds from the start of the run to its end at the earliest
    /// (default 20, with --quick 9).
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    pub end_at: Option<f64>,
    /// Seconds the run goes on after the restore at least: a restore that
    /// finishes late extends the run (default 2, with --quick 1).
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    pub after_restore: Option<f64>,
    /// Width of a time bucket, ms.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(10..=10_000))]
    pub bucket_ms: u64,
    /// The store's operation deadline, ms (default the store's, 500; with
    /// --quick 300).
    #[arg(long, value_name = "MS")]
    pub op_timeout_ms: Option<u64>,
    /// The lease on the view, ms (default the store's: twice the deadline
    /// plus the landing bound, at least 2000; with --quick 1500).
    #[arg(long, value_name = "MS")]
    pub lease_ms: Option<u64>,
    /// How long a silent heartbeat takes to make a node suspected, ms
    /// (default the store's, 1000; with --quick 400).
    #[arg(long, value_name = "MS")]
    pub failure_timeout_ms: Option<u64>,
}

/// Parses a positive number of seconds.
fn parse_secs(s: &str) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!("`{s}` is not a number of seconds above 0")),
    }
}

/// The run's schedule and load, from the flags.
#[derive(Clone, Debug)]
struct Plan {
    schedule: Schedule,
    rate: f64,
    bucket: Duration,
}

impl Plan {
    /// Checks the flags and fills in the defaults (`--quick`'s or not).
    fn new(args: &FailoverArgs) -> Result<Self> {
        let quick = args.common.output.quick;
        let pick = |v: Option<f64>, full: f64, short: f64| {
            Duration::from_secs_f64(v.unwrap_or(if quick { short } else { full }))
        };
        let nodes = usize::from(args.common.nodes);
        let schedule = Schedule {
            victim: args.victim,
            kill_at: pick(args.kill_at, 3.0, 1.0),
            rejoin_at: pick(args.rejoin_at, 10.0, 5.0),
            end_at: pick(args.end_at, 20.0, 9.0),
            after_restore: pick(args.after_restore, 2.0, 1.0),
            // Node::rejoin waits up to attach_timeout for each of its
            // two views; the copy comes on top.
            rejoin_limit: Config::default().attach_timeout * 2 + Duration::from_secs(30),
            grace: Duration::from_millis(50),
        };
        let usage = |m: String| Err(HarnessError::Usage(m));
        if args.replicas < 2 {
            return usage(
                "failover needs --replicas 2 or more: with one copy the lost node's share is gone, and the store refuses a rejoin".into(),
            );
        }
        check_replicas(args.replicas, nodes)?;
        if args.victim >= nodes {
            return usage(format!(
                "--victim {} is not a node of --nodes {nodes}",
                args.victim
            ));
        }
        let bucket = Duration::from_millis(args.bucket_ms);
        let s = &schedule;
        if s.kill_at < bucket * 3 || s.rejoin_at <= s.kill_at || s.end_at < s.rejoin_at {
            return usage(format!(
                "the schedule must run --kill-at ({:?}, at least three buckets) < --rejoin-at ({:?}) <= --end-at ({:?})",
                s.kill_at, s.rejoin_at, s.end_at
            ));
        }
        let c = &args.common;
        if c.cluster.launcher != LauncherKind::Local {
            return usage(
                "failover starts, kills and replaces node processes itself: use --launcher local (a replacement cannot join a launcher's step yet)".into(),
            );
        }
        if !matches!(c.cluster.fabric, Fabric::Shm | Fabric::Tcp) {
            return usage("failover runs on --fabric shm or tcp".into());
        }
        if c.cpu_hogs > 0 {
            return usage("failover runs no CPU hogs".into());
        }
        if c.systems.as_ref().is_some_and(|s| s != &[StoreKind::Cd]) {
            return usage("failover runs CD only (the other systems keep no replicas)".into());
        }
        let rate = c.rate.unwrap_or(if quick { 4_000.0 } else { 10_000.0 });
        Ok(Plan {
            schedule,
            rate,
            bucket,
        })
    }

    fn limit(&self) -> Duration {
        let s = &self.schedule;
        s.end_at + s.rejoin_limit + s.after_restore + Duration::from_secs(60)
    }
}

/// The workload: the point's values, keys by `--keys` or about 64 MiB of
/// values (4 MiB with --quick), at least 256 and at most 65,536 — the
/// restore copies every slot of every table, so the tables are kept
/// moderate.
fn workload(ctx: &Ctx, point: &PointArgs) -> Result<WorkloadSpec> {
    let mut w = ctx.workload(point.value_size, point.get_ratio, KeyDistribution::Uniform);
    if ctx.common.keys.is_none() {
        let budget: u64 = if ctx.common.output.quick {
            4 << 20
        } else {
            64 << 20
        };
        w.keys = (budget / point.value_size.max(1) as u64).clamp(256, 65_536);
    }
    w.validate()?;
    Ok(w)
}

/// The store's configuration of the run: the spec's, with data tables
/// sized for the offered load, the timeouts of the flags, and on `tcp`
/// fixed addresses (the replacement must find its peers and take the lost
/// node's address; the harness's rendezvous serves only once).
fn configure(spec: &RunSpec, args: &FailoverArgs, rate: f64, cluster: &str) -> Result<Config> {
    let mut c = spec.config(cluster)?;
    size_tables_for_rate(&mut c, &spec.workload, spec.nodes, spec.load_factor, rate);
    let quick = args.common.output.quick;
    let ms = |v: Option<u64>, short: u64| v.or(quick.then_some(short)).map(Duration::from_millis);
    if let Some(t) = ms(args.op_timeout_ms, 300) {
        c.op_timeout = t;
    }
    if let Some(t) = ms(args.lease_ms, 1_500) {
        c.lease = t;
    }
    if let Some(t) = ms(args.failure_timeout_ms, 400) {
        c.failure_timeout = t;
    }
    if let FabricConfig::Tcp {
        peers, rendezvous, ..
    } = &mut c.fabric
    {
        *rendezvous = None;
        while peers.len() < spec.nodes {
            let port = crate::peers::free_port(IpAddr::V4(Ipv4Addr::LOCALHOST))?;
            let address = format!("127.0.0.1:{port}");
            if !peers.contains(&address) {
                peers.push(address);
            }
        }
    }
    crate::launcher::checkable(&c).validate()?;
    Ok(c)
}

/// Runs `failover`; returns the exit code (1 if the run failed).
///
/// # Errors
/// [`HarnessError::Usage`] or [`HarnessError::Replicas`] for flags that
/// cannot run; Ctrl-C; a report that cannot be written.
pub fn run(args: FailoverArgs) -> Result<i32> {
    let plan = Plan::new(&args)?;
    let ctx = Ctx::new("failover", args.common.clone())?;
    let workload = workload(&ctx, &args.point)?;
    let end_ms = u64::try_from(plan.schedule.end_at.as_millis()).unwrap_or(u64::MAX);
    let mut spec = ctx.spec("failover".into(), StoreKind::Cd, workload.clone(), end_ms);
    spec.replicas = Some(args.replicas);
    spec.load = Load::Open {
        ops_per_sec: plan.rate,
    };
    spec.warmup_ms = 0;
    spec.timeline = Some(TimelineSpec {
        bucket_ms: args.bucket_ms,
        limit_ms: u64::try_from(plan.limit().as_millis()).unwrap_or(u64::MAX),
    });
    spec.validate()?;
    let cluster = crate::cluster::cluster_name();
    let config = configure(&spec, &args, plan.rate, &cluster)?;
    let s = &plan.schedule;
    let title = format!(
        "node {} of {} lost at {:.1} s and replaced at {:.1} s; CD r = {}, {}, {} ops/s offered",
        s.victim,
        spec.nodes,
        s.kill_at.as_secs_f64(),
        s.rejoin_at.as_secs_f64(),
        args.replicas,
        workload.describe(),
        num(plan.rate)
    );
    let mut report = ctx.report("failover", &title, params(&spec, &config, &plan));
    let dir = ctx.out.join("runs").join("001-failover");
    let bar = ctx.bar();
    bar.set_length(u64::try_from(s.end_at.as_millis()).unwrap_or(u64::MAX));
    let mut progress = |at: Duration, what: &str| {
        bar.set_position(u64::try_from(at.as_millis()).unwrap_or(u64::MAX));
        bar.set_message(format!("failover: {what}"));
    };
    let exe = ctx.exe().to_path_buf();
    let result = driver::run(&exe, &spec, &config, &cluster, &dir, s, &mut progress);
    bar.finish_and_clear();
    let mut record = RunRecord {
        label: spec.label.clone(),
        system: StoreKind::Cd,
        status: RunStatus::Ok,
        reason: None,
        spec: spec.clone(),
        figures: None,
        dir,
    };
    match result {
        Ok(outcome) => add_results(&mut report, &outcome, &config, &args, &plan),
        Err(HarnessError::Interrupted) => {
            record.status = RunStatus::Failed;
            record.reason = Some("interrupted".into());
            report.runs.push(record);
            report.notes.push("interrupted by the user".into());
            if report.write(&ctx.out).is_ok() {
                eprintln!("nessie-bench: partial report in {}", ctx.out.display());
            }
            return Err(HarnessError::Interrupted);
        }
        Err(e) => {
            eprintln!("nessie-bench: the failover run failed: {e}");
            record.status = RunStatus::Failed;
            record.reason = Some(e.to_string());
        }
    }
    report.runs.insert(0, record);
    ctx.finish(report)
}

/// The report's parameters: the workload, the schedule, the load and the
/// store's times and table sizes.
fn params(spec: &RunSpec, c: &Config, plan: &Plan) -> serde_json::Value {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let s = &plan.schedule;
    serde_json::json!({
        "workload": spec.workload,
        "replicas": c.replicas,
        "victim": s.victim,
        "kill_at_s": s.kill_at.as_secs_f64(),
        "rejoin_at_s": s.rejoin_at.as_secs_f64(),
        "end_at_s": s.end_at.as_secs_f64(),
        "after_restore_s": s.after_restore.as_secs_f64(),
        "bucket_ms": ms(plan.bucket),
        "offered_ops_per_s": plan.rate,
        "op_timeout_ms": ms(c.op_timeout),
        "lease_ms": ms(c.effective_lease()),
        "failure_timeout_ms": ms(c.failure_timeout),
        "landing_bound_ms": ms(c.landing_bound()),
        "max_clock_skew_ms": ms(c.max_clock_skew),
        "data_bytes_per_node": c.data_bytes_per_node,
        "index_slots_per_node": c.index_slots_per_node,
    })
}

/// The tables, the time series, the figure, the three times (also as
/// `outcome` in results.json) and the notes of a completed run.
fn add_results(
    report: &mut Report,
    o: &Outcome,
    config: &Config,
    args: &FailoverArgs,
    plan: &Plan,
) {
    let clock = Clock::new(o.run_us, plan.bucket.as_micros() as u64);
    let slices = merge(&o.timelines);
    let rows = analysis::rows(&slices, clock, o.stop_us);
    let marks = analysis::marks(&rows, &slices, clock, o);
    let phases = analysis::phases(&rows, &slices, clock, &marks);
    let setting = tables::Setting {
        victim: plan.schedule.victim,
        fabric: args.common.cluster.fabric,
        replicas: config.replicas,
        data_bytes_per_node: config.data_bytes_per_node,
    };
    report.tables.push(tables::times(&marks, &setting));
    report.tables.push(tables::restore(o, &setting));
    report.tables.push(tables::phases(&phases));
    report.data.push(tables::series(&rows));
    report
        .figures
        .push(tables::figure(&rows, &marks, plan.schedule.victim));
    report.outcome = serde_json::json!({
        "detect_s": marks.detect(),
        "serve_again_s": marks.serve_again(),
        "restore_s": marks.restore(),
        "kill_at_s": marks.kill_s,
        "detected_at_s": marks.detect_s,
        "served_at_s": marks.serve_s,
        "rejoin_started_at_s": marks.spawn_s,
        "restored_at_s": marks.restored_s,
        "stopped_at_s": marks.stop_s,
        "baseline_ops_per_s": marks.baseline_ops_s,
        "ok_after_restore": marks.ok_after_restore,
        "restore": o.restore,
    });
    report.notes.extend(o.notes.iter().cloned());
    for (what, missing) in [
        (
            "no survivor saw a ViewChanging after the loss",
            marks.detect_s.is_none(),
        ),
        (
            "no bucket served again before the replacement started",
            marks.serve_s.is_none(),
        ),
        ("the restore did not finish", marks.restored_s.is_none()),
    ] {
        if missing {
            report.notes.push(format!("{what}: that time is missing"));
        }
    }
    let mut errors = std::collections::BTreeMap::new();
    for t in &o.timelines {
        for (m, n) in &t.errors {
            *errors.entry(m.clone()).or_insert(0u64) += n;
        }
    }
    if let Some((m, n)) = errors.iter().max_by_key(|e| e.1) {
        report.notes.push(format!(
            "{} operations failed in all (not refusals); the most common error ({n}×): {m}",
            errors.values().sum::<u64>()
        ));
    }
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    if let Some(load) = load_average() {
        report.notes.push(format!(
            "1-minute load average {load:.1} on {cores} cores right after the run (its own node processes included): the times depend on how promptly the membership threads ran"
        ));
    }
}
