//! The paper's experiments, one module per subcommand, and what they share:
//! common flags, run planning, the progress bar, running a list of runs and
//! finishing the report.

pub mod breakdown;
pub mod cdf;
pub mod chaos;
pub mod compare;
pub mod contention;
mod data_tables;
pub mod energy;
pub mod job;
pub mod peers;
pub mod sweep;
mod tails;
pub mod zipf;

pub use breakdown::BreakdownArgs;
pub use cdf::CdfArgs;
pub use compare::CompareArgs;
pub use contention::ContentionArgs;
pub use energy::EnergyArgs;
pub use peers::PeersArgs;
pub use sweep::SweepArgs;
pub use zipf::ZipfArgs;

use crate::cluster::{self, Progress};
use crate::error::{HarnessError, Result};
use crate::launcher::{ClusterArgs, Launching};
use crate::measure::{Merged, RunFigures};
use crate::report::{num, Figure, FigureKind, Report, RunRecord, RunStatus, Table};
use crate::spec::RunSpec;
use crate::workload::{KeyDistribution, WorkloadSpec};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use nessie_examples::StoreKind;
use std::path::PathBuf;
use std::time::Duration;

/// Flags of every subcommand that writes a report (the experiments, `job`
/// and `chaos`).
#[derive(Clone, Debug, clap::Args, serde::Serialize)]
pub struct OutputArgs {
    /// A complete but short run (under a minute on 2 cores): fewer points,
    /// fewer keys or less input, shorter phases.
    #[arg(long)]
    pub quick: bool,
    /// Where to write the report (default `results/<subcommand>-<timestamp>`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print only machine-readable JSON (results.json) on stdout.
    #[arg(long)]
    pub json: bool,
}

impl OutputArgs {
    /// `--out`, or `results/<name>-<local time>`.
    #[must_use]
    pub fn dir(&self, name: &str) -> PathBuf {
        self.out.clone().unwrap_or_else(|| {
            PathBuf::from("results").join(format!(
                "{name}-{}",
                chrono::Local::now().format("%Y%m%d-%H%M%S")
            ))
        })
    }
}

/// The workload point of the experiments that measure one (16 KiB values,
/// 90 % GETs unless told otherwise).
#[derive(Clone, Debug, clap::Args)]
pub struct PointArgs {
    /// Value size (e.g. 16KiB, 256, 2m).
    #[arg(long, default_value = "16KiB", value_parser = parse_size)]
    pub value_size: usize,
    /// Fraction of GETs (0.9 or 90%).
    #[arg(long, default_value = "0.9", value_parser = parse_fraction)]
    pub get_ratio: f64,
}

/// The value sizes and GET fractions of the experiments that measure a grid
/// of them (`sweep`: 256 B … 128 KiB, --quick 2KiB,16KiB,128KiB; `zipf`:
/// 256B,2KiB,16KiB,128KiB, --quick 256B,16KiB).
#[derive(Clone, Debug, clap::Args)]
pub struct GridArgs {
    /// Value sizes (default: the experiment's; see its description).
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    pub value_sizes: Option<Vec<usize>>,
    /// GET fractions (default 0.5,0.9,0.99; --quick: sweep 0.5,0.9, zipf
    /// 0.5,0.99).
    #[arg(long, value_delimiter = ',', value_parser = parse_fraction)]
    pub get_ratios: Option<Vec<f64>>,
}

