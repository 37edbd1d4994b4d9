//! A conformance suite for [`Fabric`] backends.
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
//!   into their buffers and CAS results into `old`;
//! * out-of-bounds, misaligned, unknown-node and unknown-region verbs fail
//!   with the matching [`FabricError`] variant, carrying the verb's
//!   coordinates, and change nothing;
//! * concurrent CAS increments from several threads (and views) lose none;
//! * concurrent WRITEs and READs never tear an 8-byte word;
//! * an [`Endpoint`] counts verbs, bytes, round trips and local/remote
//!   targets exactly.

use nessie::fabric::{
    Endpoint, Fabric, FabricError, RegionId, RegionSpec, RemoteAddr, Verb, VerbCounts,
};
use nessie::layout::region;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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

/// The index-like region of the suite's clusters.
pub const SMALL: RegionId = region::INDEX;
/// The data-like region of the suite's clusters.
pub const LARGE: RegionId = region::data(0);
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
                view.region_len(node, region::data(9)),
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

fn expect_err(what: &str, result: Result<(), FabricError>, ok: impl Fn(&FabricError) -> bool) {
    match result {
        Err(e) if ok(&e) => {
            // The message names the verb's coordinates.
            assert!(!e.to_string().is_empty());
        }
        other => panic!("{what}: unexpected {other:?}"),
    }
}

/// Out-of-bounds, misaligned, unknown-node and unknown-region verbs fail
/// with their own error, carrying the verb's coordinates, through READ,
/// WRITE, CAS and batches, and change nothing.
///
/// # Panics
/// On any deviation.
pub fn check_errors(make: Factory<'_>) {
    let views = cluster(make);
    let nodes = views.len();
    for (v, f) in views.iter().enumerate() {
        let f = &**f;
        let mut buf16 = [0u8; 16];
        let data16 = [0xeeu8; 16];
        let node = (v + 1) % nodes;
        let past_end = RemoteAddr::new(node, SMALL, SMALL_LEN - 8);
        let out = |off: u64, len: u64| {
            move |e: &FabricError| {
                matches!(e, FabricError::OutOfBounds { node: n, region, offset, len: l, region_len }
                    if *n == node && *region == SMALL && *offset == off && *l == len && *region_len == SMALL_LEN)
            }
        };
        expect_err(
            "READ across the end",
            f.read(past_end, &mut buf16),
            out(SMALL_LEN - 8, 16),
        );
        expect_err(
            "WRITE across the end",
            f.write(past_end, &data16),
            out(SMALL_LEN - 8, 16),
        );
        let at_end = RemoteAddr::new(node, SMALL, SMALL_LEN);
        expect_err(
            "CAS past the end",
            f.cas(at_end, 0, 1).map(drop),
            out(SMALL_LEN, 8),
        );
        expect_err(
            "READ far past the end",
            f.read(RemoteAddr::new(node, SMALL, 1 << 40), &mut buf16),
            out(1 << 40, 16),
        );
        let wrap = u64::MAX - 7;
        expect_err(
            "READ whose end overflows",
            f.read(RemoteAddr::new(node, SMALL, wrap), &mut buf16),
            out(wrap, 16),
        );
        expect_err(
            "CAS whose end overflows",
            f.cas(RemoteAddr::new(node, SMALL, wrap), 0, 1).map(drop),
            out(wrap, 8),
        );

        let mis = |off: u64, len: u64| {
            move |e: &FabricError| {
                matches!(e, FabricError::Misaligned { node: n, region, offset, len: l }
                    if *n == node && *region == SMALL && *offset == off && *l == len)
            }
        };
        let odd = RemoteAddr::new(node, SMALL, 4);
        expect_err("misaligned READ", f.read(odd, &mut buf16), mis(4, 16));
        expect_err("misaligned WRITE", f.write(odd, &data16), mis(4, 16));
        expect_err("misaligned CAS", f.cas(odd, 0, 1).map(drop), mis(4, 8));
        let word = RemoteAddr::new(node, SMALL, 8);
        expect_err(
            "READ of a partial word",
            f.read(word, &mut buf16[..12]),
            mis(8, 12),
        );
        expect_err(
            "WRITE of a partial word",
            f.write(word, &data16[..3]),
            mis(8, 3),
        );

        let unknown_node = |e: &FabricError| matches!(e, FabricError::UnknownNode { node: n, nodes: c } if *n == nodes && *c == nodes);
        let nowhere = RemoteAddr::new(nodes, SMALL, 0);
        expect_err(
            "READ of an unknown node",
            f.read(nowhere, &mut buf16),
            unknown_node,
        );
        expect_err(
            "WRITE of an unknown node",
            f.write(nowhere, &data16),
            unknown_node,
        );
        expect_err(
            "CAS of an unknown node",
            f.cas(nowhere, 0, 1).map(drop),
            unknown_node,
        );
        expect_err(
            "READ of a far unknown node",
            f.read(RemoteAddr::new(usize::MAX, SMALL, 0), &mut buf16),
            |e| {
                matches!(
                    e,
                    FabricError::UnknownNode {
                        node: usize::MAX,
                        ..
                    }
                )
            },
        );

        let missing = region::data(9);
        let unknown_region = |e: &FabricError| matches!(e, FabricError::UnknownRegion { node: n, region } if *n == node && *region == missing);
        let unregistered = RemoteAddr::new(node, missing, 0);
        expect_err(
            "READ of an unknown region",
            f.read(unregistered, &mut buf16),
            unknown_region,
        );
        expect_err(
            "WRITE of an unknown region",
            f.write(unregistered, &data16),
            unknown_region,
        );
        expect_err(
            "CAS of an unknown region",
            f.cas(unregistered, 0, 1).map(drop),
            unknown_region,
        );
        expect_err(
            "batched verb of an unknown region",
            f.post(&mut [Verb::Write {
                addr: unregistered,
                data: &data16,
            }]),
            unknown_region,
        );
        expect_err(
            "batched verb across the end",
            f.post(&mut [Verb::Read {
                addr: past_end,
                buf: &mut buf16,
            }]),
            out(SMALL_LEN - 8, 16),
        );
    }
    // Nothing above changed any memory.
    for node in 0..nodes {
        let all = read_vec(
            &*views[0],
            RemoteAddr::new(node, SMALL, 0),
            SMALL_LEN as usize,
        );
        assert!(
            all.iter().all(|&b| b == 0),
            "failed verbs changed node {node}'s memory"
        );
    }
}

