//! The job engine: one task's map, shuffle, barrier, reduce and
//! validation, generic over the store ([`KvClient`]) and the job
//! ([`MapReduce`]).
//!
//! Every task is map task *i* and reduce task *i* of a job of `tasks`
//! tasks, each typically on its own node:
//!
//! 1. **map** — [`MapReduce::map`] reads or generates the task's input
//!    split and cuts it into one sorted run per reducer;
//! 2. **shuffle-write** — PUT each run under `job/<stage>/<i>/<r>`
//!    ([`crate::chunk`]: chunked if larger than one value), then the
//!    digest of the input under `job/<stage>/input/<i>`;
//! 3. **barrier** `done` ([`crate::barrier`]);
//! 4. **reduce-read** — GET partition `job/<stage>/<m>/<i>` of every map
//!    `m` (starting after its own index, so that reducers do not all read
//!    map 0 first);
//! 5. **merge** — [`MapReduce::reduce`]: k-way merge, with checks of order
//!    and partition membership;
//! 6. **output** — keep it in the store, in a file, or drop it;
//! 7. **validate** — PUT this reducer's summary (digest, first and last
//!    key), barrier `reduced`, GET every map's input digest and every
//!    reducer's summary and check that the output is the same multiset as
//!    the input and, for range-partitioned jobs, globally sorted; then
//!    barrier `finished`, after which no task reads anything of the job;
//! 8. **cleanup** (optional) — delete what this task wrote: partitions,
//!    digests, summaries and the `done` and `reduced` arrivals. The
//!    `finished` arrivals stay: deleting them would need yet another barrier
//!    (a task still waiting at `finished` must find them), and the stage is
//!    never reused.
//!
//! A task that fails writes the reason under `job/<stage>/abort` (best
//! effort) so that the others stop at their next barrier instead of
//! waiting for the deadline.
//!
//! ## Leaving
//!
//! When [`run_task`] returns, every task has *arrived* at `finished`, but
//! some may still be polling for the last arrivals — and those keys may
//! live on this task's node (SD and HY place a key on its home node by
//! hash, with a server worker that must answer; CD keeps it in the writer's
//! memory, which on `shm` survives the process but on `tcp` does not). No
//! barrier can cover its own reads, so a process that hosts a node must
//! stay up until every task has returned: the harness keeps its task
//! processes until all have reported; a process without a supervisor
//! lingers for [`LINGER`], which covers a waiter's next poll
//! (`poll_max`) many times over. Tasks that are threads of one process
//! ([`crate::store::run_threads`]) share the nodes, which outlive them.

use crate::barrier::{Barrier, BarrierConfig};
use crate::chunk;
use crate::digest::Digest;
use crate::keys::Keys;
use crate::report::{Phase, PhaseTimer, TaskReport};
use crate::{ops, JobError};
use nessie::fabric::VerbCounts;
use nessie::KvClient;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Smallest `max_value` a job accepts.
pub const MIN_VALUE: usize = 1 << 10;
/// Largest `max_value` a job accepts (64 MiB). The nessie stores reserve
/// address space for their largest size class in every class's share and,
/// in SD and HY, four largest frames per ring; see [`crate::store`].
pub const MAX_VALUE: usize = 64 << 20;

/// How long a node process without a supervisor should stay up after
/// [`run_task`] returned, so that tasks still polling the `finished`
/// barrier can read its keys (see the module documentation).
pub const LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// What a reducer returns: its output, or why the job failed.
pub type Reduced = Result<ReduceOutput, JobError>;

/// A job: how to map an input split and how to reduce the runs.
pub trait MapReduce: Sync {
    /// A short name (`sort`, `wordcount`).
    fn name(&self) -> &'static str;

    /// Map task `task` of `tasks`: read or generate its split and return
    /// one run per reducer, each sorted in the job's order, with the digest
    /// of every input item.
    ///
    /// # Errors
    /// The input cannot be read or is malformed.
    fn map(&self, task: usize, tasks: usize) -> Result<MapOutput, JobError>;

    /// Reduce task `task` of `tasks`: merge `runs` (one per map, in map
    /// order), check order and partition membership, and return the output
    /// with its digest.
    ///
    /// # Errors
    /// A run is malformed, or the merged output fails a check.
    fn reduce(&self, task: usize, tasks: usize, runs: &[Vec<u8>]) -> Reduced;

    /// Whether the reducers' outputs, concatenated in reducer order, must
    /// be sorted (range partitioning) — checked across reducers from their
    /// first and last keys.
    fn ordered_across_reducers(&self) -> bool;
}

