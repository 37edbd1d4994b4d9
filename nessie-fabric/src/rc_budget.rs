//! How long an RDMA reliable connection (RC) may keep retransmitting a verb,
//! and the queue-pair settings that keep it within the landing bound.
//!
//! A CAS must take effect within the landing bound Δ₀ of the deadline check
//! before it (docs/design.md#the-landing-bound), or not at all. On an RC queue
//! pair the requester retransmits an unacknowledged request after the local
//! ACK timeout, `4.096 µs × 2^timeout`, up to `retry_count` times; a request
//! that is still in flight after the last attempt's timeout fails. So a
//! request can still reach the target up to about `(retry_count + 1)` timeouts
//! after it was posted. Adapters may wait up to four times the nominal timeout
//! before they retransmit (implementations round the timer, and the
//! specification leaves them that slack), so the budget here assumes the
//! worst: `4 × 4.096 µs × 2^timeout × (retry_count + 1)`, and keeps a tenth of
//! Δ₀ for the packet lifetime on the wire.
//!
//! Worked example, at the defaults (`expiry` 1 s, `op_timeout` 500 ms,
//! `max_clock_skew` 10 ms, so Δ₀ = 4/5 × 490 ms = 392 ms): 3 retries, timeout
//! exponent 12 (16.8 ms nominal): worst case 4 × 16.8 ms × 4 = 268 ms ≤ 353 ms
//! (9/10 of Δ₀). The settings of earlier builds (exponent 16, 7 retries: 268
//! ms × 8 ≈ 2.1 s nominal) did not fit.

use std::time::Duration;

/// Retransmissions a queue pair makes before it fails a request.
pub const RC_RETRY_COUNT: u8 = 3;
/// Smallest ACK timeout exponent used (4.096 µs × 2^8 ≈ 1 ms): shorter ones
/// retransmit spuriously on a busy host (0 would mean "wait for ever").
pub const MIN_ACK_TIMEOUT: u8 = 8;
/// Largest ACK timeout exponent the verbs API accepts.
pub const MAX_ACK_TIMEOUT: u8 = 31;
/// How many times the nominal ACK timeout an adapter may wait.
const TIMER_SLACK: u32 = 4;

/// Queue-pair retransmission settings and how long they may keep a request
/// in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RcTimeouts {
    /// Local ACK timeout exponent (`4.096 µs × 2^ack_timeout`).
    pub ack_timeout: u8,
    /// Retransmissions before a request fails.
    pub retry_count: u8,
}

impl Default for RcTimeouts {
    /// The settings of the default configuration (exponent 12, 3 retries).
    fn default() -> RcTimeouts {
        RcTimeouts {
            ack_timeout: 12,
            retry_count: RC_RETRY_COUNT,
        }
    }
}

impl RcTimeouts {
    /// The longest settings whose worst case fits nine tenths of
    /// `landing_bound`, or `None` if even the shortest ACK timeout does not.
    #[must_use]
    pub fn within(landing_bound: Duration) -> Option<RcTimeouts> {
        let allowed = landing_bound.mul_f64(0.9);
        (MIN_ACK_TIMEOUT..=MAX_ACK_TIMEOUT)
            .rev()
            .map(|ack_timeout| RcTimeouts {
                ack_timeout,
                retry_count: RC_RETRY_COUNT,
            })
            .find(|t| t.worst_case() <= allowed)
    }

    /// Nominal local ACK timeout.
    #[must_use]
    pub fn ack_timeout(&self) -> Duration {
        Duration::from_nanos(4096).saturating_mul(1 << u32::from(self.ack_timeout.min(31)))
    }

    /// The longest a request may stay in flight: every attempt's timeout at
    /// its worst.
    #[must_use]
    pub fn worst_case(&self) -> Duration {
        self.ack_timeout()
            .saturating_mul(TIMER_SLACK)
            .saturating_mul(u32::from(self.retry_count) + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_setting_that_fits_is_chosen() {
        for ms in [19u64, 20, 100, 392, 1000, 60_000] {
            let bound = Duration::from_millis(ms);
            let t = RcTimeouts::within(bound).unwrap();
            assert!(t.worst_case() <= bound.mul_f64(0.9), "{ms} ms: {t:?}");
            if t.ack_timeout < MAX_ACK_TIMEOUT {
                let longer = RcTimeouts {
                    ack_timeout: t.ack_timeout + 1,
                    ..t
                };
                assert!(longer.worst_case() > bound.mul_f64(0.9), "{ms} ms: {t:?}");
            }
        }
        assert_eq!(RcTimeouts::within(Duration::from_millis(18)), None);
    }
}
