//! `cdf` (paper Figs. 8–11): distributions of the verbs and the network
//! bytes each GET and PUT costs, 50 % GETs, 16 KiB values, uniform keys. The
//! node processes record every operation's cost (from the store's verb
//! counters) in histograms; this plots their CDFs.

use super::{parse_fraction, parse_size, Common, Ctx, Done};
use crate::error::Result;
use crate::measure::Hist;
use crate::paper::{judge, ClaimId, Evidence};
use crate::report::{num, pct, share, Figure, FigureKind, Report, Table};
use crate::workload::{KeyDistribution, OpKind};
use nessie_examples::StoreKind;

/// Flags of `cdf`.
#[derive(Clone, Debug, clap::Args)]
pub struct CdfArgs {
    /// Common flags.
    #[command(flatten)]
    pub common: Common,
    /// Value size.
    #[arg(long, default_value = "16KiB", value_parser = parse_size)]
    pub value_size: usize,
    /// Fraction of GETs.
    #[arg(long, default_value = "0.5", value_parser = parse_fraction)]
    pub get_ratio: f64,
}

/// The distributions plotted, one figure each.
#[derive(Clone, Copy)]
struct Metric {
    fig: &'static str,
    file: &'static str,
    kind: OpKind,
    what: &'static str,
    hist: fn(&crate::measure::KindReport) -> &Hist,
}

const METRICS: [Metric; 6] = [
    Metric {
        fig: "Fig. 8",
        file: "fig8-verbs-get",
        kind: OpKind::Get,
        what: "verbs per GET (all targets)",
        hist: |k| &k.verbs,
    },
    Metric {
        fig: "Fig. 9",
        file: "fig9-verbs-put",
        kind: OpKind::Put,
        what: "verbs per PUT (all targets)",
        hist: |k| &k.verbs,
    },
    Metric {
        fig: "Fig. 10",
        file: "fig10-bytes-get",
        kind: OpKind::Get,
        what: "network bytes per GET",
        hist: |k| &k.remote_bytes,
    },
    Metric {
        fig: "Fig. 11",
        file: "fig11-bytes-put",
        kind: OpKind::Put,
        what: "network bytes per PUT",
        hist: |k| &k.remote_bytes,
    },
    Metric {
        fig: "Figs. 8/9",
        file: "remote-verbs-get",
        kind: OpKind::Get,
        what: "remote verbs per GET",
        hist: |k| &k.remote_verbs,
    },
    Metric {
        fig: "Figs. 8/9",
        file: "remote-verbs-put",
        kind: OpKind::Put,
        what: "remote verbs per PUT",
        hist: |k| &k.remote_verbs,
    },
];

/// Runs `cdf`; returns the exit code.
///
/// # Errors
/// Ctrl-C or a report that cannot be written.
pub fn run(args: CdfArgs) -> Result<i32> {
    let mut ctx = Ctx::new("cdf", args.common)?;
    let workload = ctx.workload(args.value_size, args.get_ratio, KeyDistribution::Uniform);
    workload.validate()?;
    let duration = ctx.duration_ms(5_000, 1_500);
    let systems = ctx.systems(&StoreKind::PAPER);
    let title = format!(
        "Figs. 8–11: verbs and bytes per operation, {}",
        workload.describe()
    );
    let (mut report, specs) = ctx.one_run_each("cdf", &title, &workload, &systems, duration);
    let done = ctx.run_all(specs, &mut report)?;
    let measured: Vec<&Done> = done.iter().filter(|d| d.merged.is_some()).collect();
    distributions(&mut report, &measured);
    claims(&mut report, &measured, ctx.common.nodes);
    report.notes.push(
        "Figs. 8/9 count every verb, local ones included (the paper's CD reads ITEs with RDMA even on its own node); the remote-verbs plots count only verbs to other nodes. Bytes are those moved to or from other nodes.".into(),
    );
    ctx.finish(report)
}

