//! The size classes of a configuration and the sizing rules of its tables
//! (docs/operations.md#sizing).

use super::Config;
use crate::data::Geometry;
use std::time::Duration;

impl Config {
    /// Value capacities of the size classes: powers of two from
    /// [`MIN_CLASS_BYTES`](super::MIN_CLASS_BYTES) up to `value_size_max` rounded up to a power of
    /// two (see [`Geometry::new`] for the policy).
    #[must_use]
    pub fn size_classes(&self) -> Vec<usize> {
        Geometry::new(self).capacities().to_vec()
    }

    /// Bytes of one slot of size class `class` (a whole number of words).
    #[must_use]
    pub fn class_slot_bytes(&self, class: usize) -> usize {
        u8::try_from(class).map_or(0, |c| Geometry::new(self).slot_bytes(c))
    }

    /// The smallest size class whose capacity holds `value_len` bytes.
    #[must_use]
    pub fn class_for(&self, value_len: usize) -> Option<usize> {
        Geometry::new(self).class_for(value_len).map(usize::from)
    }

    /// `data_bytes_per_node` by the sizing rule (see its docs) for a node
    /// holding `live` entries of `value_size` bytes and writing at most
    /// `puts_per_sec` of them per second: room for the live entries plus
    /// one [`Config::reuse_window`] of writes, in the value's size class,
    /// times the number of classes (each gets an equal share). `None` for a
    /// value larger than `value_size_max`.
    #[must_use]
    pub fn data_bytes_for(
        &self,
        value_size: usize,
        live: usize,
        puts_per_sec: f64,
    ) -> Option<usize> {
        let class = self.class_for(value_size)?;
        let window = self.reuse_window().as_secs_f64();
        let staged = (puts_per_sec.max(0.0) * window).ceil() as usize;
        let slots = live.saturating_add(staged);
        Some(
            slots
                .saturating_mul(self.class_slot_bytes(class))
                .saturating_mul(self.size_classes().len()),
        )
    }

    /// [`Config::tombstone_reserve`] by its sizing rule for a node that
    /// makes at most `deletes_per_sec` DELETE attempts per second while
    /// the rest of its smallest class is full: one `op_timeout` plus one
    /// [`Config::reuse_window`] of tombstones, and at least 1.
    #[must_use]
    pub fn tombstone_reserve_for(&self, deletes_per_sec: f64) -> usize {
        let window = (self.op_timeout + self.reuse_window()).as_secs_f64();
        ((deletes_per_sec.max(0.0) * window).ceil() as usize).max(1)
    }

    /// How long a replaced or deleted entry's slot waits after it was
    /// unlinked before it is reused, at most: `expiry + max_clock_skew`
    /// after its stamp, and then up to [`crate::clock::reuse_lag`] (three
    /// heartbeat periods of the clock watch) until a check of the node's
    /// clock vouches for that time. At the defaults, 1 s + 10 ms + 15 ms.
    #[must_use]
    pub fn reuse_window(&self) -> Duration {
        self.expiry + self.max_clock_skew + crate::clock::reuse_lag(self.max_clock_skew)
    }

    /// How often the background recycler looks: a tenth of the expiry
    /// period, so expired slots return well before a free list runs dry.
    #[must_use]
    pub fn recycler_period(&self) -> Duration {
        (self.expiry / 10).max(Duration::from_millis(1))
    }

    /// Slots of size class `class` on each node: an equal share of
    /// `data_bytes_per_node` per class, plus the tombstone reserve in the
    /// smallest class (see [`Geometry::new`]).
    #[must_use]
    pub fn class_slots(&self, class: usize) -> usize {
        u8::try_from(class).map_or(0, |c| Geometry::new(self).slots(c))
    }
}
