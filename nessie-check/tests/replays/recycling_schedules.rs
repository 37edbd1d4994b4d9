//! The schedules that lost or wedged acknowledged data once DTE slots are
//! recycled (review `2026-11-protocol-review.md` F2–F5; the model's traces in
//! `REPORT-recycling.md`, and T1 beyond the landing bound), replayed step by
//! step on two nodes. Each test drives the clients into the racy state,
//! asserts it was reached, then makes every slot that may be reused really
//! be reused ([`Script::reuse_slots`]) — which the original audit never did
//! — and asserts that every acknowledged value is still readable and
//! writable.

use nessie::layout::dte::DteStatus;
use nessie::layout::{Ite, IteKind};
use nessie::Error;
use nessie_check::scripted::{
    any_write, cas_at, cas_at_if, layout_a, nth, read_at, state_cas, tiny_config, Script,
};
use nessie_check::sim::Injected;

/// Runs c0 (a PUT of k2 in layout A) to the point where it passed the
/// deadline check of its MIGRATE's source CAS and stalls there, past its
/// death. Returns the copy's ITE value (in s1).
fn zombie_migrator_at_source_cas(script: &Script) -> Ite {
    script.sched.run_until(0, cas_at(script.slot(1))).unwrap();
    script
        .sched
        .run_until(0, cas_at(script.slot(0)))
        .expect("c0 stops right before its source CAS");
    let copy = script.ite(1);
    let (_, h, _) = script.target(copy);
    assert!(h.state.is_migrated() && h.state.status() == DteStatus::Invalid);
    script.let_owners_die();
    copy
}

/// F2: a migrator crashes between its commit and its marker clear; a second
/// MIGRATE moves the committed copy on and stages it although `MOVED(copy)`
/// is still in its first source. Before the copy's slot is reused, the
/// recycler must clear that marker (and stage k1's first entry).
#[test]
fn f2_marker_of_a_remigrated_copy_is_cleared_before_reuse() {
    let script = Script::new(tiny_config(4, 3), 2);
    let k1 = script.key_with("k1-", &[0, 1, 2]);
    let kx = script.key_with("kx-", &[0, 3]);
    let ky = script.key_with("ky-", &[1, 3]);
    let f3 = script.key_first("f3-", 3);
    let mut c = script.direct_client();
    c.put(&k1, b"v1").unwrap();
    c.put(&f3, b"v9").unwrap();
    let d1 = script.ite(0);
    let (kxa, kya) = (kx.clone(), ky.clone());
    let c0 = script.spawn(0, move |c| c.put(&kxa, b"x"));
    let c1 = script.spawn(1, move |c| c.put(&kya, b"y"));
    // 1. c0 moves k1 from s0 to s1, commits, and crashes before clearing
    //    MOVED(C1) in s0.
    script
        .sched
        .run_until(0, cas_at_if(script.slot(0), Ite::is_moved))
        .expect("c0 stops before its marker clear");
    script.sched.crash(0);
    let c1_ite = script.ite(1);
    let (c1_at, h, _) = script.target(c1_ite);
    assert_eq!(h.state.status(), DteStatus::Valid);
    assert_eq!(script.ite(0), Ite::moved(c1_at));
    // 2. c1 moves the committed copy on from s1 to s2 and stages it.
    script.sched.run_to_end(1);
    c1.join().unwrap().unwrap().unwrap();
    assert!(c0.join().unwrap().is_none());
    let (_, h, _) = script.target(script.ite(2));
    assert!(
        h.state.is_migrated() && h.prev == c1_ite.0,
        "C2 in s2 copies C1"
    );
    assert_ne!(script.entry(c1_at).0.expires_at, 0, "C1 is staged");
    assert_eq!(
        script.ite(0),
        Ite::moved(c1_at),
        "the racy state of F2: a staged copy whose first source still holds its marker"
    );
    // 3. Every reusable slot is reused: the recycler clears the marker first.
    script.let_slots_expire();
    script.reuse_slots();
    assert!(script.ite(0).is_empty(), "the marker was cleared");
    let data = script.cluster.node_data(1).unwrap();
    assert_eq!(data.recycle_counts().markers_cleared, 1);
    let (_, old, _) = script.target(d1);
    assert_ne!(old.expires_at, 0, "k1's first entry was staged, not leaked");
    // 4. Nothing is wedged.
    assert_eq!(c.get(&k1).unwrap().as_deref(), Some(&b"v1"[..]));
    assert_eq!(c.get(&kx).unwrap(), None);
    c.put(&kx, b"x2").unwrap();
    assert_eq!(c.get(&kx).unwrap().as_deref(), Some(&b"x2"[..]));
    assert_eq!(c.get(&ky).unwrap().as_deref(), Some(&b"y"[..]));
}

