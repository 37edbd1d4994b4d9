//! How long the verbs a thread posts may wait for their peers.
//!
//! An operation of the store has a deadline; a verb that waits for a silent
//! peer (a host gone without a reset, a stopped process) must not outlive it
//! by the fabric's own I/O timeout. The store sets a [`WaitBound`] for the
//! length of each operation, on the thread that runs it, and a fabric whose
//! verbs can block on a peer (`tcp`) stops waiting at that instant: the verb
//! fails as a broken connection, its outcome unknown
//! (docs/replication.md#failure-detection). Fabrics whose verbs cannot
//! block on a peer's software (`local`, `shm`; `verbs`, bounded by its
//! retransmission budget) ignore it.

use std::cell::Cell;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

/// A thread's bound: an instant, or a budget whose clock starts at the
/// first verb that asks for it.
#[derive(Clone, Copy, Debug)]
enum Bound {
    At(Instant),
    Within(Duration),
}

thread_local! {
    static BOUND: Cell<Option<Bound>> = const { Cell::new(None) };
}

/// The instant after which this thread's verbs stop waiting, if one is set.
/// A bound set with [`WaitBound::within`] is fixed here, at its first use.
pub(crate) fn current() -> Option<Instant> {
    BOUND.with(|b| match b.get()? {
        Bound::At(at) => Some(at),
        Bound::Within(budget) => {
            let at = Instant::now() + budget;
            b.set(Some(Bound::At(at)));
            Some(at)
        }
    })
}

/// Sets this thread's wait bound until dropped, then restores the previous
/// one. Not `Send`: the bound belongs to the thread that set it.
#[derive(Debug)]
#[must_use = "the bound holds only while the guard lives"]
pub struct WaitBound {
    previous: Option<Bound>,
    _thread: PhantomData<*const ()>,
}

impl WaitBound {
    /// Verbs this thread posts while the guard lives wait for their peers
    /// until `until` at the latest.
    pub fn until(until: Instant) -> WaitBound {
        WaitBound {
            previous: BOUND.with(|b| b.replace(Some(Bound::At(until)))),
            _thread: PhantomData,
        }
    }

    /// Verbs this thread posts while the guard lives wait for their peers
    /// for `budget` at most, counted from the first of them that waits:
    /// a thread whose verbs never wait (`local`, `shm`, `verbs`) never
    /// reads the clock for it.
    pub fn within(budget: Duration) -> WaitBound {
        WaitBound {
            previous: BOUND.with(|b| b.replace(Some(Bound::Within(budget)))),
            _thread: PhantomData,
        }
    }
}

impl WaitBound {
    /// How long this thread's verbs may still wait for their peers: the
    /// time left before its bound, or the whole budget of one set with
    /// [`WaitBound::within`] and not yet used; `None` if no bound is set.
    #[must_use]
    pub fn left() -> Option<Duration> {
        BOUND.with(|b| match b.get()? {
            Bound::At(at) => Some(at.saturating_duration_since(Instant::now())),
            Bound::Within(budget) => Some(budget),
        })
    }
}

impl Drop for WaitBound {
    fn drop(&mut self) {
        BOUND.with(|b| b.set(self.previous));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_holds_while_its_guard_lives_and_nests() {
        assert_eq!(current(), None);
        let outer_at = Instant::now() + Duration::from_secs(1);
        let outer = WaitBound::until(outer_at);
        assert_eq!(current(), Some(outer_at));
        {
            let inner_at = outer_at + Duration::from_secs(1);
            let _inner = WaitBound::until(inner_at);
            assert_eq!(current(), Some(inner_at));
        }
        assert_eq!(current(), Some(outer_at));
        drop(outer);
        assert_eq!(current(), None);
    }

    #[test]
    fn a_budget_starts_at_its_first_use_and_then_stays() {
        let set = Instant::now();
        let _bound = WaitBound::within(Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(20));
        let first = current().unwrap();
        assert!(first >= set + Duration::from_secs(5) + Duration::from_millis(20));
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(current(), Some(first), "fixed at its first use");
    }

    #[test]
    fn what_is_left_of_a_bound_shrinks_and_a_budget_is_whole_until_used() {
        assert_eq!(WaitBound::left(), None);
        let at = WaitBound::until(Instant::now() + Duration::from_secs(1));
        let left = WaitBound::left().unwrap();
        assert!(left <= Duration::from_secs(1) && left > Duration::from_millis(500));
        drop(at);
        let _past = WaitBound::until(Instant::now());
        assert_eq!(WaitBound::left(), Some(Duration::ZERO));
        let _budget = WaitBound::within(Duration::from_secs(3));
        assert_eq!(
            WaitBound::left(),
            Some(Duration::from_secs(3)),
            "not started"
        );
        let _ = current();
        assert!(WaitBound::left().unwrap() < Duration::from_secs(3));
    }

    #[test]
    fn a_bound_is_the_setting_threads_only() {
        let _bound = WaitBound::until(Instant::now());
        std::thread::spawn(|| assert_eq!(current(), None))
            .join()
            .unwrap();
        assert!(current().is_some());
    }
}
