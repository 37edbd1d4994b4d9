//! Deterministic verb counts of the hybrid store: PUT and DELETE are two
//! WRITEs; a GET reads the candidate ITEs in one batch, then the header and
//! key of each occupied candidate in order (no filter bits), then the value.

use nessie::fabric::VerbCounts;
use nessie::layout::dte::KEY_OFFSET;
use nessie::layout::round_up_words;
use nessie::{Config, KvClient, OpKind};
use nessie_hy::{Client, Cluster};

fn cluster() -> Cluster {
    Cluster::local(Config {
        index_slots_per_node: 64,
        data_bytes_per_node: 16 << 20,
        value_size_max: 16 << 10,
        ..Config::default()
    })
    .unwrap()
}

/// Keys homed on `node` for which `pred` holds of their candidate slots.
fn find_key(c: &Client, node: usize, prefix: &str, pred: impl Fn(&[u64]) -> bool) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| c.table().home(k.as_bytes()) == node && pred(&c.table().candidates(k.as_bytes())))
        .unwrap()
}

fn delta(c: &mut Client, kind: OpKind, op: impl FnOnce(&mut Client)) -> VerbCounts {
    let before = c.stats().of(kind).verbs;
    op(c);
    c.stats().of(kind).verbs - before
}

fn header_read(key: &str) -> u64 {
    (KEY_OFFSET + round_up_words(key.len())) as u64
}

#[test]
fn remote_put_and_delete_cost_two_writes() {
    let cluster = cluster();
    let mut c = cluster.client(0).unwrap();
    let key = find_key(&c, 2, "w", |_| true);
    for round in 0..30 {
        let value = vec![round as u8; 16 << 10];
        let d = delta(&mut c, OpKind::Put, |c| {
            c.put(key.as_bytes(), &value).unwrap();
        });
        assert_eq!((d.writes, d.reads, d.cas, d.remote), (2, 0, 0, 2), "{d:?}");
    }
    let d = delta(&mut c, OpKind::Delete, |c| {
        assert!(c.delete(key.as_bytes()).unwrap());
    });
    assert_eq!((d.writes, d.reads, d.cas, d.remote), (2, 0, 0, 2), "{d:?}");
}

#[test]
fn get_reads_ites_then_each_occupied_candidates_header_then_the_value() {
    let cluster = cluster();
    let mut c = cluster.client(0).unwrap();
    // A takes its first candidate; B's first candidate is A's slot, so B
    // lands in its second and a GET of B reads A's header first.
    let a = find_key(&c, 1, "a", |s| s.len() == 3);
    let a_slot = c.table().candidates(a.as_bytes())[0];
    let b = find_key(&c, 1, "b", |s| s.len() == 3 && s[0] == a_slot);
    let b_slot = c.table().candidates(b.as_bytes())[1];
    let lone = find_key(&c, 1, "c", |s| {
        s.len() == 3 && !s.contains(&a_slot) && !s.contains(&b_slot)
    });
    let behind_a = find_key(&c, 1, "d", |s| {
        s.len() == 3 && s[0] == a_slot && !s.contains(&b_slot)
    });
    let (va, vb) = (vec![1u8; 1000], vec![2u8; 3000]);
    c.put(a.as_bytes(), &va).unwrap();
    c.put(b.as_bytes(), &vb).unwrap();

    let d = delta(&mut c, OpKind::Get, |c| {
        assert_eq!(c.get(a.as_bytes()).unwrap(), Some(va.clone()));
    });
    assert_eq!(
        (d.reads, d.writes, d.cas, d.round_trips),
        (3 + 2, 0, 0, 3),
        "A: {d:?}"
    );
    assert_eq!(d.read_bytes, 3 * 8 + header_read(&a) + 1000);
    assert_eq!((d.remote, d.local), (5, 0));

    let d = delta(&mut c, OpKind::Get, |c| {
        assert_eq!(c.get(b.as_bytes()).unwrap(), Some(vb.clone()));
    });
    assert_eq!(
        (d.reads, d.round_trips),
        (3 + 3, 4),
        "B reads A's header first: {d:?}"
    );
    assert_eq!(d.read_bytes, 3 * 8 + header_read(&b) * 2 + 3000);

    // A miss with empty candidates: the ITEs, then the confirming re-read.
    let d = delta(&mut c, OpKind::Get, |c| {
        assert_eq!(c.get(lone.as_bytes()).unwrap(), None);
    });
    assert_eq!((d.reads, d.round_trips), (6, 2), "{d:?}");
    // A miss behind another key: that key's header too.
    let d = delta(&mut c, OpKind::Get, |c| {
        assert_eq!(c.get(behind_a.as_bytes()).unwrap(), None);
    });
    assert_eq!((d.reads, d.round_trips), (7, 3), "{d:?}");

    // Same-node GETs read local memory through the same path.
    let own = find_key(&c, 0, "o", |s| s.len() == 3);
    c.put(own.as_bytes(), b"mine").unwrap();
    let d = delta(&mut c, OpKind::Get, |c| {
        assert_eq!(c.get(own.as_bytes()).unwrap(), Some(b"mine".to_vec()));
    });
    assert_eq!((d.reads, d.local, d.remote), (5, 5, 0), "{d:?}");
}
