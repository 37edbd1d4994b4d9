//! Time as the protocol sees it: wall-clock microseconds, which nodes compare
//! with each other (expiry, dead owners), so every node must stay within
//! `max_clock_skew` of the others.

use std::fmt::Debug;
use std::time::Duration;

/// A source of time for one node.
pub trait Clock: Send + Sync + Debug {
    /// Microseconds since the Unix epoch.
    fn now_us(&self) -> u64;

    /// Waits about `d` (back-off). A simulated clock advances instead.
    fn sleep(&self, d: Duration);
}

/// The host's wall clock (chrono), optionally shifted by a fixed offset to
/// emulate a node whose clock is skewed.
#[derive(Debug, Clone, Copy, Default)]
pub struct WallClock {
    /// Microseconds added to the host clock (may be negative).
    pub offset_us: i64,
}

impl WallClock {
    /// A clock `offset_us` microseconds ahead of (or, if negative, behind)
    /// the host's.
    #[must_use]
    pub fn skewed(offset_us: i64) -> WallClock {
        WallClock { offset_us }
    }
}

impl Clock for WallClock {
    fn now_us(&self) -> u64 {
        let now = chrono::Utc::now().timestamp_micros();
        (now + self.offset_us).max(0) as u64
    }

    fn sleep(&self, d: Duration) {
        if d < Duration::from_micros(50) {
            // Too short for the OS timer; give the CPU away instead.
            std::thread::yield_now();
        } else {
            std::thread::sleep(d);
        }
    }
}
