//! The figures of a data table that ran out of free slots, for the
//! message a user reads beside [`crate::Error::DataTableFull`].

use super::NodeData;
use std::fmt;
use std::time::Duration;

/// One size class of one node's data tables at the moment a write found no
/// free slot before its deadline.
///
/// A class must hold its live entries plus every entry replaced within the
/// last reuse window (`expiry + max_clock_skew`, and the clock watch's
/// word after it: they wait out that period before reuse);
/// [`crate::Config::data_bytes_for`] sizes `data_bytes_per_node` by that
/// rule.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DataTableFigures {
    /// The node whose table ran out.
    pub node: usize,
    /// The size class.
    pub class: u8,
    /// Largest value the class holds, bytes.
    pub value_capacity: usize,
    /// Bytes of one slot (header, key and value).
    pub slot_bytes: usize,
    /// Slots of the class, its tombstone reserve included.
    pub slots: usize,
    /// Of those, the slots only DELETEs may take: a PUT finds the class
    /// full while no more than these are free
    /// (docs/design.md#the-tombstone-reserve).
    #[serde(default)]
    pub reserve: usize,
    /// Slots free or never used.
    pub free: usize,
    /// Slots that hold an entry, live or replaced and waiting out the
    /// reuse window.
    pub in_use: usize,
    /// Of those, replaced entries the node's own clients staged and will
    /// reuse as soon as they expire.
    pub queued: usize,
    /// The most slots ever in use at once: the live entries plus the
    /// replaced ones waiting at the busiest moment, which the sizing rule
    /// must cover.
    pub peak_in_use: usize,
    /// How long a replaced entry waits before its slot is reused.
    pub reuse_after: Duration,
}

impl DataTableFigures {
    /// Bytes of the most slots ever in use at once.
    #[must_use]
    pub fn peak_in_use_bytes(&self) -> usize {
        self.peak_in_use.saturating_mul(self.slot_bytes)
    }

    /// PUTs per second of this class the table sustains with `live`
    /// entries in it, by the sizing rule.
    #[must_use]
    pub fn sustained_puts_per_sec(&self, live: usize) -> f64 {
        let window = self.reuse_after.as_secs_f64();
        if window <= 0.0 {
            return f64::INFINITY;
        }
        self.slots.saturating_sub(live) as f64 / window
    }
}

impl fmt::Display for DataTableFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node {} has no free slot for values up to {} B: {} slots of {} B ({:.1} MiB), \
             {} free ({} of them kept for DELETEs' tombstones), {} in use ({} of them \
             replaced by this node's clients, waiting); \
             a replaced entry's slot is reused only after {} ms, so the table must hold \
             the live entries plus every PUT of {} ms — size data_bytes_per_node with \
             Config::data_bytes_for",
            self.node,
            self.value_capacity,
            self.slots,
            self.slot_bytes,
            (self.slots * self.slot_bytes) as f64 / f64::from(1 << 20),
            self.free,
            self.free.min(self.reserve),
            self.in_use,
            self.queued,
            self.reuse_after.as_millis(),
            self.reuse_after.as_millis(),
        )
    }
}

impl NodeData {
    /// The figures of size class `class` now.
    #[must_use]
    pub fn figures(&self, class: u8) -> DataTableFigures {
        DataTableFigures {
            node: self.node,
            class,
            value_capacity: self.geometry.capacity(class),
            slot_bytes: self.slot_bytes(class),
            slots: self.capacity(class),
            reserve: self.reserve(class),
            free: self.available(class),
            in_use: self.in_use(class),
            queued: self.queued(class),
            peak_in_use: self.peak_in_use(class),
            reuse_after: Duration::from_micros(self.reuse_after_us()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(slots: usize, reuse_after: Duration) -> DataTableFigures {
        DataTableFigures {
            node: 2,
            class: 4,
            value_capacity: 4096,
            slot_bytes: 4280,
            slots,
            reserve: 0,
            free: 0,
            in_use: slots,
            queued: 7,
            peak_in_use: slots,
            reuse_after,
        }
    }

    #[test]
    fn a_table_sustains_its_spare_slots_per_reuse_window() {
        let f = figures(1000, Duration::from_millis(500));
        assert!((f.sustained_puts_per_sec(200) - 1600.0).abs() < 1e-9);
        assert!(f.sustained_puts_per_sec(1000).abs() < 1e-9);
        assert!(
            f.sustained_puts_per_sec(5000).abs() < 1e-9,
            "never negative"
        );
        assert!(figures(10, Duration::ZERO)
            .sustained_puts_per_sec(0)
            .is_infinite());
        assert_eq!(f.peak_in_use_bytes(), 1000 * 4280);
    }

    #[test]
    fn the_message_gives_the_figures_and_the_rule() {
        let m = figures(1000, Duration::from_millis(1010)).to_string();
        for needle in [
            "node 2",
            "values up to 4096 B",
            "1000 slots of 4280 B",
            "0 free (0 of them kept for DELETEs' tombstones)",
            "1000 in use (7 of them",
            "after 1010 ms",
            "Config::data_bytes_for",
        ] {
            assert!(m.contains(needle), "{needle:?} not in {m:?}");
        }
    }
}