/// F3, which is also Z1 in its other order: the helper rolls a zombie's
/// copy back and stages it *before* the zombie's late source CAS installs
/// `MOVED(copy)`. Before the copy's slot is reused, the recycler must put
/// the marker back to the copy's `prev`, or k1's acknowledged value is lost.
#[test]
fn f3_late_marker_of_a_staged_copy_is_restored_before_reuse() {
    let script = Script::new(tiny_config(3, 2), 2);
    let (k1, k2) = layout_a(&script);
    let d1 = script.ite(0);
    let k1a = k1.clone();
    let c0 = script.spawn(0, move |c| c.put(&k2, b"v4"));
    let c1 = script.spawn(1, move |c| c.get(&k1a));
    let copy_ite = zombie_migrator_at_source_cas(&script);
    let copy = copy_ite.target().unwrap();
    // The helper rolls the copy back, restores s1 and stages the copy.
    script.sched.run_to_end(1);
    assert_eq!(
        c1.join().unwrap().unwrap().unwrap().as_deref(),
        Some(&b"v1"[..])
    );
    let (h, _) = script.entry(copy);
    assert_eq!(h.state.status(), DteStatus::Aborted);
    assert_ne!(h.expires_at, 0, "the restorer staged the copy");
    // The zombie's late CAS lands.
    script.sched.run_to_end(0);
    assert!(matches!(c0.join().unwrap().unwrap(), Err(Error::Timeout)));
    assert_eq!(
        script.ite(0),
        Ite::moved(copy),
        "the racy state of F3: a staged copy whose source holds its marker"
    );
    // Nobody touches s0 until the copy's slot is reused.
    script.let_slots_expire();
    script.reuse_slots();
    assert_eq!(script.ite(0), d1, "the recycler restored the marker to D1");
    let data = script.cluster.node_data(1).unwrap();
    assert_eq!(data.recycle_counts().markers_restored, 1);
    let mut c = script.direct_client();
    assert_eq!(c.get(&k1).unwrap().as_deref(), Some(&b"v1"[..]));
    c.put(&k1, b"v9").unwrap();
    assert_eq!(c.get(&k1).unwrap().as_deref(), Some(&b"v9"[..]));
}

/// F4: in the F3 state, the reader that restores the marker (Z1) used to
/// stage the copy a second time; a stage WRITE that lands after the slot's
/// reuse stamps its live new occupant. The Z1 restorer must stage nothing.
#[test]
fn f4_marker_restorer_stages_nothing() {
    let script = Script::new(tiny_config(3, 2), 3);
    let (k1, k2) = layout_a(&script);
    let d1 = script.ite(0);
    let (k1a, k1b) = (k1.clone(), k1.clone());
    let c0 = script.spawn(0, move |c| c.put(&k2, b"v4"));
    let c1 = script.spawn(1, move |c| c.get(&k1a));
    let c2 = script.spawn(2, move |c| c.get(&k1b));
    let copy = zombie_migrator_at_source_cas(&script).target().unwrap();
    script.sched.run_to_end(1);
    script.sched.run_to_end(0);
    assert_eq!(script.ite(0), Ite::moved(copy));
    let staged_at = script.entry(copy).0.expires_at;
    assert_ne!(staged_at, 0);
    // c2 meets the marker with the copy ABORTED and restores D1 (Z1): it
    // must not WRITE anything (a GET writes only when it stages).
    script
        .sched
        .run_until(2, cas_at_if(script.slot(0), Ite::is_moved))
        .expect("c2 is about to restore the marker");
    assert!(
        script.sched.run_until(2, any_write()).is_none(),
        "the Z1 restorer staged the copy a second time"
    );
    assert_eq!(
        c2.join().unwrap().unwrap().unwrap().as_deref(),
        Some(&b"v1"[..])
    );
    assert_eq!(script.ite(0), d1);
    assert_eq!(script.entry(copy).0.expires_at, staged_at);
    assert!(matches!(c0.join().unwrap().unwrap(), Err(Error::Timeout)));
    assert!(c1.join().unwrap().is_some());
    // The copy's slot is reused by another key's entry, which must stay.
    script.let_slots_expire();
    script.reuse_slots();
    let mut on_node_1 = script.cluster.client(1).unwrap();
    let z = script.key_first("z-", 3);
    on_node_1.put(&z, b"z3").unwrap();
    script.let_slots_expire();
    script.reuse_slots();
    assert_eq!(on_node_1.get(&z).unwrap().as_deref(), Some(&b"z3"[..]));
    assert_eq!(on_node_1.get(&k1).unwrap().as_deref(), Some(&b"v1"[..]));
}

