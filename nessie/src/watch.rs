//! The background thread that keeps each hosted node's clock heartbeat
//! fresh and stops the node's clients when a peer's clock disagrees by more
//! than `max_clock_skew` (see [`crate::clock::SkewVerdict`]).

use crate::clock::{alarms, verdict, SkewVerdict, ALARMS_OFFSET, HEARTBEAT_OFFSET};
use crate::fabric::{NodeId, RemoteAddr};
use crate::layout::region;
use crate::periodic::Periodic;
use crate::store::Shared;
use std::sync::Arc;
use std::time::Duration;

/// A running clock watch; stops and joins its thread when dropped.
#[derive(Debug)]
pub(crate) struct ClockWatch {
    _thread: Periodic,
}

/// How often heartbeats are written and checked: often enough that a
/// heartbeat is rarely older than half the tolerated skew.
pub(crate) fn heartbeat_period(max_skew: Duration) -> Duration {
    (max_skew / 2).clamp(Duration::from_millis(1), Duration::from_millis(50))
}

fn to_bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn to_words(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect()
}

impl ClockWatch {
    /// Starts watching the nodes in `hosted`.
    pub(crate) fn start(shared: Arc<Shared>, hosted: Vec<NodeId>) -> std::io::Result<ClockWatch> {
        let nodes = shared.config().nodes;
        let max_skew_us = shared.config().max_clock_skew.as_micros() as u64;
        let period = heartbeat_period(shared.config().max_clock_skew);
        let fabric = Arc::clone(shared.scan_fabric());
        let thread = Periodic::start("nessie-clock-watch", period, move || {
            let meta = |n: NodeId, off: u64| RemoteAddr::new(n, region::META, off);
            {
                for &node in &hosted {
                    let clock = shared.clock(node);
                    let mut beats = vec![0u64; nodes];
                    let mut about_me = vec![0u64; nodes];
                    let _ =
                        fabric.write(meta(node, HEARTBEAT_OFFSET), &clock.now_us().to_le_bytes());
                    for peer in 0..nodes {
                        let mut w = [0u8; 16];
                        let _ = fabric.read(meta(peer, HEARTBEAT_OFFSET), &mut w[..8]);
                        let _ =
                            fabric.read(meta(peer, ALARMS_OFFSET + 8 * node as u64), &mut w[8..]);
                        let w = to_words(&w);
                        beats[peer] = w[0];
                        about_me[peer] = w[1];
                    }
                    let own = alarms(node, clock.now_us(), &beats, max_skew_us);
                    let _ = fabric.write(meta(node, ALARMS_OFFSET), &to_bytes(&own));
                    let v = verdict(&own, &about_me);
                    if let SkewVerdict::Skewed {
                        node: peer,
                        skew_us,
                    } = v
                    {
                        tracing::error!(
                            node,
                            peer,
                            skew_us,
                            "clock skew beyond max_clock_skew; refusing operations"
                        );
                    }
                    shared.set_skew(node, v);
                }
            }
        })?;
        Ok(ClockWatch { _thread: thread })
    }
}
