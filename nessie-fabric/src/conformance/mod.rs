//! The conformance suites every backend must pass, and what tests need of
//! the crate's private parts. Compiled only with the cargo feature
//! `conformance`, which the crate's own tests switch on (a dev-dependency
//! of the crate on itself); other crates' tests and the fuzz target enable
//! it the same way. It is no part of the library's API.
//!
//! * This module: the suite for [`Fabric`] backends, and
//!   [`fabric_conformance_tests!`](crate::fabric_conformance_tests), which
//!   instantiates it as one test per check.
//! * [`bootstrap`]: the suite for backends whose nodes meet through the
//!   authenticated rendezvous (`tcp`, `verbs`).
//! * `verbs` (with the feature `verbs` too): clusters of `VerbsFabric`s on
//!   the RDMA device the tests are given.
//! * [`serve_tcp_bytes`]: the `tcp` backend's frame decoder on an in-memory
//!   byte stream (the decoder's property tests and fuzz target).
//! * [`hostile`]: slow, unauthenticated connections, for the tests that a
//!   server cannot be held hostage.
//!
//! ## The fabric suite
//!
//! Every check takes a [`Factory`]: a function that builds a fresh cluster
//! of the requested shape and returns one view of it per node (for an
//! in-process backend the same fabric for every node; for a multi-process
//! backend each view is opened as its own node). A view `v` is used as node
//! `v`: data written through one view must be visible through every other.
//! Checks panic with a message on the first deviation, like the assertions
//! of a test; [`run_all`] runs every one of them.
//!
//! What the suite holds a backend to:
//!
//! * fresh regions read as zeros; READ returns what the latest WRITE or CAS
//!   stored, through any view, at any word-aligned offset and length;
//! * CAS swaps only when the word holds `expected`, returns the old value
//!   either way, and sees the word as the little-endian `u64` that READ and
//!   WRITE move;
//! * [`Fabric::post`] executes every verb of a batch, writing READ results
//!   into their buffers and CAS results into `old`; where the backend says
//!   it [keeps a node's verbs in batch order](Fabric::keeps_batch_order),
//!   they take effect in that order;
//! * out-of-bounds, misaligned, unknown-node and unknown-region verbs fail
//!   with the matching [`FabricError`] variant, carrying the verb's
//!   coordinates, and change nothing;
//! * concurrent CAS increments from several threads (and views) lose none;
//! * concurrent WRITEs and READs never tear an 8-byte word;
//! * an [`Endpoint`](crate::Endpoint) counts verbs, bytes, round trips and
//!   local/remote targets exactly.

use crate::{Fabric, FabricError, RegionId, RegionSpec, RemoteAddr, Verb};
use std::sync::Arc;

pub mod bootstrap;
mod concurrency;
mod counts;
mod errors;
pub mod hostile;
mod order;

pub use concurrency::{check_concurrent_cas, check_word_atomicity};
pub use counts::check_endpoint_counts;
pub use errors::check_errors;
pub use order::check_batch_order;

#[cfg(feature = "verbs")]
pub mod verbs;

/// The shape of a cluster a check asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSpec {
    /// Number of nodes.
    pub nodes: usize,
    /// Regions every node registers.
    pub regions: Vec<RegionSpec>,
}

/// Builds a fresh cluster of the given shape (zeroed memory, no state shared
/// with earlier clusters) and returns one view per node, in node order.
pub type Factory<'a> = &'a dyn Fn(&ClusterSpec) -> Vec<Arc<dyn Fabric>>;

/// The format version the memberships of the suites' clusters carry: the
/// fabric's own layouts' ([`crate::wire::VERSION`]); a store folds in its
/// own.
pub const FORMAT_VERSION: u32 = crate::wire::VERSION;

