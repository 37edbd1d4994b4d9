//! `sweep` (paper Figs. 5–7 and Table 1): goodput of CD, SD and HY over
//! value sizes 256 B … 128 KiB at 50, 90 and 99 % GETs, uniform keys; and the
//! latency and bytes table of the 50 % GET runs.

use super::{run_at, Common, Ctx, Done, GridArgs};
use crate::error::Result;
use crate::measure::RunFigures;
use crate::paper::{self, Evidence, Table1Row};
use crate::paper::{judge, ClaimId};
use crate::report::{bytes_label, num, pct, Figure, FigureKind, Report, Table};
use crate::workload::{percent, KeyDistribution};
use nessie_examples::StoreKind;

/// Flags of `sweep`.
#[derive(Clone, Debug, clap::Args)]
pub struct SweepArgs {
    /// Common flags.
    #[command(flatten)]
    pub common: Common,
    /// Value sizes (default 256 B … 128 KiB; --quick 2KiB,16KiB,128KiB)
    /// and GET fractions (default 0.5,0.9,0.99; --quick 0.5,0.9).
    #[command(flatten)]
    pub grid: GridArgs,
}

fn fig_of(ratio: f64) -> &'static str {
    if (ratio - 0.5).abs() < 1e-9 {
        "Fig. 5"
    } else if (ratio - 0.9).abs() < 1e-9 {
        "Fig. 6"
    } else if (ratio - 0.99).abs() < 1e-9 {
        "Fig. 7"
    } else {
        "Figs. 5–7"
    }
}

/// The file-name stem of the figure of `ratio`.
fn fig_file(ratio: f64) -> &'static str {
    match fig_of(ratio) {
        "Fig. 5" => "fig5",
        "Fig. 6" => "fig6",
        "Fig. 7" => "fig7",
        _ => "figs5-7",
    }
}

/// Runs `sweep`; returns the exit code.
///
/// # Errors
/// Ctrl-C or a report that cannot be written.
pub fn run(args: SweepArgs) -> Result<i32> {
    let mut ctx = Ctx::new("sweep", args.common)?;
    let quick = ctx.common.output.quick;
    let sizes = args.grid.value_sizes.unwrap_or_else(|| {
        if quick {
            vec![2 << 10, 16 << 10, 128 << 10]
        } else {
            paper::SWEEP_VALUE_SIZES.to_vec()
        }
    });
    let ratios = args.grid.get_ratios.unwrap_or_else(|| {
        if quick {
            vec![0.5, 0.9]
        } else {
            paper::SWEEP_GET_RATIOS.to_vec()
        }
    });
    let duration = ctx.duration_ms(4_000, 800);
    let systems = ctx.systems(&StoreKind::PAPER);
    let specs = ctx.grid(
        &systems,
        &sizes,
        &ratios,
        KeyDistribution::Uniform,
        duration,
        "",
    )?;
    let mut report = ctx.report(
        "sweep",
        "Figs. 5–7 and Table 1: value-size sweep, uniform keys",
        serde_json::json!({
            "value_sizes": sizes, "get_ratios": ratios, "systems": systems,
            "duration_ms": duration,
        }),
    );
    let done = ctx.run_all(specs, &mut report)?;

    let at = |s: StoreKind, size: usize, ratio: f64| run_at(&done, s, size, ratio);
    let mut goodput = Table::new(
        "goodput",
        "Goodput (MB/s) by value size and GET ratio (Figs. 5–7)",
        &[
            "GET %",
            "value size",
            "CD MB/s",
            "SD MB/s",
            "HY MB/s",
            "CD vs SD",
        ],
    );
    for &ratio in &ratios {
        let mut fig = Figure::new(
            &format!("{}-goodput-{}get", fig_file(ratio), percent(ratio)),
            &format!("{}: uniform keys, {}% GETs", fig_of(ratio), percent(ratio)),
            FigureKind::Line,
            "value size",
            "goodput MB/s",
        );
        fig.log2_x_bytes = true;
        for &s in &systems {
            let pts = sizes
                .iter()
                .filter_map(|&z| at(s, z, ratio).map(|f| (z as f64, f.goodput_mb_s)))
                .collect();
            fig.series(s.label(), pts);
        }
        report.figures.push(fig);
        for &size in &sizes {
            let g = |s| at(s, size, ratio).map_or("-".to_owned(), |f| num(f.goodput_mb_s));
            let rel = match (
                at(StoreKind::Cd, size, ratio),
                at(StoreKind::Sd, size, ratio),
            ) {
                (Some(c), Some(s)) if s.goodput_mb_s > 0.0 => {
                    pct(c.goodput_mb_s / s.goodput_mb_s - 1.0)
                }
                _ => "-".into(),
            };
            goodput.row(vec![
                percent(ratio),
                bytes_label(size as f64),
                g(StoreKind::Cd),
                g(StoreKind::Sd),
                g(StoreKind::Hy),
                rel,
            ]);
        }
    }
    report.tables.push(goodput);
    if let Some(&r50) = ratios.iter().find(|&&r| (r - 0.5).abs() < 1e-9) {
        table1(&mut report, &done, &sizes, r50);
        crossover(&mut report, &sizes, |s, z| {
            at(s, z, r50).map(|f| f.goodput_mb_s)
        });
    } else {
        report.notes.push(
            "Table 1 and the Fig. 5 comparison need the 50 % GET runs (--get-ratios 0.5,…)".into(),
        );
    }
    ctx.finish(report)
}