/// Flags every experiment takes.
#[derive(Clone, Debug, clap::Args, serde::Serialize)]
pub struct Common {
    /// Output flags.
    #[command(flatten)]
    #[serde(flatten)]
    pub output: OutputArgs,
    /// Fabric and launcher of the node processes.
    #[command(flatten)]
    #[serde(flatten)]
    pub cluster: ClusterArgs,
    /// Systems to run (default: the experiment's own list).
    #[arg(long, value_delimiter = ',', value_name = "SYSTEM,...")]
    pub systems: Option<Vec<StoreKind>>,
    /// Node processes per cluster.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub nodes: u16,
    /// Worker threads per node. CD and the peers' clients use them all;
    /// SD and HY give `--server-workers` of them to server threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: u16,
    /// Server worker threads per node of SD and HY.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub server_workers: u16,
    /// Number of keys (default: from the value size, about 256 MiB of data
    /// and 1,000 to 200,000 keys; with --quick 8 MiB and 256 to 4,096 keys).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: Option<u64>,
    /// Key size in bytes.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u16).range(8..=1024))]
    pub key_size: u16,
    /// Background CPU hogs (unpinned busy processes) beside every run, to
    /// emulate a shared host (`contention` sets its own).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=256))]
    pub cpu_hogs: u16,
    /// Open loop: Poisson arrivals at this many operations per second over
    /// the whole cluster (default: closed loop; `energy` sets its own).
    #[arg(long, value_name = "OPS_PER_SEC", value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// Seed of every random stream.
    #[arg(long, default_value_t = WorkloadSpec::default().seed)]
    pub seed: u64,
    /// Measured phase of every run, ms (overrides the experiment's default).
    #[arg(long, hide = true)]
    pub duration_ms: Option<u64>,
    /// Warm-up of every run, ms (overrides the default).
    #[arg(long, hide = true)]
    pub warmup_ms: Option<u64>,
}

/// Parses a size: `16384`, `16k`, `16KiB`, `2m`.
///
/// # Errors
/// A message for clap.
pub fn parse_size(s: &str) -> std::result::Result<usize, String> {
    let t = s.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: usize = digits.parse().map_err(|_| format!("`{s}` is not a size"))?;
    let mult = match unit.trim() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        _ => return Err(format!("`{s}`: unknown unit (use B, KiB or MiB)")),
    };
    match n.checked_mul(mult) {
        Some(v) if (1..=nessie::MAX_VALUE_SIZE).contains(&v) => Ok(v),
        _ => Err(format!("`{s}` is not between 1 B and 1 GiB")),
    }
}

/// Parses a positive rate (operations per second).
///
/// # Errors
/// A message for clap.
pub fn parse_rate(s: &str) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!(
            "`{s}` is not a positive number of operations per second"
        )),
    }
}

/// Parses a fraction: `0.9` or `90%`.
///
/// # Errors
/// A message for clap.
pub fn parse_fraction(s: &str) -> std::result::Result<f64, String> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("`{s}` is not a fraction (e.g. 0.9 or 90%)"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("`{s}` is not within 0 and 1 (0 % and 100 %)"))
    }
}

/// A run that was planned: its spec and, once run, its record and merged
/// histograms.
#[derive(Debug)]
pub struct Done {
    /// The record that goes into results.json.
    pub record: RunRecord,
    /// Merged histograms of a completed run.
    pub merged: Option<Merged>,
}

impl Done {
    /// The figures of a completed run.
    #[must_use]
    pub fn figures(&self) -> Option<&RunFigures> {
        self.record.figures.as_ref()
    }
}

/// An experiment in progress: flags, output directory, progress bar.
#[derive(Debug)]
pub struct Ctx {
    /// The common flags.
    pub common: Common,
    /// The report directory.
    pub out: PathBuf,
    /// Where the node processes run and what carries their verbs.
    pub launching: Launching,
    exe: PathBuf,
    bar: ProgressBar,
    runs: usize,
}

