//! Time sources: wall-clock microseconds that nodes compare with each
//! other, and monotonic microseconds for durations a node measures alone.
//! The `tcp` service reads the wall clock to refuse CASes that arrive past
//! their land-by time; the store builds its expiry and deadlines on the same
//! trait.

use std::fmt::Debug;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A source of time for one node.
pub trait Clock: Send + Sync + Debug {
    /// Wall-clock microseconds since the Unix epoch (compared across nodes).
    fn now_us(&self) -> u64;

    /// Microseconds on a clock that never steps, from an arbitrary origin
    /// (only differences of two readings of the same clock mean anything).
    fn mono_us(&self) -> u64;

    /// Waits about `d` (back-off). A simulated clock advances instead.
    fn sleep(&self, d: Duration);
}

/// The process's monotonic clock in microseconds since its first reading.
fn process_mono_us() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    u64::try_from(origin.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// The host's wall clock, optionally shifted by a fixed offset to
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
        // `SystemTime` directly: chrono's `Utc::now()` converts to a calendar
        // date and back, which cost a visible share of a cached GET.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        (now + self.offset_us).max(0) as u64
    }

    fn mono_us(&self) -> u64 {
        process_mono_us()
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