/// What a map task produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapOutput {
    /// One encoded, sorted run per reducer.
    pub partitions: Vec<Vec<u8>>,
    /// Digest of every input item.
    pub digest: Digest,
    /// Input bytes read or generated.
    pub input_bytes: u64,
}

/// What a reduce task produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReduceOutput {
    /// The output, encoded.
    pub output: Vec<u8>,
    /// Digest of the output items (comparable with the maps' input digests).
    pub digest: Digest,
    /// Key of the first output item (range-partitioned jobs).
    pub first_key: Option<Vec<u8>>,
    /// Key of the last output item (range-partitioned jobs).
    pub last_key: Option<Vec<u8>>,
}

/// A reducer's summary, published for everyone's validation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReduceSummary {
    /// Digest of its output.
    pub digest: Digest,
    /// First key of its output.
    pub first_key: Option<Vec<u8>>,
    /// Last key of its output.
    pub last_key: Option<Vec<u8>>,
}

/// Where reducers put their output.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Output {
    /// Validate it and drop it.
    #[default]
    Discard,
    /// PUT it under `job/<stage>/output/<reduce>` (chunked).
    Store,
    /// Write it to `<path>/part-<reduce>`.
    Dir {
        /// The directory (created if missing).
        path: PathBuf,
    },
}

/// The parameters every task of one job run shares.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Names this run; unique per run (see [`crate::keys`]).
    pub stage: String,
    /// Number of tasks (maps = reducers).
    pub tasks: usize,
    /// Largest value the job PUTs, bytes: larger partitions are chunked.
    /// At most the store's `value_size_max`, within
    /// [`MIN_VALUE`]`..=`[`MAX_VALUE`].
    pub max_value: usize,
    /// Barrier deadline and polling.
    pub barrier: BarrierConfig,
    /// Where the output goes.
    pub output: Output,
    /// Delete the job's keys at the end.
    pub cleanup: bool,
}

impl JobSpec {
    /// A spec with 1 MiB values, default barriers, no output kept and no
    /// cleanup.
    #[must_use]
    pub fn new(stage: impl Into<String>, tasks: usize) -> Self {
        JobSpec {
            stage: stage.into(),
            tasks,
            max_value: 1 << 20,
            barrier: BarrierConfig::default(),
            output: Output::Discard,
            cleanup: false,
        }
    }

    /// Checks the spec for task `task`.
    ///
    /// # Errors
    /// [`JobError::Spec`] naming the bad field.
    pub fn validate(&self, task: usize) -> Result<(), JobError> {
        Keys::new(&self.stage)?;
        if self.tasks == 0 {
            return Err(JobError::Spec("tasks must be at least 1".into()));
        }
        if task >= self.tasks {
            return Err(JobError::Spec(format!(
                "task {task} is out of range for {} tasks",
                self.tasks
            )));
        }
        if !(MIN_VALUE..=MAX_VALUE).contains(&self.max_value) {
            return Err(JobError::Spec(format!(
                "max_value = {} is not within {MIN_VALUE} and {MAX_VALUE} bytes",
                self.max_value
            )));
        }
        if self.barrier.timeout.is_zero() || self.barrier.poll_max < self.barrier.poll_min {
            return Err(JobError::Spec(
                "barrier: timeout must be positive and poll_max at least poll_min".into(),
            ));
        }
        Ok(())
    }
}

fn verbs<C: KvClient + ?Sized>(client: &C) -> VerbCounts {
    client.stats().total().verbs
}

/// CPU seconds the calling thread has used so far (0 where unknown: a
/// report figure, not worth failing a task for).
fn thread_cpu_secs() -> f64 {
    power_ipmi::own_thread_cpu_times().map_or(0.0, |t| t.cpu_s())
}

/// Runs task `task` of `spec` with `client`: map, shuffle, reduce and
/// validation (see the module documentation), and returns what it
/// measured. Every task of the job must call it with the same `spec` and
/// `job`, each with its own client.
///
/// # Errors
/// The first step that failed; the other tasks then stop with
/// [`JobError::Aborted`] at their next barrier.
pub fn run_task<C, J>(
    client: &mut C,
    job: &J,
    spec: &JobSpec,
    task: usize,
) -> Result<TaskReport, JobError>
where
    C: KvClient + ?Sized,
    J: MapReduce + ?Sized,
{
    spec.validate(task)?;
    let keys = Keys::new(&spec.stage)?;
    let cpu = thread_cpu_secs();
    let result = steps(client, job, spec, &keys, task);
    match result {
        Ok(mut report) => {
            report.cpu_secs = thread_cpu_secs() - cpu;
            Ok(report)
        }
        Err(e) => {
            if !matches!(e, JobError::Aborted { .. }) {
                // Best effort: the task's own error matters more.
                let _ = abort(client, &keys, task, &e);
            }
            Err(e)
        }
    }
}