impl Ctx {
    /// Starts experiment `name`: checks the fabric and launcher flags,
    /// resolves the output directory and this binary's path, and sweeps
    /// stale shared memory of killed harnesses.
    ///
    /// # Errors
    /// [`HarnessError::Usage`] for fabric and launcher flags that cannot be
    /// run ([`ClusterArgs::resolve`]); [`HarnessError::Io`] if the binary's
    /// path is unknown.
    pub fn new(name: &str, common: Common) -> Result<Self> {
        let launching = common.cluster.resolve()?;
        let exe = std::env::current_exe()
            .map_err(HarnessError::io("locating", "the nessie-bench binary"))?;
        let out = common.output.dir(name);
        cluster::sweep_stale_shm();
        let bar = if common.output.json {
            ProgressBar::hidden()
        } else {
            ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr())
        };
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] [{bar:30}] {percent:>3}% {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        Ok(Ctx {
            common,
            out,
            launching,
            exe,
            bar,
            runs: 0,
        })
    }

    /// The report of this experiment; its parameters are `params` plus the
    /// common flags, and its setup says where the nodes ran.
    #[must_use]
    pub fn report(&self, experiment: &str, title: &str, mut params: serde_json::Value) -> Report {
        if let Some(map) = params.as_object_mut() {
            map.insert(
                "common".to_owned(),
                serde_json::to_value(&self.common).unwrap_or_default(),
            );
        }
        let mut report = Report::new(experiment, title, params);
        report.setup = self.launching.describe(usize::from(self.common.nodes));
        report
    }

    /// The systems to run: `--systems` or the experiment's default.
    #[must_use]
    pub fn systems(&self, default: &[StoreKind]) -> Vec<StoreKind> {
        self.common
            .systems
            .clone()
            .unwrap_or_else(|| default.to_vec())
    }

    /// The measured duration: `--duration-ms`, else `quick_ms` or `full_ms`.
    #[must_use]
    pub fn duration_ms(&self, full_ms: u64, quick_ms: u64) -> u64 {
        self.common
            .duration_ms
            .unwrap_or(if self.common.output.quick {
                quick_ms
            } else {
                full_ms
            })
    }

    /// A workload with the common flags applied; the key count defaults to
    /// about 256 MiB of values (8 MiB with `--quick`).
    #[must_use]
    pub fn workload(
        &self,
        value_size: usize,
        get_ratio: f64,
        distribution: KeyDistribution,
    ) -> WorkloadSpec {
        let (budget, lo, hi) = if self.common.output.quick {
            (8u64 << 20, 256, 4_096)
        } else {
            (256u64 << 20, 1_000, 200_000)
        };
        let keys = self
            .common
            .keys
            .unwrap_or_else(|| (budget / value_size.max(1) as u64).clamp(lo, hi));
        WorkloadSpec {
            keys,
            key_size: usize::from(self.common.key_size),
            value_size,
            get_ratio,
            distribution,
            seed: self.common.seed,
        }
    }

    /// A run spec with the common flags applied; measured for `duration_ms`
    /// after a warm-up of a fifth of that (at most 1 s) unless overridden.
    #[must_use]
    pub fn spec(
        &self,
        label: String,
        system: StoreKind,
        workload: WorkloadSpec,
        duration_ms: u64,
    ) -> RunSpec {
        let mut s = RunSpec::new(label, system, workload).with_threads(
            usize::from(self.common.threads),
            usize::from(self.common.server_workers),
        );
        s.nodes = usize::from(self.common.nodes);
        s.fabric = self.launching.fabric;
        s.hogs = usize::from(self.common.cpu_hogs);
        if let Some(ops_per_sec) = self.common.rate {
            s.load = crate::spec::Load::Open { ops_per_sec };
        }
        s.duration_ms = duration_ms;
        s.warmup_ms = self.common.warmup_ms.unwrap_or((duration_ms / 5).min(1000));
        s
    }

    /// The workload at `point` with keys drawn from `distribution`.
    ///
    /// # Errors
    /// [`HarnessError::Usage`] for a workload that cannot be generated.
    pub fn point_workload(
        &self,
        point: &PointArgs,
        distribution: KeyDistribution,
    ) -> Result<WorkloadSpec> {
        let workload = self.workload(point.value_size, point.get_ratio, distribution);
        workload.validate()?;
        Ok(workload)
    }

    /// The report and the runs of an experiment that runs `workload` once
    /// on each of `systems` (each run named by its system); the report's
    /// parameters are the workload, the systems and the duration.
    pub fn one_run_each(
        &self,
        experiment: &str,
        title: &str,
        workload: &WorkloadSpec,
        systems: &[StoreKind],
        duration_ms: u64,
    ) -> (Report, Vec<RunSpec>) {
        let specs = systems
            .iter()
            .map(|&s| self.spec(s.label().to_owned(), s, workload.clone(), duration_ms))
            .collect();
        let report = self.report(
            experiment,
            title,
            serde_json::json!({
                "workload": workload,
                "systems": systems,
                "duration_ms": duration_ms,
            }),
        );
        (report, specs)
    }

    /// One run per GET ratio × value size × system (in that nesting), labelled
    /// `<system>-<size>-<ratio>get<suffix>`.
    ///
    /// # Errors
    /// [`HarnessError::Usage`] for a workload that cannot be generated.
    pub fn grid(
        &self,
        systems: &[StoreKind],
        sizes: &[usize],
        ratios: &[f64],
        distribution: KeyDistribution,
        duration_ms: u64,
        suffix: &str,
    ) -> Result<Vec<RunSpec>> {
        let mut specs = Vec::new();
        for &ratio in ratios {
            for &size in sizes {
                let w = self.workload(size, ratio, distribution);
                w.validate()?;
                for &s in systems {
                    let label = format!(
                        "{}-{}-{}get{suffix}",
                        s.label(),
                        crate::report::bytes_label(size as f64),
                        crate::workload::percent(ratio)
                    );
                    specs.push(self.spec(label, s, w.clone(), duration_ms));
                }
            }
        }
        Ok(specs)
    }

    /// Runs `specs` one after another with a progress bar, recording each in
    /// `report`. Unavailable systems are skipped and failed runs recorded,
    /// and the experiment goes on; a Ctrl-C stops it after writing the
    /// partial report.
    ///
    /// # Errors
    /// [`HarnessError::Interrupted`] on Ctrl-C, with every process and file
    /// of the current run already cleaned up.
    pub fn run_all(&mut self, specs: Vec<RunSpec>, report: &mut Report) -> Result<Vec<Done>> {
        let overhead = Duration::from_millis(800);
        let total: Duration = specs.iter().map(|s| s.run_time() + overhead).sum();
        self.bar.set_length(total.as_millis() as u64);
        self.bar.set_position(0);
        let mut base = Duration::ZERO;
        let mut done = Vec::with_capacity(specs.len());
        let count = specs.len();
        for (i, spec) in specs.into_iter().enumerate() {
            self.runs += 1;
            let dir =
                self.out
                    .join("runs")
                    .join(format!("{:03}-{}", self.runs, sanitize(&spec.label)));
            let head = format!("[{}/{count}] {}", i + 1, spec.label);
            let bar = self.bar.clone();
            let run_time = spec.run_time();
            let mut on_progress = |p: Progress| {
                let at = base + p.run_elapsed.min(run_time);
                bar.set_position(at.as_millis() as u64);
                let rate = if p.run_elapsed.as_secs_f64() > 0.0 {
                    format!(" {} ops/s", num(p.ops as f64 / p.run_elapsed.as_secs_f64()))
                } else {
                    String::new()
                };
                bar.set_message(format!("{head}: {}{rate}", p.phase));
            };
            let result = match cluster::check_runnable(&spec, &self.launching) {
                Err(e) => Err(e),
                Ok(()) => cluster::run(&self.exe, &spec, &self.launching, &dir, &mut on_progress),
            };
            base += run_time + overhead;
            self.bar.set_position(base.as_millis() as u64);
            let mut record = RunRecord {
                label: spec.label.clone(),
                system: spec.system,
                status: RunStatus::Ok,
                reason: None,
                spec,
                figures: None,
                dir,
            };
            let merged = match result {
                Ok(out) => {
                    check_sanity(&record, &out.figures, report);
                    record.figures = Some(out.figures);
                    Some(out.merged)
                }
                Err(HarnessError::Interrupted) => {
                    self.bar.abandon_with_message("interrupted");
                    report.runs.push(record);
                    report.notes.push(
                        "interrupted by the user: the report holds the runs completed so far"
                            .into(),
                    );
                    if report.write(&self.out).is_ok() {
                        eprintln!("nessie-bench: partial report in {}", self.out.display());
                    }
                    return Err(HarnessError::Interrupted);
                }
                Err(e @ HarnessError::NotAvailable { .. }) => {
                    record.status = RunStatus::Skipped;
                    record.reason = Some(e.to_string());
                    None
                }
                Err(e) => {
                    self.bar
                        .suspend(|| eprintln!("nessie-bench: run {} failed: {e}", record.label));
                    record.status = RunStatus::Failed;
                    record.reason = Some(e.to_string());
                    None
                }
            };
            report.runs.push(record.clone());
            done.push(Done { record, merged });
        }
        self.bar.finish_and_clear();
        Ok(done)
    }

    /// Writes the report and prints it (markdown tables, or results.json
    /// with `--json`); the exit code is 1 if any run failed.
    ///
    /// # Errors
    /// [`HarnessError::Io`] if the report cannot be written.
    pub fn finish(self, mut report: Report) -> Result<i32> {
        // Each distinct reason once: a system skipped at every point of a
        // grid is skipped for the same reason each time.
        for why in report
            .runs
            .iter()
            .filter(|r| r.status == RunStatus::Skipped)
            .filter_map(|r| r.reason.clone())
            .collect::<std::collections::BTreeSet<_>>()
        {
            report.notes.push(format!("skipped: {why}"));
        }
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let threads = usize::from(self.common.nodes) * usize::from(self.common.threads);
        if threads > cores {
            report.notes.push(format!(
                "each cluster runs {threads} worker threads (nodes × --threads) on {cores} cores: the CPU is oversubscribed {:.1}×, which hurts the polling server workers of SD and HY most (as in Fig. 4)",
                threads as f64 / cores as f64
            ));
        }
        report.write(&self.out)?;
        if self.common.output.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            report.print(&self.out);
        }
        let failed = report.runs.iter().any(|r| r.status == RunStatus::Failed);
        Ok(i32::from(failed))
    }
}