/// A CDF per metric and a table of each distribution's mean and
/// percentiles.
fn distributions(report: &mut Report, measured: &[&Done]) {
    let mut table = Table::new(
        "cost",
        "Cost per operation: mean and percentiles of each distribution",
        &[
            "system",
            "op",
            "metric",
            "mean",
            "p50",
            "p90",
            "p99",
            "max",
            "share = 0",
        ],
    );
    for m in METRICS {
        let mut fig = Figure::new(
            m.file,
            &format!("{}: CDF of {}", m.fig, m.what),
            FigureKind::Cdf,
            m.what,
            "fraction of operations",
        );
        for d in measured {
            let Some(merged) = &d.merged else { continue };
            let h = (m.hist)(merged.kind(m.kind));
            if h.0.is_empty() {
                continue;
            }
            fig.series(
                format!("{}-{}", d.record.system.label(), m.kind.name()),
                h.cdf(),
            );
            let q = |q: f64| num(h.0.value_at_quantile(q) as f64);
            table.row(vec![
                d.record.system.label().to_owned(),
                m.kind.name().to_owned(),
                m.what.to_owned(),
                num(h.0.mean()),
                q(0.5),
                q(0.9),
                q(0.99),
                num(h.0.max() as f64),
                share(h.0.count_between(0, 0) as f64 / h.0.len() as f64),
            ]);
        }
        report.figures.push(fig);
    }
    report.tables.push(table);
}

/// The claims of Figs. 8–11: CD's PUTs move fewer bytes with more verbs
/// than SD's, GETs similar bytes; SD serves 1 in `nodes` GETs locally.
fn claims(report: &mut Report, measured: &[&Done], nodes: u16) {
    let mean = |s: StoreKind, kind: OpKind, pick: fn(&crate::measure::KindReport) -> &Hist| {
        measured
            .iter()
            .find(|d| d.record.system == s)
            .and_then(|d| d.merged.as_ref())
            .map(|m| pick(m.kind(kind)).0.mean())
    };
    // (claim, what is compared, the operation, its histogram)
    type Pick = fn(&crate::measure::KindReport) -> &Hist;
    let cd_vs_sd: [(ClaimId, &str, OpKind, Pick); 3] = [
        (
            ClaimId::Fig11PutBytes,
            "mean net bytes/PUT",
            OpKind::Put,
            |k| &k.remote_bytes,
        ),
        (ClaimId::Fig9PutVerbs, "mean verbs/PUT", OpKind::Put, |k| {
            &k.verbs
        }),
        (
            ClaimId::Fig10GetBytes,
            "mean net bytes/GET",
            OpKind::Get,
            |k| &k.remote_bytes,
        ),
    ];
    for (claim, what, kind, pick) in cd_vs_sd {
        let both = mean(StoreKind::Cd, kind, pick).zip(mean(StoreKind::Sd, kind, pick));
        report.comparisons.push(match both {
            Some((c, s)) if kind == OpKind::Put || s > 0.0 => {
                // The GET claim is about similarity, so ours says by how much.
                let diff = if kind == OpKind::Get {
                    format!(" ({})", pct(c / s - 1.0))
                } else {
                    String::new()
                };
                let ours = format!("{what}: CD {} SD {}{diff}", num(c), num(s));
                judge(
                    claim,
                    None,
                    ours,
                    Some(&[Evidence {
                        value: c,
                        reference: s,
                    }]),
                )
            }
            _ => judge(claim, None, "needs CD and SD".into(), None),
        });
    }
    let sd_local = measured
        .iter()
        .find(|d| d.record.system == StoreKind::Sd)
        .and_then(|d| d.merged.as_ref())
        .map(|m| {
            let h = &m.get.remote_verbs.0;
            h.count_between(0, 0) as f64 / h.len().max(1) as f64
        });
    let nodes = f64::from(nodes);
    report.comparisons.push(match sd_local {
        Some(local) => judge(
            ClaimId::Figs8And9Locality,
            None,
            format!(
                "{} of SD GETs use no network ({} nodes: expect {})",
                share(local),
                nodes,
                share(1.0 / nodes)
            ),
            Some(&[Evidence {
                value: local,
                reference: 1.0 / nodes,
            }]),
        ),
        None => judge(ClaimId::Figs8And9Locality, None, "needs SD".into(), None),
    });
}
