//! The remaining schedules of the protocol review (`2026-11-protocol-
//! review.md`): F1 (keys of different lengths), F6 (slot generations), F8
//! (a full data table), and the GET that waited for a dead writer's first
//! insert. F2–F5 are in `recycling_schedules.rs`.

use nessie::{Error, Optimizations};
use nessie_check::scripted::{backoff, state_cas, tiny_config, Script};

/// A 40-byte key and a short key with the same first candidate and, when
/// `same_filter`, the same filter bits.
fn long_and_short(script: &Script, same_filter: bool) -> (Vec<u8>, Vec<u8>) {
    let long = b"a-rather-long-key-of-forty-bytes-0000000".to_vec();
    let h = script.hasher();
    let (cands, filter) = (h.candidates(&long), h.filter(&long));
    let short = script.find("s", |k| {
        h.candidates(k)[0] == cands[0] && (!same_filter || h.filter(k) == filter)
    });
    assert!(short.len() < long.len());
    (long, short)
}

/// F1: a PUT or DELETE of a key must not see a longer key with the same
/// filter bits in its candidate slot as a torn read (it returned `Corrupt`
/// for as long as the other key stayed).
fn short_key_beside_a_longer_one(optimizations: Optimizations, same_filter: bool) {
    let mut config = tiny_config(4, 2);
    config.optimizations = optimizations;
    let script = Script::new(config, 0);
    let (long, short) = long_and_short(&script, same_filter);
    let mut a = script.direct_client();
    let mut b = script.cluster.client(1).unwrap();
    a.put(&long, b"L").unwrap();
    b.put(&short, b"S").unwrap();
    assert_eq!(b.get(&short).unwrap().as_deref(), Some(&b"S"[..]));
    assert_eq!(a.get(&short).unwrap().as_deref(), Some(&b"S"[..]));
    b.put(&short, b"S2").unwrap();
    assert!(a.delete(&short).unwrap());
    assert_eq!(b.get(&short).unwrap(), None);
    assert!(!b.delete(&short).unwrap());
    assert_eq!(b.get(&long).unwrap().as_deref(), Some(&b"L"[..]));
}

#[test]
fn f1_short_key_beside_a_longer_one_with_the_same_filter_bits() {
    short_key_beside_a_longer_one(Optimizations::default(), true);
}

#[test]
fn f1_short_key_beside_a_longer_one_without_filters() {
    let o = Optimizations {
        filter: false,
        ..Optimizations::default()
    };
    short_key_beside_a_longer_one(o, false);
}

#[test]
fn f1_short_key_beside_a_longer_one_without_multi_read() {
    let o = Optimizations {
        multi_read: false,
        filter: false,
        ..Optimizations::default()
    };
    short_key_beside_a_longer_one(o, false);
}

#[test]
fn f1_short_key_beside_a_longer_one_with_every_switch_off() {
    short_key_beside_a_longer_one(Optimizations::none(), false);
}

/// F6: a slot released unpublished keeps its generation, so a writer that
/// keeps losing its CAS cannot cycle a slot through its generations; only a
/// published, staged and expired slot comes back under a new one.
#[test]
fn f6_generations_count_published_reuses_only() {
    let script = Script::new(tiny_config(4, 2), 0);
    let data = script.cluster.node_data(0).unwrap();
    let access = script.cluster.table_access(0);
    let first = data.allocate(0, access).unwrap().unwrap();
    data.release_unpublished(first);
    for _ in 0..5000 {
        let r = data.allocate(0, access).unwrap().unwrap();
        assert_eq!(r, first, "same slot, same generation");
        data.release_unpublished(r);
    }
    // A published slot: linked, unlinked, staged, expired, reused.
    let mut c = script.direct_client();
    let key = script.key_first("g-", 0);
    c.put(&key, b"1").unwrap();
    c.put(&key, b"2").unwrap();
    assert!(c.delete(&key).unwrap());
    script.let_slots_expire();
    let mut seen = Vec::new();
    while let Some(r) = data.allocate(0, access).unwrap() {
        seen.push(r);
    }
    let again = seen.iter().find(|r| r.slot == first.slot).unwrap();
    assert_eq!(
        again.generation,
        nessie::layout::ite::next_generation(first.generation),
        "one bump for one published incarnation"
    );
}

/// F8: a data table that stays full makes a write fail with
/// `DataTableFull` (nothing changed), never `Timeout` (unknown outcome).
#[test]
fn f8_a_full_data_table_is_reported_as_such() {
    let mut config = tiny_config(64, 2);
    // One class of 4 slots per node.
    config.data_bytes_per_node = 4 * nessie::layout::dte::entry_bytes(48, 256);
    let script = Script::new(config, 0);
    let mut c = script.direct_client();
    let mut stored = Vec::new();
    let failure = (0..32)
        .map(|i| format!("key-{i}").into_bytes())
        .find_map(|k| match c.put(&k, b"v") {
            Ok(()) => {
                stored.push(k);
                None
            }
            Err(e) => Some((k, e)),
        });
    let (k, e) = failure.expect("the table fills up");
    assert!(matches!(e, Error::DataTableFull), "{e:?}");
    assert_eq!(stored.len(), 4);
    assert_eq!(c.get(&k).unwrap(), None, "the failed PUT changed nothing");
    assert!(c.stats().put.retries.no_free_slot > 0);
    for k in &stored {
        assert_eq!(c.get(k).unwrap().as_deref(), Some(&b"v"[..]));
    }
}

/// A GET that meets a live writer's first insert of its key answers from
/// the other candidates (here: absent) at once, instead of backing off until
/// the writer commits or is declared dead (review §0, 152 ms > `op_timeout`).
#[test]
fn get_reads_past_a_first_insert_in_progress() {
    let script = Script::new(tiny_config(4, 2), 2);
    let key = script.key_first("n-", 0);
    let (k0, k1) = (key.clone(), key.clone());
    let writer = script.spawn(0, move |c| c.put(&k0, b"new"));
    let reader = script.spawn(1, move |c| (c.get(&k1), c.get(&k1)));
    script
        .sched
        .run_until(0, state_cas())
        .expect("the writer stops before its commit");
    assert!(
        script.sched.run_until(1, backoff()).is_none(),
        "the reader never backs off"
    );
    script.sched.run_to_end(0);
    writer.join().unwrap().unwrap().unwrap();
    let (before, after) = reader.join().unwrap().unwrap();
    assert_eq!(before.unwrap(), None);
    assert_eq!(after.unwrap(), None, "both reads ran before the commit");
    let mut c = script.direct_client();
    assert_eq!(c.get(&key).unwrap().as_deref(), Some(&b"new"[..]));
}
