//! `energy` (paper Fig. 14): cost at several offered loads, as a fraction of
//! each system's measured peak (Poisson arrivals, 16 KiB values, 90 %
//! GETs).
//!
//! The paper measured watts with IPMI. Every run here samples the host's
//! power through `power-ipmi` (RAPL counters and the local BMC) where the
//! machine allows it, and always reports the proxy that is available
//! everywhere: CPU seconds of the node processes, as cores busy per node and
//! CPU µs per operation. Server-driven systems poll, so their CPU stays up
//! when the load falls; the client-driven store's idle workers sleep. The
//! verdicts use the CPU proxy, which covers the store's processes only
//! (power meters see the whole host, other tenants included).

use super::{parse_fraction, runs_of, Common, Ctx, Done, PointArgs};
use crate::error::{HarnessError, Result};
use crate::paper::{self, judge, ClaimId, Evidence};
use crate::report::{num, share, Figure, FigureKind, Report, Table};
use crate::spec::Load;
use crate::workload::{percent, KeyDistribution};
use nessie_examples::StoreKind;

/// Flags of `energy`.
#[derive(Clone, Debug, clap::Args)]
pub struct EnergyArgs {
    /// Common flags.
    #[command(flatten)]
    pub common: Common,
    /// Offered loads as fractions of the peak (default 0.05,0.2,0.4,0.6,0.8;
    /// --quick 0.2,0.8).
    #[arg(long, value_delimiter = ',', value_parser = parse_fraction)]
    pub loads: Option<Vec<f64>>,
    /// The workload point.
    #[command(flatten)]
    pub point: PointArgs,
}

/// The power meter a row reports: IPMI (wall power, as in the paper) if it
/// measured, else RAPL.
fn meter(f: &crate::measure::RunFigures) -> Option<&crate::measure::PowerFigures> {
    let measured = |name: &str| {
        f.power
            .iter()
            .find(|m| m.sampler.contains(name) && m.watts.is_some())
    };
    measured("ipmi").or_else(|| measured("rapl"))
}

/// Runs `energy`; returns the exit code.
///
/// # Errors
/// Bad flags, Ctrl-C or a report that cannot be written.
pub fn run(args: EnergyArgs) -> Result<i32> {
    let mut ctx = Ctx::new("energy", args.common)?;
    let quick = ctx.common.output.quick;
    let loads = args.loads.unwrap_or_else(|| {
        if quick {
            vec![0.2, 0.8]
        } else {
            paper::FIG14_LOADS.to_vec()
        }
    });
    if loads.iter().any(|&l| l <= 0.0) {
        return Err(HarnessError::Usage("every load must be above 0".into()));
    }
    let workload = ctx.point_workload(&args.point, KeyDistribution::Uniform)?;
    let duration = ctx.duration_ms(5_000, 1_000);
    let systems = ctx.systems(&StoreKind::PAPER);
    let mut report = ctx.report(
        "energy",
        &format!("Fig. 14: cost vs offered load, {}", workload.describe()),
        serde_json::json!({
            "workload": workload, "systems": systems, "loads": loads,
            "duration_ms": duration,
            "power_meters": ["rapl", "ipmi (local BMC)"],
        }),
    );
    let peaks = systems
        .iter()
        .map(|&s| {
            let mut spec = ctx.spec(format!("{}-peak", s.label()), s, workload.clone(), duration);
            spec.measure_power = true;
            spec
        })
        .collect();
    let peak_runs = ctx.run_all(peaks, &mut report)?;
    let mut specs = Vec::new();
    for &s in &systems {
        let Some(peak) = super::throughput_of(&peak_runs, s).filter(|&p| p > 0.0) else {
            continue;
        };
        for &l in &loads {
            let mut spec = ctx.spec(
                format!("{}-{}pct", s.label(), percent(l)),
                s,
                workload.clone(),
                duration,
            );
            spec.load = Load::Open {
                ops_per_sec: peak * l,
            };
            spec.measure_power = true;
            specs.push(spec);
        }
    }
    // Peak runs first: `throughput_of` picks a system's first measured run.
    let mut done = peak_runs;
    done.extend(ctx.run_all(specs, &mut report)?);

    let rel_at = cost_tables(&mut report, &done, &systems);
    fig14(&mut report, &rel_at);
    meter_notes(&mut report, &done);
    report.notes.push(
        "\"host W\" is the first power meter that measured (IPMI, else RAPL) and covers the whole host; CPU cores/node and CPU µs/op count the node processes only (not hogs, the harness or other tenants)".into(),
    );
    ctx.finish(report)
}

