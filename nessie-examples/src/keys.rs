//! The job's key space: every key a job reads or writes, in one place.
//!
//! ```text
//! job/<stage>/<map>/<reduce>            partition (inline, or a chunk manifest)
//! job/<stage>/<map>/<reduce>/<chunk>    its chunks, when it is larger than one value
//! job/<stage>/<barrier>/<task>          barrier arrivals ("done", "reduced", "finished")
//! job/<stage>/abort                     why a failed task gave up
//! job/<stage>/input/<map>               digest of a map's input
//! job/<stage>/summary/<reduce>          digest and key range of a reducer's output
//! job/<stage>/output/<reduce>[/<chunk>] reducer output (when kept in the store)
//! ```
//!
//! Partition keys have numeric second components and every other key a
//! word, so no two kinds collide. `<stage>` names one run of one job:
//! barrier keys are never reset, so a second run must use a new stage (see
//! [`crate::barrier`]).

use crate::JobError;

/// Longest stage name.
pub const MAX_STAGE_LEN: usize = 64;

/// The keys of one stage of a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// The keys of stage `stage`: 1 to [`MAX_STAGE_LEN`] ASCII letters,
    /// digits, `-`, `_` or `.`.
    ///
    /// # Errors
    /// [`JobError::Spec`] for another stage name.
    pub fn new(stage: &str) -> Result<Keys, JobError> {
        let ok = !stage.is_empty()
            && stage.len() <= MAX_STAGE_LEN
            && stage
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !ok {
            return Err(JobError::Spec(format!(
                "stage {stage:?} must be 1 to {MAX_STAGE_LEN} ASCII letters, digits, '-', '_' or '.'"
            )));
        }
        Ok(Keys {
            prefix: format!("job/{stage}"),
        })
    }

    /// `job/<stage>`.
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The partition map task `map` wrote for reduce task `reduce`.
    #[must_use]
    pub fn partition(&self, map: usize, reduce: usize) -> String {
        format!("{}/{map}/{reduce}", self.prefix)
    }

    /// Task `task`'s arrival at barrier `barrier`.
    #[must_use]
    pub fn arrival(&self, barrier: &str, task: usize) -> String {
        format!("{}/{barrier}/{task}", self.prefix)
    }

    /// Where a failing task writes why.
    #[must_use]
    pub fn abort(&self) -> String {
        format!("{}/abort", self.prefix)
    }

    /// Digest of map task `map`'s input.
    #[must_use]
    pub fn input_digest(&self, map: usize) -> String {
        format!("{}/input/{map}", self.prefix)
    }

    /// Summary of reduce task `reduce`'s output.
    #[must_use]
    pub fn summary(&self, reduce: usize) -> String {
        format!("{}/summary/{reduce}", self.prefix)
    }

    /// Reduce task `reduce`'s output.
    #[must_use]
    pub fn output(&self, reduce: usize) -> String {
        format!("{}/output/{reduce}", self.prefix)
    }

    /// The longest key the stage uses with up to `tasks` tasks and
    /// `chunks` chunks per value (for sizing `key_size_max`).
    #[must_use]
    pub fn longest(&self, tasks: usize, chunks: usize) -> usize {
        let t = tasks.saturating_sub(1);
        let c = chunks.saturating_sub(1);
        [
            chunk_key(&self.partition(t, t), c).len(),
            chunk_key(&self.output(t), c).len(),
            self.arrival("finished", t).len(),
            self.summary(t).len(),
            self.input_digest(t).len(),
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }
}

/// Chunk `chunk` of the value whose manifest is at `key`.
#[must_use]
pub fn chunk_key(key: &str, chunk: usize) -> String {
    format!("{key}/{chunk}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_documented_layout() {
        let k = Keys::new("sort-1").unwrap();
        assert_eq!(k.partition(2, 0), "job/sort-1/2/0");
        assert_eq!(chunk_key(&k.partition(2, 0), 3), "job/sort-1/2/0/3");
        assert_eq!(k.arrival("done", 1), "job/sort-1/done/1");
        assert_eq!(k.abort(), "job/sort-1/abort");
        assert_eq!(k.longest(10, 100), "job/sort-1/output/9/99".len());
    }

    #[test]
    fn bad_stage_names_are_refused() {
        for bad in ["", "a/b", "with space", &"x".repeat(MAX_STAGE_LEN + 1)] {
            assert!(matches!(Keys::new(bad), Err(JobError::Spec(_))), "{bad:?}");
        }
    }
}
