//! `peers`: the same workload against Redis and memcached (on loopback, or
//! under a launcher on `--peer-host`) and LMDB (one environment in
//! `/dev/shm` that the node processes share), with CD as the reference
//! point. Servers that are not installed are skipped with a note, and so is
//! LMDB when a launcher may place nodes on other hosts. The paper has no
//! such experiment; this places the store among familiar ones.

use super::{add_latency_cdfs, add_summary, Common, Ctx, PointArgs, Replication};
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
    /// Copies of every CD entry and index slot (r > 1 needs --nodes 3 or
    /// more and at most that many copies); Redis, memcached and LMDB keep
    /// one.
    #[arg(long, value_name = "N", value_parser = super::parse_replicas)]
    pub replicas: Option<usize>,
}

/// The systems `peers` runs without `--systems`.
pub const DEFAULT_SYSTEMS: [StoreKind; 4] = [
    StoreKind::Cd,
    StoreKind::Redis,
    StoreKind::Memcached,
    StoreKind::Lmdb,
];

/// The note on how LMDB runs and what its columns mean.
pub const LMDB_NOTE: &str = "LMDB runs inside the node processes: one environment in a fresh /dev/shm directory that every node opens (NO_SYNC, NO_META_SYNC, a map of twice the data plus 64 MiB, a reader slot per worker thread). A GET is a lock-free read transaction whose value is copied into the worker's buffer; a PUT is one write transaction, and LMDB admits one writer at a time across all processes. Nothing crosses a network: its net B/op are 0, and its verbs/op count the one local copy of the value (a GET's read, a PUT's write), not network verbs. Its CPU µs/op is the node processes' own.";

/// Runs `peers`; returns the exit code.
///
/// # Errors
/// [`crate::HarnessError::Replicas`] for `--replicas` the nodes cannot
/// hold; Ctrl-C or a report that cannot be written.
pub fn run(args: PeersArgs) -> Result<i32> {
    let mut ctx = Ctx::new("peers", args.common)?;
    let workload = ctx.point_workload(&args.point, KeyDistribution::Uniform)?;
    let duration = ctx.duration_ms(5_000, 1_500);
    let systems = ctx.systems(&DEFAULT_SYSTEMS);
    let host = ctx.launching.peer_host()?;
    let title = format!(
        "CD beside Redis, memcached and LMDB{}, {}",
        if host.is_loopback() {
            " on loopback".to_owned()
        } else {
            format!(" (servers on {host})")
        },
        workload.describe()
    );
    let (mut report, specs) = match args.replicas {
        None => ctx.one_run_each("peers", &title, &workload, &systems, duration),
        Some(r) => Replication::only(r, usize::from(ctx.common.nodes), &systems)?.plan(
            &ctx,
            "peers",
            &format!("{title}; CD with r = {r}"),
            &workload,
            &systems,
            duration,
        ),
    };
    let done = ctx.run_all(specs, &mut report)?;
    add_summary(&mut report, &workload, &done);
    add_latency_cdfs(&mut report, "", &done);
    if systems.iter().any(|s| s.is_peer()) {
        report.notes.push(format!(
            "Redis and memcached run as one server process listening on {host} (memcached with {} threads); the node processes are their clients. Their CPU µs/op includes the server's CPU time. Network bytes are request plus reply bytes.",
            ctx.common.nodes
        ));
    }
    if systems.contains(&StoreKind::Lmdb) {
        report.notes.push(LMDB_NOTE.into());
    }
    ctx.finish(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: PeersArgs,
    }

    #[test]
    fn lmdb_is_a_default_peer_and_parses() {
        assert_eq!(
            DEFAULT_SYSTEMS.map(StoreKind::label),
            ["CD", "Redis", "memcached", "LMDB"]
        );
        let cli = Cli::try_parse_from(["peers", "--systems", "cd,lmdb"]).unwrap();
        assert_eq!(
            cli.args.common.systems,
            Some(vec![StoreKind::Cd, StoreKind::Lmdb])
        );
        assert_eq!("lmdb".parse::<StoreKind>().ok(), Some(StoreKind::Lmdb));
        let cli = Cli::try_parse_from(["peers", "--replicas", "2"]).unwrap();
        assert_eq!(cli.args.replicas, Some(2));
        assert!(Cli::try_parse_from(["peers", "--replicas", "0"]).is_err());
    }
}
