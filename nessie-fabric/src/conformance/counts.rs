//! What an [`Endpoint`] counts.

use super::{cluster, Factory, LARGE, SMALL};
use crate::{Endpoint, RemoteAddr, Verb, VerbCounts};

/// An [`Endpoint`] counts every verb by kind, bytes by direction, one round
/// trip per single verb or non-empty batch, and whether each verb targeted
/// its own node; it writes results back like the fabric does.
///
/// # Panics
/// On any deviation.
pub fn check_endpoint_counts(make: Factory<'_>) {
    let views = cluster(make);
    let mut ep = Endpoint::new(views[0].clone(), 0);
    let after_singles = count_singles(&mut ep);
    let after_batch = count_batch(&mut ep, after_singles);
    count_batches_of_one(&mut ep, after_batch);

    // Endpoints count independently; another node's endpoint sees node 0 as
    // remote.
    let mut other = Endpoint::new(views[1].clone(), 1);
    other
        .read(RemoteAddr::new(0, LARGE, 0), &mut [0u8; 16])
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

/// Single verbs of a fresh endpoint of node 0; returns its counts after.
fn count_singles(ep: &mut Endpoint) -> VerbCounts {
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
    after_singles
}

/// A batch of four verbs, then an empty one; returns the counts after.
fn count_batch(ep: &mut Endpoint, after_singles: VerbCounts) -> VerbCounts {
    let (mut a, mut b, mut c) = ([0u8; 8], [0u8; 8], [0u8; 8]);
    let mut batch = [
        Verb::Read {
            addr: RemoteAddr::new(2, SMALL, 0),
            buf: &mut a,
        },
        // A scatter READ is one READ of both buffers' bytes.
        Verb::ReadScatter {
            addr: RemoteAddr::new(1, LARGE, 0),
            head: &mut b,
            tail: &mut c,
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
    assert_eq!((b, c), ([5u8; 8], [5u8; 8]));
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
    after_batch
}

/// Batches of one verb.
fn count_batches_of_one(ep: &mut Endpoint, after_batch: VerbCounts) {
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
}