/// The index-like region of the suite's clusters.
pub const SMALL: RegionId = RegionId(0);
/// The data-like region of the suite's clusters.
pub const LARGE: RegionId = RegionId(1);
/// A region no cluster of the suite registers.
pub const UNREGISTERED: RegionId = RegionId(10);
/// Bytes of [`SMALL`].
pub const SMALL_LEN: u64 = 4096;
/// Bytes of [`LARGE`].
pub const LARGE_LEN: u64 = 64 * 1024;

/// The cluster every check of the suite uses: three nodes, each with a
/// [`SMALL`] and a [`LARGE`] region.
#[must_use]
pub fn suite_spec() -> ClusterSpec {
    ClusterSpec {
        nodes: 3,
        regions: vec![
            RegionSpec {
                id: SMALL,
                len: SMALL_LEN,
            },
            RegionSpec {
                id: LARGE,
                len: LARGE_LEN,
            },
        ],
    }
}

fn cluster(make: Factory<'_>) -> Vec<Arc<dyn Fabric>> {
    let spec = suite_spec();
    let views = make(&spec);
    assert_eq!(
        views.len(),
        spec.nodes,
        "the factory returns one view per node"
    );
    views
}

/// A byte pattern that differs at every offset and for every `seed`.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn read_vec(f: &dyn Fabric, addr: RemoteAddr, len: usize) -> Vec<u8> {
    let mut buf = vec![0xa5; len];
    f.read(addr, &mut buf)
        .unwrap_or_else(|e| panic!("READ of {len} bytes at {addr}: {e}"));
    buf
}

fn read_u64(f: &dyn Fabric, addr: RemoteAddr) -> u64 {
    let b = read_vec(f, addr, 8);
    u64::from_le_bytes(b.try_into().expect("8 bytes"))
}

/// Every view reports the cluster's size and every region's length, and
/// nothing for regions or nodes that do not exist.
///
/// # Panics
/// On any deviation.
pub fn check_shape(make: Factory<'_>) {
    let spec = suite_spec();
    for (v, view) in cluster(make).iter().enumerate() {
        assert_eq!(view.nodes(), spec.nodes, "view {v}: nodes()");
        for node in 0..spec.nodes {
            for r in &spec.regions {
                assert_eq!(
                    view.region_len(node, r.id),
                    Some(r.len),
                    "view {v}: node {node} {}",
                    r.id
                );
            }
            assert_eq!(
                view.region_len(node, UNREGISTERED),
                None,
                "view {v}: unregistered region"
            );
        }
        assert_eq!(
            view.region_len(spec.nodes, SMALL),
            None,
            "view {v}: node past the cluster"
        );
    }
}

