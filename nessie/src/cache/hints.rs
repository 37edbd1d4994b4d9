//! A client's location hints: for each key it read or wrote lately, the ITE
//! value it last saw linked, so that its next GET of the key can read the
//! entry in the same round trip as the index (docs/design.md#location-hints).
//!
//! A hint is a guess, never an answer: a GET uses the entry it read through
//! a hint only if an ITE read in the same batch still holds the hinted
//! value. So a wrong, stale or colliding hint costs one wasted READ and is
//! never returned.

use lru::LruCache;

/// One key's hint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hint {
    /// The ITE value seen linked.
    pub ite: u64,
    /// When the index read (or commit) that saw it linked began
    /// (monotonic µs).
    pub seen_at: u64,
}

/// LRU of hints, keyed by a 64-bit hash of the key: two keys of one hash
/// share a hint, which costs a miss, not a wrong answer. It grows with the
/// keys its client touches, up to its capacity, so that a large capacity
/// costs no memory up front.
#[derive(Debug)]
pub struct LocationHints {
    lru: LruCache<u64, Hint>,
    capacity: usize,
}

impl LocationHints {
    /// Hints for up to `capacity` keys (0: none are kept).
    #[must_use]
    pub fn new(capacity: usize) -> LocationHints {
        LocationHints {
            lru: LruCache::unbounded(),
            capacity,
        }
    }

    /// Whether any hint can be kept.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// The hint for the key of hash `key`, if any.
    pub fn get(&mut self, key: u64) -> Option<Hint> {
        self.lru.get(&key).copied()
    }

    /// Remembers that `ite` was linked for the key of hash `key` at some
    /// instant after `seen_at`. An older sighting of the same value keeps
    /// its time: only a new value restarts the hint's age.
    pub fn set(&mut self, key: u64, ite: u64, seen_at: u64) {
        if !self.enabled() {
            return;
        }
        match self.lru.get_mut(&key) {
            Some(h) if h.ite == ite => h.seen_at = h.seen_at.max(seen_at),
            _ => {
                self.lru.push(key, Hint { ite, seen_at });
                if self.lru.len() > self.capacity {
                    self.lru.pop_lru();
                }
            }
        }
    }

    /// Forgets the key's hint (it was found absent).
    pub fn forget(&mut self, key: u64) {
        self.lru.pop(&key);
    }

    /// Hints kept.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lru.len()
    }

    /// Whether no hint is kept.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_zero_keeps_nothing() {
        let mut h = LocationHints::new(0);
        assert!(!h.enabled());
        h.set(1, 7, 10);
        assert_eq!(h.get(1), None);
        assert!(h.is_empty());
    }

    #[test]
    fn a_new_value_replaces_the_hint_and_its_age() {
        let mut h = LocationHints::new(4);
        h.set(1, 7, 10);
        h.set(1, 7, 5);
        assert_eq!(
            h.get(1),
            Some(Hint {
                ite: 7,
                seen_at: 10
            }),
            "a later sighting counts"
        );
        h.set(1, 7, 20);
        assert_eq!(
            h.get(1),
            Some(Hint {
                ite: 7,
                seen_at: 20
            })
        );
        h.set(1, 9, 15);
        assert_eq!(
            h.get(1),
            Some(Hint {
                ite: 9,
                seen_at: 15
            })
        );
        h.forget(1);
        assert_eq!(h.get(1), None);
    }

    #[test]
    fn the_least_recently_used_hint_goes_first() {
        let mut h = LocationHints::new(2);
        h.set(1, 7, 0);
        h.set(2, 8, 0);
        assert!(h.get(1).is_some());
        h.set(3, 9, 0);
        assert_eq!(h.get(2), None);
        assert_eq!(h.len(), 2);
        assert!(!h.is_empty());
    }
}