/// F5: a helper of a dead copy found through a marker must restore only
/// from the ITE value it read pointing at the copy — not from a value it
/// re-reads later, which by then belongs to another key's committed PUT.
#[test]
fn f5_helper_never_restores_over_another_keys_entry() {
    let script = Script::new(tiny_config(3, 2), 3);
    let (k1, k2) = layout_a(&script);
    let k4 = script.key_with("k4-", &[1, 2]);
    let d1 = script.ite(0);
    let (k1a, k2a, k4a) = (k1.clone(), k2.clone(), k4.clone());
    let c0 = script.spawn(0, move |c| (c.put(&k2a, b"v4"), c.put(&k4a, b"v6")));
    let c1 = script.spawn(1, move |c| c.get(&k1a));
    let c2 = script.spawn(2, move |c| c.get(&k2));
    // 1. c0 is a zombie at its source CAS.
    let copy_ite = zombie_migrator_at_source_cas(&script);
    let copy = copy_ite.target().unwrap();
    // 2. c1 finds the copy dead with D1 in the source: about to abort it.
    script.sched.run_until(1, state_cas()).unwrap();
    // 3. c0's late marker lands; its PUT(k2) times out, and it stops at
    //    the first READ of its PUT(k4).
    script.sched.run_until(0, read_at(script.slot(1))).unwrap();
    assert_eq!(script.ite(0), Ite::moved(copy));
    // 4. c2 GET(k2) meets the marker, the copy dead: looking for the
    //    copy's holder among k1's candidates (s1, s0), it has read s1 and
    //    stops before reading s0.
    script
        .sched
        .run_until(2, nth(2, read_at(script.slot(0))))
        .expect("c2 stops inside its search for the copy's holder");
    assert_eq!(script.ite(1), copy_ite, "c2 saw the copy in s1");
    // 5. c1 aborts the copy, restores s1, and restores the marker (Z1).
    script.sched.run_to_end(1);
    assert_eq!(
        c1.join().unwrap().unwrap().unwrap().as_deref(),
        Some(&b"v1"[..])
    );
    assert!(script.ite(1).is_empty() && script.ite(0) == d1);
    // 6. c0 PUTs k4 into s1: acknowledged.
    script.sched.run_to_end(0);
    let (put_k2, put_k4) = c0.join().unwrap().unwrap();
    assert!(matches!(put_k2, Err(Error::Timeout)));
    put_k4.unwrap();
    let IteKind::Occupied { .. } = script.ite(1).kind() else {
        panic!("k4 sits in s1")
    };
    assert_eq!(script.target(script.ite(1)).2, k4);
    // 7. c2 resumes: its restore must not touch s1 any more.
    script.sched.run_to_end(2);
    assert_eq!(c2.join().unwrap().unwrap().unwrap(), None);
    assert_eq!(
        script.target(script.ite(1)).2,
        k4,
        "k4's entry is still linked"
    );
    let mut c = script.direct_client();
    assert_eq!(c.get(&k4).unwrap().as_deref(), Some(&b"v6"[..]));
    assert_eq!(c.get(&k1).unwrap().as_deref(), Some(&b"v1"[..]));
}

