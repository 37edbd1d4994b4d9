//! Which reducer an item goes to: by key range (sort) or by hash (word
//! count).

use twox_hash::XxHash3_64;

/// Splits the key space into `parts` ranges of equal width by the first
/// eight bytes of the key, read big-endian (shorter keys padded with
/// zeros).
///
/// The partition of a key never decreases as the key grows in
/// lexicographic byte order, so reducer outputs concatenated in reducer
/// order are globally sorted. Ranges are balanced for keys uniform in
/// their first bytes (the generated input); skewed real keys would need
/// sampled split points, as `TeraSort` takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangePartitioner {
    parts: usize,
}

impl RangePartitioner {
    /// Ranges for `parts` reducers (at least one).
    #[must_use]
    pub fn new(parts: usize) -> Self {
        RangePartitioner {
            parts: parts.max(1),
        }
    }

    /// The key's first eight bytes, big-endian, zero-padded.
    #[must_use]
    pub fn prefix(key: &[u8]) -> u64 {
        let mut b = [0u8; 8];
        let n = key.len().min(8);
        b[..n].copy_from_slice(&key[..n]);
        u64::from_be_bytes(b)
    }

    /// The reducer of `key`: `⌊prefix · parts / 2⁶⁴⌋`.
    #[must_use]
    pub fn partition(&self, key: &[u8]) -> usize {
        ((u128::from(Self::prefix(key)) * self.parts as u128) >> 64) as usize
    }
}

/// Sends an item to `hash(item) mod parts` (multiply-shift on a seeded
/// xxh3), so equal items always meet at one reducer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashPartitioner {
    parts: usize,
    seed: u64,
}

impl HashPartitioner {
    /// Buckets for `parts` reducers (at least one).
    #[must_use]
    pub fn new(parts: usize, seed: u64) -> Self {
        HashPartitioner {
            parts: parts.max(1),
            seed,
        }
    }

    /// The reducer of `item`.
    #[must_use]
    pub fn partition(&self, item: &[u8]) -> usize {
        let h = XxHash3_64::oneshot_with_seed(self.seed, item);
        ((u128::from(h) * self.parts as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ranges_cover_the_key_space_evenly() {
        let p = RangePartitioner::new(4);
        assert_eq!(p.partition(&[]), 0);
        assert_eq!(p.partition(&[0x3f; 10]), 0);
        assert_eq!(p.partition(&[0x40]), 1);
        assert_eq!(p.partition(&[0xbf, 0xff]), 2);
        assert_eq!(p.partition(&[0xff; 10]), 3);
        assert_eq!(RangePartitioner::new(0).partition(&[0xff]), 0);
    }

    #[test]
    fn hashing_spreads_words() {
        let p = HashPartitioner::new(3, 7);
        let mut counts = [0usize; 3];
        for i in 0..3000u32 {
            counts[p.partition(format!("word{i}").as_bytes())] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
        assert_eq!(p.partition(b"x"), p.partition(b"x"));
    }

    proptest! {
        #[test]
        fn range_partition_is_monotone(a in prop::collection::vec(any::<u8>(), 0..12),
                                       b in prop::collection::vec(any::<u8>(), 0..12),
                                       parts in 1usize..40) {
            let p = RangePartitioner::new(parts);
            let (lo, hi) = if a <= b { (&a, &b) } else { (&b, &a) };
            prop_assert!(p.partition(lo) <= p.partition(hi));
            prop_assert!(p.partition(hi) < parts);
        }

        #[test]
        fn hash_partition_is_in_range(w in prop::collection::vec(any::<u8>(), 0..20), parts in 1usize..40) {
            prop_assert!(HashPartitioner::new(parts, 1).partition(&w) < parts);
        }
    }
}