/// `threads` threads, spread over the views, each CAS-increment a word of
/// node 0 and a word of the last node `per_thread` times (read, then CAS
/// from the value read, retrying from the value a failed CAS returns); no
/// increment may be lost.
///
/// # Panics
/// On any deviation.
pub fn check_concurrent_cas(make: Factory<'_>, threads: usize, per_thread: u64) {
    let views = cluster(make);
    let targets = [
        RemoteAddr::new(0, SMALL, 0),
        RemoteAddr::new(views.len() - 1, LARGE, LARGE_LEN - 8),
    ];
    let successes: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let view = views[t % views.len()].clone();
                s.spawn(move || {
                    let mut won = 0;
                    for i in 0..per_thread {
                        let target = targets[(i as usize + t) % 2];
                        let mut current = read_u64(&*view, target);
                        loop {
                            let old = view.cas(target, current, current + 1).expect("CAS");
                            if old == current {
                                won += 1;
                                break;
                            }
                            assert!(old > current, "a CAS'd counter went backwards");
                            current = old;
                        }
                    }
                    won
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("incrementing thread"))
            .sum()
    });
    let total = threads as u64 * per_thread;
    assert_eq!(successes, total);
    let sum: u64 = targets
        .iter()
        .map(|&t| read_u64(&*views[1 % views.len()], t))
        .sum();
    assert_eq!(sum, total, "every successful CAS increment is in memory");
    for (v, view) in views.iter().enumerate() {
        let per_target: Vec<u64> = targets.iter().map(|&t| read_u64(&**view, t)).collect();
        let expected: Vec<u64> = (0..2u64)
            .map(|k| {
                (0..threads as u64)
                    .map(|t| (0..per_thread).filter(|i| (i + t) % 2 == k).count() as u64)
                    .sum()
            })
            .collect();
        assert_eq!(per_target, expected, "view {v}: per-word counts");
    }
}

/// A writer alternately fills a block of another node with all-zero and
/// all-one words while readers on every view read it: every 8-byte word a
/// reader sees is whole (READs of many words need not be atomic, words
/// must).
///
/// # Panics
/// On any deviation.
pub fn check_word_atomicity(make: Factory<'_>, rounds: usize) {
    let views = cluster(make);
    let block = RemoteAddr::new(1, LARGE, 8192);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writer = views[0].clone();
        let stop = &stop;
        let readers: Vec<_> = views
            .iter()
            .map(|view| {
                let view = view.clone();
                s.spawn(move || {
                    let mut buf = vec![0u8; 1024];
                    let mut reads = 0u64;
                    while !stop.load(Ordering::Relaxed) || reads == 0 {
                        view.read(block, &mut buf).expect("READ");
                        for word in buf.chunks_exact(8) {
                            assert!(
                                word == [0u8; 8] || word == [0xffu8; 8],
                                "torn word {word:02x?}"
                            );
                        }
                        reads += 1;
                    }
                })
            })
            .collect();
        let (zeros, ones) = (vec![0u8; 1024], vec![0xffu8; 1024]);
        for i in 0..rounds {
            writer
                .write(block, if i % 2 == 0 { &ones } else { &zeros })
                .expect("WRITE");
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().expect("reader");
        }
    });
}

