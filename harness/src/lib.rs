//! # harness: `nessie-bench`
//!
//! Drives the client-driven store (`nessie`, CD) and its server-driven (SD)
//! and hybrid (HY) baselines — and, for reference, Redis, memcached and LMDB — with
//! the same YCSB-style workloads, and reproduces the experiments of the Nessie
//! paper (§6, Figs. 4–14 and Table 1), one subcommand each.
//!
//! Every run starts a real cluster: one process per node, by default on the
//! `shm` fabric, each a re-execution of this binary (`nessie-bench node`)
//! started by the harness or by a launcher (`srun`, `mpirun`) on other
//! hosts, coordinated over stdin/stdout and torn down completely afterwards
//! (also on Ctrl-C or when a node crashes).
//!
//! Modules:
//! * [`workload`] — keys, values, uniform and scrambled-Zipf key choice,
//!   GET/PUT mix, Poisson arrivals; all seeded.
//! * [`proc`] — child processes (one guard that kills a process group),
//!   signals, stderr tails.
//! * [`peers`] — Redis and memcached servers.
//! * [`lmdb`] — the LMDB environment the node processes of a run share.
//! * [`system`] — the stores ([`nessie_examples::StoreKind`]) behind one
//!   [`system::NodeHandle`] abstraction that hands out boxed
//!   [`nessie::KvClient`]s.
//! * [`launcher`] — `--fabric shm|tcp|verbs` and `--launcher
//!   local|srun|mpirun`: fabric settings, launcher command lines, the run's
//!   secret.
//! * [`spec`] — one run's parameters and the table sizing rules.
//! * [`tail`] — latency-bucketed costs of the slowest operations, and
//!   which operations the kernel preempted.
//! * [`measure`] — histograms and counters, per node and merged; per time
//!   bucket for a time series.
//! * [`protocol`] — the lines node processes and the harness exchange.
//! * [`cluster`] — starting, coordinating and tearing down node processes.
//! * [`node`] — the node process: preload, measured phase, report; or a
//!   time series until `stop`, and a replacement that rejoins (`failover`).
//! * [`report`] — results.json, CSV, SVG/PNG plots and report.md.
//! * [`paper`] — the paper's published numbers and claims.
//! * [`experiments`] — the subcommands.
//!
//! Modules depend downwards in this list's reverse order of use: error and
//! workload at the bottom, then proc, peers, lmdb, system, launcher, spec,
//! tail, measure, protocol, cluster and node, report and paper, experiments
//! on top.

pub mod cluster;
pub mod error;
pub mod experiments;
pub mod launcher;
pub mod lmdb;
pub mod measure;
pub mod node;
pub mod paper;
pub mod peers;
pub mod proc;
pub mod protocol;
pub mod report;
pub mod spec;
pub mod system;
pub mod tail;
pub mod workload;

pub use error::{HarnessError, Result};
