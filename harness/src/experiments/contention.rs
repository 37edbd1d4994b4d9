//! `contention` (paper Fig. 4): throughput as background CPU hogs are added
//! beside the cluster (16 KiB values, 90 % GETs, uniform keys).

use super::{runs_of, Common, Ctx, PointArgs};
use crate::error::Result;
use crate::paper::{judge, ClaimId, Evidence};
use crate::report::{num, pct, Figure, FigureKind, Report, Table};
use crate::workload::KeyDistribution;
use nessie_examples::StoreKind;

/// Flags of `contention`.
#[derive(Clone, Debug, clap::Args)]
pub struct ContentionArgs {
    /// Common flags.
    #[command(flatten)]
    pub common: Common,
    /// Numbers of background CPU hogs (default 0,1,2,4,8; --quick 0,2,4).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u16).range(0..=256))]
    pub hogs: Option<Vec<u16>>,
    /// The workload point.
    #[command(flatten)]
    pub point: PointArgs,
}

/// Runs `contention`; returns the exit code.
///
/// # Errors
/// Ctrl-C or a report that cannot be written.
pub fn run(args: ContentionArgs) -> Result<i32> {
    let mut ctx = Ctx::new("contention", args.common)?;
    let hogs: Vec<usize> = args.hogs.map_or_else(
        || {
            if ctx.common.output.quick {
                vec![0, 2, 4]
            } else {
                vec![0, 1, 2, 4, 8]
            }
        },
        |h| h.into_iter().map(usize::from).collect(),
    );
    let workload = ctx.point_workload(&args.point, KeyDistribution::Uniform)?;
    let duration = ctx.duration_ms(5_000, 1_200);
    let systems = ctx.systems(&StoreKind::PAPER);
    let mut specs = Vec::new();
    for &s in &systems {
        for &h in &hogs {
            let mut spec = ctx.spec(
                format!("{}-{h}hogs", s.label()),
                s,
                workload.clone(),
                duration,
            );
            spec.hogs = h;
            specs.push(spec);
        }
    }
    let mut report = ctx.report(
        "contention",
        &format!(
            "Fig. 4: throughput vs background CPU hogs, {}",
            workload.describe()
        ),
        serde_json::json!({
            "workload": workload, "systems": systems, "hogs": hogs,
            "duration_ms": duration,
        }),
    );
    let done = ctx.run_all(specs, &mut report)?;

    let mut fig = Figure::new(
        "fig4-contention",
        "Fig. 4: throughput as CPU hogs are added",
        FigureKind::Line,
        "background CPU hogs",
        "kops/s",
    );
    let mut cols = vec!["hogs".to_owned()];
    for s in &systems {
        cols.push(format!("{} kops/s", s.label()));
        cols.push(format!("{} vs 0 hogs", s.label()));
    }
    let col_refs: Vec<&str> = cols.iter().map(String::as_str).collect();
    let mut table = Table::new(
        "fig4",
        "Throughput vs background CPU hogs (Fig. 4)",
        &col_refs,
    );
    let mut retention = Vec::new();
    for &s in &systems {
        let pts: Vec<(f64, f64)> = runs_of(&done, s)
            .map(|(spec, f)| (spec.hogs as f64, f.throughput_ops_s / 1e3))
            .collect();
        if let (Some(first), Some(last)) = (pts.first(), pts.last()) {
            if first.0 == 0.0 && first.1 > 0.0 && last.0 > 0.0 {
                retention.push((s, last.1 / first.1, last.1));
            }
        }
        fig.series(s.label(), pts);
    }
    for &h in &hogs {
        let mut row = vec![h.to_string()];
        for &s in &systems {
            let at = |hh: usize| {
                runs_of(&done, s)
                    .find(|(spec, _)| spec.hogs == hh)
                    .map(|(_, f)| f.throughput_ops_s)
            };
            match (at(h), at(0)) {
                (Some(t), Some(t0)) if t0 > 0.0 => {
                    row.push(num(t / 1e3));
                    row.push(pct(t / t0 - 1.0));
                }
                (Some(t), _) => {
                    row.push(num(t / 1e3));
                    row.push("-".into());
                }
                _ => row.extend(["-".to_owned(), "-".to_owned()]),
            }
        }
        table.row(row);
    }
    report.tables.push(table);
    report.figures.push(fig);

    fig4(&mut report, &retention, &hogs);
    report.notes.push(
        "hogs are unpinned busy processes; node threads are not pinned either (the paper pinned server and client workers to separate cores)".into(),
    );
    ctx.finish(report)
}

/// Fig. 4's claim: with the most hogs CD keeps more of its throughput than
/// SD. `retention` holds (system, share kept, throughput with the most hogs).
fn fig4(report: &mut Report, retention: &[(StoreKind, f64, f64)], hogs: &[usize]) {
    let get = |s: StoreKind| retention.iter().find(|r| r.0 == s).copied();
    let max_hogs = hogs.iter().max().copied().unwrap_or(0);
    let comparison = match (get(StoreKind::Cd), get(StoreKind::Sd)) {
        (Some(cd), Some(sd)) => {
            let hy = get(StoreKind::Hy)
                .map(|h| format!(", HY keeps {}", pct(h.1 - 1.0)))
                .unwrap_or_default();
            let ours = format!(
                "at {max_hogs} hogs CD keeps {} of its throughput, SD {}{hy}; CD/SD = {}",
                pct(cd.1 - 1.0),
                pct(sd.1 - 1.0),
                num(cd.2 / sd.2)
            );
            judge(
                ClaimId::Fig4Hogs,
                None,
                ours,
                Some(&[Evidence {
                    value: cd.1,
                    reference: sd.1,
                }]),
            )
        }
        _ => judge(
            ClaimId::Fig4Hogs,
            None,
            "CD and SD not both measured with and without hogs".into(),
            None,
        ),
    };
    report.comparisons.push(comparison);
}
