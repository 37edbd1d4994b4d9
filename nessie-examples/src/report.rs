//! What a task measured, phase by phase, and the job-wide view of all
//! tasks.

use crate::digest::Digest;
use nessie::fabric::VerbCounts;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// The steps of a task, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Read or generate the input split, partition it, sort the runs (no
    /// store operations).
    Map,
    /// PUT every partition (chunked) and the input digest.
    ShuffleWrite,
    /// Wait until every map has written its partitions.
    Barrier,
    /// GET this reducer's partition from every map.
    ReduceRead,
    /// k-way merge of the runs, with order and partition checks.
    Merge,
    /// Keep the output (store or file), if asked to.
    Output,
    /// Publish this reducer's summary, wait for everyone's, check them
    /// against the maps' input digests, and wait until everyone has.
    Validate,
    /// Delete what this task wrote, if asked to.
    Cleanup,
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Phase; 8] = [
        Phase::Map,
        Phase::ShuffleWrite,
        Phase::Barrier,
        Phase::ReduceRead,
        Phase::Merge,
        Phase::Output,
        Phase::Validate,
        Phase::Cleanup,
    ];

    /// A short label (`shuffle-write`).
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Phase::Map => "map",
            Phase::ShuffleWrite => "shuffle-write",
            Phase::Barrier => "barrier",
            Phase::ReduceRead => "reduce-read",
            Phase::Merge => "merge",
            Phase::Output => "output",
            Phase::Validate => "validate",
            Phase::Cleanup => "cleanup",
        }
    }
}

/// One phase of one task.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseReport {
    /// Which.
    pub phase: Phase,
    /// Wall-clock seconds.
    pub secs: f64,
    /// Verbs the task's client issued in it (all operation kinds).
    pub verbs: VerbCounts,
}

impl PhaseReport {
    /// Bytes the phase moved to or from the task's own node's memory: all
    /// READ and WRITE bytes minus those that crossed the fabric.
    #[must_use]
    pub fn local_bytes(&self) -> u64 {
        self.verbs.bytes().saturating_sub(self.verbs.remote_bytes)
    }
}

/// Everything one task measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskReport {
    /// The task (map and reduce task of the same index).
    pub task: usize,
    /// One entry per [`Phase`], in order.
    pub phases: Vec<PhaseReport>,
    /// Wall-clock seconds of the whole task.
    pub total_secs: f64,
    /// CPU seconds of the task's thread (user + system). A multi-process
    /// runner adds the whole process's in `process_cpu_secs`.
    pub cpu_secs: f64,
    /// CPU seconds of the task's whole process over the task, when the
    /// runner measured them (server threads of SD and HY included).
    #[serde(default)]
    pub process_cpu_secs: Option<f64>,
    /// Input bytes the map read.
    pub input_bytes: u64,
    /// Partition bytes the map PUT.
    pub shuffle_bytes: u64,
    /// Store values the map PUT for them (chunks and manifests).
    pub shuffle_values: u64,
    /// Partition bytes the reducer fetched.
    pub fetched_bytes: u64,
    /// Items (records, word occurrences) the map read.
    pub records_in: u64,
    /// Items the reducer produced.
    pub records_out: u64,
    /// Output bytes of the reducer.
    pub output_bytes: u64,
    /// The validated digest of the whole job (the same on every task).
    pub job_digest: Digest,
}

impl TaskReport {
    /// The report of phase `p`.
    #[must_use]
    pub fn phase(&self, p: Phase) -> PhaseReport {
        self.phases
            .iter()
            .copied()
            .find(|r| r.phase == p)
            .unwrap_or(PhaseReport {
                phase: p,
                secs: 0.0,
                verbs: VerbCounts::default(),
            })
    }

    /// Verbs of all phases together.
    #[must_use]
    pub fn verbs(&self) -> VerbCounts {
        self.phases.iter().fold(VerbCounts::default(), |mut a, p| {
            a += p.verbs;
            a
        })
    }
}

/// Times phases and takes the difference of the client's counters.
#[derive(Debug)]
pub(crate) struct PhaseTimer {
    started: Instant,
    at: Instant,
    verbs: VerbCounts,
    pub(crate) phases: Vec<PhaseReport>,
}

impl PhaseTimer {
    pub(crate) fn start(verbs: VerbCounts) -> Self {
        let now = Instant::now();
        PhaseTimer {
            started: now,
            at: now,
            verbs,
            phases: Vec::with_capacity(Phase::ALL.len()),
        }
    }

    /// Ends `phase` now, the client's counters standing at `verbs`.
    pub(crate) fn lap(&mut self, phase: Phase, verbs: VerbCounts) {
        let now = Instant::now();
        self.phases.push(PhaseReport {
            phase,
            secs: (now - self.at).as_secs_f64(),
            verbs: verbs - self.verbs,
        });
        self.at = now;
        self.verbs = verbs;
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// Every task of one job run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobReport {
    /// The store (`CD`, `SD`, `HY`, `Redis`).
    pub store: String,
    /// Each task's report, by task.
    pub tasks: Vec<TaskReport>,
    /// Wall-clock seconds from the start of the first task to the end of
    /// the last.
    pub wall_secs: f64,
    /// Verbs the server workers issued (SD and HY; in-process runs only).
    #[serde(default)]
    pub server_verbs: Option<VerbCounts>,
}

impl JobReport {
    /// The longest any task spent in phase `p` (phases of different tasks
    /// overlap, so this is the phase's share of the critical path, not a
    /// sum).
    #[must_use]
    pub fn phase_secs(&self, p: Phase) -> f64 {
        self.tasks
            .iter()
            .map(|t| t.phase(p).secs)
            .fold(0.0, f64::max)
    }

    /// Verbs of phase `p`, all tasks together.
    #[must_use]
    pub fn phase_verbs(&self, p: Phase) -> VerbCounts {
        self.tasks.iter().fold(VerbCounts::default(), |mut a, t| {
            a += t.phase(p).verbs;
            a
        })
    }

    /// Verbs of every phase of every task.
    #[must_use]
    pub fn verbs(&self) -> VerbCounts {
        self.tasks.iter().fold(VerbCounts::default(), |mut a, t| {
            a += t.verbs();
            a
        })
    }

    /// Input bytes of all maps.
    #[must_use]
    pub fn input_bytes(&self) -> u64 {
        self.tasks.iter().map(|t| t.input_bytes).sum()
    }
}
