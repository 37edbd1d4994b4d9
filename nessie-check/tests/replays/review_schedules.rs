//! The remaining schedules of the protocol review (`2026-11-protocol-
//! review.md`): F1 (keys of different lengths), F6 (slot generations), F8
//! (a full data table), and the GET that waited for a dead writer's first
//! insert. F2–F5 are in `recycling_schedules.rs`.

use nessie::{Error, Optimizations};
use nessie_check::scripted::{backoff, cas_at, read_at, state_cas, tiny_config, Script};

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
    let seen = script.take_entry_slots(0, 0);
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

/// A GET that meets a live writer's first insert of its key answers from the
/// other candidates (here: absent) at once, instead of backing off until the
/// writer commits or is declared dead
/// (docs/design.md#absent_first_insert-get-reads-past-a-first-insert-in-progress).
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

/// Node 0 of a scripted cluster whose one size class holds `entries`
/// entries besides a tombstone reserve of `reserve` slots, and a direct
/// client on it.
fn full_table_script(entries: usize, reserve: usize) -> (Script, nessie::Client) {
    let mut config = tiny_config(64, 2);
    config.data_bytes_per_node = entries * nessie::layout::dte::entry_bytes(48, 256);
    config.tombstone_reserve = reserve;
    let script = Script::new(config, 0);
    let c = script.direct_client();
    (script, c)
}

/// PUTs fresh keys `prefix-0`, `prefix-1`, … until the table is full;
/// returns the keys stored (the one that failed, with `DataTableFull`,
/// changed nothing).
fn fill(c: &mut nessie::Client, prefix: &str) -> Vec<Vec<u8>> {
    let mut stored = Vec::new();
    for i in 0..64 {
        let k = format!("{prefix}-{i}").into_bytes();
        match c.put(&k, &k) {
            Ok(()) => stored.push(k),
            Err(Error::DataTableFull) => {
                assert_eq!(c.get(&k).unwrap(), None, "a failed PUT changed nothing");
                return stored;
            }
            Err(e) => panic!("PUT {i}: {e:?}"),
        }
    }
    panic!("the table never filled up");
}

/// N1: a full size class can be emptied. Every slot outside the tombstone
/// reserve holds a live entry; a DELETE of a live key still finds a slot
/// for its tombstone, and the space it frees comes back one reuse window
/// later. The reserve covers `reserve` DELETEs per window: one more waits
/// for the window and fails as `DataTableFull`, changing nothing
/// (docs/design.md#the-tombstone-reserve).
#[test]
fn n1_a_full_table_can_be_emptied_and_refilled() {
    let (script, mut c) = full_table_script(4, 2);
    let stored = fill(&mut c, "n1");
    assert_eq!(stored.len(), 4, "the reserve is not for entries");
    // Overwrites of a full class fail too (documented), changing nothing.
    assert!(matches!(
        c.put(&stored[0], b"new"),
        Err(Error::DataTableFull)
    ));
    assert!(c.delete(&stored[0]).unwrap());
    assert!(c.delete(&stored[1]).unwrap());
    // The reserve is used up until the window passes.
    assert!(matches!(c.delete(&stored[2]), Err(Error::DataTableFull)));
    assert_eq!(c.get(&stored[2]).unwrap().as_deref(), Some(&stored[2][..]));
    script.let_slots_expire();
    assert!(c.delete(&stored[2]).unwrap());
    assert!(c.delete(&stored[3]).unwrap());
    for k in &stored {
        assert_eq!(c.get(k).unwrap(), None);
    }
    script.let_slots_expire();
    let again = fill(&mut c, "n1-again");
    assert_eq!(again.len(), 4, "all the space came back");
    let data = script.cluster.node_data(0).unwrap();
    assert_eq!(
        data.available(0),
        data.reserve(0),
        "only the reserve is free"
    );
}

