//! `breakdown` (paper Fig. 13): CD's goodput under Zipf keys as its
//! optimisations are switched on one after another.
//!
//! The steps follow the project's switch list (none, +`batched_reads`,
//! +filter, +`multi_read`, +`prev_versions`, +cache); the paper's figure adds
//! filter, caching, previous versions and multi-read to a "basic" protocol
//! that already batches, in that order. Each step keeps the ones before it.

use super::{parse_fraction, parse_size, runs_of, Common, Ctx};
use crate::error::Result;
use crate::paper::{judge, ClaimId, Evidence};
use crate::report::{num, pct, Comparison, Figure, FigureKind, Table};
use crate::workload::{percent, KeyDistribution, YCSB_THETA};
use nessie::Optimizations;
use nessie_examples::StoreKind;

/// Flags of `breakdown`.
#[derive(Clone, Debug, clap::Args)]
pub struct BreakdownArgs {
    /// Common flags.
    #[command(flatten)]
    pub common: Common,
    /// Value size.
    #[arg(long, default_value = "16KiB", value_parser = parse_size)]
    pub value_size: usize,
    /// GET fractions.
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.99", value_parser = parse_fraction)]
    pub get_ratios: Vec<f64>,
    /// Zipf exponent.
    #[arg(long, default_value_t = YCSB_THETA)]
    pub theta: f64,
}

/// The cumulative optimisation steps: name and switches.
#[must_use]
pub fn steps() -> Vec<(&'static str, Optimizations)> {
    let mut o = Optimizations::none();
    let mut out = vec![("none", o)];
    type Add = fn(&mut Optimizations);
    let adds: [(&str, Add); 6] = [
        ("+batched_reads", |o| o.batched_reads = true),
        ("+filter", |o| o.filter = true),
        ("+multi_read", |o| o.multi_read = true),
        ("+prev_versions", |o| o.prev_versions = true),
        ("+cache", |o| o.cache = true),
        // Beyond the paper (docs/design.md#location-hints).
        ("+hints", |o| o.hints = true),
    ];
    for (name, add) in adds {
        add(&mut o);
        out.push((name, o));
    }
    out
}

/// Runs `breakdown`; returns the exit code.
///
/// # Errors
/// Ctrl-C or a report that cannot be written.
pub fn run(args: BreakdownArgs) -> Result<i32> {
    let mut ctx = Ctx::new("breakdown", args.common)?;
    let duration = ctx.duration_ms(4_000, 800);
    let system = ctx
        .systems(&[StoreKind::Cd])
        .first()
        .copied()
        .unwrap_or(StoreKind::Cd);
    let dist = KeyDistribution::Zipf { theta: args.theta };
    let steps = steps();
    let mut specs = Vec::new();
    for &ratio in &args.get_ratios {
        let w = ctx.workload(args.value_size, ratio, dist);
        w.validate()?;
        for (name, opts) in &steps {
            let mut spec = ctx.spec(
                format!("{}-{}get{name}", system.label(), percent(ratio)),
                system,
                w.clone(),
                duration,
            );
            spec.optimizations = *opts;
            specs.push(spec);
        }
    }
    let mut report = ctx.report(
        "breakdown",
        "Fig. 13: CD optimisations added one by one, Zipf keys",
        serde_json::json!({
            "value_size": args.value_size, "get_ratios": args.get_ratios, "theta": args.theta,
            "steps": steps.iter().map(|s| serde_json::json!({"step": s.0, "optimizations": s.1})).collect::<Vec<_>>(),
            "duration_ms": duration,
        }),
    );
    let done = ctx.run_all(specs, &mut report)?;
    let at = |ratio: f64, opts: Optimizations| {
        runs_of(&done, system)
            .find(|(s, _)| s.optimizations == opts && (s.workload.get_ratio - ratio).abs() < 1e-9)
            .map(|(_, f)| f)
    };
    let mut fig = Figure::new(
        "fig13-breakdown",
        "Fig. 13: goodput as optimisations are added (Zipf keys)",
        FigureKind::Bar,
        "optimisations",
        "goodput MB/s",
    );
    fig.categories = steps.iter().map(|s| s.0.to_owned()).collect();
    let mut table = Table::new(
        "fig13",
        "CD goodput by optimisation step (Fig. 13)",
        &[
            "GET %",
            "step",
            "kops/s",
            "goodput MB/s",
            "vs none",
            "retries/op",
            "cache hits/GET",
            "hint hits/GET",
            "net B/op",
        ],
    );
    for &ratio in &args.get_ratios {
        let base = at(ratio, steps[0].1).map(|f| f.goodput_mb_s);
        let mut pts = Vec::new();
        for (i, (name, opts)) in steps.iter().enumerate() {
            let Some(f) = at(ratio, *opts) else {
                table.row(vec![
                    percent(ratio),
                    (*name).to_owned(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ]);
                continue;
            };
            pts.push((i as f64, f.goodput_mb_s));
            table.row(vec![
                percent(ratio),
                (*name).to_owned(),
                num(f.throughput_ops_s / 1e3),
                num(f.goodput_mb_s),
                base.filter(|b| *b > 0.0)
                    .map_or("-".into(), |b| pct(f.goodput_mb_s / b - 1.0)),
                num(f.all.retries_per_op),
                num(f.get.cache_hits_per_op),
                num(f.get.hint_hits_per_op),
                num(f.all.remote_bytes_per_op),
            ]);
        }
        fig.series(format!("{}% GET", percent(ratio)), pts);
        // The paper's claim is about the paper's switches, all on: the
        // step before the hints.
        let paper_all = steps.iter().find(|s| s.0 == "+cache").map(|s| s.1);
        let all_on = paper_all.and_then(|o| at(ratio, o)).map(|f| f.goodput_mb_s);
        report.comparisons.push(fig13(ratio, base, all_on));
    }
    report.figures.push(fig);
    report.tables.push(table);
    ctx.finish(report)
}

/// Fig. 13's claim at `ratio`: goodput with every optimisation (`all_on`)
/// above goodput with none (`base`).
fn fig13(ratio: f64, base: Option<f64>, all_on: Option<f64>) -> Comparison {
    let (claim, qualifier) = if (ratio - 0.5).abs() < 1e-9 {
        (ClaimId::Fig13At50, None)
    } else if (ratio - 0.99).abs() < 1e-9 {
        (ClaimId::Fig13At99, None)
    } else {
        (
            ClaimId::Fig13Other,
            Some(format!("({}% GET)", percent(ratio))),
        )
    };
    let qualifier = qualifier.as_deref();
    match (base, all_on) {
        (Some(b), Some(a)) if b > 0.0 => {
            let ours = format!("all vs none: {}", pct(a / b - 1.0));
            judge(
                claim,
                qualifier,
                ours,
                Some(&[Evidence {
                    value: a,
                    reference: b,
                }]),
            )
        }
        _ => judge(
            claim,
            qualifier,
            "needs the first and last step".into(),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_cumulative_and_end_all_on() {
        let s = steps();
        assert_eq!(s.len(), 7);
        assert_eq!(s[0].1, Optimizations::none());
        assert_eq!(s[6].1, Optimizations::default());
        assert!(s[2].1.batched_reads && s[2].1.filter && !s[2].1.cache);
    }
}
