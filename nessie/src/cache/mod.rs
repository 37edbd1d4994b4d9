//! A client's LRU cache of committed DTEs, keyed by the ITE value that
//! pointed at them.
//!
//! A committed DTE never changes, and an ITE value cannot repeat within
//! `expiry` (slots are reused only after they expire, and the slot generation
//! is part of the ITE), so a fresh ITE read that returns a cached ITE value
//! proves the cached entry is still the key's current version. An entry is
//! usable only within `expiry` of the last ITE read that confirmed it.

use lru::LruCache;
use std::num::NonZeroUsize;
use std::sync::Arc;

/// What the cache holds for one committed DTE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedEntry {
    /// The key.
    pub key: Arc<[u8]>,
    /// The value, or `None` for a committed tombstone.
    pub value: Option<Arc<[u8]>>,
    /// When an ITE read last confirmed the entry (µs).
    pub confirmed_at: u64,
}

/// LRU of committed DTEs.
#[derive(Debug)]
pub struct DteCache {
    lru: LruCache<u64, CachedEntry>,
    expiry_us: u64,
}

impl DteCache {
    /// A cache of `capacity` entries (at least 1) with the given expiry.
    #[must_use]
    pub fn new(capacity: usize, expiry_us: u64) -> DteCache {
        DteCache {
            lru: LruCache::new(NonZeroUsize::new(capacity.max(1)).unwrap_or(NonZeroUsize::MIN)),
            expiry_us,
        }
    }

    /// The entry for an ITE value just read at `now`, if cached and still
    /// within expiry; a hit refreshes its confirmation time.
    pub fn get(&mut self, ite: u64, now: u64) -> Option<&CachedEntry> {
        let fresh = match self.lru.get(&ite) {
            Some(e) => now.saturating_sub(e.confirmed_at) <= self.expiry_us,
            None => return None,
        };
        if !fresh {
            self.lru.pop(&ite);
            return None;
        }
        let e = self.lru.get_mut(&ite)?;
        e.confirmed_at = now;
        Some(e)
    }

    /// Caches a committed DTE read through the ITE value `ite` at `now`.
    pub fn insert(&mut self, ite: u64, key: &[u8], value: Option<&[u8]>, now: u64) {
        self.lru.put(
            ite,
            CachedEntry {
                key: key.into(),
                value: value.map(Into::into),
                confirmed_at: now,
            },
        );
    }

    /// Entries cached.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lru.len()
    }

    /// Whether the cache is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.lru.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_unless_confirmed() {
        let mut c = DteCache::new(2, 100);
        c.insert(1, b"k", Some(b"v"), 0);
        assert!(c.get(1, 50).is_some());
        assert!(c.get(1, 150).is_some(), "refreshed at 50");
        assert!(c.get(1, 251).is_none(), "expired after 150 + 100");
        assert!(c.is_empty());
    }

    #[test]
    fn least_recently_used_goes_first() {
        let mut c = DteCache::new(2, 1000);
        c.insert(1, b"a", Some(b"1"), 0);
        c.insert(2, b"b", None, 0);
        assert!(c.get(1, 1).is_some());
        c.insert(3, b"c", Some(b"3"), 1);
        assert!(c.get(2, 2).is_none());
        assert_eq!(c.get(3, 2).unwrap().value.as_deref(), Some(&b"3"[..]));
        assert_eq!(c.len(), 2);
    }
}