/// N1 with every size class full at once: each class is filled to
/// `DataTableFull`, every key is deleted (a reserve's worth per reuse
/// window), and every class refills to the same count.
#[test]
fn n1_every_class_full_deleted_and_refilled() {
    let mut config = tiny_config(256, 2);
    config.value_size_max = 1024;
    let classes = config.size_classes().len();
    assert_eq!(classes, 3);
    // Three entries of each class.
    config.data_bytes_per_node = 3 * classes * nessie::layout::dte::entry_bytes(48, 1024);
    config.tombstone_reserve = 3;
    let script = Script::new(config, 0);
    let mut c = script.direct_client();
    let sizes = [200usize, 400, 1000];
    let fill_all = |c: &mut nessie::Client, round: usize| -> Vec<Vec<Vec<u8>>> {
        sizes
            .iter()
            .map(|&size| {
                let value = vec![round as u8; size];
                let mut stored = Vec::new();
                for i in 0.. {
                    let k = format!("r{round}-{size}-{i}").into_bytes();
                    match c.put(&k, &value) {
                        Ok(()) => stored.push(k),
                        Err(Error::DataTableFull) => break,
                        Err(e) => panic!("{e:?}"),
                    }
                }
                stored
            })
            .collect()
    };
    let first = fill_all(&mut c, 1);
    let counts: Vec<usize> = first.iter().map(Vec::len).collect();
    assert!(counts.iter().all(|&n| n > 0), "{counts:?}");
    let all: Vec<&Vec<u8>> = first.iter().flatten().collect();
    for batch in all.chunks(3) {
        for k in batch {
            assert!(c.delete(k).unwrap(), "a DELETE at full occupancy");
        }
        script.let_slots_expire();
    }
    for k in all {
        assert_eq!(c.get(k).unwrap(), None);
    }
    let second = fill_all(&mut c, 2);
    let again: Vec<usize> = second.iter().map(Vec::len).collect();
    assert_eq!(again, counts, "every class refilled to the same count");
}

/// N1 as a steady state: at full occupancy, delete one key, let the window
/// pass, store another, many times over; every DELETE succeeds, the space
/// always comes back, and the class is full again after every round.
#[test]
fn n1_fill_and_delete_at_full_occupancy_loses_no_space() {
    let (script, mut c) = full_table_script(4, 1);
    let mut live = fill(&mut c, "loop");
    assert_eq!(live.len(), 4);
    for round in 0..40 {
        let gone = live.remove(round % live.len());
        assert!(c.delete(&gone).unwrap(), "round {round}");
        assert_eq!(c.get(&gone).unwrap(), None);
        script.let_slots_expire();
        let k = format!("loop-new-{round}").into_bytes();
        c.put(&k, b"v")
            .unwrap_or_else(|e| panic!("round {round}: {e:?}"));
        live.push(k);
        let extra = format!("loop-extra-{round}").into_bytes();
        assert!(
            matches!(c.put(&extra, b"v"), Err(Error::DataTableFull)),
            "round {round}: still full"
        );
    }
    for k in &live {
        // `fill` stores each key as its own value.
        let want: &[u8] = if k.starts_with(b"loop-new") { b"v" } else { k };
        assert_eq!(c.get(k).unwrap().as_deref(), Some(want));
    }
}

/// The index layout of the N2 and A4 schedules, written by node 0: `new`
/// has candidates (s0, s1); `a` sits in s0 and can move only to s2, where
/// `c` sits, which can move to the empty s4; likewise `b` in s1 → s3
/// (`d`) → s5. Freeing a candidate of `new` takes a MIGRATE two levels
/// deep. Returns `new` and the four placed keys.
fn two_level_layout(script: &Script) -> (Vec<u8>, [Vec<u8>; 4]) {
    let new = script.key_with("new-", &[0, 1]);
    let a = script.key_with("a-", &[0, 2]);
    let c = script.key_with("c-", &[2, 4]);
    let b = script.key_with("b-", &[1, 3]);
    let d = script.key_with("d-", &[3, 5]);
    let mut w = script.direct_client();
    for k in [&a, &c, &b, &d] {
        w.put(k, k).unwrap();
    }
    for (slot, k) in [(0, &a), (2, &c), (1, &b), (3, &d)] {
        assert_eq!(&script.target(script.ite(slot)).2, k);
    }
    assert!(script.ite(4).is_empty() && script.ite(5).is_empty());
    (new, [a, b, c, d])
}

