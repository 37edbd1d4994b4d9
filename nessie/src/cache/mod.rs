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

pub mod hints;

use lru::LruCache;
use std::num::NonZeroUsize;
use std::ops::Range;

/// What the cache holds for one committed DTE: the bytes a GET read of it,
/// kept whole, so that caching the entry moves a buffer instead of copying
/// a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedEntry {
    /// The bytes read, the key and the value among them.
    bytes: Vec<u8>,
    key: Range<usize>,
    /// `None` for a committed tombstone.
    value: Option<Range<usize>>,
    /// When the index read that last confirmed the entry began (monotonic
    /// µs).
    pub confirmed_at: u64,
}

impl CachedEntry {
    /// The key.
    #[must_use]
    pub fn key(&self) -> &[u8] {
        self.bytes.get(self.key.clone()).unwrap_or_default()
    }

    /// The value, or `None` for a committed tombstone.
    #[must_use]
    pub fn value(&self) -> Option<&[u8]> {
        let value = self.value.clone()?;
        Some(self.bytes.get(value).unwrap_or_default())
    }
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

    /// Whether an entry for `ite` is cached, fresh or not (no LRU update).
    #[must_use]
    pub fn holds(&self, ite: u64) -> bool {
        self.lru.contains(&ite)
    }

    /// Caches a committed DTE read through the ITE value `ite`, which an
    /// index read that began at `read_began` (monotonic µs) returned:
    /// `bytes` as read, its key at `key` and its value at `value` (`None`
    /// for a tombstone). Returns a buffer for the caller to read into
    /// next: the one of the entry this insert replaced or evicted, or
    /// `bytes` itself if its ranges do not lie within it (nothing cached).
    pub fn insert(
        &mut self,
        ite: u64,
        mut bytes: Vec<u8>,
        key: Range<usize>,
        value: Option<Range<usize>>,
        read_began: u64,
    ) -> Option<Vec<u8>> {
        let end = value.as_ref().map_or(key.end, |v| v.end.max(key.end));
        let within = |r: &Range<usize>| r.start <= r.end && r.end <= bytes.len();
        if !within(&key) || !value.as_ref().is_none_or(within) {
            return Some(bytes);
        }
        // A slot's bytes past the value are of no use here; a buffer that
        // once held a far larger entry gives the excess back, so the cache
        // holds about what its entries need.
        bytes.truncate(end);
        if bytes.capacity() > 2 * end.max(64) {
            bytes.shrink_to_fit();
        }
        let entry = CachedEntry {
            bytes,
            key,
            value,
            confirmed_at: read_began,
        };
        self.lru.push(ite, entry).map(|(_, old)| old.bytes)
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

    /// Caches `key` and `value` (`None`: a tombstone) as a read would
    /// leave them: a few header bytes, the key, the value, some slack.
    fn insert(
        c: &mut DteCache,
        ite: u64,
        key: &[u8],
        value: Option<&[u8]>,
        at: u64,
    ) -> Option<Vec<u8>> {
        let mut bytes = vec![0xee; 8];
        bytes.extend_from_slice(key);
        let key_at = 8..bytes.len();
        let value_at = value.map(|v| {
            let from = bytes.len();
            bytes.extend_from_slice(v);
            from..bytes.len()
        });
        bytes.extend_from_slice(&[0xdd; 16]);
        c.insert(ite, bytes, key_at, value_at, at)
    }

    #[test]
    fn entries_expire_unless_confirmed() {
        let mut c = DteCache::new(2, 100);
        insert(&mut c, 1, b"k", Some(b"v"), 0);
        assert!(c.get(1, 50, 50).is_some());
        assert!(c.get(1, 150, 150).is_some(), "refreshed at 50");
        assert!(c.get(1, 251, 251).is_none(), "expired after 150 + 100");
        assert!(c.is_empty());
    }

    #[test]
    fn freshness_counts_until_the_end_of_the_index_read() {
        let mut c = DteCache::new(2, 100);
        insert(&mut c, 1, b"k", Some(b"v"), 0);
        // A read that began in time but ended (after a preemption) too late
        // must not hit (docs/design.md#cache).
        assert!(c.get(1, 90, 101).is_none());
        insert(&mut c, 2, b"k", Some(b"v"), 0);
        assert!(c.get(2, 10, 100).is_some());
        assert_eq!(c.get(2, 20, 20).unwrap().confirmed_at, 20);
        // A hit never moves the confirmation back in time.
        assert_eq!(c.get(2, 5, 30).unwrap().confirmed_at, 20);
    }

    /// An entry answers exactly its key and value, however it was read;
    /// replacing and evicting hand the old entry's buffer back for the
    /// next read, and only then.
    #[test]
    fn entries_answer_their_own_bytes_and_lend_their_buffers_back() {
        let mut c = DteCache::new(2, 1000);
        let large = vec![9u8; 4096];
        assert_eq!(insert(&mut c, 1, b"long key", Some(&large), 0), None);
        assert_eq!(insert(&mut c, 2, b"k2", Some(b"v2"), 0), None);
        let evicted = insert(&mut c, 3, b"k", Some(b"v"), 0).expect("full: 1 goes");
        assert!(
            evicted.capacity() >= large.len(),
            "the evicted entry's buffer"
        );
        let e = c.get(3, 0, 0).unwrap();
        assert_eq!((e.key(), e.value()), (&b"k"[..], Some(&b"v"[..])));
        assert!(c.get(1, 0, 0).is_none(), "evicted");
        assert!(insert(&mut c, 3, b"k", None, 1).is_some(), "replaced");
        assert_eq!(c.get(3, 1, 1).unwrap().value(), None, "a tombstone now");
        assert_eq!(c.get(3, 1, 1).unwrap().key(), b"k");
        assert!(insert(&mut c, 2, b"k2", Some(b""), 1).is_some());
        assert_eq!(c.get(2, 1, 1).unwrap().value(), Some(&b""[..]));
        assert_eq!(c.len(), 2);
    }

    /// Ranges outside the bytes cache nothing, and the bytes come back.
    #[test]
    fn ranges_outside_the_bytes_cache_nothing() {
        let mut c = DteCache::new(2, 1000);
        let back = c.insert(1, vec![1; 10], 2..4, Some(4..11), 0);
        assert_eq!(back.as_deref(), Some(&[1u8; 10][..]));
        #[allow(clippy::reversed_empty_ranges, reason = "the bad input tested")]
        let back = c.insert(1, vec![1; 10], 4..2, None, 0);
        assert!(back.is_some());
        assert!(c.is_empty());
    }

    /// A buffer of up to twice its entry's bytes is kept as it is (no
    /// reallocation for a little slack); a larger one gives the excess
    /// back.
    #[test]
    fn a_buffer_twice_its_entry_is_kept_and_a_larger_one_shrinks() {
        let mut c = DteCache::new(2, 1000);
        let mut bytes = Vec::with_capacity(256);
        bytes.extend_from_slice(&[7; 128]);
        let twice = bytes.capacity();
        assert_eq!(twice, 256, "the allocator gave what was asked");
        c.insert(1, bytes, 0..8, Some(8..128), 0);
        let back = c.insert(1, vec![0; 16], 0..1, None, 0).unwrap();
        assert_eq!(back.capacity(), twice, "kept, not reallocated");
        let mut bytes = Vec::with_capacity(264);
        bytes.extend_from_slice(&[7; 128]);
        c.insert(1, bytes, 0..8, Some(8..128), 0);
        let back = c.insert(1, vec![0; 16], 0..1, None, 0).unwrap();
        assert!(back.capacity() < 264, "shrunk: {}", back.capacity());
    }

    /// A buffer far larger than its entry gives the excess back.
    #[test]
    fn a_small_entry_in_a_large_buffer_keeps_about_its_size() {
        let mut c = DteCache::new(2, 1000);
        let mut bytes = Vec::with_capacity(1 << 20);
        bytes.extend_from_slice(b"hdr-key-value");
        c.insert(1, bytes, 4..7, Some(8..13), 0);
        let back = c.insert(1, vec![0; 16], 0..1, None, 0).unwrap();
        assert!(back.capacity() < 1024, "{} bytes kept", back.capacity());
        assert_eq!(back, b"hdr-key-value");
    }

    #[test]
    fn least_recently_used_goes_first() {
        let mut c = DteCache::new(2, 1000);
        insert(&mut c, 1, b"a", Some(b"1"), 0);
        insert(&mut c, 2, b"b", None, 0);
        assert!(c.get(1, 1, 1).is_some());
        insert(&mut c, 3, b"c", Some(b"3"), 1);
        assert!(c.get(2, 2, 2).is_none());
        assert_eq!(c.get(3, 2, 2).unwrap().value(), Some(&b"3"[..]));
        assert_eq!(c.len(), 2);
    }
}
