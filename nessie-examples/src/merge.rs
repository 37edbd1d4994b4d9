//! k-way merge of sorted runs.
//!
//! [`kmerge_by`] merges `k` iterators, each sorted by the same order, into
//! one sorted iterator with a binary min-heap of the runs' heads: `log k`
//! comparisons per item. Items equal under the order come out in run order
//! (the run listed first first), so a merge is deterministic. The order is
//! a closure, so items may borrow from the runs' buffers (records as
//! `&[u8]` slices of the fetched partitions) without copying keys.

/// The merge of several sorted runs; see [`kmerge_by`].
pub struct KMerge<I: Iterator, F> {
    runs: Vec<I>,
    heads: Vec<Option<I::Item>>,
    /// Indices of runs with a head, as a binary min-heap by (head, index).
    heap: Vec<usize>,
    less: F,
}

impl<I: Iterator, F> std::fmt::Debug for KMerge<I, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KMerge")
            .field("runs", &self.runs.len())
            .field("live", &self.heap.len())
            .finish_non_exhaustive()
    }
}

/// Merges `runs`, each sorted by `less` (a strict "comes before"), into one
/// sorted sequence. If a run is not sorted the output is not either; the
/// callers check their output.
pub fn kmerge_by<R, F>(runs: R, less: F) -> KMerge<<R::Item as IntoIterator>::IntoIter, F>
where
    R: IntoIterator,
    R::Item: IntoIterator,
    F: FnMut(&<R::Item as IntoIterator>::Item, &<R::Item as IntoIterator>::Item) -> bool,
{
    let mut runs: Vec<_> = runs.into_iter().map(IntoIterator::into_iter).collect();
    let heads: Vec<_> = runs.iter_mut().map(Iterator::next).collect();
    let mut m = KMerge {
        heap: (0..runs.len()).filter(|&i| heads[i].is_some()).collect(),
        runs,
        heads,
        less,
    };
    for i in (0..m.heap.len() / 2).rev() {
        m.sift_down(i);
    }
    m
}

impl<I: Iterator, F: FnMut(&I::Item, &I::Item) -> bool> KMerge<I, F> {
    /// Whether heap position `a` comes before heap position `b`.
    fn before(&mut self, a: usize, b: usize) -> bool {
        let (ra, rb) = (self.heap[a], self.heap[b]);
        match (&self.heads[ra], &self.heads[rb]) {
            (Some(x), Some(y)) => (self.less)(x, y) || (!(self.less)(y, x) && ra < rb),
            // Only runs with a head are in the heap.
            _ => ra < rb,
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut top = i;
            if l < self.heap.len() && self.before(l, top) {
                top = l;
            }
            if r < self.heap.len() && self.before(r, top) {
                top = r;
            }
            if top == i {
                return;
            }
            self.heap.swap(i, top);
            i = top;
        }
    }
}

impl<I: Iterator, F: FnMut(&I::Item, &I::Item) -> bool> Iterator for KMerge<I, F> {
    type Item = I::Item;

    fn next(&mut self) -> Option<I::Item> {
        let run = *self.heap.first()?;
        let item = self.heads[run].take();
        self.heads[run] = self.runs[run].next();
        if self.heads[run].is_none() {
            let last = self.heap.len() - 1;
            self.heap.swap(0, last);
            self.heap.pop();
        }
        self.sift_down(0);
        item
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let heads = self.heap.len();
        self.runs.iter().fold((heads, Some(heads)), |(lo, hi), r| {
            let (l, h) = r.size_hint();
            (
                lo.saturating_add(l),
                hi.and_then(|hi| h.and_then(|h| hi.checked_add(h))),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn merges_runs_of_any_length() {
        let runs = vec![vec![1, 4, 9], vec![], vec![2, 3, 10, 11], vec![5]];
        let merged: Vec<i32> = kmerge_by(runs, |a: &i32, b: &i32| a < b).collect();
        assert_eq!(merged, vec![1, 2, 3, 4, 5, 9, 10, 11]);
        let none: Vec<Vec<i32>> = Vec::new();
        assert_eq!(kmerge_by(none, |a: &i32, b: &i32| a < b).count(), 0);
    }

    #[test]
    fn ties_come_out_in_run_order_and_items_may_borrow() {
        let a = b"a1b1c1".to_vec();
        let b = b"a2c2".to_vec();
        let c = b"b3c3".to_vec();
        let runs = [&a, &b, &c].map(|r| r.chunks_exact(2));
        let merged: Vec<&[u8]> = kmerge_by(runs, |x: &&[u8], y: &&[u8]| x[0] < y[0]).collect();
        assert_eq!(
            merged,
            [b"a1", b"a2", b"b1", b"b3", b"c1", b"c2", b"c3"].map(|s| &s[..])
        );
    }

    proptest! {
        #[test]
        fn merge_equals_sorting_the_concatenation(mut runs in prop::collection::vec(prop::collection::vec(0u16..50, 0..20), 0..9)) {
            for r in &mut runs {
                r.sort_unstable();
            }
            let mut expected: Vec<u16> = runs.concat();
            expected.sort_unstable();
            let m = kmerge_by(runs.clone(), |a: &u16, b: &u16| a < b);
            prop_assert_eq!(m.size_hint(), (expected.len(), Some(expected.len())));
            prop_assert_eq!(m.collect::<Vec<_>>(), expected);
        }
    }
}
