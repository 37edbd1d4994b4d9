//! `peers`: the same workload against Redis and memcached (on loopback, or
//! under a launcher on `--peer-host`), with CD as the reference point. Servers that are not installed are skipped
//! with a note. The paper has no such experiment; this places the store
//! among familiar ones.

use super::{add_summary, Common, Ctx, PointArgs};
use crate::error::Result;
use crate::workload::KeyDistribution;
use nessie_examples::StoreKind;

/// Flags of `peers`.
#[derive(Clone, Debug, clap::Args)]
pub struct PeersArgs {
    /// Common flags.
    #[command(flatten)]
    pub common: Common,
    /// The workload point.
    #[command(flatten)]
    pub point: PointArgs,
}

/// Runs `peers`; returns the exit code.
///
/// # Errors
/// Ctrl-C or a report that cannot be written.
pub fn run(args: PeersArgs) -> Result<i32> {
    let mut ctx = Ctx::new("peers", args.common)?;
    let workload = ctx.point_workload(&args.point, KeyDistribution::Uniform)?;
    let duration = ctx.duration_ms(5_000, 1_500);
    let systems = ctx.systems(&[StoreKind::Cd, StoreKind::Redis, StoreKind::Memcached]);
    let host = ctx.launching.peer_host()?;
    let title = if host.is_loopback() {
        format!(
            "CD beside Redis and memcached on loopback, {}",
            workload.describe()
        )
    } else {
        format!(
            "CD beside Redis and memcached on {host}, {}",
            workload.describe()
        )
    };
    let (mut report, specs) = ctx.one_run_each("peers", &title, &workload, &systems, duration);
    let done = ctx.run_all(specs, &mut report)?;
    add_summary(&mut report, &workload, &done);
    report.notes.push(format!(
        "Redis and memcached run as one server process listening on {host} (memcached with {} threads); the node processes are their clients. Their CPU µs/op includes the server's CPU time. Network bytes are request plus reply bytes.",
        ctx.common.nodes
    ));
    ctx.finish(report)
}