/// A helper that met a dead copy through its marker must restore the
/// copy's destination itself when the copy's aborter dies before doing so:
/// `find_holder` must name the candidate whose ITE points at the copy (not
/// another key's entry met first, nor the marker), and the restore must put
/// back the destination's exact earlier value (the copy's `replaced`).
/// Here k1's candidates are (s2, s1, s0): k3's entry in s2 comes first.
#[test]
fn helper_through_a_marker_restores_the_destination_its_aborter_left() {
    let script = Script::new(tiny_config(4, 3), 4);
    let k1 = script.key_with("k1-", &[2, 1, 0]);
    let k2 = script.key_with("k2-", &[0, 2, 3]);
    let k3 = script.key_first("k3-", 2);
    let k5 = script.key_first("k5-", 3);
    let parker = script.key_first("t-", 1);
    let _c = script.put_around_parked(&parker, &[(&k3, b"v3"), (&k5, b"v5"), (&k1, b"v1")]);
    let s1_before = script.ite(1);
    assert!(
        s1_before.is_empty() && s1_before.0 != 0,
        "s1 holds a cleared value"
    );
    assert_eq!(script.target(script.ite(0)).2, k1, "k1 sits in s0");
    let d1 = script.ite(0);
    let (k1a, k2a, k2b, k2c) = (k1.clone(), k2.clone(), k2.clone(), k2.clone());
    let c0 = script.spawn(0, move |c| c.put(&k2c, b"v4"));
    let c1 = script.spawn(1, move |c| c.get(&k1a));
    let c2 = script.spawn(2, move |c| c.get(&k2a));
    let c3 = script.spawn(3, move |c| c.get(&k2b));
    // 1. c0 moves k1 from s0 to s1 and is a zombie at its source CAS.
    let copy_ite = zombie_migrator_at_source_cas(&script);
    let copy = copy_ite.target().unwrap();
    // 2. c1 (GET k1) finds the copy dead with D1 in the source: about to
    //    abort it.
    script.sched.run_until(1, state_cas()).unwrap();
    // 3. c0's late marker lands; its commit is refused, its PUT times out.
    script.sched.run_to_end(0);
    assert!(matches!(c0.join().unwrap().unwrap(), Err(Error::Timeout)));
    assert_eq!(script.ite(0), Ite::moved(copy));
    assert_eq!(script.entry(copy).0.state.status(), DteStatus::Invalid);
    // 4. c2 (GET k2) meets the marker with the copy dead, finds the copy's
    //    holder among (s2, s1, s0), and stops before re-reading the source.
    script
        .sched
        .run_until(2, nth(3, read_at(script.slot(0))))
        .expect("c2 stops before it re-reads the source");
    // 5. c1 aborts the copy and crashes before restoring s1.
    script
        .sched
        .run_until(1, cas_at(script.slot(1)))
        .expect("c1 is about to restore s1");
    script.sched.crash(1);
    assert!(c1.join().unwrap().is_none());
    assert_eq!(script.entry(copy).0.state.status(), DteStatus::Aborted);
    assert_eq!(script.ite(1), copy_ite);
    // 6. c3 (GET k2) restores the marker to D1 (Z1) and leaves s1 alone.
    script.sched.run_to_end(3);
    assert_eq!(c3.join().unwrap().unwrap().unwrap(), None);
    assert_eq!(script.ite(0), d1);
    assert_eq!(script.ite(1), copy_ite);
    // 7. c2 resumes: the marker is gone, the copy aborted; it restores s1
    //    from the value it found pointing at the copy, and stages the copy.
    script.sched.run_to_end(2);
    assert_eq!(c2.join().unwrap().unwrap().unwrap(), None);
    assert_eq!(
        script.ite(1),
        s1_before,
        "s1 holds exactly its value before the copy"
    );
    assert_ne!(script.entry(copy).0.expires_at, 0, "c2 staged the copy");
    script.let_slots_expire();
    script.reuse_slots();
    let mut c = script.direct_client();
    assert_eq!(c.get(&k1).unwrap().as_deref(), Some(&b"v1"[..]));
    assert_eq!(c.get(&k3).unwrap().as_deref(), Some(&b"v3"[..]));
    assert_eq!(c.get(&k5).unwrap().as_deref(), Some(&b"v5"[..]));
    assert_eq!(c.get(&k2).unwrap(), None);
}

/// T1 of REPORT-recycling.md, beyond the landing bound: the zombie's source
/// CAS is delayed until after its rolled-back copy's slot was reused. On a
/// fabric that enforces land-by times (`tcp`), the target refuses the late
/// CAS and nothing is lost; the breach is counted either way.
#[test]
fn t1_cas_later_than_the_landing_bound_is_refused_by_its_target() {
    let script = Script::with_land_by(tiny_config(3, 2), 2);
    let (k1, k2) = layout_a(&script);
    let d1 = script.ite(0);
    let k1a = k1.clone();
    let c0 = script.spawn(0, move |c| (c.put(&k2, b"v4"), c.stats()));
    let c1 = script.spawn(1, move |c| c.get(&k1a));
    zombie_migrator_at_source_cas(&script);
    script.sched.run_to_end(1);
    assert!(c1.join().unwrap().is_some());
    // The copy expires and its slot is reused while c0 still stalls.
    script.let_slots_expire();
    script.reuse_slots();
    script.sched.run_to_end(0);
    let (put, stats) = c0.join().unwrap().unwrap();
    assert!(matches!(put, Err(Error::Timeout)), "{put:?}");
    assert_eq!(stats.put.late_cas, 1, "the breach was counted");
    assert_eq!(script.ite(0), d1, "the late CAS was refused");
    let mut c = script.direct_client();
    assert_eq!(c.get(&k1).unwrap().as_deref(), Some(&b"v1"[..]));
}

