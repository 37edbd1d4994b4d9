//! An order-independent checksum of a multiset of items.
//!
//! Each item is hashed with xxh3; the digest keeps the count, the wrapping
//! sum and the xor of the hashes. Sum and xor are commutative and
//! associative, so maps and reducers can digest the same records in any
//! order and in any grouping and still agree — and a lost, duplicated or
//! altered record changes the count or the sum (a duplicated one leaves the
//! xor unchanged but not the sum; two compensating alterations would have to
//! collide in both). It is a check against bugs and torn data, not against
//! an adversary.

use serde::{Deserialize, Serialize};
use std::ops::AddAssign;
use twox_hash::XxHash3_64;

/// Count, sum and xor of the xxh3 hashes of a multiset of items.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digest {
    /// Items (records, or word occurrences).
    pub records: u64,
    /// Wrapping sum of the items' hashes.
    pub sum: u64,
    /// Xor of the items' hashes.
    pub xor: u64,
}

impl Digest {
    /// Adds one item.
    pub fn add(&mut self, item: &[u8]) {
        self.add_times(item, 1);
    }

    /// Adds `times` copies of one item (a word counted `times` times).
    pub fn add_times(&mut self, item: &[u8], times: u64) {
        let h = XxHash3_64::oneshot(item);
        self.records = self.records.wrapping_add(times);
        self.sum = self.sum.wrapping_add(h.wrapping_mul(times));
        if times % 2 == 1 {
            self.xor ^= h;
        }
    }

    /// The digest of `items`.
    #[must_use]
    pub fn of<'a>(items: impl IntoIterator<Item = &'a [u8]>) -> Digest {
        let mut d = Digest::default();
        for i in items {
            d.add(i);
        }
        d
    }
}

impl AddAssign for Digest {
    #[expect(
        clippy::suspicious_op_assign_impl,
        reason = "combining digests adds counts and sums and xors the xors"
    )]
    fn add_assign(&mut self, o: Digest) {
        self.records = self.records.wrapping_add(o.records);
        self.sum = self.sum.wrapping_add(o.sum);
        self.xor ^= o.xor;
    }
}

impl std::iter::Sum for Digest {
    fn sum<I: Iterator<Item = Digest>>(iter: I) -> Digest {
        let mut d = Digest::default();
        for x in iter {
            d += x;
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_grouping_do_not_matter() {
        let items: Vec<&[u8]> = vec![b"a", b"bb", b"ccc", b"bb"];
        let whole = Digest::of(items.iter().copied());
        let mut parts = Digest::of(items[2..].iter().copied());
        parts += Digest::of(items[..2].iter().rev().copied());
        assert_eq!(whole, parts);
        let mut counted = Digest::default();
        counted.add(b"a");
        counted.add_times(b"bb", 2);
        counted.add_times(b"ccc", 1);
        assert_eq!(whole, counted);
    }

    #[test]
    fn lost_duplicated_or_altered_items_are_seen() {
        let base = Digest::of([&b"x"[..], b"y", b"z"]);
        assert_ne!(base, Digest::of([&b"x"[..], b"y"]));
        assert_ne!(base, Digest::of([&b"x"[..], b"y", b"z", b"z"]));
        assert_ne!(base, Digest::of([&b"x"[..], b"y", b"Z"]));
        assert_eq!(Digest::default(), [].into_iter().sum());
    }
}