/// N2: a PUT whose room can only come from a MIGRATE two levels deep,
/// while the data table has no slot for the copy, fails as
/// `DataTableFull` (the index had room), not `IndexFull`; once slots are
/// free again the same PUT succeeds through that MIGRATE.
#[test]
fn n2_a_deep_migrate_short_of_a_data_slot_is_not_a_full_index() {
    let script = Script::new(tiny_config(16, 2), 0);
    let (new, [a, b, c, d]) = two_level_layout(&script);
    // Every slot of node 0 for an entry is held.
    let data = script.cluster.node_data(0).unwrap();
    let held = script.take_entry_slots(0, 0);
    let mut w = script.direct_client();
    let e = w.put(&new, b"v").unwrap_err();
    assert!(matches!(e, Error::DataTableFull), "{e:?}");
    assert_eq!(w.get(&new).unwrap(), None);
    assert!(w.stats().put.retries.no_free_slot > 0);
    for r in held {
        data.release_unpublished(r);
    }
    w.put(&new, b"v").unwrap();
    assert!(w.stats().put.migrations >= 2, "{:?}", w.stats().put);
    for k in [&a, &b, &c, &d] {
        assert_eq!(w.get(k).unwrap().as_deref(), Some(&k[..]));
    }
    assert_eq!(w.get(&new).unwrap().as_deref(), Some(&b"v"[..]));
}

/// A4: the slot a nested MIGRATE freed is refilled by another writer
/// before the migrating PUT re-reads it. The PUT retries (it does not
/// report a full index: the refill can itself move), and lands.
#[test]
fn a4_a_slot_refilled_after_a_nested_migrate_is_retried() {
    let mut config = tiny_config(16, 2);
    // Two levels at most, and `d` cannot move (s5 is taken): only the
    // branch through `a` and `c` can make room.
    config.max_migrate_depth = 2;
    let script = Script::new(config, 2);
    let (new, _) = two_level_layout(&script);
    let e = script.key_with("e-", &[5, 7]);
    script.direct_client().put(&e, b"e").unwrap();
    assert_eq!(script.target(script.ite(5)).2, e);
    // A key of the rival that lands in s2 once `c` has moved out of it.
    let rival_key = script.key_with("r-", &[2, 6]);
    let slot2 = script.slot(2);
    let n = new.clone();
    let writer = script.spawn(0, move |c| c.put(&n, b"new"));
    // The writer's nested MIGRATE moves `c` to s4 and clears s2; stop it
    // before it re-reads s2.
    script
        .sched
        .run_until(0, cas_at(slot2))
        .expect("the writer clears s2");
    script
        .sched
        .run_until(0, read_at(slot2))
        .expect("the writer re-reads s2");
    let rk = rival_key.clone();
    let rival = script.spawn(1, move |c| c.put(&rk, b"rival"));
    script.sched.run_to_end(1);
    rival.join().unwrap().unwrap().unwrap();
    assert_eq!(script.target(script.ite(2)).2, rival_key, "s2 refilled");
    script.sched.run_to_end(0);
    let outcome = writer.join().unwrap().unwrap();
    assert!(outcome.is_ok(), "{outcome:?}");
    let mut c = script.direct_client();
    assert_eq!(c.get(&new).unwrap().as_deref(), Some(&b"new"[..]));
    assert_eq!(c.get(&rival_key).unwrap().as_deref(), Some(&b"rival"[..]));
}

/// A3: a write that once waited for a data slot, and then ran out of time
/// behind a live writer of its key, reports `Timeout`, not
/// `DataTableFull`: only a last attempt that waited for a slot makes the
/// table the cause.
#[test]
fn a3_a_deadline_missed_for_another_cause_is_a_timeout() {
    let script = Script::new(tiny_config(16, 2), 2);
    let key = script.key_first("k-", 0);
    // Node 1 has no slot for an entry: every one is held.
    let data = script.cluster.node_data(1).unwrap();
    let mut held = script.take_entry_slots(1, 0);
    let k1 = key.clone();
    let starved = script.spawn(1, move |c| c.put(&k1, b"starved"));
    script
        .sched
        .run_until(1, backoff())
        .expect("the write backs off for want of a slot");
    // A slot comes back, and a live writer of the key (on node 0) links
    // its entry and stalls before its commit.
    data.release_unpublished(held.pop().unwrap());
    let k0 = key.clone();
    let owner = script.spawn_on(0, 0, move |c| c.put(&k0, b"owner"));
    script
        .sched
        .run_until(0, state_cas())
        .expect("the owner stops before its commit");
    script.sched.run_to_end(1);
    let e = starved.join().unwrap().unwrap().unwrap_err();
    assert!(matches!(e, Error::Timeout), "{e:?}");
    script.sched.run_to_end(0);
    owner.join().unwrap().unwrap().unwrap();
}
