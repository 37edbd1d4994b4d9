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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_fits_the_region() {
        let last_alarm = ALARMS_OFFSET + 8 * (super::super::ite::MAX_NODES as u64 - 1);
        assert!(HEARTBEAT_OFFSET + 8 <= ALARMS_OFFSET);
        assert_eq!(last_alarm + 8, META_BYTES);
    }
}