/// Fig. 5's shape: CD's goodput relative to SD's grows with the value size.
fn crossover(
    report: &mut Report,
    sizes: &[usize],
    goodput: impl Fn(StoreKind, usize) -> Option<f64>,
) {
    let rel: Vec<(usize, f64)> = sizes
        .iter()
        .filter_map(
            |&z| match (goodput(StoreKind::Cd, z), goodput(StoreKind::Sd, z)) {
                (Some(c), Some(s)) if s > 0.0 => Some((z, c / s - 1.0)),
                _ => None,
            },
        )
        .collect();
    report.comparisons.push(match (rel.first(), rel.last()) {
        (Some(a), Some(b)) if rel.len() >= 2 => {
            let ours = format!(
                "CD vs SD: {} at {}, {} at {}",
                pct(a.1),
                bytes_label(a.0 as f64),
                pct(b.1),
                bytes_label(b.0 as f64)
            );
            judge(
                ClaimId::Fig5Crossover,
                None,
                ours,
                Some(&[Evidence {
                    value: b.1,
                    reference: a.1,
                }]),
            )
        }
        _ => judge(
            ClaimId::Fig5Crossover,
            None,
            "needs CD and SD at two sizes or more".into(),
            None,
        ),
    });
}

/// Table 1: mean GET / PUT / all latencies and bytes sent, 50 % GETs, ours
/// beside the paper's where the size matches.
fn table1(report: &mut Report, done: &[Done], sizes: &[usize], ratio: f64) {
    let at = |s: StoreKind, size: usize| run_at(done, s, size, ratio);
    let mut cols = vec!["row".to_owned()];
    cols.extend(sizes.iter().map(|&z| bytes_label(z as f64)));
    let col_refs: Vec<&str> = cols.iter().map(String::as_str).collect();
    let mut ours = Table::new(
        "table1",
        "Table 1 (ours): mean latency and bytes sent, 50% GETs",
        &col_refs,
    );
    let mut theirs = Table::new(
        "table1-paper",
        "Table 1 (paper, 15 nodes, RDMA) at the same sizes",
        &col_refs,
    );
    let paper_rows: [(StoreKind, &Table1Row); 3] = [
        (StoreKind::Cd, &paper::TABLE1_CD),
        (StoreKind::Sd, &paper::TABLE1_SD),
        (StoreKind::Hy, &paper::TABLE1_HY),
    ];
    let paper_col = |size: usize| {
        paper::TABLE1_SIZES_KB
            .iter()
            .position(|&kb| kb << 10 == size)
    };
    type Pick = fn(&RunFigures) -> f64;
    type PickPaper = fn(&Table1Row, usize) -> f64;
    let rows: [(&str, Pick, PickPaper); 4] = [
        ("GET Lat. (µs)", |f| f.get.mean_us, |r, i| r.get_us[i]),
        ("PUT Lat. (µs)", |f| f.put.mean_us, |r, i| r.put_us[i]),
        ("All Lat. (µs)", |f| f.all.mean_us, |r, i| r.all_us[i]),
        (
            "Sent (MB/s; paper: GB total)",
            |f| f.all.remote_bytes_total as f64 / f.elapsed_s.max(1e-9) / 1e6,
            |r, i| r.sent_gb[i],
        ),
    ];
    for (name, pick, pick_paper) in rows {
        for (s, prow) in paper_rows {
            let mut row = vec![format!("{} {name}", s.label())];
            let mut prow_cells = vec![format!("{} {name}", s.label())];
            for &z in sizes {
                row.push(at(s, z).map_or("-".into(), |f| num(pick(f))));
                prow_cells.push(paper_col(z).map_or("-".into(), |i| num(pick_paper(prow, i))));
            }
            ours.row(row);
            theirs.row(prow_cells);
        }
    }
    report.tables.push(ours);
    report.tables.push(theirs);

    // Claim 1: CD sends fewer bytes than SD at every size.
    let per_op = |s, z| at(s, z).map(|f| f.all.remote_bytes_per_op);
    let pairs: Vec<(usize, f64, f64)> = sizes
        .iter()
        .filter_map(|&z| Some((z, per_op(StoreKind::Cd, z)?, per_op(StoreKind::Sd, z)?)))
        .collect();
    report.comparisons.push(if pairs.is_empty() {
        judge(ClaimId::Table1Sent, None, "needs CD and SD".into(), None)
    } else {
        let ratios: Vec<String> = pairs
            .iter()
            .map(|(z, c, s)| format!("{} {}", bytes_label(*z as f64), num(c / s.max(1e-9))))
            .collect();
        let ours = format!("net bytes/op CD÷SD: {}", ratios.join(", "));
        let not_below = pairs
            .iter()
            .filter(|(_, c, s)| c.partial_cmp(s) != Some(std::cmp::Ordering::Less))
            .count();
        judge(
            ClaimId::Table1Sent,
            None,
            ours,
            Some(&[Evidence {
                value: not_below as f64,
                reference: 1.0,
            }]),
        )
    });
    // Claim 2: at large values CD's GET latency is below SD's.
    let largest = sizes.iter().copied().max().unwrap_or(0);
    report.comparisons.push(
        match (at(StoreKind::Cd, largest), at(StoreKind::Sd, largest)) {
            (Some(c), Some(s)) => {
                let ours = format!(
                    "mean GET latency at {}: CD {} µs, SD {} µs",
                    bytes_label(largest as f64),
                    num(c.get.mean_us),
                    num(s.get.mean_us)
                );
                judge(
                    ClaimId::Table1GetLatency,
                    None,
                    ours,
                    Some(&[Evidence {
                        value: c.get.mean_us,
                        reference: s.get.mean_us,
                    }]),
                )
            }
            _ => judge(
                ClaimId::Table1GetLatency,
                None,
                "needs CD and SD".into(),
                None,
            ),
        },
    );
}