fn sanitize(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Adds a note when a run's numbers cannot be trusted as they stand.
fn check_sanity(record: &RunRecord, f: &RunFigures, report: &mut Report) {
    if f.preload_errors > 0 {
        report.notes.push(format!(
            "{}: {} preload PUTs failed",
            record.label, f.preload_errors
        ));
    }
    if f.get.misses > 0 {
        report.notes.push(format!(
            "{}: {} GETs found no value although every key was preloaded",
            record.label, f.get.misses
        ));
    }
    let errors = f.all.errors;
    if errors > 0 {
        let top = f
            .errors
            .iter()
            .max_by_key(|e| e.1)
            .map(|(m, n)| format!(" (most: {n}× {m})"))
            .unwrap_or_default();
        report.notes.push(format!(
            "{}: {errors} operations failed of {}{top}",
            record.label,
            errors + f.all.ok
        ));
    }
}

/// The measured runs among `done` of `system`.
pub fn runs_of(done: &[Done], system: StoreKind) -> impl Iterator<Item = (&RunSpec, &RunFigures)> {
    done.iter()
        .filter(move |d| d.record.system == system)
        .filter_map(|d| d.figures().map(|f| (&d.record.spec, f)))
}

/// The measured run of `system` with this value size and GET ratio.
#[must_use]
pub fn run_at(
    done: &[Done],
    system: StoreKind,
    value_size: usize,
    get_ratio: f64,
) -> Option<&RunFigures> {
    runs_of(done, system)
        .find(|(spec, _)| {
            spec.workload.value_size == value_size
                && (spec.workload.get_ratio - get_ratio).abs() < 1e-9
        })
        .map(|(_, f)| f)
}

/// Adds the summary table, the tail tables and the figures of `done`, runs
/// of `workload`.
pub fn add_summary(report: &mut Report, workload: &WorkloadSpec, done: &[Done]) {
    report.tables.push(summary_table(
        "summary",
        &format!("Summary: {}", workload.describe()),
        done,
    ));
    report.tables.push(tails::tail_table(done));
    report.tables.push(tails::preemption_table(done));
    if let Some(t) = data_tables::data_tables_table(done) {
        report.tables.push(t);
    }
    report.figures.extend(summary_figures("", done));
}

/// The summary table of a set of runs (compare, peers): throughput,
/// goodput, latency, cost per operation, CPU; the CSV also has the tail
/// figures (preemption, the slowest 1 % and 0.1 %), after those.
#[must_use]
pub fn summary_table(name: &str, title: &str, done: &[Done]) -> Table {
    let mut t = Table::new(
        name,
        title,
        &[
            "system",
            "kops/s",
            "goodput MB/s",
            "GET p50 µs",
            "GET p99 µs",
            "GET p99.9 µs",
            "PUT p50 µs",
            "PUT p99 µs",
            "PUT p99.9 µs",
            "verbs/GET",
            "verbs/PUT",
            "net B/GET",
            "net B/PUT",
            "CPU µs/op",
            "CPU cores/node",
            "errors",
        ],
    );
    let tail = tails::summary_columns();
    t.csv_only = tail.len();
    t.columns.extend(tail);
    for d in done {
        let Some(f) = d.figures() else {
            let why = match d.record.status {
                RunStatus::Skipped => "not available",
                _ => "failed",
            };
            let mut row = vec![d.record.system.label().to_owned(), why.to_owned()];
            row.resize(t.columns.len(), "-".into());
            t.row(row);
            continue;
        };
        t.row(
            vec![
                d.record.system.label().to_owned(),
                num(f.throughput_ops_s / 1e3),
                num(f.goodput_mb_s),
                num(f.get.p50_us),
                num(f.get.p99_us),
                num(f.get.p999_us),
                num(f.put.p50_us),
                num(f.put.p99_us),
                num(f.put.p999_us),
                num(f.get.verbs_per_op),
                num(f.put.verbs_per_op),
                num(f.get.remote_bytes_per_op),
                num(f.put.remote_bytes_per_op),
                num(f.cpu_us_per_op),
                num(f.cpu_util_per_node),
                f.all.errors.to_string(),
            ]
            .into_iter()
            .chain(tails::summary_cells(f))
            .collect(),
        );
    }
    t
}

/// Bar charts of throughput, latency percentiles and network bytes per
/// operation, one bar group per measured run.
#[must_use]
pub fn summary_figures(prefix: &str, done: &[Done]) -> Vec<Figure> {
    let measured: Vec<(&str, &RunFigures)> = done
        .iter()
        .filter_map(|d| d.figures().map(|f| (d.record.system.label(), f)))
        .collect();
    let categories: Vec<String> = measured.iter().map(|(l, _)| (*l).to_owned()).collect();
    let points = |get: &dyn Fn(&RunFigures) -> f64| -> Vec<(f64, f64)> {
        measured
            .iter()
            .enumerate()
            .map(|(i, (_, f))| (i as f64, get(f)))
            .collect()
    };
    let mut tp = Figure::new(
        &format!("{prefix}throughput"),
        "Throughput (successful operations per second)",
        FigureKind::Bar,
        "system",
        "kops/s",
    );
    tp.categories.clone_from(&categories);
    tp.series("throughput", points(&|f| f.throughput_ops_s / 1e3));
    let mut lat = Figure::new(
        &format!("{prefix}latency"),
        "Latency percentiles",
        FigureKind::Bar,
        "system",
        "µs",
    );
    lat.categories.clone_from(&categories);
    lat.series("GET p50", points(&|f| f.get.p50_us));
    lat.series("GET p99", points(&|f| f.get.p99_us));
    lat.series("PUT p50", points(&|f| f.put.p50_us));
    lat.series("PUT p99", points(&|f| f.put.p99_us));
    let mut bytes = Figure::new(
        &format!("{prefix}bytes"),
        "Bytes moved between nodes per operation",
        FigureKind::Bar,
        "system",
        "bytes/op",
    );
    bytes.categories = categories;
    bytes.series("GET", points(&|f| f.get.remote_bytes_per_op));
    bytes.series("PUT", points(&|f| f.put.remote_bytes_per_op));
    vec![tp, lat, bytes]
}

/// Most points a latency CDF keeps per line: enough for a smooth curve,
/// few enough to keep results.json and the SVGs small.
const CDF_POINTS: usize = 400;

/// The latency CDFs of `done`'s measured runs, one figure for GETs and one
/// for PUTs, one line per run (named by its system), in µs on a log axis.
#[must_use]
pub fn latency_cdfs(prefix: &str, done: &[Done]) -> Vec<Figure> {
    crate::workload::OpKind::ALL
        .into_iter()
        .map(|kind| {
            let name = kind.name();
            let mut fig = Figure::new(
                &format!("{prefix}latency-cdf-{}", name.to_ascii_lowercase()),
                &format!("{name} latency CDF"),
                FigureKind::Cdf,
                "µs",
                &format!("fraction of {name}s"),
            );
            for d in done {
                let Some(merged) = &d.merged else { continue };
                let h = &merged.kind(kind).latency_ns;
                if h.0.is_empty() {
                    continue;
                }
                let points = thin(h.cdf(), CDF_POINTS)
                    .into_iter()
                    .map(|(ns, q)| (ns / 1e3, q))
                    .collect();
                fig.series(d.record.system.label(), points);
            }
            fig
        })
        .collect()
}

/// Adds [`latency_cdfs`] of `done` to `report`.
pub fn add_latency_cdfs(report: &mut Report, prefix: &str, done: &[Done]) {
    report.figures.extend(latency_cdfs(prefix, done));
}

/// At most about `max` of `points`, evenly spaced by index, always keeping
/// the last (the maximum, where a CDF reaches 1).
fn thin(points: Vec<(f64, f64)>, max: usize) -> Vec<(f64, f64)> {
    let step = points.len().div_ceil(max.max(1)).max(1);
    if step == 1 {
        return points;
    }
    let last = points.last().copied();
    let mut kept: Vec<(f64, f64)> = points.into_iter().step_by(step).collect();
    if kept.last().copied() != last {
        kept.extend(last);
    }
    kept
}

/// Throughput of the first measured run of `system` among `done`.
#[must_use]
pub fn throughput_of(done: &[Done], system: StoreKind) -> Option<f64> {
    runs_of(done, system)
        .next()
        .map(|(_, f)| f.throughput_ops_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_figures_get_log_axes() {
        let figs = summary_figures("", &[]);
        let of = |name: &str| figs.iter().find(|f| f.name == name).unwrap();
        assert!(of("latency").log_y());
        assert!(!of("throughput").log_y() && !of("bytes").log_y());
        let cdfs = latency_cdfs("", &[]);
        let names: Vec<&str> = cdfs.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["latency-cdf-get", "latency-cdf-put"]);
        assert!(cdfs.iter().all(|f| f.log_x() && f.kind == FigureKind::Cdf));
    }

    #[test]
    fn cdfs_are_thinned_to_their_end() {
        let points: Vec<(f64, f64)> = (1..=1000)
            .map(|i| (f64::from(i), f64::from(i) / 1e3))
            .collect();
        let kept = thin(points.clone(), 400);
        assert!(kept.len() <= 401, "{}", kept.len());
        assert_eq!(kept.first(), points.first());
        assert_eq!(kept.last(), Some(&(1000.0, 1.0)));
        assert_eq!(thin(points[..10].to_vec(), 400).len(), 10);
    }

    #[test]
    fn sizes_and_fractions_parse() {
        assert_eq!(parse_size("16KiB"), Ok(16384));
        assert_eq!(parse_size("16k"), Ok(16384));
        assert_eq!(parse_size("256"), Ok(256));
        assert_eq!(parse_size("2m"), Ok(2 << 20));
        assert!(parse_size("0").is_err());
        assert!(parse_size("12q").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert_eq!(parse_fraction("90%"), Ok(0.9));
        assert_eq!(parse_fraction("0.5"), Ok(0.5));
        assert!(parse_fraction("1.5").is_err());
        assert!(parse_fraction("x").is_err());
        assert_eq!(parse_rate("2500"), Ok(2500.0));
        assert!(parse_rate("0").is_err() && parse_rate("inf").is_err());
    }
}
