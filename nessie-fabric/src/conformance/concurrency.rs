//! Verbs from many threads and views at once.

use super::{cluster, read_u64, Factory, LARGE, LARGE_LEN, SMALL};
use crate::RemoteAddr;
use std::sync::atomic::{AtomicBool, Ordering};

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