/// An [`Endpoint`] counts every verb by kind, bytes by direction, one round
/// trip per single verb or non-empty batch, and whether each verb targeted
/// its own node; it writes results back like the fabric does.
///
/// # Panics
/// On any deviation.
pub fn check_endpoint_counts(make: Factory<'_>) {
    let views = cluster(make);
    let mut ep = Endpoint::new(views[0].clone(), 0);
    assert_eq!(ep.node(), 0);
    assert_eq!(ep.counts(), VerbCounts::default());
    let mut buf = [0u8; 16];
    ep.read(RemoteAddr::new(0, LARGE, 0), &mut buf)
        .expect("READ");
    ep.write(RemoteAddr::new(1, LARGE, 0), &[5u8; 24])
        .expect("WRITE");
    assert_eq!(ep.cas(RemoteAddr::new(2, SMALL, 0), 0, 41).expect("CAS"), 0);
    assert_eq!(
        ep.read_word(RemoteAddr::new(1, LARGE, 8)).expect("READ"),
        u64::from_le_bytes([5; 8])
    );
    let after_singles = VerbCounts {
        reads: 2,
        writes: 1,
        cas: 1,
        read_bytes: 24,
        write_bytes: 24,
        // The local READ is a verb, not a network round trip.
        round_trips: 3,
        local: 1,
        remote: 3,
        remote_bytes: 32,
    };
    assert_eq!(ep.counts(), after_singles);

    let (mut a, mut b) = ([0u8; 8], [0u8; 16]);
    let mut batch = [
        Verb::Read {
            addr: RemoteAddr::new(2, SMALL, 0),
            buf: &mut a,
        },
        Verb::Read {
            addr: RemoteAddr::new(1, LARGE, 0),
            buf: &mut b,
        },
        Verb::Cas {
            addr: RemoteAddr::new(0, SMALL, 8),
            expected: 0,
            new: 3,
            old: 9,
        },
        Verb::Write {
            addr: RemoteAddr::new(0, LARGE, 64),
            data: &[1u8; 8],
        },
    ];
    ep.post(&mut batch).expect("batch");
    assert!(matches!(batch[2], Verb::Cas { old: 0, .. }));
    assert_eq!(u64::from_le_bytes(a), 41);
    assert_eq!(b, [5u8; 16]);
    let after_batch = after_singles
        + VerbCounts {
            reads: 2,
            writes: 1,
            cas: 1,
            read_bytes: 24,
            write_bytes: 8,
            round_trips: 1,
            local: 2,
            remote: 2,
            remote_bytes: 24,
        };
    assert_eq!(ep.counts(), after_batch);

    ep.post(&mut []).expect("empty batch");
    assert_eq!(ep.counts(), after_batch, "an empty batch costs nothing");

    // Batches of one verb take the single-verb path and still write back.
    let mut single = [Verb::Cas {
        addr: RemoteAddr::new(0, SMALL, 8),
        expected: 3,
        new: 4,
        old: 0,
    }];
    ep.post(&mut single).expect("batch of one");
    assert!(matches!(single[0], Verb::Cas { old: 3, .. }));
    let mut one = [0u8; 8];
    ep.post(&mut [Verb::Read {
        addr: RemoteAddr::new(0, SMALL, 8),
        buf: &mut one,
    }])
    .expect("batch of one");
    assert_eq!(u64::from_le_bytes(one), 4);
    let c = ep.counts() - after_batch;
    assert_eq!(
        c,
        VerbCounts {
            reads: 1,
            cas: 1,
            read_bytes: 8,
            // Both verbs were on the endpoint's own node.
            round_trips: 0,
            local: 2,
            ..VerbCounts::default()
        }
    );
    assert_eq!(ep.counts().verbs(), 10);
    assert_eq!(ep.counts().bytes(), 24 + 24 + 24 + 8 + 8);

    // Endpoints count independently; another node's endpoint sees node 0 as
    // remote.
    let mut other = Endpoint::new(views[1].clone(), 1);
    other
        .read(RemoteAddr::new(0, LARGE, 0), &mut buf)
        .expect("READ");
    other
        .write(RemoteAddr::new(1, LARGE, 0), &[0u8; 8])
        .expect("WRITE");
    assert_eq!(
        other.counts(),
        VerbCounts {
            reads: 1,
            writes: 1,
            read_bytes: 16,
            write_bytes: 8,
            round_trips: 1,
            local: 1,
            remote: 1,
            remote_bytes: 16,
            ..VerbCounts::default()
        }
    );
    assert_eq!(
        ep.counts().verbs(),
        10,
        "other endpoints do not count into this one"
    );
}

