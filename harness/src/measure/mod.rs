//! What a node process measures and how the harness adds it up.
//!
//! Each worker thread keeps a [`Recorder`]: per operation kind, a latency
//! histogram (ns) and histograms of the verbs and bytes each operation cost
//! (from the store's [`nessie::Stats`] before and after it), plus counts of
//! successes, errors and misses. A node merges its workers' recorders into a
//! [`NodeReport`], which travels to the harness as one JSON line with the
//! histograms in `HdrHistogram` V2 encoding (hex). The harness merges the
//! nodes' reports into a [`RunFigures`]: throughput, goodput, latency
//! percentiles, verbs and bytes per operation and CPU time per operation.
//!
//! Each kind also keeps a second latency histogram of only the operations
//! the kernel did not preempt, and latency-bucketed sums of what the
//! operations cost ([`crate::tail`]), from which the summary reads what the
//! slowest 1 % and 0.1 % spent their time on.
//!
//! A run measured as a time series (`failover`) records per time bucket
//! instead ([`timeline`]).

mod figures;
mod record;
#[cfg(test)]
mod tests;
pub mod timeline;

pub use figures::{summarize, KindSummary, Merged, NodeFigures, PowerFigures, RunFigures};
pub use record::{Hist, KindReport, NodeReport, OpCounters, PreloadReport, Recorder};