/// Fresh regions read as zeros; WRITEs through any view are visible to
/// READs through every view, exactly, at word granularity, without
/// disturbing neighbouring words.
///
/// # Panics
/// On any deviation.
pub fn check_read_write(make: Factory<'_>) {
    let views = cluster(make);
    let nodes = views.len();
    for (v, view) in views.iter().enumerate() {
        for node in 0..nodes {
            assert!(
                read_vec(&**view, RemoteAddr::new(node, LARGE, 0), LARGE_LEN as usize)
                    .iter()
                    .all(|&b| b == 0),
                "view {v}: node {node}'s fresh region reads as zeros"
            );
        }
    }
    // Each view writes a distinct block into every node's region.
    for (v, view) in views.iter().enumerate() {
        for node in 0..nodes {
            let addr = RemoteAddr::new(node, LARGE, 4096 * v as u64 + 8);
            let data = pattern(992, (v * nodes + node) as u8);
            view.write(addr, &data)
                .unwrap_or_else(|e| panic!("view {v}: WRITE at {addr}: {e}"));
        }
    }
    for (r, reader) in views.iter().enumerate() {
        for (v, _) in views.iter().enumerate() {
            for node in 0..nodes {
                let base = RemoteAddr::new(node, LARGE, 4096 * v as u64);
                let got = read_vec(&**reader, base, 1008);
                let data = pattern(992, (v * nodes + node) as u8);
                assert_eq!(
                    &got[..8],
                    &[0; 8],
                    "view {r}: word before the block untouched"
                );
                assert_eq!(
                    &got[8..1000],
                    &data[..],
                    "view {r}: block written by view {v} at {base}"
                );
                assert_eq!(
                    &got[1000..],
                    &[0; 8],
                    "view {r}: word after the block untouched"
                );
                // A word-aligned slice in the middle of the block.
                let mid = read_vec(&**reader, base.add(8 + 8 * 17), 8 * 5);
                assert_eq!(
                    mid,
                    &data[8 * 17..8 * 22],
                    "view {r}: sub-read of view {v}'s block"
                );
            }
        }
    }
    // Overwrites replace exactly the words written; the first and last word
    // of a region are reachable.
    let (first, last) = (views[0].clone(), views[nodes - 1].clone());
    let end = RemoteAddr::new(1, SMALL, SMALL_LEN - 16);
    first
        .write(end, &[1u8; 16])
        .expect("WRITE at the region's end");
    last.write(end.add(8), &[2u8; 8])
        .expect("WRITE of the last word");
    assert_eq!(read_vec(&*first, end, 16), [[1u8; 8], [2u8; 8]].concat());
    last.write(RemoteAddr::new(1, SMALL, 0), &[3u8; 8])
        .expect("WRITE of the first word");
    assert_eq!(
        read_vec(&*first, RemoteAddr::new(1, SMALL, 0), 16),
        [[3u8; 8], [0u8; 8]].concat()
    );
    // Regions of one node are distinct memory.
    assert!(
        read_vec(&*first, RemoteAddr::new(1, LARGE, LARGE_LEN - 16), 16)
            .iter()
            .all(|&b| b == 0)
    );
}

/// Minor page faults of the calling thread so far (Linux's
/// `/proc/thread-self/stat`, its tenth field): what a prefault saves.
///
/// # Panics
/// If the file cannot be read or parsed (not Linux).
#[must_use]
pub fn thread_minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("/proc/thread-self/stat");
    let after_name = &stat[stat.rfind(')').expect("a stat line") + 2..];
    after_name
        .split(' ')
        .nth(7)
        .and_then(|f| f.parse().ok())
        .expect("the minor fault count")
}

/// Faulting in a node's own memory ahead of use changes no byte of it, and
/// a range past a region's end is refused as a WRITE's would be (or
/// ignored, by a backend whose memory needs no faulting in).
///
/// # Panics
/// On any deviation.
pub fn check_prefault(make: Factory<'_>) {
    let views = cluster(make);
    for (v, view) in views.iter().enumerate() {
        let data = pattern(LARGE_LEN as usize - 16, v as u8 + 1);
        let inner = RemoteAddr::new(v, LARGE, 8);
        view.write(inner, &data)
            .unwrap_or_else(|e| panic!("view {v}: WRITE: {e}"));
        view.prefault(RemoteAddr::new(v, LARGE, 0), LARGE_LEN)
            .unwrap_or_else(|e| panic!("view {v}: prefault of its whole region: {e}"));
        assert_eq!(
            read_vec(&**view, inner, data.len()),
            data,
            "view {v}: prefault changed its memory"
        );
        if let Err(e) = view.prefault(RemoteAddr::new(v, LARGE, LARGE_LEN - 8), 16) {
            assert!(
                matches!(e, FabricError::OutOfBounds { .. }),
                "view {v}: a prefault past the end failed with {e}"
            );
        }
    }
}

