//! `compare`: CD vs SD vs HY on the paper's default workload (16 KiB values,
//! 90 % GETs, uniform keys), with the summary table and plots; with
//! `--with-peers`, Redis and memcached in the same table.

use super::replication::{self, Replication};
use super::{add_latency_cdfs, add_summary, throughput_of, Common, Ctx, Done, PointArgs};
use crate::error::Result;
use crate::paper;
use crate::paper::{judge, ClaimId, Evidence};
use crate::report::{bytes_label, num, pct, Report};
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
    /// The cost of replication: run CD with r = 1 and with r = N copies of
    /// every entry and index slot side by side (interleaved) and report
    /// both with their ratio. r > 1 needs --nodes 3 or more and at most
    /// that many copies; SD and HY stay unreplicated.
    #[arg(long, value_name = "N", value_parser = super::parse_replicas)]
    pub replicas: Option<usize>,
    /// With --replicas: how many times CD runs at each r (rounds of r = 1
    /// then r = N); the cost table takes the medians.
    #[arg(long, value_name = "K", requires = "replicas",
          value_parser = clap::value_parser!(u16).range(1..=100))]
    pub replica_rounds: Option<u16>,
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
/// [`crate::HarnessError::Replicas`] for `--replicas` the nodes cannot
/// hold; Ctrl-C or a report that cannot be written.
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
    let replication = args
        .replicas
        .map(|r| {
            let rounds = args.replica_rounds.map_or(1, usize::from);
            Replication::side_by_side(r, rounds, usize::from(ctx.common.nodes), &systems)
        })
        .transpose()?;
    let names: Vec<&str> = systems.iter().map(|s| s.label()).collect();
    let mut title = format!("{}, {}", names.join(" vs "), workload.describe());
    let (mut report, specs) = match &replication {
        None => ctx.one_run_each("compare", &title, &workload, &systems, duration),
        Some(plan) => {
            title = format!("{title}; CD with r = {}", levels(&plan.levels));
            plan.plan(&ctx, "compare", &title, &workload, &systems, duration)
        }
    };
    let done = ctx.run_all(specs, &mut report)?;
    add_summary(&mut report, &workload, &done);
    add_latency_cdfs(&mut report, "", &done);
    if let Some(plan) = &replication {
        replication::add_cost_table(&mut report, &done, plan);
    }

    add_throughput_claim(&mut report, &args.point, &done);
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

/// `1, 2` as `1 and 2`.
fn levels(levels: &[usize]) -> String {
    let names: Vec<String> = levels.iter().map(ToString::to_string).collect();
    names.join(" and ")
}

/// Judges CD's, SD's and HY's throughput against the paper's claim for
/// the point's GET ratio (Figs. 5–7).
fn add_throughput_claim(report: &mut Report, point: &PointArgs, done: &[Done]) {
    let (cd, sd, hy) = (
        throughput_of(done, StoreKind::Cd),
        throughput_of(done, StoreKind::Sd),
        throughput_of(done, StoreKind::Hy),
    );
    let claim = if (point.get_ratio - 0.9).abs() < 1e-9 {
        ClaimId::Fig6GetHeavy
    } else if (point.get_ratio - 0.5).abs() < 1e-9 {
        ClaimId::Fig5GetHeavy
    } else {
        ClaimId::Figs5To7GetHeavy
    };
    let at = format!(
        "at {} ({}% GET)",
        bytes_label(point.value_size as f64),
        percent(point.get_ratio)
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: CompareArgs,
    }

    #[test]
    fn replicas_parse_and_rounds_need_them() {
        use clap::Parser;
        let plain = Cli::try_parse_from(["compare"]).unwrap().args;
        assert_eq!((plain.replicas, plain.replica_rounds), (None, None));
        let cli = Cli::try_parse_from(["compare", "--replicas", "2", "--replica-rounds", "3"]);
        let args = cli.unwrap().args;
        assert_eq!((args.replicas, args.replica_rounds), (Some(2), Some(3)));
        for bad in [
            &["compare", "--replica-rounds", "2"][..],
            &["compare", "--replicas", "0"],
            &["compare", "--replicas", "9"],
            &["compare", "--replicas", "2", "--replica-rounds", "0"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
        assert_eq!(levels(&[1, 2]), "1 and 2");
    }

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
