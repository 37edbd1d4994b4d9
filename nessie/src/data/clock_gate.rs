//! The clock gate on reuse: a node reuses a staged slot only on the word
//! of its clock watch (docs/design.md#the-clock-gate-on-reuse).
//!
//! A staged slot's reuse time `expires_at + max_clock_skew` is judged on
//! the node's own wall clock. Should that clock step forward beyond the
//! skew bound, the stamps would look expired at once, while a reader
//! elsewhere that read the slot's index entry moments ago still reads the
//! slot without verifying its checksum (`ChecksumPolicy::AfterStall`). The
//! watch catches such a step, but only after a lag: the node learns that it
//! runs ahead from a peer's alarm, which follows its next heartbeat
//! ([`crate::clock::detection_lag`]). So, once a watch runs for the node:
//!
//! * a check that finds the clocks skewed shuts the gate: nothing staged is
//!   reused until the clocks agree again, and the checks made before it
//!   vouch for nothing any more;
//! * an agreeing check vouches for the clock reading of the newest earlier
//!   check of the same unbroken run of agreeing checks taken at least the
//!   detection lag before it (on the monotonic clock, which never steps):
//!   a step after that earlier reading would have been caught by now;
//! * a staged slot may be reused only when its reuse time lies before the
//!   vouched reading, besides before `now` (one rule, [`NodeData::expired`]).
//!
//! Until a run of checks spans the lag (at start, after a skew, or when the
//! watch stops running) the gate is shut. Without a watch (the baselines,
//! and simulations that run no clock checks) the skew bound is assumed, as
//! before the gate.

use super::NodeData;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// The gate of one node's data tables.
#[derive(Debug)]
pub(super) struct ClockGate {
    /// Whether a watch decides (else reuse follows the stamps alone).
    armed: AtomicBool,
    /// The newest vouched wall-clock reading, µs (0: the gate is shut).
    vouched_us: AtomicU64,
    /// The largest reading ever vouched for (for the debug check of the
    /// rule, which must not race with the watch: it only grows).
    ever_vouched_us: AtomicU64,
    /// The detection lag, µs.
    lag_us: u64,
    /// The current run of agreeing checks not yet old enough to vouch:
    /// (wall reading, monotonic reading), oldest first.
    run: Mutex<VecDeque<(u64, u64)>>,
}

impl ClockGate {
    pub(super) fn new(lag_us: u64) -> ClockGate {
        ClockGate {
            armed: AtomicBool::new(false),
            vouched_us: AtomicU64::new(0),
            ever_vouched_us: AtomicU64::new(0),
            lag_us,
            run: Mutex::new(VecDeque::new()),
        }
    }

    /// Whether a slot that becomes reusable at wall time `reuse_at` (on
    /// the stamps alone) may be reused on the watch's word.
    pub(super) fn admits(&self, reuse_at: u64) -> bool {
        !self.armed.load(Ordering::Acquire) || reuse_at < self.vouched_us.load(Ordering::Acquire)
    }

    /// Whether a slot the gate admitted (at `reuse_at`) is consistent with
    /// every check so far: before some reading the watch once vouched for,
    /// unless it never vouched for any. Checks that came since the slot was
    /// admitted cannot make this false, so a debug assertion may use it.
    pub(super) fn once_admitted(&self, reuse_at: u64) -> bool {
        let ever = self.ever_vouched_us.load(Ordering::Acquire);
        !self.armed.load(Ordering::Acquire) || ever == 0 || reuse_at < ever
    }

    /// Whether nothing staged may be reused now.
    pub(super) fn shut(&self) -> bool {
        self.armed.load(Ordering::Acquire) && self.vouched_us.load(Ordering::Acquire) == 0
    }

    fn arm(&self) {
        self.armed.store(true, Ordering::Release);
    }

    /// Records a check: `agreed` or not, of the heartbeat `wall_us` read at
    /// monotonic `mono_us`.
    fn note(&self, agreed: bool, wall_us: u64, mono_us: u64) {
        let mut run = self
            .run
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !agreed {
            run.clear();
            self.vouched_us.store(0, Ordering::Release);
            return;
        }
        run.push_back((wall_us, mono_us));
        // The newest reading at least the lag old vouches; older ones are
        // of no further use.
        let mut vouched = None;
        while let Some(&(wall, mono)) = run.front() {
            if mono_us.saturating_sub(mono) < self.lag_us {
                break;
            }
            vouched = Some(wall);
            run.pop_front();
        }
        if let Some(wall) = vouched {
            // Ever vouched for first: a reader that sees the new vouched
            // reading (Acquire) then sees it there too, so the debug check
            // of what the gate admitted cannot race with this.
            self.ever_vouched_us.fetch_max(wall, Ordering::AcqRel);
            // 0 is "shut"; a clock reading 0 µs vouches for nothing anyway.
            self.vouched_us.store(wall, Ordering::Release);
        }
    }
}

