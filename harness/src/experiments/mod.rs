//! The paper's experiments, one module per subcommand, and what they share:
//! common flags, run planning, the progress bar, running a list of runs and
//! finishing the report.

pub mod breakdown;
pub mod cdf;
pub mod chaos;
pub mod compare;
pub mod contention;
mod data_tables;
pub mod energy;
pub mod failover;
pub mod job;
pub mod peers;
pub mod replication;
pub mod sweep;
mod tails;
pub mod zipf;
pub use breakdown::BreakdownArgs;
pub use cdf::CdfArgs;
pub use compare::CompareArgs;
pub use contention::ContentionArgs;
pub use energy::EnergyArgs;
pub use failover::FailoverArgs;
pub use peers::PeersArgs;
pub use replication::Replication;
pub use sweep::SweepArgs;
pub use zipf::ZipfArgs;
mod context;
mod flags;
mod summary;

pub use context::{Ctx, Done};
pub use flags::{
    parse_fraction, parse_rate, parse_replicas, parse_size, Common, GridArgs, OutputArgs, PointArgs,
};
pub use summary::{
    add_latency_cdfs, add_summary, latency_cdfs, run_at, runs_of, summary_figures, summary_table,
    throughput_of,
};