/// CAS swaps only on a match, returns the old value either way, and agrees
/// with READ and WRITE on the little-endian encoding of the word.
///
/// # Panics
/// On any deviation.
pub fn check_cas(make: Factory<'_>) {
    let views = cluster(make);
    let nodes = views.len();
    for (v, view) in views.iter().enumerate() {
        for node in 0..nodes {
            let w = RemoteAddr::new(node, SMALL, 8 * (1 + v as u64));
            let tag = 0x0102_0304_0506_0700 | (v * nodes + node) as u64;
            assert_eq!(
                view.cas(w, 0, tag).expect("CAS"),
                0,
                "view {v}: CAS on a fresh word returns 0"
            );
            assert_eq!(
                view.cas(w, 0, 99).expect("CAS"),
                tag,
                "view {v}: failed CAS returns the current value"
            );
            for (r, reader) in views.iter().enumerate() {
                assert_eq!(
                    read_u64(&**reader, w),
                    tag,
                    "view {r}: READ sees view {v}'s CAS at {w}"
                );
            }
            assert_eq!(
                read_vec(&**view, w, 8),
                tag.to_le_bytes(),
                "CAS'd words are little-endian"
            );
            let other = &views[(v + 1) % nodes];
            assert_eq!(
                other.cas(w, tag, !tag).expect("CAS"),
                tag,
                "CAS from another view"
            );
            assert_eq!(read_u64(&**view, w), !tag);
        }
    }
    // WRITE then CAS: the CAS sees the written little-endian word.
    let w = RemoteAddr::new(2, LARGE, 512);
    views[0]
        .write(w, &0xdead_beef_u64.to_le_bytes())
        .expect("WRITE");
    assert_eq!(views[1].cas(w, 0xdead_beef, 7).expect("CAS"), 0xdead_beef);
    assert_eq!(read_u64(&*views[2], w), 7);
    // A failed CAS leaves the word alone.
    assert_eq!(views[2].cas(w, 8, 9).expect("CAS"), 7);
    assert_eq!(read_u64(&*views[0], w), 7);
    // Extreme values survive the round trip.
    for value in [u64::MAX, 1 << 63, 1] {
        let old = read_u64(&*views[0], w);
        assert_eq!(views[0].cas(w, old, value).expect("CAS"), old);
        assert_eq!(read_u64(&*views[1], w), value);
    }
}

/// [`Fabric::post`] executes every verb of a batch across nodes and
/// regions, writes READ results into their buffers and CAS old values into
/// `old`; an empty batch does nothing.
///
/// # Panics
/// On any deviation.
pub fn check_batches(make: Factory<'_>) {
    let views = cluster(make);
    let words: Vec<RemoteAddr> = (0..3).map(|n| RemoteAddr::new(n, SMALL, 64)).collect();
    for (n, w) in words.iter().enumerate() {
        views[n].cas(*w, 0, 100 + n as u64).expect("CAS");
    }
    let data = pattern(256, 9);
    views[2]
        .write(RemoteAddr::new(2, LARGE, 1024), &data)
        .expect("WRITE");
    let to_write = pattern(64, 77);
    let (mut a, mut b, mut c) = ([0u8; 8], vec![0u8; 256], [0u8; 16]);
    let mut batch = [
        Verb::Read {
            addr: words[1],
            buf: &mut a,
        },
        Verb::Cas {
            addr: words[0],
            expected: 100,
            new: 200,
            old: 12345,
        },
        Verb::Read {
            addr: RemoteAddr::new(2, LARGE, 1024),
            buf: &mut b,
        },
        Verb::Cas {
            addr: words[2],
            expected: 5,
            new: 6,
            old: 12345,
        },
        Verb::Write {
            addr: RemoteAddr::new(1, LARGE, 8),
            data: &to_write,
        },
        Verb::Read {
            addr: RemoteAddr::new(0, LARGE, 0),
            buf: &mut c,
        },
    ];
    views[0].post(&mut batch).expect("batch");
    assert!(
        matches!(batch[1], Verb::Cas { old: 100, .. }),
        "successful CAS reports its old value: {:?}",
        batch[1]
    );
    assert!(
        matches!(batch[3], Verb::Cas { old: 102, .. }),
        "failed CAS reports the current value: {:?}",
        batch[3]
    );
    assert_eq!(u64::from_le_bytes(a), 101, "READ result written back");
    assert_eq!(b, data, "READ result written back");
    assert_eq!(c, [0; 16]);
    assert_eq!(
        read_u64(&*views[2], words[0]),
        200,
        "batched CAS took effect"
    );
    assert_eq!(
        read_u64(&*views[1], words[2]),
        102,
        "failed batched CAS changed nothing"
    );
    assert_eq!(
        read_vec(&*views[2], RemoteAddr::new(1, LARGE, 8), 64),
        to_write,
        "batched WRITE took effect"
    );
    check_scatter_reads(&views, &data);
    views[1].post(&mut []).expect("an empty batch");
    // A batch of one verb of each kind.
    let mut one = [0u8; 8];
    views[1]
        .post(&mut [Verb::Read {
            addr: words[0],
            buf: &mut one,
        }])
        .expect("batch of one");
    assert_eq!(u64::from_le_bytes(one), 200);
    let mut single = [Verb::Cas {
        addr: words[0],
        expected: 200,
        new: 201,
        old: 0,
    }];
    views[2].post(&mut single).expect("batch of one");
    assert!(matches!(single[0], Verb::Cas { old: 200, .. }));
    // A batch that fails reports an error.
    let mut buf = [0u8; 8];
    let mut bad = [
        Verb::Read {
            addr: words[0],
            buf: &mut buf,
        },
        Verb::Cas {
            addr: RemoteAddr::new(0, SMALL, 3),
            expected: 0,
            new: 1,
            old: 0,
        },
    ];
    assert!(
        matches!(
            views[0].post(&mut bad),
            Err(FabricError::Misaligned { offset: 3, .. })
        ),
        "a batch with a misaligned verb fails"
    );
}

