//! Time as the protocol sees it, from two clocks
//! (docs/design.md#f7-two-clocks):
//!
//! * **wall-clock** microseconds for the stamps other nodes read
//!   (`created_at`, `expires_at`) and compare with their own clocks, so every
//!   node must stay within `max_clock_skew` of the others;
//! * **monotonic** microseconds for every duration a node measures on its
//!   own — an operation's deadline, the stall behind the checksum policy,
//!   back-off, a cache entry's age — so that a step of the wall clock (NTP)
//!   can neither stretch a deadline nor shorten a stall.

pub use nessie_fabric::clock::{Clock, WallClock};

use std::time::Duration;

/// How often the clock watch writes and checks heartbeats: often enough
/// that a heartbeat is rarely older than half the tolerated skew.
#[must_use]
pub fn heartbeat_period(max_skew: Duration) -> Duration {
    (max_skew / 2).clamp(Duration::from_millis(1), Duration::from_millis(50))
}

/// How long a node's clock may run ahead before its own watch can know:
/// two heartbeat periods. A step lands just after a check; the next check
/// publishes the fast heartbeat, a peer's check within a period raises the
/// alarm, and the node's check after that reads it. Until then the node's
/// checks still agree, so an agreeing check vouches for the node's clock
/// only as it read this long before (see `data/clock_gate.rs`).
#[must_use]
pub fn detection_lag(max_skew: Duration) -> Duration {
    heartbeat_period(max_skew) * 2
}

/// How much later than `expiry + max_clock_skew` after its stamp a staged
/// slot may come back on a node whose clock is watched: the
/// [`detection_lag`] plus up to one heartbeat period until the first check
/// after the slot's expiry.
#[must_use]
pub fn reuse_lag(max_skew: Duration) -> Duration {
    detection_lag(max_skew) + heartbeat_period(max_skew)
}

pub use crate::layout::meta::{ALARMS_OFFSET, HEARTBEAT_OFFSET, META_BYTES};

/// Detects clock skew beyond `max_clock_skew` between nodes, with one-sided
/// verbs only.
///
/// Every node WRITEs its clock into its own heartbeat word periodically (a
/// word that is never CAS'd) and READs its peers' heartbeats. A heartbeat
/// `h` was written before it was read, so a peer whose `h` exceeds the
/// reader's clock by more than `max_skew` is certainly ahead by more than
/// that; a late or stalled heartbeat can only hide skew, never invent it.
/// Nothing comparable proves a peer is *behind* (its heartbeat may just be
/// old), so the slow node raises an alarm about the fast one in its own
/// metadata region ([`ALARMS_OFFSET`]), which the fast node reads. Both then
/// refuse operations ([`crate::Error::ClockSkew`]) until the heartbeats
/// agree again: expiry and dead-owner decisions assume bounded skew, and a
/// refused operation is better than a stale read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkewVerdict {
    /// No peer is known to disagree.
    Agreed,
    /// A peer disagrees by at least `skew_us`.
    Skewed {
        /// The peer.
        node: usize,
        /// Lower bound of the difference, µs.
        skew_us: u64,
    },
}

/// The alarm words node `me` should publish: for each peer, by how much its
/// heartbeat is ahead of `now_us` beyond `max_skew_us` (0 when it is not).
#[must_use]
pub fn alarms(me: usize, now_us: u64, beats: &[u64], max_skew_us: u64) -> Vec<u64> {
    beats
        .iter()
        .enumerate()
        .map(|(peer, &h)| {
            if peer != me && h > now_us.saturating_add(max_skew_us) {
                h - now_us
            } else {
                0
            }
        })
        .collect()
}

/// The verdict for node `me` from its own alarms and the alarms every peer
/// published (`about_me[p]` = peer `p`'s alarm word for `me`).
#[must_use]
pub fn verdict(own_alarms: &[u64], about_me: &[u64]) -> SkewVerdict {
    let first = |words: &[u64]| {
        words
            .iter()
            .enumerate()
            .find(|(_, &w)| w != 0)
            .map(|(node, &skew_us)| SkewVerdict::Skewed { node, skew_us })
    };
    first(own_alarms)
        .or_else(|| first(about_me))
        .unwrap_or(SkewVerdict::Agreed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_000_000_000;

    #[test]
    fn peers_within_bounds_or_behind_raise_no_alarm() {
        assert_eq!(
            alarms(0, NOW, &[NOW, NOW + 9_000, NOW - 500_000, 0], 10_000),
            vec![0; 4]
        );
    }

    #[test]
    fn a_peer_ahead_raises_an_alarm() {
        assert_eq!(
            alarms(0, NOW, &[NOW, NOW + 12_000, NOW], 10_000),
            vec![0, 12_000, 0]
        );
        assert_eq!(
            alarms(1, NOW, &[NOW, NOW + 12_000, NOW], 10_000),
            vec![0, 0, 0],
            "not about itself"
        );
    }

    #[test]
    fn both_sides_refuse() {
        // Node 0 sees node 1 ahead; node 1 reads node 0's alarm about it.
        assert_eq!(
            verdict(&[0, 12_000, 0], &[0, 0, 0]),
            SkewVerdict::Skewed {
                node: 1,
                skew_us: 12_000
            }
        );
        assert_eq!(
            verdict(&[0, 0, 0], &[12_000, 0, 0]),
            SkewVerdict::Skewed {
                node: 0,
                skew_us: 12_000
            }
        );
        assert_eq!(verdict(&[0, 0, 0], &[0, 0, 0]), SkewVerdict::Agreed);
    }
}