/// Runs every check of the suite, with a modest amount of concurrency.
///
/// # Panics
/// On the first deviation.
pub fn run_all(make: Factory<'_>) {
    check_shape(make);
    check_read_write(make);
    check_cas(make);
    check_batches(make);
    check_errors(make);
    check_concurrent_cas(make, 4, 2_000);
    check_word_atomicity(make, 2_000);
    check_endpoint_counts(make);
}

#[cfg(test)]
mod tests {
    //! The suite must be able to fail: each check is run against a backend
    //! with one deliberate fault.

    use super::*;
    use nessie::fabric::LocalFabric;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Fault {
        None,
        CasReturnsNew,
        CasIgnoresExpected,
        PostDropsResults,
        MisalignedAsOutOfBounds,
        WritesSkipLastWord,
        /// Every seventh CAS reports success without storing.
        CasLosesSomeStores,
    }

    #[derive(Debug)]
    struct Faulty {
        inner: LocalFabric,
        fault: Fault,
        cas_calls: std::sync::atomic::AtomicU64,
    }

    impl Fabric for Faulty {
        fn nodes(&self) -> usize {
            self.inner.nodes()
        }

        fn region_len(&self, node: usize, region: RegionId) -> Option<u64> {
            self.inner.region_len(node, region)
        }

        fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
            self.inner.read(addr, buf)
        }

        fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
            if self.fault == Fault::WritesSkipLastWord && data.len() > 8 {
                return self.inner.write(addr, &data[..data.len() - 8]);
            }
            self.inner.write(addr, data)
        }

        fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
            let call = self.cas_calls.fetch_add(1, Ordering::Relaxed);
            match self.fault {
                Fault::CasLosesSomeStores if call % 7 == 6 => Ok(expected),
                Fault::CasReturnsNew => self.inner.cas(addr, expected, new).map(|_| new),
                Fault::CasIgnoresExpected => {
                    let mut b = [0u8; 8];
                    self.inner.read(addr, &mut b)?;
                    let old = u64::from_le_bytes(b);
                    self.inner.cas(addr, old, new)
                }
                Fault::MisalignedAsOutOfBounds if addr.offset % 8 != 0 => {
                    Err(FabricError::OutOfBounds {
                        node: addr.node,
                        region: addr.region,
                        offset: addr.offset,
                        len: 8,
                        region_len: 0,
                    })
                }
                _ => self.inner.cas(addr, expected, new),
            }
        }

        fn post(&self, batch: &mut [Verb<'_>]) -> Result<(), FabricError> {
            if self.fault != Fault::PostDropsResults {
                return self.inner.post(batch);
            }
            for verb in batch.iter_mut() {
                match verb {
                    Verb::Read { addr, buf } => self.inner.read(*addr, &mut vec![0; buf.len()])?,
                    Verb::Write { addr, data } => self.inner.write(*addr, data)?,
                    Verb::Cas {
                        addr,
                        expected,
                        new,
                        ..
                    } => drop(self.inner.cas(*addr, *expected, *new)?),
                }
            }
            Ok(())
        }
    }

    fn fails(fault: Fault, check: fn(Factory<'_>)) -> bool {
        let make = move |spec: &ClusterSpec| {
            let f: Arc<dyn Fabric> = Arc::new(Faulty {
                inner: LocalFabric::new(spec.nodes, &spec.regions),
                fault,
                cas_calls: 0.into(),
            });
            vec![f; spec.nodes]
        };
        catch_unwind(AssertUnwindSafe(|| check(&make))).is_err()
    }

    #[test]
    fn a_correct_backend_passes() {
        assert!(!fails(Fault::None, run_all));
    }

    #[test]
    fn each_check_catches_its_fault() {
        assert!(fails(Fault::CasReturnsNew, check_cas));
        assert!(fails(Fault::CasIgnoresExpected, check_cas));
        assert!(fails(Fault::PostDropsResults, check_batches));
        assert!(fails(Fault::MisalignedAsOutOfBounds, check_errors));
        assert!(fails(Fault::WritesSkipLastWord, check_read_write));
    }

    #[test]
    fn views_that_do_not_share_memory_are_caught() {
        let make = |spec: &ClusterSpec| {
            (0..spec.nodes)
                .map(|_| Arc::new(LocalFabric::new(spec.nodes, &spec.regions)) as Arc<dyn Fabric>)
                .collect()
        };
        assert!(catch_unwind(|| check_read_write(&make)).is_err());
        assert!(catch_unwind(|| check_cas(&make)).is_err());
    }

    #[test]
    fn lost_cas_increments_are_caught() {
        assert!(fails(Fault::CasLosesSomeStores, |make| {
            check_concurrent_cas(make, 2, 100);
        }));
    }
}