/// A scatter READ of `data`, at node 2's `LARGE` + 1024, from a remote
/// node and from node 2 itself: the same bytes as one READ, split between
/// the two buffers, in a batch and alone; one whose tail runs past the
/// region fails whole, its head untouched.
fn check_scatter_reads(views: &[Arc<dyn Fabric>], data: &[u8]) {
    let at = RemoteAddr::new(2, LARGE, 1024);
    for from in [0, 2] {
        for split in [0, 8, 24, data.len()] {
            let (mut head, mut tail) = (vec![0u8; split], vec![0u8; data.len() - split]);
            let mut word = [0u8; 8];
            let mut batch = [
                Verb::ReadScatter {
                    addr: at,
                    head: &mut head,
                    tail: &mut tail,
                },
                Verb::Read {
                    addr: RemoteAddr::new(1, LARGE, 8),
                    buf: &mut word,
                },
            ];
            views[from]
                .post(&mut batch)
                .expect("a batch with a scatter READ");
            assert_eq!(
                ([&head[..], &tail[..]].concat(), &head[..], &tail[..]),
                (data.to_vec(), &data[..split], &data[split..]),
                "node {from}'s scatter READ split at {split}"
            );
        }
    }
    // Alone, through the fabric's own entry point.
    for from in [0, 2] {
        let (mut head, mut tail) = ([0u8; 24], vec![0u8; data.len() - 24]);
        views[from]
            .read_scatter(at, &mut head, &mut tail)
            .expect("a lone scatter READ");
        assert!(
            head[..] == data[..24] && tail[..] == data[24..],
            "node {from}'s lone scatter READ"
        );
    }
    let (mut head, mut tail) = ([0u8; 8], [0u8; 16]);
    let past = views[0].post(&mut [Verb::ReadScatter {
        addr: RemoteAddr::new(2, LARGE, LARGE_LEN - 16),
        head: &mut head,
        tail: &mut tail,
    }]);
    assert!(
        matches!(past, Err(FabricError::OutOfBounds { .. })),
        "a scatter READ past the region's end: {past:?}"
    );
    for from in [0, 2] {
        let (mut head, mut tail) = ([0u8; 8], [0u8; 8]);
        let end = RemoteAddr::new(2, LARGE, LARGE_LEN - 16);
        views[from]
            .read_scatter(end, &mut head, &mut tail)
            .expect("a scatter READ that ends at the region's end");
        let (mut head, mut tail) = ([0xeeu8; 8], [0u8; 16]);
        let past = views[from].read_scatter(
            RemoteAddr::new(2, LARGE, LARGE_LEN - 16),
            &mut head,
            &mut tail,
        );
        assert!(
            matches!(past, Err(FabricError::OutOfBounds { .. })) && head == [0xee; 8],
            "node {from}'s lone scatter READ past the region's end fails whole: {past:?}"
        );
    }
}