/// The same schedule where nothing enforces the bound (`shm`, `local`): the
/// late CAS links a recycled slot and k1 is lost, as the model predicts
/// (`fixed-beyond`). This is why a breach is logged as an error, and why
/// `Config::validate` keeps `expiry` above `op_timeout + landing bound +
/// max_clock_skew`.
#[test]
fn t1_beyond_the_landing_bound_loses_a_key_where_nothing_enforces_it() {
    let script = Script::new(tiny_config(3, 2), 2);
    let (k1, k2) = layout_a(&script);
    let k1a = k1.clone();
    let c0 = script.spawn(0, move |c| (c.put(&k2, b"v4"), c.stats()));
    let c1 = script.spawn(1, move |c| c.get(&k1a));
    let copy = zombie_migrator_at_source_cas(&script).target().unwrap();
    script.sched.run_to_end(1);
    assert!(c1.join().unwrap().is_some());
    script.let_slots_expire();
    script.reuse_slots();
    script.sched.run_to_end(0);
    let (_, stats) = c0.join().unwrap().unwrap();
    assert_eq!(stats.put.late_cas, 1, "the breach was counted");
    assert_eq!(script.ite(0), Ite::moved(copy), "a marker to a reused slot");
    let mut c = script.direct_client();
    assert!(
        matches!(c.get(&k1), Err(Error::Timeout | Error::Corrupt { .. })),
        "k1 is wedged"
    );
}

/// A scan that dies while it resolves a copy's marker (its thread unwinds
/// between taking the slot out of the in-use list and settling it) puts
/// the slot back, so a later scan still resolves the marker first.
#[test]
fn a_scan_cut_short_returns_its_pending_slots() {
    let script = Script::new(tiny_config(3, 2), 3);
    let (k1, k2) = layout_a(&script);
    let d1 = script.ite(0);
    let k1a = k1.clone();
    let c0 = script.spawn(0, move |c| c.put(&k2, b"v4"));
    let c1 = script.spawn(1, move |c| c.get(&k1a));
    let copy = zombie_migrator_at_source_cas(&script).target().unwrap();
    script.sched.run_to_end(1);
    script.sched.run_to_end(0);
    assert!(c1.join().unwrap().is_some() && c0.join().unwrap().is_some());
    assert_eq!(script.ite(0), Ite::moved(copy), "the F3 state");
    script.let_slots_expire();
    // A scan of the copy's node, stopped as it reads the copy's source.
    let scan = script.spawn_task(2, move |cluster| {
        let data = cluster.node_data(1).unwrap();
        data.recycle(copy.class, cluster.table_access(1))
    });
    script
        .sched
        .run_until(2, read_at(script.slot(0)))
        .expect("the scan reads the copy's source");
    script.sched.crash(2);
    assert!(scan.join().unwrap().is_none());
    let data = script.cluster.node_data(1).unwrap();
    assert!(
        data.in_use_slots(copy.class)
            .iter()
            .any(|r| r.slot == copy.slot),
        "the copy's slot is back in use"
    );
    assert_eq!(script.ite(0), Ite::moved(copy));
    // A later scan resolves the copy (a pending slot) and counts what it
    // freed, the copy's slot included.
    let before = data.recycle_counts();
    let freed = data
        .recycle(copy.class, script.cluster.table_access(1))
        .unwrap() as u64;
    let after = data.recycle_counts();
    assert!(
        !data
            .in_use_slots(copy.class)
            .iter()
            .any(|r| r.slot == copy.slot),
        "the copy's slot was freed"
    );
    assert_eq!(
        freed,
        after.reclaimed - before.reclaimed + after.in_doubt_freed - before.in_doubt_freed
    );
    script.reuse_slots();
    assert_eq!(script.ite(0), d1, "a later scan resolved the marker");
    assert_eq!(data.recycle_counts().markers_restored, 1);
    let mut c = script.direct_client();
    assert_eq!(c.get(&k1).unwrap().as_deref(), Some(&b"v1"[..]));
}

