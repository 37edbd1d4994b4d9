//! An experiment in progress: its runs, output directory and progress bar,
//! running them and finishing the report.

use super::{Common, PointArgs};
use crate::cluster::{self, Progress};
use crate::error::{HarnessError, Result};
use crate::launcher::Launching;
use crate::measure::{Merged, RunFigures};
use crate::report::{num, Report, RunRecord, RunStatus};
use crate::spec::RunSpec;
use crate::workload::{KeyDistribution, WorkloadSpec};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use nessie_examples::StoreKind;
use std::path::PathBuf;
use std::time::Duration;

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

    /// The run's name in tables and figures: its system's label, or its
    /// own label (e.g. `CD r=2`) for a CD run given a replica count.
    #[must_use]
    pub fn name(&self) -> String {
        if self.record.spec.replicas.is_some() {
            self.record.label.clone()
        } else {
            self.record.system.label().to_owned()
        }
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
    /// run ([`crate::launcher::ClusterArgs::resolve`]); [`HarnessError::Io`] if the binary's
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

    /// The progress bar (hidden with `--json`), for an experiment that
    /// drives its run itself.
    #[must_use]
    pub fn bar(&self) -> ProgressBar {
        self.bar.clone()
    }

    /// This binary, which the node processes run.
    #[must_use]
    pub fn exe(&self) -> &std::path::Path {
        &self.exe
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
        s.placement = self.common.placement;
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
