//! The META region of a node: the words the clock watch keeps
//! (docs/design.md#the-meta-page). Neither word is ever CAS'd: each is
//! written only by its node's watch and read by the peers' watches.

/// Offset of the clock heartbeat word: the node's wall clock (µs) at its
/// watch's last check.
pub const HEARTBEAT_OFFSET: u64 = 0;
/// Offset of the skew alarm words, one per node the index can address:
/// word `i` is nonzero while this node finds node `i` ahead by more than
/// `max_clock_skew`.
pub const ALARMS_OFFSET: u64 = 8;
/// Bytes of a node's META region: the heartbeat and one alarm word per node
/// the index can address.
pub const META_BYTES: u64 = 8 * (1 + super::ite::MAX_NODES as u64);

// The heartbeat and the alarms do not overlap, and the last alarm word
// ends the region.
const _: () = {
    assert!(HEARTBEAT_OFFSET + 8 <= ALARMS_OFFSET);
    assert!(ALARMS_OFFSET + 8 * super::ite::MAX_NODES as u64 == META_BYTES);
};
