//! A barrier built on the store itself, with no side channel.
//!
//! The key-value interface has GET, PUT and DELETE but no atomic increment
//! or compare-and-swap, so the barrier uses one key per task: task `i`
//! **arrives** by `PUTting` `job/<stage>/<barrier>/<i>`, then **waits** by
//! `GETting` the other tasks' keys — only those it has not seen yet — with
//! exponential back-off, until it has seen all of them or its deadline
//! passes ([`JobError::BarrierTimeout`] naming the missing tasks). While it
//! waits it also GETs the stage's abort key, so a task that failed and said
//! so ([`crate::job::abort`]) stops the others early ([`JobError::Aborted`]).
//!
//! ## Why this is correct on a linearizable store
//!
//! Every operation of a linearizable store takes effect at one instant
//! between its call and its return, in an order consistent with real time.
//! A task calls `arrive` only after its PUTs before the barrier (its
//! partitions) have returned, so they took effect before its arrival PUT
//! did. A task leaves `wait` only after a GET returned each other task's
//! arrival key, so each arrival took effect before that GET returned, and
//! therefore before any operation the waiting task starts afterwards. By
//! transitivity, every PUT any task made before arriving took effect before
//! every GET any task makes after leaving the barrier: a reducer that finds
//! a partition's manifest missing after the barrier is looking at a bug, not
//! a race, and reports [`JobError::Missing`]. Each arrival key has a single
//! writer and is written once, so there is no lost update to fear, and
//! arrivals never disappear while anyone may still wait (they are deleted,
//! if at all, only after a later barrier; see [`crate::job`]).
//!
//! **Why not a counter key.** Without CAS or increment, a shared counter
//! would be a read-modify-write: GET `n`, PUT `n + 1`. Two tasks can both
//! read 3 and both write 4; one arrival is lost, the count never reaches
//! `tasks`, and everybody waits until the deadline. (With a CAS the PUT would
//! fail for the slower task, which would re-read and retry — the store's
//! fabric has CAS, but its key-value interface, which the baselines and
//! Redis share, does not.) Per-task keys need no atomic read-modify-write:
//! each is written by one task and only read by the others.
//!
//! The barrier's keys are never reset, so a stage must not be reused: a
//! second run under the same stage would find the first run's arrivals and
//! pass at once. Jobs therefore name each run's stage uniquely.
//!
//! **Cost.** Each waiting task issues one GET per missing task and one for
//! the abort key per poll; the back-off (from `poll_min`, doubling up to
//! `poll_max`) bounds that to a few hundred small GETs per second per task
//! while it waits, and at most `poll_max` of extra latency once the last
//! task arrives.

use crate::keys::Keys;
use crate::{ops, JobError};
use nessie::KvClient;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// How a task waits at a barrier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BarrierConfig {
    /// Give up after waiting this long.
    pub timeout: Duration,
    /// First pause between polls.
    pub poll_min: Duration,
    /// Longest pause between polls.
    pub poll_max: Duration,
}

impl Default for BarrierConfig {
    fn default() -> Self {
        BarrierConfig {
            timeout: Duration::from_secs(120),
            poll_min: Duration::from_micros(200),
            poll_max: Duration::from_millis(20),
        }
    }
}

/// What waiting at a barrier took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Waited {
    /// Time from the call of [`Barrier::wait`] until every task was seen.
    pub elapsed: Duration,
    /// Rounds of GETs issued.
    pub polls: u64,
}

/// One barrier of one stage, for `tasks` tasks.
#[derive(Clone, Debug)]
pub struct Barrier<'a> {
    keys: &'a Keys,
    name: &'a str,
    tasks: usize,
    config: BarrierConfig,
}

impl<'a> Barrier<'a> {
    /// The barrier `name` (a word such as `done`) of the stage of `keys`.
    #[must_use]
    pub fn new(keys: &'a Keys, name: &'a str, tasks: usize, config: BarrierConfig) -> Self {
        Barrier {
            keys,
            name,
            tasks,
            config,
        }
    }

    /// The value an arrival key holds.
    fn token(&self, task: usize) -> Vec<u8> {
        format!("{}:{task}", self.name).into_bytes()
    }

    fn check_task(&self, task: usize) -> Result<(), JobError> {
        if task < self.tasks {
            Ok(())
        } else {
            Err(JobError::Spec(format!(
                "task {task} at barrier {:?} of {} tasks",
                self.name, self.tasks
            )))
        }
    }

    /// Records that `task` arrived. Call it after every write the others
    /// must see after the barrier has returned.
    ///
    /// # Errors
    /// [`JobError::Spec`] for a task out of range; [`JobError::Store`] if
    /// the PUT fails.
    pub fn arrive<C: KvClient + ?Sized>(
        &self,
        client: &mut C,
        task: usize,
    ) -> Result<(), JobError> {
        self.check_task(task)?;
        ops::put(
            client,
            &self.keys.arrival(self.name, task),
            &self.token(task),
        )
    }