/// Tells the other tasks of the stage of `keys` that `task` failed with
/// `error`: they stop at their next barrier with [`JobError::Aborted`].
///
/// # Errors
/// [`JobError::Store`] if the PUT fails.
pub fn abort<C: KvClient + ?Sized>(
    client: &mut C,
    keys: &Keys,
    task: usize,
    error: &JobError,
) -> Result<(), JobError> {
    let reason = format!("task {task}: {error}");
    ops::put(client, &keys.abort(), reason.as_bytes())
}

fn steps<C, J>(
    client: &mut C,
    job: &J,
    spec: &JobSpec,
    keys: &Keys,
    task: usize,
) -> Result<TaskReport, JobError>
where
    C: KvClient + ?Sized,
    J: MapReduce + ?Sized,
{
    let tasks = spec.tasks;
    let barrier = |name: &'static str| Barrier::new(keys, name, tasks, spec.barrier);
    let mut timer = PhaseTimer::start(verbs(client));

    let mapped = job.map(task, tasks)?;
    if mapped.partitions.len() != tasks {
        return Err(JobError::Spec(format!(
            "map {task} made {} partitions for {tasks} reducers",
            mapped.partitions.len()
        )));
    }
    timer.lap(Phase::Map, verbs(client));

    let (mut shuffle_bytes, mut shuffle_values) = (0, 0);
    for (r, part) in mapped.partitions.iter().enumerate() {
        let stored = chunk::put_blob(client, &keys.partition(task, r), part, spec.max_value)?;
        shuffle_bytes += stored.bytes;
        shuffle_values += stored.values;
    }
    ops::put_json(client, &keys.input_digest(task), &mapped.digest)?;
    let (input_digest, input_bytes) = (mapped.digest, mapped.input_bytes);
    drop(mapped);
    timer.lap(Phase::ShuffleWrite, verbs(client));

    barrier("done").sync(client, task)?;
    timer.lap(Phase::Barrier, verbs(client));

    let mut runs = vec![Vec::new(); tasks];
    let mut fetched_bytes = 0;
    for i in 1..=tasks {
        let m = (task + i) % tasks;
        fetched_bytes += chunk::get_blob(client, &keys.partition(m, task), &mut runs[m])?.bytes;
    }
    timer.lap(Phase::ReduceRead, verbs(client));

    let reduced = job.reduce(task, tasks, &runs)?;
    drop(runs);
    timer.lap(Phase::Merge, verbs(client));

    write_output(client, spec, keys, task, &reduced.output)?;
    timer.lap(Phase::Output, verbs(client));

    let summary = ReduceSummary {
        digest: reduced.digest,
        first_key: reduced.first_key,
        last_key: reduced.last_key,
    };
    ops::put_json(client, &keys.summary(task), &summary)?;
    barrier("reduced").sync(client, task)?;
    let mut inputs = Vec::with_capacity(tasks);
    let mut summaries = Vec::with_capacity(tasks);
    for t in 0..tasks {
        inputs.push(ops::get_json::<C, Digest>(client, &keys.input_digest(t))?);
        summaries.push(ops::get_json::<C, ReduceSummary>(client, &keys.summary(t))?);
    }
    let job_digest = check_summaries(&inputs, &summaries, job.ordered_across_reducers())?;
    barrier("finished").sync(client, task)?;
    timer.lap(Phase::Validate, verbs(client));

    if spec.cleanup {
        cleanup(client, spec, keys, task)?;
    }
    timer.lap(Phase::Cleanup, verbs(client));

    Ok(TaskReport {
        task,
        total_secs: timer.elapsed().as_secs_f64(),
        phases: timer.phases,
        cpu_secs: 0.0,
        process_cpu_secs: None,
        input_bytes,
        shuffle_bytes,
        shuffle_values,
        fetched_bytes,
        records_in: input_digest.records,
        records_out: summary.digest.records,
        output_bytes: reduced.output.len() as u64,
        job_digest,
    })
}