/// The publishing CAS of a PUT fails with a transport error after it
/// executed: the entry is linked although its owner got an error. Its slot
/// must not be freed while linked; a helper undoes the entry, which then
/// recycles normally.
#[test]
fn an_in_doubt_slot_whose_cas_landed_stays_until_it_is_unlinked() {
    let script = Script::new(tiny_config(4, 2), 1);
    let key = script.key_first("d-", 0);
    let k = key.clone();
    let c0 = script.spawn(0, move |c| c.put(&k, b"v"));
    script.sched.run_until(0, cas_at(script.slot(0))).unwrap();
    script.sched.fail_next_verb(0, Injected::After);
    script.sched.run_to_end(0);
    assert!(matches!(c0.join().unwrap().unwrap(), Err(Error::Fabric(_))));
    let linked = script.ite(0);
    let (entry, h, _) = script.target(linked);
    assert_eq!(h.state.status(), DteStatus::Invalid, "linked, uncommitted");
    let data = script.cluster.node_data(1).unwrap();
    script.let_slots_expire();
    script.reuse_slots();
    assert!(
        data.in_use_slots(entry.class).contains(&entry),
        "a linked slot is not reused"
    );
    assert_eq!(data.recycle_counts().in_doubt_freed, 0);
    assert_eq!(script.ite(0), linked);
    let mut c = script.direct_client();
    assert_eq!(c.get(&key).unwrap(), None, "the dead PUT is undone");
    assert!(script.ite(0).is_empty());
    script.let_slots_expire();
    script.reuse_slots();
    assert!(!data.in_use_slots(entry.class).contains(&entry));
    c.put(&key, b"w").unwrap();
    assert_eq!(c.get(&key).unwrap().as_deref(), Some(&b"w"[..]));
}

/// The publishing CAS fails with a transport error before it executed: the
/// slot is kept while the CAS might still land, then freed. A second
/// in-doubt slot settled meanwhile must not make the scan forget the first.
#[test]
fn an_in_doubt_slot_whose_cas_never_landed_is_freed_after_expiry() {
    let script = Script::new(tiny_config(4, 2), 2);
    let (ka, kb) = (script.key_first("a-", 0), script.key_first("b-", 1));
    let data = script.cluster.node_data(1).unwrap();
    // c0's CAS lands (After) and c1's does not (Before), half an expiry
    // apart.
    let c0 = script.spawn(0, move |c| c.put(&ka, b"v"));
    script.sched.run_until(0, cas_at(script.slot(0))).unwrap();
    script.sched.fail_next_verb(0, Injected::After);
    script.sched.run_to_end(0);
    assert!(c0.join().unwrap().unwrap().is_err());
    let half = script.config().expiry / 2;
    script.sched.advance(half.as_micros() as u64);
    let c1 = script.spawn(1, move |c| c.put(&kb, b"v"));
    script.sched.run_until(1, cas_at(script.slot(1))).unwrap();
    script.sched.fail_next_verb(1, Injected::Before);
    script.sched.run_to_end(1);
    assert!(c1.join().unwrap().unwrap().is_err());
    assert!(script.ite(1).is_empty(), "c1's CAS never executed");
    assert_eq!(data.in_use(0), 2, "both slots kept while in doubt");
    // c0's slot is due first: settled as published (it is linked).
    let skew = script.config().max_clock_skew.as_micros() as u64;
    script.sched.advance(half.as_micros() as u64 + 2 * skew);
    script.reuse_slots();
    assert_eq!(data.recycle_counts().in_doubt_freed, 0);
    assert_eq!(data.in_use(0), 2, "c1's slot is not due yet");
    // Then c1's: its CAS can no longer land, and never did: freed.
    script.let_slots_expire();
    script.reuse_slots();
    assert_eq!(data.recycle_counts().in_doubt_freed, 1);
    assert_eq!(data.in_use(0), 1, "only c0's linked entry holds a slot");
}

/// Staging is one WRITE after the operation took effect: when it fails, the
/// operation still succeeds, the replaced entry's slot leaks (never reused
/// while it may be read), and the failure is counted.
#[test]
fn a_failed_stage_write_is_counted_and_the_put_stands() {
    let script = Script::new(tiny_config(2, 1), 1);
    let k = script.key_first("k-", 0);
    script.direct_client().put(&k, b"v1").unwrap();
    let (old, _, _) = script.target(script.ite(0));
    let ka = k.clone();
    let put = script.spawn(0, move |c| {
        (c.put(&ka, b"v2"), c.stats().put.stage_failures)
    });
    script
        .sched
        .run_until(0, state_cas())
        .expect("the PUT stops at its commit");
    script
        .sched
        .run_until(0, any_write())
        .expect("the PUT stages the entry it replaced");
    script.sched.fail_next_verb(0, Injected::Before);
    script.sched.run_to_end(0);
    let (done, stage_failures) = put.join().unwrap().unwrap();
    done.unwrap();
    assert_eq!(stage_failures, 1);
    assert_eq!(script.entry(old).0.expires_at, 0, "never staged");
    script.let_slots_expire();
    script.reuse_slots();
    let data = script.cluster.node_data(usize::from(old.node)).unwrap();
    assert!(
        data.in_use_slots(old.class).contains(&old),
        "the slot leaked"
    );
    let mut c = script.direct_client();
    assert_eq!(c.get(&k).unwrap().as_deref(), Some(&b"v2"[..]));
}

