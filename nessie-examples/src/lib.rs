//! # nessie-examples: jobs on the store
//!
//! The workload the Nessie paper was designed for (§1–3): the processes of
//! a compute job, each at once a storage node and a client, exchanging
//! partitions through the store the way Spark exchanges shuffle blocks.
//! This crate holds a **distributed sort** (100-byte records with 10-byte
//! keys, as in the sort benchmark) and a **word count**, on one engine that
//! is generic over [`nessie::KvClient`], so the same job runs on Nessie
//! (CD), its server-driven (SD) and hybrid (HY) baselines, and Redis.
//!
//! ```
//! use nessie::Config;
//! use nessie_examples::{job_config, run_threads, Input, JobSpec, LocalCluster, Sizing, Sort, StoreKind};
//!
//! let spec = JobSpec { max_value: 64 << 10, ..JobSpec::new("doc-sort", 3) };
//! let sizing = Sizing { tasks: 3, shuffle_bytes: 1 << 20, max_value: spec.max_value, output_in_store: false };
//! let config = job_config(&Config::default(), &sizing)?;
//! let cluster = LocalCluster::start(StoreKind::Cd, config.clone(), None)?; // 3 nodes, this process
//! let sort = Sort { input: Input::Generated { bytes: 1 << 20, seed: 7 } };
//! let report = run_threads(&cluster, &sort, &spec, &config)?;          // one thread per task
//! assert_eq!(report.tasks[0].job_digest.records, (1 << 20) / 100);    // validated by every task
//! # Ok::<(), nessie_examples::JobError>(())
//! ```
//!
//! ## Architecture
//!
//! * [`job`] — the engine: [`run_task`] runs one task's phases (map,
//!   shuffle-write, barrier, reduce-read, merge, output, validate, cleanup)
//!   against any `KvClient`; a job is a [`MapReduce`] (map a split into
//!   sorted runs, reduce runs into output).
//! * [`sort`] and [`wordcount`] — the two jobs. Sort partitions by key range
//!   ([`partition::RangePartitioner`]), word count by hash
//!   ([`partition::HashPartitioner`]); both send sorted runs and merge them
//!   with [`merge::kmerge_by`].
//! * [`barrier`] — a barrier made of per-task keys on the store itself, and
//!   why that is correct on a linearizable store when a shared counter
//!   would not be.
//! * [`chunk`] — values of any size over a store with a value-size limit:
//!   numbered chunks plus a manifest with a checksum.
//! * [`keys`] — the job's key space (`job/<stage>/<map>/<reduce>/…`).
//! * [`digest`] — the order-independent checksum that lets reducers check
//!   that they output exactly the maps' input.
//! * [`input`] — generated input, or byte-range splits of files aligned to
//!   records or words.
//! * [`store`] — the stores ([`StoreKind`]): sizing a [`nessie::Config`] for
//!   a job and its value-size limit ([`job_config`]), an in-process cluster
//!   ([`LocalCluster`]), one process's node ([`StoreNode`]), and
//!   [`run_threads`].
//! * Redis is reached through `text_kv::TextClient`, a minimal Redis and
//!   memcached client.
//! * [`ops`] — GET/PUT/DELETE with the retries that are safe in a job.
//! * [`report`] — per-task, per-phase times and verb counts
//!   ([`TaskReport`], [`JobReport`]).
//!
//! `examples/sort.rs` spells the sort out step by step (start a node, get a
//! client, PUT partitions, barrier, GET partitions, merge, validate); the
//! harness's `nessie-bench job` runs [`run_task`] in one process per node
//! on the `shm` fabric and reports time and bytes per phase.
//!
//! ## Threads and processes
//!
//! A task is one thread with its own client. Tasks of one job may run as
//! threads of one process ([`run_threads`], on the `local` fabric) or in
//! separate processes ([`StoreNode`] on `shm` or `tcp`): they coordinate
//! only through the store.

#![deny(missing_docs)]

mod error;

pub mod barrier;
pub mod chunk;
pub mod digest;
pub mod input;
pub mod job;
pub mod keys;
pub mod merge;
pub mod ops;
pub mod partition;
pub mod report;
pub mod sort;
pub mod store;
pub mod wordcount;

#[cfg(test)]
mod testing;

pub use barrier::{Barrier, BarrierConfig};
pub use digest::Digest;
pub use error::JobError;
pub use input::Input;
pub use job::{run_task, JobSpec, MapReduce, Output};
pub use report::{JobReport, Phase, PhaseReport, TaskReport};
pub use sort::Sort;
pub use store::{job_config, run_threads, LocalCluster, Sizing, StoreKind, StoreNode};
pub use wordcount::WordCount;