fn write_output<C: KvClient + ?Sized>(
    client: &mut C,
    spec: &JobSpec,
    keys: &Keys,
    task: usize,
    output: &[u8],
) -> Result<(), JobError> {
    match &spec.output {
        Output::Discard => Ok(()),
        Output::Store => {
            chunk::put_blob(client, &keys.output(task), output, spec.max_value).map(|_| ())
        }
        Output::Dir { path } => {
            std::fs::create_dir_all(path).map_err(JobError::io(path))?;
            let file = path.join(format!("part-{task:05}"));
            std::fs::write(&file, output).map_err(JobError::io(file))
        }
    }
}

/// Deletes what task `task` wrote, except its `finished` arrival and its
/// output.
fn cleanup<C: KvClient + ?Sized>(
    client: &mut C,
    spec: &JobSpec,
    keys: &Keys,
    task: usize,
) -> Result<(), JobError> {
    for r in 0..spec.tasks {
        chunk::delete_blob(client, &keys.partition(task, r))?;
    }
    ops::delete(client, &keys.input_digest(task))?;
    ops::delete(client, &keys.summary(task))?;
    for name in ["done", "reduced"] {
        Barrier::new(keys, name, spec.tasks, spec.barrier).remove(client, task)?;
    }
    Ok(())
}

/// Checks the reducers' summaries against the maps' input digests: the
/// same multiset of items and, if `ordered`, the key ranges of non-empty
/// reducers in reducer order do not overlap. Returns the job's digest.
///
/// # Errors
/// [`JobError::DigestMismatch`] or [`JobError::Overlap`].
pub fn check_summaries(
    inputs: &[Digest],
    summaries: &[ReduceSummary],
    ordered: bool,
) -> Result<Digest, JobError> {
    let input: Digest = inputs.iter().copied().sum();
    let output: Digest = summaries.iter().map(|s| s.digest).sum();
    if input != output {
        return Err(JobError::DigestMismatch { input, output });
    }
    if ordered {
        let mut prev: Option<(usize, &[u8])> = None;
        for (r, s) in summaries.iter().enumerate() {
            let (Some(first), Some(last)) = (&s.first_key, &s.last_key) else {
                continue;
            };
            if let Some((left, prev_last)) = prev {
                if prev_last > first.as_slice() {
                    return Err(JobError::Overlap { left, right: r });
                }
            }
            prev = Some((r, last));
        }
    }
    Ok(input)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(items: &[&[u8]], first: Option<&[u8]>, last: Option<&[u8]>) -> ReduceSummary {
        ReduceSummary {
            digest: Digest::of(items.iter().copied()),
            first_key: first.map(<[u8]>::to_vec),
            last_key: last.map(<[u8]>::to_vec),
        }
    }

    #[test]
    fn summaries_must_match_the_input_and_not_overlap() {
        let inputs = [Digest::of([&b"a"[..], b"c"]), Digest::of([&b"b"[..]])];
        let ok = [
            summary(&[b"a", b"b"], Some(b"a"), Some(b"b")),
            summary(&[], None, None),
            summary(&[b"c"], Some(b"c"), Some(b"c")),
        ];
        assert_eq!(check_summaries(&inputs, &ok, true).unwrap().records, 3);

        let overlap = [
            summary(&[b"a", b"c"], Some(b"a"), Some(b"c")),
            summary(&[], None, None),
            summary(&[b"b"], Some(b"b"), Some(b"b")),
        ];
        assert!(matches!(
            check_summaries(&inputs, &overlap, true),
            Err(JobError::Overlap { left: 0, right: 2 })
        ));
        assert!(check_summaries(&inputs, &overlap, false).is_ok());

        let lost = [summary(&[b"a", b"b"], None, None)];
        assert!(matches!(
            check_summaries(&inputs, &lost, false),
            Err(JobError::DigestMismatch { .. })
        ));
    }

    #[test]
    fn specs_are_checked() {
        let ok = JobSpec::new("s", 2);
        ok.validate(1).unwrap();
        for (spec, task) in [
            (JobSpec::new("s", 2), 2),
            (JobSpec::new("s", 0), 0),
            (JobSpec::new("bad stage", 1), 0),
            (
                JobSpec {
                    max_value: 100,
                    ..JobSpec::new("s", 1)
                },
                0,
            ),
            (
                JobSpec {
                    barrier: BarrierConfig {
                        timeout: std::time::Duration::ZERO,
                        ..BarrierConfig::default()
                    },
                    ..JobSpec::new("s", 1)
                },
                0,
            ),
        ] {
            assert!(
                matches!(spec.validate(task), Err(JobError::Spec(_))),
                "{spec:?}"
            );
        }
    }
}