/// A client's own replaced entries come back from the queue of local
/// stagings once expired, with no scan: a PUT touches memory that is
/// already in use rather than a fresh slot (whose first write costs page
/// faults), and the entry it replaces is the one reused. What each
/// reused slot held stays readable through its successor.
#[test]
fn own_staged_slots_are_reused_from_the_queue_without_a_scan() {
    let script = Script::new(tiny_config(4, 2), 1);
    let key = script.key_first("q-", 0);
    let mut c = script.direct_client();
    let data = script.cluster.node_data(0).unwrap();
    c.put(&key, b"v0").unwrap();
    let first = script.target(script.ite(0)).0;
    c.put(&key, b"v1").unwrap();
    let second = script.target(script.ite(0)).0;
    assert_ne!(first.slot, second.slot);
    // Not expired yet: the next PUT takes another slot.
    c.put(&key, b"v2").unwrap();
    let third = script.target(script.ite(0)).0;
    assert!(third.slot != first.slot && third.slot != second.slot);
    assert_eq!(data.recycle_counts().reclaimed_from_queue, 0);
    script.let_slots_expire();
    // Expired: the oldest staging (the first entry's slot) is reused, at
    // the next generation, without a scan.
    c.put(&key, b"v3").unwrap();
    let fourth = script.target(script.ite(0)).0;
    assert_eq!(fourth.slot, first.slot);
    assert_ne!(fourth.generation, first.generation);
    let counts = data.recycle_counts();
    assert_eq!((counts.reclaimed_from_queue, counts.scans), (1, 0));
    c.put(&key, b"v4").unwrap();
    assert_eq!(script.target(script.ite(0)).0.slot, second.slot);
    assert_eq!(c.get(&key).unwrap().as_deref(), Some(&b"v4"[..]));
    assert_eq!(data.recycle_counts().reclaimed_from_queue, 2);
}

/// Runs `puts` PUTs over `keys` keys from one client, one every `step_us`
/// of simulated time, on node tables of `data_bytes`; returns the errors
/// and the figures of the client's last `DataTableFull`.
fn write_heavy(
    config: nessie::Config,
    keys: usize,
    puts: usize,
    step_us: u64,
) -> (Vec<Error>, Option<nessie::data::DataTableFigures>) {
    let script = Script::new(config, 1);
    let names: Vec<Vec<u8>> = (0..keys).map(|k| format!("w{k}").into_bytes()).collect();
    let mut c = script.direct_client();
    let mut errors = Vec::new();
    for i in 0..puts {
        if let Err(e) = c.put(&names[i % keys], &[i as u8; 100]) {
            errors.push(e);
        }
        script.sched.advance(step_us);
    }
    (errors, c.last_data_table_full().cloned())
}

