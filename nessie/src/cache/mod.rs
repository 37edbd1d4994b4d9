//! A client's LRU cache of committed DTEs, keyed by the ITE value that pointed
//! at them.
//!
//! A committed DTE never changes, and an ITE value cannot come back for
//! another incarnation of its slot within 2047 × `expiry` (a slot's
//! generation, part of the ITE value, is bumped only when a published slot is
//! reused, at most once per `expiry`), so a fresh ITE read that returns a
//! cached ITE value proves the cached entry is still the key's current
//! version. An entry is usable only if at most `expiry` passed between the
//! start of the index read that last confirmed it and the end of the index
//! read that finds it again; both times come from the monotonic clock, the
//! second read *after* the ITE read
//! (docs/design.md#f6-rule-v-generations-count-published-reuses and
//! docs/design.md#cache: a reader preempted between its clock read and its ITE
//! read must not count the preemption as fresh).

use lru::LruCache;
use std::num::NonZeroUsize;

/// What the cache holds for one committed DTE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedEntry {
    /// The key.
    pub key: Vec<u8>,
    /// The value, or `None` for a committed tombstone.
    pub value: Option<Vec<u8>>,
    /// When the index read that last confirmed the entry began (monotonic
    /// µs).
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

    /// The entry for the ITE value `ite`, found by an index read that began
    /// at `read_began` and ended by `read_ended` (monotonic µs), if cached
    /// and confirmed at most `expiry` before `read_ended`; a hit is
    /// confirmed again as of `read_began`.
    pub fn get(&mut self, ite: u64, read_began: u64, read_ended: u64) -> Option<&CachedEntry> {
        let fresh = match self.lru.get(&ite) {
            Some(e) => read_ended.saturating_sub(e.confirmed_at) <= self.expiry_us,
            None => return None,
        };
        if !fresh {
            self.lru.pop(&ite);
            return None;
        }
        let e = self.lru.get_mut(&ite)?;
        e.confirmed_at = e.confirmed_at.max(read_began);
        Some(e)
    }

    /// Caches a committed DTE read through the ITE value `ite`, which an
    /// index read that began at `read_began` (monotonic µs) returned.
    pub fn insert(&mut self, ite: u64, key: &[u8], value: Option<&[u8]>, read_began: u64) {
        // The entry this insert replaces or evicts lends its buffers: a
        // cache of large values then costs a copy per insert, not an
        // allocation and a free as well.
        let full = self.lru.len() == self.lru.cap().get();
        let reused = match self.lru.pop(&ite) {
            Some(e) => Some(e),
            None if full => self.lru.pop_lru().map(|(_, e)| e),
            None => None,
        };
        let (mut k, mut v) = reused.map_or((Vec::new(), None), |e| (e.key, e.value));
        k.clear();
        k.extend_from_slice(key);
        let value = value.map(|new| {
            let mut buf = v.take().unwrap_or_default();
            buf.clear();
            buf.extend_from_slice(new);
            buf
        });
        self.lru.put(
            ite,
            CachedEntry {
                key: k,
                value,
                confirmed_at: read_began,
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
        assert!(c.get(1, 50, 50).is_some());
        assert!(c.get(1, 150, 150).is_some(), "refreshed at 50");
        assert!(c.get(1, 251, 251).is_none(), "expired after 150 + 100");
        assert!(c.is_empty());
    }

    #[test]
    fn freshness_counts_until_the_end_of_the_index_read() {
        let mut c = DteCache::new(2, 100);
        c.insert(1, b"k", Some(b"v"), 0);
        // A read that began in time but ended (after a preemption) too late
        // must not hit (docs/design.md#cache).
        assert!(c.get(1, 90, 101).is_none());
        c.insert(2, b"k", Some(b"v"), 0);
        assert!(c.get(2, 10, 100).is_some());
        assert_eq!(c.get(2, 20, 20).unwrap().confirmed_at, 20);
        // A hit never moves the confirmation back in time.
        assert_eq!(c.get(2, 5, 30).unwrap().confirmed_at, 20);
    }

    /// Replacing and evicting keep what the cache answers exact: a
    /// buffer lent by another entry carries none of its bytes. And the
    /// buffers are lent: a replaced or evicted entry's large value buffer
    /// holds the next small value.
    #[test]
    fn reused_buffers_hold_only_the_new_entry() {
        let lent = |e: &CachedEntry, len: usize| e.value.as_ref().unwrap().capacity() >= len;
        let mut c = DteCache::new(2, 1000);
        let large = vec![9u8; 4096];
        c.insert(1, b"long key", Some(&large), 0);
        c.insert(2, b"k2", Some(b"v2"), 0);
        c.insert(3, b"k", Some(b"v"), 0);
        let e = c.get(3, 0, 0).unwrap();
        assert_eq!(
            (&e.key[..], e.value.as_deref()),
            (&b"k"[..], Some(&b"v"[..]))
        );
        assert!(lent(e, large.len()), "the evicted entry lent its buffer");
        assert!(c.get(1, 0, 0).is_none(), "evicted");
        c.insert(3, b"k", None, 1);
        assert_eq!(
            c.get(3, 1, 1).unwrap().value,
            None,
            "replaced by a tombstone"
        );
        c.insert(2, b"k2", Some(&large), 1);
        c.insert(2, b"k2", Some(b"w"), 1);
        let e = c.get(2, 1, 1).unwrap();
        assert_eq!(e.value.as_deref(), Some(&b"w"[..]));
        assert!(lent(e, large.len()), "the replaced entry lent its buffer");
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn least_recently_used_goes_first() {
        let mut c = DteCache::new(2, 1000);
        c.insert(1, b"a", Some(b"1"), 0);
        c.insert(2, b"b", None, 0);
        assert!(c.get(1, 1, 1).is_some());
        c.insert(3, b"c", Some(b"3"), 1);
        assert!(c.get(2, 2, 2).is_none());
        assert_eq!(c.get(3, 2, 2).unwrap().value.as_deref(), Some(&b"3"[..]));
        assert_eq!(c.len(), 2);
    }
}