impl NodeData {
    /// From now on, reuses staged slots only on the word of clock checks
    /// ([`NodeData::note_clock_check`]); until a run of agreeing checks
    /// spans the detection lag, nothing staged is reused.
    pub(crate) fn arm_clock_gate(&self) {
        self.clock_gate.arm();
    }

    /// Records a check of this node's clock: whether the clocks `agreed`,
    /// and the heartbeat the peers judged (`wall_us`, read at monotonic
    /// `mono_us`).
    pub(crate) fn note_clock_check(&self, agreed: bool, wall_us: u64, mono_us: u64) {
        self.clock_gate.note(agreed, wall_us, mono_us);
    }

    /// How long a staged slot waits before reuse, at most, while the clocks
    /// agree: `expiry + max_clock_skew`, and with a watch up to a heartbeat
    /// period more until a check after that time, and the detection lag
    /// until that check is vouched for ([`crate::clock::reuse_lag`]).
    pub(super) fn reuse_after_us(&self) -> u64 {
        let window = self.expiry_us.saturating_add(self.skew_us);
        if self.clock_gate.armed.load(Ordering::Acquire) {
            window.saturating_add(self.clock_gate.lag_us + self.clock_gate.lag_us / 2)
        } else {
            window
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAG: u64 = 2_000;

    #[test]
    fn an_unarmed_gate_admits_everything() {
        let g = ClockGate::new(LAG);
        assert!(g.admits(u64::MAX - 1) && !g.shut());
        g.note(false, 5, 5);
        assert!(g.admits(u64::MAX - 1), "no watch decides");
    }

    /// Checks every 1 000 µs: a reading vouches once an agreeing check two
    /// periods later follows it without a skewed one in between.
    #[test]
    fn an_agreeing_check_vouches_for_the_reading_a_lag_before() {
        let g = ClockGate::new(LAG);
        g.arm();
        assert!(g.shut() && !g.admits(0), "unknown until checked");
        g.note(true, 10_000, 0);
        g.note(true, 11_000, 1_000);
        assert!(g.shut(), "a run shorter than the lag vouches for nothing");
        g.note(true, 12_000, 2_000);
        assert!(!g.shut());
        assert!(g.admits(9_999) && !g.admits(10_000) && !g.admits(11_500));
        g.note(true, 13_000, 3_000);
        assert!(g.admits(10_999) && !g.admits(11_000));
        // A skewed check shuts the gate, and the run starts over.
        g.note(false, 14_000, 4_000);
        assert!(g.shut() && !g.admits(0));
        g.note(true, 15_000, 5_000);
        g.note(true, 16_000, 6_000);
        assert!(g.shut(), "readings before the skew vouch for nothing");
        g.note(true, 17_000, 7_000);
        assert!(g.admits(14_999) && !g.admits(15_000));
    }

    /// The schedule the lag answers: the clock steps far ahead just after
    /// an agreeing check; the next two checks still agree (the peers'
    /// alarm is on its way), yet vouch only for readings from before the
    /// step; the third finds the skew.
    #[test]
    fn a_step_just_after_an_agreeing_check_vouches_for_nothing_ahead() {
        let g = ClockGate::new(LAG);
        g.arm();
        for i in 0..3 {
            g.note(true, 10_000 + i * 1_000, i * 1_000);
        }
        let step = 1_000_000;
        g.note(true, 13_000 + step, 3_000);
        g.note(true, 14_000 + step, 4_000);
        assert!(
            g.admits(11_999) && !g.admits(12_000),
            "before the step only"
        );
        g.note(false, 15_000 + step, 5_000);
        assert!(g.shut());
        // What was admitted stays consistent with the checks since; a
        // reuse on the fast clock's word never was.
        assert!(g.once_admitted(11_999) && !g.once_admitted(13_000 + step));
    }

    /// The debug check must hold for whatever the gate admitted while the
    /// watch goes on noting checks: a reader that sees a new vouched
    /// reading must see it among those ever vouched for (found by a chaos
    /// run, whose allocating worker hit the debug assertion in `verdict`).
    #[test]
    fn what_the_gate_admits_is_once_admitted_while_the_watch_runs() {
        let g = ClockGate::new(1);
        g.arm();
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 1..=2_000_000u64 {
                    g.note(true, i * 1_000, i * 1_000);
                }
                done.store(true, Ordering::Release);
            });
            let mut checked = 0u64;
            while !done.load(Ordering::Acquire) {
                let v = g.vouched_us.load(Ordering::Acquire);
                if v > 0 && g.admits(v - 1) {
                    assert!(g.once_admitted(v - 1), "admitted {} unvouched", v - 1);
                    checked += 1;
                }
            }
            assert!(checked > 0);
        });
    }
}