/// Figures and table of cost against offered load; returns each system's
/// CPU use at each load as a share of its use at its highest load.
fn cost_tables(
    report: &mut Report,
    done: &[Done],
    systems: &[StoreKind],
) -> Vec<(StoreKind, f64, f64)> {
    let mut util = Figure::new(
        "fig14-cpu",
        "Fig. 14 (proxy): CPU cores busy per node vs offered load",
        FigureKind::Line,
        "offered load (% of peak)",
        "CPU cores per node",
    );
    let mut per_op = Figure::new(
        "fig14-cpu-per-op",
        "CPU µs per operation vs offered load",
        FigureKind::Line,
        "offered load (% of peak)",
        "CPU µs per op",
    );
    let mut table = Table::new(
        "fig14",
        "Cost vs offered load (Fig. 14, CPU proxy)",
        &[
            "system",
            "load",
            "offered ops/s",
            "achieved ops/s",
            "CPU cores/node",
            "CPU µs/op",
            "GET p50 µs",
            "GET p99 µs",
            "late ops",
            "host W",
            "host mJ/op",
        ],
    );
    let mut rel_at = Vec::new();
    for &s in systems {
        let peak = super::throughput_of(done, s);
        let mut rows: Vec<(f64, &crate::measure::RunFigures)> = runs_of(done, s)
            .map(|(spec, f)| match (spec.load, peak) {
                (Load::Open { ops_per_sec }, Some(p)) if p > 0.0 => (ops_per_sec / p, f),
                _ => (1.0, f),
            })
            .collect();
        rows.sort_by(|a, b| a.0.total_cmp(&b.0));
        util.series(
            s.label(),
            rows.iter()
                .map(|(l, f)| (l * 100.0, f.cpu_util_per_node))
                .collect(),
        );
        per_op.series(
            s.label(),
            rows.iter()
                .map(|(l, f)| (l * 100.0, f.cpu_us_per_op))
                .collect(),
        );
        let top = rows
            .last()
            .map(|r| r.1.cpu_util_per_node)
            .filter(|&u| u > 0.0);
        for (l, f) in &rows {
            table.row(vec![
                s.label().to_owned(),
                format!("{}%", percent(*l)),
                if f.offered_ops_s > 0.0 {
                    num(f.offered_ops_s)
                } else {
                    "closed loop".into()
                },
                num(f.throughput_ops_s),
                num(f.cpu_util_per_node),
                num(f.cpu_us_per_op),
                num(f.get.p50_us),
                num(f.get.p99_us),
                f.late_ops.to_string(),
                meter(f).and_then(|m| m.watts).map_or("-".into(), num),
                meter(f)
                    .and_then(|m| m.joules_per_op)
                    .map_or("-".into(), |j| num(j * 1e3)),
            ]);
            if let Some(top) = top {
                rel_at.push((s, *l, f.cpu_util_per_node / top));
            }
        }
    }
    report.figures.push(util);
    report.figures.push(per_op);
    report.tables.push(table);

    rel_at
}

/// Fig. 14's claims: at 20 % and 80 % load CD uses less of its peak's CPU
/// than SD.
fn fig14(report: &mut Report, rel_at: &[(StoreKind, f64, f64)]) {
    for (load, claim) in [(0.2, ClaimId::Fig14At20), (0.8, ClaimId::Fig14At80)] {
        let find = |s: StoreKind| {
            rel_at
                .iter()
                .find(|r| r.0 == s && (r.1 - load).abs() < 1e-9)
                .map(|r| r.2)
        };
        report.comparisons.push(
            if let (Some(c), Some(s)) = (find(StoreKind::Cd), find(StoreKind::Sd)) {
                let ours = format!(
                    "CPU at {}% load, share of own peak: CD {} SD {}",
                    percent(load),
                    share(c),
                    share(s)
                );
                judge(
                    claim,
                    None,
                    ours,
                    Some(&[Evidence {
                        value: c,
                        reference: s,
                    }]),
                )
            } else {
                let ours = format!("needs CD and SD at {}% load", percent(load));
                judge(claim, None, ours, None)
            },
        );
    }
}

/// Why the power meters that measured nothing did not.
fn meter_notes(report: &mut Report, done: &[Done]) {
    let mut unavailable: Vec<String> = done
        .iter()
        .filter_map(|d| d.figures())
        .flat_map(|f| f.power.iter())
        .filter_map(|m| {
            m.unavailable
                .as_ref()
                .map(|why| format!("{}: {why}", m.sampler))
        })
        .collect();
    unavailable.sort();
    unavailable.dedup();
    for u in unavailable {
        report
            .notes
            .push(format!("power meter unavailable here — {u}"));
    }
}