/// The sizing rule of `Config::data_bytes_per_node`: tables sized by it
/// for a write-heavy load (every PUT replaces a live key, 1000 PUTs per
/// simulated second against a 20.5 ms reuse window) never fail a PUT;
/// tables of half that size fail with `DataTableFull`, never `Timeout`.
#[test]
fn tables_sized_by_the_rule_take_a_write_heavy_load_and_half_of_it_fails_as_full() {
    let (keys, puts, step_us) = (8, 400, 1000);
    let rate = 1e6 / step_us as f64;
    let mut config = tiny_config(64, 3);
    config.nodes = 1;
    config.tombstone_reserve = 2;
    let reserve = config.tombstone_reserve;
    config.data_bytes_per_node = config.data_bytes_for(100, keys, rate).unwrap();
    let slots = config.class_slots(0) - reserve;
    assert!(slots >= keys + 21, "the rule gives {slots} slots");
    let (errors, figures) = write_heavy(config.clone(), keys, puts, step_us);
    assert!(errors.is_empty(), "sized by the rule: {errors:?}");
    assert_eq!(figures, None);
    config.data_bytes_per_node /= 2;
    let half = config.class_slots(0) - reserve;
    let (errors, figures) = write_heavy(config.clone(), keys, puts, step_us);
    assert!(!errors.is_empty(), "half the rule must run out");
    assert!(
        errors.iter().all(|e| matches!(e, Error::DataTableFull)),
        "{errors:?}"
    );
    // The figures say which table, how large it is, and that it is full
    // of entries waiting out the reuse window (only the tombstone reserve
    // is free).
    let f = figures.expect("the figures of the full table");
    assert_eq!(
        (f.node, f.class, f.slots, f.free, f.reserve),
        (0, 0, half + reserve, reserve, reserve),
        "{f:?}"
    );
    assert_eq!((f.in_use, f.peak_in_use), (half, half));
    assert_eq!(f.slot_bytes, config.class_slot_bytes(0));
    assert_eq!(f.reuse_after, config.expiry + config.max_clock_skew);
    assert!(f.queued > 0 && f.queued <= half, "{f:?}");
    assert!(
        f.sustained_puts_per_sec(keys) < rate,
        "the table sustains less than the load: {f:?}"
    );
    let message = f.to_string();
    for needle in [
        format!("{} slots", half + reserve),
        format!("{reserve} free ({reserve} of them kept for DELETEs' tombstones)"),
        "data_bytes_for".to_owned(),
    ] {
        assert!(message.contains(&needle), "{needle:?} not in {message:?}");
    }
}

/// Slots staged by another node's client are found by scans, a slice at a
/// time: an allocation that finds no free slot scans until one slice has
/// freed something (here exactly one slice: 32 expired slots), not the
/// whole table; a full recycle then frees the rest and says how many.
#[test]
fn an_allocation_scans_one_slice_and_a_recycle_the_whole_table() {
    let mut config = tiny_config(512, 3);
    config.data_bytes_per_node = 64 * nessie::layout::dte::entry_bytes(48, 256);
    let script = Script::new(config, 1);
    let data = script.cluster.node_data(0).unwrap();
    assert_eq!(data.capacity(0) - data.reserve(0), 64, "slots for entries");
    let keys: Vec<Vec<u8>> = (0..64).map(|k| format!("s{k}").into_bytes()).collect();
    let mut writer = script.direct_client();
    for k in &keys {
        writer.put(k, b"first").unwrap();
    }
    assert_eq!(
        data.available(0),
        data.reserve(0),
        "every slot of node 0 but the tombstone reserve holds an entry"
    );
    // Node 1's client replaces every entry: node 0's 64 slots are staged
    // by another node, so they are not in node 0's queue.
    let mut other = script.cluster.client(1).unwrap();
    for k in &keys {
        other.put(k, b"second").unwrap();
    }
    script.let_slots_expire();
    let access = script.cluster.table_access(0);
    let taken = data.allocate(0, access).unwrap().expect("a reclaimed slot");
    let counts = data.recycle_counts();
    let slice = nessie::data::SCAN_SLICE as u64;
    assert_eq!((counts.scans, counts.reclaimed), (1, slice), "{counts:?}");
    assert!(counts.scan_ns > 0, "the scan's time is counted");
    assert_eq!(
        data.recycle(0, access).unwrap() as u64,
        64 - slice,
        "the rest of the table"
    );
    assert_eq!(data.recycle(0, access).unwrap(), 0);
    assert_eq!(data.in_use(0), 1);
    data.release_unpublished(taken);
    // Once nothing is free, a PUT's own scan is counted in its stats: half
    // of node 0's slots hold entries node 1 replaced, the other half are
    // taken.
    for k in &keys[..32] {
        writer.put(k, b"third").unwrap();
    }
    // (Node 1's replaced entries must expire before it can write again.)
    script.let_slots_expire();
    for k in &keys[..32] {
        other.put(k, b"fourth").unwrap();
    }
    let fill = script.take_entry_slots(0, 0);
    assert_eq!(fill.len(), 32);
    script.let_slots_expire();
    let before = writer.stats().put.scan_ns;
    writer.put(&keys[0], b"fifth").unwrap();
    assert!(
        writer.stats().put.scan_ns > before,
        "the PUT's scan is counted"
    );
    for r in fill {
        data.release_unpublished(r);
    }
    assert_eq!(
        writer.get(&keys[0]).unwrap().as_deref(),
        Some(&b"fifth"[..])
    );
    for (i, k) in keys.iter().enumerate().skip(1) {
        let want: &[u8] = if i < 32 { b"fourth" } else { b"second" };
        assert_eq!(writer.get(k).unwrap().as_deref(), Some(want), "key {i}");
    }
}
