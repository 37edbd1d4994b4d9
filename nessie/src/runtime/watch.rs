//! The background thread that keeps each hosted node's clock heartbeat
//! fresh, stops the node's clients when a peer's clock disagrees by more
//! than `max_clock_skew` (see [`crate::clock::SkewVerdict`]), and tells the
//! node's data tables when its clock may be trusted to reuse slots (see
//! `data/clock_gate.rs`).

use crate::clock::{
    alarms, heartbeat_period, verdict, SkewVerdict, ALARMS_OFFSET, HEARTBEAT_OFFSET,
};
use crate::fabric::{Fabric, NodeId, RemoteAddr, WaitBound};
use crate::layout::region;
use crate::runtime::periodic::Periodic;
use crate::runtime::store::Shared;
use std::sync::Arc;
use std::time::Instant;

/// The shortest wait bound of one clock check: a heartbeat period can be a
/// few milliseconds, too short to dial a peer on a loaded host.
const WATCH_WAIT_MIN: std::time::Duration = std::time::Duration::from_millis(100);

/// A running clock watch; stops and joins its thread when dropped.
#[derive(Debug)]
pub(crate) struct ClockWatch {
    _thread: Periodic,
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

/// Makes the hosted nodes' data tables reuse staged slots only on the
/// word of clock checks ([`check`]), from now on.
pub(crate) fn arm(shared: &Shared, hosted: &[NodeId]) {
    for &node in hosted {
        if let Some(data) = shared.data(node) {
            data.arm_clock_gate();
        }
    }
}

/// One check of `node`'s clock: publishes its heartbeat, reads its peers'
/// heartbeats and their alarms about it, publishes its own alarms, and
/// records the verdict (for the node's clients and its data tables).
pub(crate) fn check(shared: &Shared, fabric: &dyn Fabric, node: NodeId) {
    let nodes = shared.config().nodes;
    let max_skew_us = crate::config::micros(shared.config().max_clock_skew);
    let meta = |n: NodeId, off: u64| RemoteAddr::new(n, region::META, off);
    let clock = shared.clock(node);
    // The reading peers judge, with the monotonic time it was taken at:
    // an agreeing verdict later vouches for it (see `data/clock_gate.rs`).
    let (beat, beat_mono) = (clock.now_us(), clock.mono_us());
    let mut beats = vec![0u64; nodes];
    let mut about_me = vec![0u64; nodes];
    let _ = fabric.write(meta(node, HEARTBEAT_OFFSET), &beat.to_le_bytes());
    for peer in 0..nodes {
        let mut w = [0u8; 16];
        let _ = fabric.read(meta(peer, HEARTBEAT_OFFSET), &mut w[..8]);
        let _ = fabric.read(meta(peer, ALARMS_OFFSET + 8 * node as u64), &mut w[8..]);
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
            "clock skew beyond max_clock_skew; refusing operations and slot reuse"
        );
    }
    shared.note_clock_check(node, v, beat, beat_mono);
}

impl ClockWatch {
    /// Starts watching the nodes in `hosted`; their data tables reuse
    /// staged slots only on the watch's word from now on.
    pub(crate) fn start(shared: Arc<Shared>, hosted: Vec<NodeId>) -> std::io::Result<ClockWatch> {
        arm(&shared, &hosted);
        let period = heartbeat_period(shared.config().max_clock_skew);
        let fabric = Arc::clone(shared.scan_fabric());
        let thread = Periodic::start("nessie-clock-watch", period, move || {
            // A silent peer must not hold this node's heartbeat back, or
            // the members would suspect this node
            // (docs/replication.md#failure-detection).
            let _wait = WaitBound::until(Instant::now() + period.max(WATCH_WAIT_MIN));
            for &node in &hosted {
                check(&shared, fabric.as_ref(), node);
            }
        })?;
        Ok(ClockWatch { _thread: thread })
    }
}
