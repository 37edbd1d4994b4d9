//! Time sources: wall-clock microseconds that nodes compare with each
//! other, and monotonic microseconds for durations a node measures alone.
//! The `tcp` service reads the wall clock to refuse CASes that arrive past
//! their land-by time; the store builds its expiry and deadlines on the same
//! trait.

use nix::time::ClockId;
use std::fmt::Debug;
use std::sync::OnceLock;
use std::time::Duration;

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
    static ORIGIN: OnceLock<i64> = OnceLock::new();
    let now = clock_us(ClockId::CLOCK_MONOTONIC);
    let origin = *ORIGIN.get_or_init(|| now);
    u64::try_from(now - origin).unwrap_or(0)
}

/// Microseconds on `clock`, read with `clock_gettime` itself: a PUT reads
/// its clocks six times, and `SystemTime`'s checked conversions made
/// a wall reading half as dear again as the system call (44 ns against 30
/// on the reference machine). Both clocks always exist; a failure reads 0.
fn clock_us(clock: ClockId) -> i64 {
    nix::time::clock_gettime(clock).map_or(0, |t| t.tv_sec() * 1_000_000 + t.tv_nsec() / 1_000)
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
        let now = clock_us(ClockId::CLOCK_REALTIME);
        now.saturating_add(self.offset_us).max(0) as u64
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};

    fn system_us() -> u64 {
        u64::try_from(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_micros(),
        )
        .unwrap()
    }

    /// The wall clock is the host's `SystemTime` in µs, shifted by the
    /// offset either way, and never below 0.
    #[test]
    fn the_wall_clock_reads_the_hosts_time_shifted() {
        let before = system_us();
        let plain = WallClock::default().now_us();
        let ahead = WallClock::skewed(5_000_000).now_us();
        let behind = WallClock::skewed(-5_000_000).now_us();
        let after = system_us();
        assert!(
            before <= plain && plain <= after,
            "{before} {plain} {after}"
        );
        assert!(before + 5_000_000 <= ahead && ahead <= after + 5_000_000);
        assert!(before - 5_000_000 <= behind && behind <= after - 5_000_000);
        assert_eq!(WallClock::skewed(i64::MIN).now_us(), 0);
    }

    /// The monotonic clock never goes back and counts a sleep whole.
    #[test]
    fn the_monotonic_clock_counts_microseconds_forward() {
        let clock = WallClock::default();
        let first = clock.mono_us();
        std::thread::sleep(Duration::from_millis(3));
        let second = clock.mono_us();
        assert!(second >= first + 3_000, "{first} then {second}");
        assert!(clock.mono_us() >= second);
    }
}
