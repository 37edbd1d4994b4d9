//! The error type of every job step.

use crate::digest::Digest;
use std::path::PathBuf;
use std::time::Duration;

/// Why a job step failed. Store errors carry the key they were about;
/// validation errors say which task saw what.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// A store operation failed (after the retries that are safe for it).
    #[error("{op} {key:?}: {source}")]
    Store {
        /// `GET`, `PUT` or `DELETE`.
        op: &'static str,
        /// The key.
        key: String,
        /// The store's error.
        #[source]
        source: nessie::Error,
    },
    /// A key that an earlier step (before a barrier) must have written is
    /// absent.
    #[error("{key:?} is missing from the store")]
    Missing {
        /// The key.
        key: String,
    },
    /// A value does not decode as what the key should hold.
    #[error("{key:?}: malformed {what}: {why}")]
    Malformed {
        /// The key (or `task <i> run <m>` for data handed to a reducer).
        key: String,
        /// What it should have been (`manifest`, `partition`, …).
        what: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// A chunked value's bytes do not match the checksum in its manifest:
    /// chunks of another run, or a torn write.
    #[error("{key:?}: the chunks do not match the manifest's checksum")]
    Checksum {
        /// The manifest's key.
        key: String,
    },
    /// Not every task arrived at a barrier before its deadline.
    #[error("barrier {barrier:?} timed out after {waited:?}; tasks {missing:?} never arrived")]
    BarrierTimeout {
        /// The barrier's name.
        barrier: String,
        /// How long this task waited.
        waited: Duration,
        /// The tasks whose arrival this task never saw.
        missing: Vec<usize>,
    },
    /// Another task failed and said so in the job's abort key.
    #[error("the job was aborted: {reason}")]
    Aborted {
        /// What the failing task wrote.
        reason: String,
    },
    /// A reducer's output is not sorted.
    #[error("task {task}: output is out of order at item {index}")]
    Unsorted {
        /// The reducer.
        task: usize,
        /// Index of the first item smaller than its predecessor.
        index: u64,
    },
    /// A reducer received an item that belongs to another reducer.
    #[error("task {task}: item {index} belongs to partition {belongs}")]
    WrongPartition {
        /// The reducer.
        task: usize,
        /// Index of the item in the reducer's merged output.
        index: u64,
        /// Where the partitioner sends it.
        belongs: usize,
    },
    /// Two reducers' key ranges overlap, so the concatenated output is not
    /// globally sorted.
    #[error("reducer {left}'s last key is greater than reducer {right}'s first key")]
    Overlap {
        /// The earlier reducer.
        left: usize,
        /// The later (non-empty) reducer.
        right: usize,
    },
    /// The reducers' output is not the same multiset as the maps' input.
    #[error("the reducers' output {output:?} differs from the maps' input {input:?}")]
    DigestMismatch {
        /// What the maps read.
        input: Digest,
        /// What the reducers wrote.
        output: Digest,
    },
    /// The job's parameters are unusable.
    #[error("bad job spec: {0}")]
    Spec(String),
    /// An input file is unusable.
    #[error("input {path}: {why}")]
    Input {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// Reading input or writing output failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A store could not be started, joined or connected to.
    #[error("starting {store}: {source}")]
    Start {
        /// The store's label.
        store: &'static str,
        /// Its error.
        #[source]
        source: nessie::Error,
    },
    /// A task's thread panicked (in-process runs).
    #[error("task {task} panicked")]
    TaskPanicked {
        /// The task.
        task: usize,
    },
}

impl JobError {
    /// A store error about `key`.
    pub(crate) fn store(op: &'static str, key: &str) -> impl FnOnce(nessie::Error) -> JobError {
        let key = key.to_owned();
        move |source| JobError::Store { op, key, source }
    }

    /// An I/O error about `path`.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> JobError {
        let path = path.into();
        move |source| JobError::Io { path, source }
    }

    /// A malformed-value error.
    pub(crate) fn malformed(key: &str, what: &'static str, why: impl Into<String>) -> JobError {
        JobError::Malformed {
            key: key.to_owned(),
            what,
            why: why.into(),
        }
    }
}
