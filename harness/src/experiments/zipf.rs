//! `zipf` (paper Fig. 12): CD's goodput relative to SD's under scrambled
//! Zipf (θ = 0.99) keys, over value sizes and GET ratios.

use super::{run_at, Common, Ctx, GridArgs};
use crate::error::{HarnessError, Result};
use crate::paper;
use crate::paper::{judge, ClaimId, Evidence};
use crate::report::{bytes_label, num, pct, Figure, FigureKind, Table};
use crate::workload::{percent, KeyDistribution, YCSB_THETA};
use nessie_examples::StoreKind;

/// Flags of `zipf`.
#[derive(Clone, Debug, clap::Args)]
pub struct ZipfArgs {
    /// Common flags.
    #[command(flatten)]
    pub common: Common,
    /// Value sizes (default 256B,2KiB,16KiB,128KiB; --quick 256B,16KiB)
    /// and GET fractions (default 0.5,0.9,0.99; --quick 0.5,0.99).
    #[command(flatten)]
    pub grid: GridArgs,
    /// Zipf exponent.
    #[arg(long, default_value_t = YCSB_THETA)]
    pub theta: f64,
}

/// Runs `zipf`; returns the exit code.
///
/// # Errors
/// Bad flags, Ctrl-C or a report that cannot be written.
pub fn run(args: ZipfArgs) -> Result<i32> {
    let mut ctx = Ctx::new("zipf", args.common)?;
    let quick = ctx.common.output.quick;
    let sizes = args.grid.value_sizes.unwrap_or_else(|| {
        if quick {
            vec![256, 16 << 10]
        } else {
            vec![256, 2 << 10, 16 << 10, 128 << 10]
        }
    });
    let ratios = args.grid.get_ratios.unwrap_or_else(|| {
        if quick {
            vec![0.5, 0.99]
        } else {
            paper::SWEEP_GET_RATIOS.to_vec()
        }
    });
    let systems = ctx.systems(&[StoreKind::Cd, StoreKind::Sd]);
    if !systems.contains(&StoreKind::Cd) || !systems.contains(&StoreKind::Sd) {
        return Err(HarnessError::Usage(
            "zipf compares CD with SD: --systems must include cd and sd".into(),
        ));
    }
    let duration = ctx.duration_ms(4_000, 1_200);
    let dist = KeyDistribution::Zipf { theta: args.theta };
    let specs = ctx.grid(&systems, &sizes, &ratios, dist, duration, "-zipf")?;
    let mut report = ctx.report(
        "zipf",
        &format!(
            "Fig. 12: Zipf (θ = {}) keys, CD goodput relative to SD",
            args.theta
        ),
        serde_json::json!({
            "value_sizes": sizes, "get_ratios": ratios, "theta": args.theta, "systems": systems,
            "duration_ms": duration,
        }),
    );
    let done = ctx.run_all(specs, &mut report)?;
    let goodput = |s: StoreKind, size: usize, ratio: f64| {
        run_at(&done, s, size, ratio).map(|f| f.goodput_mb_s)
    };
    let rel = |size, ratio| match (
        goodput(StoreKind::Cd, size, ratio),
        goodput(StoreKind::Sd, size, ratio),
    ) {
        (Some(c), Some(s)) if s > 0.0 => Some(c / s - 1.0),
        _ => None,
    };
    let mut fig = Figure::new(
        "fig12-zipf",
        "Fig. 12: Zipf keys, CD goodput vs SD",
        FigureKind::Line,
        "value size",
        "relative goodput CD vs SD (%)",
    );
    fig.log2_x_bytes = true;
    let mut table = Table::new(
        "fig12",
        "Zipf goodput (MB/s), CD vs SD (Fig. 12)",
        &["GET %", "value size", "CD MB/s", "SD MB/s", "CD vs SD"],
    );
    for &ratio in &ratios {
        let pts = sizes
            .iter()
            .filter_map(|&z| rel(z, ratio).map(|r| (z as f64, r * 100.0)))
            .collect();
        fig.series(format!("{}% GET", percent(ratio)), pts);
        for &size in &sizes {
            let g = |s| goodput(s, size, ratio).map_or("-".into(), num);
            table.row(vec![
                percent(ratio),
                bytes_label(size as f64),
                g(StoreKind::Cd),
                g(StoreKind::Sd),
                rel(size, ratio).map_or("-".into(), pct),
            ]);
        }
    }
    report.figures.push(fig);
    report.tables.push(table);

    let (small, large) = (
        sizes.iter().copied().min().unwrap_or(0),
        sizes.iter().copied().max().unwrap_or(0),
    );
    for (ratio, claim) in [(0.5, ClaimId::Fig12At50), (0.99, ClaimId::Fig12At99)] {
        if !ratios.iter().any(|&r| (r - ratio).abs() < 1e-9) {
            continue;
        }
        report
            .comparisons
            .push(match (rel(small, ratio), rel(large, ratio)) {
                (Some(a), Some(b)) if small != large => {
                    let ours = format!(
                        "CD vs SD {} at {}, {} at {}",
                        pct(a),
                        bytes_label(small as f64),
                        pct(b),
                        bytes_label(large as f64)
                    );
                    judge(
                        claim,
                        None,
                        ours,
                        Some(&[
                            Evidence {
                                value: b,
                                reference: a,
                            },
                            Evidence {
                                value: b,
                                reference: 0.0,
                            },
                        ]),
                    )
                }
                _ => judge(claim, None, "needs CD and SD at two sizes".into(), None),
            });
    }
    ctx.finish(report)
}