/// Runs every check of the suite, with a modest amount of concurrency.
///
/// # Panics
/// On the first deviation.
pub fn run_all(make: Factory<'_>) {
    check_shape(make);
    check_read_write(make);
    check_prefault(make);
    check_cas(make);
    check_batches(make);
    check_batch_order(make);
    check_errors(make);
    check_concurrent_cas(make, 4, 2_000);
    check_word_atomicity(make, 2_000);
    check_endpoint_counts(make);
}

/// Serves `tcp` request frames from an in-memory byte stream until it ends
/// or a frame is refused, as a one-node service with two small regions
/// would; returns how many frames were answered and the response bytes.
/// What the frame decoder's property tests and fuzz target feed.
#[must_use]
pub fn serve_tcp_bytes(input: &[u8]) -> (usize, Vec<u8>) {
    crate::tcp::serve_bytes_for_testing(input)
}

#[cfg(test)]
mod tests;

/// Defines one `#[test]` per check of the fabric suite, each running the
/// check through `$backend`, a `fn(impl FnOnce(Factory<'_>))` that builds
/// the backend's clusters. The concurrent checks use `$threads` threads of
/// `$per_thread` CAS increments and `$rounds` rounds of writes; further
/// attributes (such as `#[ignore = "..."]`) go on every test.
#[macro_export]
macro_rules! fabric_conformance_tests {
    ($backend:ident, threads: $threads:expr, per_thread: $per_thread:expr, rounds: $rounds:expr $(, #[$attr:meta])*) => {
        $crate::fabric_conformance_tests!(@each $backend [$(#[$attr])*]
            every_view_reports_the_cluster_shape: $crate::conformance::check_shape;
            writes_are_read_back_through_every_view: $crate::conformance::check_read_write;
            prefaulting_own_memory_changes_nothing: $crate::conformance::check_prefault;
            cas_swaps_only_on_a_match_and_returns_the_old_value: $crate::conformance::check_cas;
            batches_execute_every_verb_and_write_results_back: $crate::conformance::check_batches;
            a_nodes_verbs_keep_their_batch_order_where_promised: $crate::conformance::check_batch_order;
            bad_verbs_fail_with_their_own_error_and_change_nothing: $crate::conformance::check_errors;
            concurrent_cas_increments_lose_nothing:
                |make| $crate::conformance::check_concurrent_cas(make, $threads, $per_thread);
            concurrent_writes_never_tear_a_word:
                |make| $crate::conformance::check_word_atomicity(make, $rounds);
            endpoints_count_verbs_bytes_and_round_trips: $crate::conformance::check_endpoint_counts;
            whole_suite_passes_on_one_factory: $crate::conformance::run_all;
        );
    };
    (@each $backend:ident $attrs:tt $($name:ident: $check:expr;)*) => {
        $($crate::fabric_conformance_tests!(@one $backend $attrs $name $check);)*
    };
    (@one $backend:ident [$(#[$attr:meta])*] $name:ident $check:expr) => {
        #[test]
        $(#[$attr])*
        fn $name() {
            $backend($check);
        }
    };
}
