//! `compare`: CD vs SD vs HY on the paper's default workload (16 KiB values,
//! 90 % GETs, uniform keys), with the summary table and plots; with
//! `--with-peers`, Redis and memcached in the same table.

use super::{add_latency_cdfs, add_summary, throughput_of, Common, Ctx, PointArgs};
use crate::error::Result;
use crate::paper;
use crate::paper::{judge, ClaimId, Evidence};
use crate::report::{bytes_label, num, pct};
use crate::workload::{percent, KeyDistribution, YCSB_THETA};
use nessie_examples::StoreKind;

/// Flags of `compare`.
#[derive(Clone, Debug, clap::Args)]
pub struct CompareArgs {
    /// Common flags.
    #[command(flatten)]
    pub common: Common,
    /// The workload point.
    #[command(flatten)]
    pub point: PointArgs,
    /// Zipf-distributed keys (θ = 0.99) instead of uniform.
    #[arg(long)]
    pub zipf: bool,
    /// Run Redis and memcached too, after CD, SD and HY (when `--systems`
    /// is not given).
    #[arg(long)]
    pub with_peers: bool,
}

/// The systems `compare` runs without `--systems`.
fn default_systems(with_peers: bool) -> Vec<StoreKind> {
    let mut systems = StoreKind::PAPER.to_vec();
    if with_peers {
        systems.extend([StoreKind::Redis, StoreKind::Memcached]);
    }
    systems
}

/// Runs `compare`; returns the exit code.
///
/// # Errors
/// Ctrl-C or a report that cannot be written.
pub fn run(args: CompareArgs) -> Result<i32> {
    let mut ctx = Ctx::new("compare", args.common)?;
    let dist = if args.zipf {
        KeyDistribution::Zipf { theta: YCSB_THETA }
    } else {
        KeyDistribution::Uniform
    };
    let workload = ctx.point_workload(&args.point, dist)?;
    let duration = ctx.duration_ms(10_000, 2_000);
    let systems = ctx.systems(&default_systems(args.with_peers));
    let names: Vec<&str> = systems.iter().map(|s| s.label()).collect();
    let title = format!("{}, {}", names.join(" vs "), workload.describe());
    let (mut report, specs) = ctx.one_run_each("compare", &title, &workload, &systems, duration);
    let done = ctx.run_all(specs, &mut report)?;
    add_summary(&mut report, &workload, &done);
    add_latency_cdfs(&mut report, "", &done);

    let (cd, sd, hy) = (
        throughput_of(&done, StoreKind::Cd),
        throughput_of(&done, StoreKind::Sd),
        throughput_of(&done, StoreKind::Hy),
    );
    let claim = if (args.point.get_ratio - 0.9).abs() < 1e-9 {
        ClaimId::Fig6GetHeavy
    } else if (args.point.get_ratio - 0.5).abs() < 1e-9 {
        ClaimId::Fig5GetHeavy
    } else {
        ClaimId::Figs5To7GetHeavy
    };
    let at = format!(
        "at {} ({}% GET)",
        bytes_label(args.point.value_size as f64),
        percent(args.point.get_ratio)
    );
    let (ours, pairs) = match (cd, sd, hy) {
        (Some(cd), Some(sd), Some(hy)) => (
            format!(
                "CD {} SD {} HY {} kops/s (CD vs SD {})",
                num(cd / 1e3),
                num(sd / 1e3),
                num(hy / 1e3),
                pct(cd / sd - 1.0)
            ),
            Some(vec![
                Evidence {
                    value: cd,
                    reference: sd,
                },
                Evidence {
                    value: hy,
                    reference: cd.min(sd),
                },
            ]),
        ),
        (Some(cd), Some(sd), None) => (
            format!(
                "CD {} SD {} kops/s; HY not measured",
                num(cd / 1e3),
                num(sd / 1e3)
            ),
            None,
        ),
        _ => ("CD and SD not both measured".into(), None),
    };
    report
        .comparisons
        .push(judge(claim, Some(&at), ours, pairs.as_deref()));
    let put_bytes = |s| {
        super::runs_of(&done, s)
            .next()
            .map(|(_, f)| f.put.remote_bytes_per_op)
    };
    report
        .comparisons
        .push(match (put_bytes(StoreKind::Cd), put_bytes(StoreKind::Sd)) {
            (Some(c), Some(s)) => judge(
                ClaimId::Figs10And11PutBytes,
                None,
                format!("net bytes/PUT: CD {} SD {}", num(c), num(s)),
                Some(&[Evidence {
                    value: c,
                    reference: s,
                }]),
            ),
            _ => judge(
                ClaimId::Figs10And11PutBytes,
                None,
                "CD and SD not both measured".into(),
                None,
            ),
        });
    report.notes.push(format!(
        "the paper ran {} nodes with 12 cores each; this run has {} node processes sharing {} cores, each with {} worker threads",
        paper::NODES,
        ctx.common.nodes,
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
        ctx.common.threads
    ));
    if let (true, Ok(host)) = (
        systems.iter().any(|s| s.is_peer()),
        ctx.launching.peer_host(),
    ) {
        report.notes.push(format!(
            "Redis and memcached run as one server process on the harness's host, listening on {host} (memcached with {} threads); the node processes are their clients. Their CPU µs/op includes the server's CPU time. Network bytes are request plus reply bytes.",
            ctx.common.nodes
        ));
    }
    if systems.contains(&StoreKind::Lmdb) {
        report.notes.push(super::peers::LMDB_NOTE.into());
    }
    ctx.finish(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_peers_adds_redis_and_memcached() {
        let names = |v: Vec<StoreKind>| v.iter().map(|s| s.label()).collect::<Vec<_>>();
        assert_eq!(names(default_systems(false)), ["CD", "SD", "HY"]);
        assert_eq!(
            names(default_systems(true)),
            ["CD", "SD", "HY", "Redis", "memcached"]
        );
    }
}