    /// Waits until every task other than `task` has arrived.
    ///
    /// # Errors
    /// [`JobError::BarrierTimeout`] after `config.timeout`;
    /// [`JobError::Aborted`] if a task wrote the abort key;
    /// [`JobError::Malformed`] if an arrival key holds something else;
    /// [`JobError::Store`] if a GET fails.
    pub fn wait<C: KvClient + ?Sized>(
        &self,
        client: &mut C,
        task: usize,
    ) -> Result<Waited, JobError> {
        self.check_task(task)?;
        let start = Instant::now();
        let mut missing: Vec<usize> = (0..self.tasks).filter(|&t| t != task).collect();
        let mut backoff = self.config.poll_min;
        let mut polls = 0;
        let mut value = Vec::new();
        loop {
            polls += 1;
            let mut still = Vec::with_capacity(missing.len());
            for &t in &missing {
                let key = self.keys.arrival(self.name, t);
                if !ops::get_into(client, &key, &mut value)? {
                    still.push(t);
                } else if value != self.token(t) {
                    return Err(JobError::malformed(
                        &key,
                        "barrier arrival",
                        format!("holds {:?}", String::from_utf8_lossy(&value)),
                    ));
                }
            }
            missing = still;
            if missing.is_empty() {
                return Ok(Waited {
                    elapsed: start.elapsed(),
                    polls,
                });
            }
            if ops::get_into(client, &self.keys.abort(), &mut value)? {
                return Err(JobError::Aborted {
                    reason: String::from_utf8_lossy(&value).into_owned(),
                });
            }
            let waited = start.elapsed();
            if waited >= self.config.timeout {
                return Err(JobError::BarrierTimeout {
                    barrier: self.name.to_owned(),
                    waited,
                    missing,
                });
            }
            std::thread::sleep(backoff.min(self.config.timeout.saturating_sub(waited)));
            backoff = (backoff * 2).min(self.config.poll_max);
        }
    }

    /// [`Barrier::arrive`], then [`Barrier::wait`].
    ///
    /// # Errors
    /// As those.
    pub fn sync<C: KvClient + ?Sized>(
        &self,
        client: &mut C,
        task: usize,
    ) -> Result<Waited, JobError> {
        self.arrive(client, task)?;
        self.wait(client, task)
    }

    /// Deletes `task`'s arrival key. Only once no task can still be waiting
    /// at this barrier — that is, after every task has passed a *later*
    /// barrier — or a slow waiter would never see the arrival.
    ///
    /// # Errors
    /// [`JobError::Store`] if the DELETE fails.
    pub fn remove<C: KvClient + ?Sized>(
        &self,
        client: &mut C,
        task: usize,
    ) -> Result<(), JobError> {
        ops::delete(client, &self.keys.arrival(self.name, task)).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::MemStore;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// An empty store and the key space of stage `name`.
    fn stage(name: &str) -> (MemStore, Keys) {
        (MemStore::default(), Keys::new(name).unwrap())
    }

    fn quick() -> BarrierConfig {
        BarrierConfig {
            timeout: Duration::from_secs(30),
            poll_min: Duration::from_micros(50),
            poll_max: Duration::from_millis(2),
        }
    }

    #[test]
    fn nobody_passes_before_a_late_task_arrives() {
        let (store, keys) = stage("b1");
        let late_arrived = AtomicBool::new(false);
        std::thread::scope(|s| {
            for task in 0..4 {
                let (store, keys, late_arrived) = (&store, &keys, &late_arrived);
                s.spawn(move || {
                    let mut c = store.client();
                    let b = Barrier::new(keys, "done", 4, quick());
                    if task == 3 {
                        // Arrive only once the others are surely polling.
                        while store.len() < 3 {
                            std::thread::yield_now();
                        }
                        std::thread::sleep(Duration::from_millis(20));
                        late_arrived.store(true, Ordering::SeqCst);
                    }
                    b.sync(&mut c, task).unwrap();
                    assert!(
                        late_arrived.load(Ordering::SeqCst),
                        "task {task} passed early"
                    );
                });
            }
        });
        assert_eq!(store.len(), 4);
    }

    #[test]
    fn a_missing_task_times_out_and_is_named() {
        let (store, keys) = stage("b2");
        let config = BarrierConfig {
            timeout: Duration::from_millis(30),
            ..quick()
        };
        let mut c0 = store.client();
        let mut c1 = store.client();
        Barrier::new(&keys, "done", 3, config)
            .arrive(&mut c1, 1)
            .unwrap();
        match Barrier::new(&keys, "done", 3, config).sync(&mut c0, 0) {
            Err(JobError::BarrierTimeout {
                missing, barrier, ..
            }) => {
                assert_eq!(missing, vec![2]);
                assert_eq!(barrier, "done");
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
    }

    #[test]
    fn an_abort_stops_the_waiters() {
        let (store, keys) = stage("b3");
        let mut c = store.client();
        c.put(keys.abort().as_bytes(), b"task 1: disk on fire")
            .unwrap();
        match Barrier::new(&keys, "done", 2, quick()).sync(&mut c, 0) {
            Err(JobError::Aborted { reason }) => assert!(reason.contains("disk on fire")),
            other => panic!("expected an abort, got {other:?}"),
        }
    }

    #[test]
    fn foreign_values_and_bad_tasks_are_refused() {
        let (store, keys) = stage("b4");
        let mut c = store.client();
        let b = Barrier::new(&keys, "done", 2, quick());
        c.put(keys.arrival("done", 1).as_bytes(), b"something else")
            .unwrap();
        assert!(matches!(b.sync(&mut c, 0), Err(JobError::Malformed { .. })));
        assert!(matches!(b.arrive(&mut c, 2), Err(JobError::Spec(_))));
        // A single task never waits.
        let solo = Barrier::new(&keys, "solo", 1, quick());
        assert_eq!(solo.sync(&mut c, 0).unwrap().polls, 1);
        solo.remove(&mut c, 0).unwrap();
    }
}
