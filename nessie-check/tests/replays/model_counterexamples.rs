//! The counterexample traces of the protocol's bounded model checks
//! without recycling (`REPORT.md`: V1–V4 and the stale marker of a crashed
//! migrator; `REPORT-zombies.md`: Z1, Z1b and Z2/CV), replayed step by step
//! on the real implementation on two nodes (the clients run on node 1, the
//! preloaded entries live on node 0, so reads go through the cache). Each
//! test first drives the clients into the racy state its trace describes
//! and asserts that state was reached, then lets the run finish and asserts
//! the outcome the fixed protocol guarantees. The traces with recycling are
//! in `recycling_schedules.rs`.

use nessie::layout::dte::DteStatus;
use nessie::layout::{Ite, IteKind, SlotRef};
use nessie::{Error, Optimizations};
use nessie_check::scripted::{
    any_cas, backoff, cas_at, cas_at_if, layout_a, read_at, state_cas, tiny_config, Script,
};

/// Stop before a CAS on `slot` that expects a marker.
fn marker_cas(script: &Script, slot: u64) -> impl Fn(&nessie_check::sim::PointInfo) -> bool + Send {
    cas_at_if(script.slot(slot), Ite::is_moved)
}

/// Runs c0, a PUT of k2 in layout A, until its MIGRATE has linked the copy
/// into s1 and put its marker into s0, and stops before the commit. Returns
/// the marker and the copy.
fn migrator_before_its_commit(script: &Script) -> (Ite, SlotRef) {
    script.sched.run_until(0, cas_at(script.slot(1))).unwrap();
    script
        .sched
        .run_until(0, state_cas())
        .expect("c0 stops before its commit");
    let marker = script.ite(0);
    let IteKind::Moved { copy } = marker.kind() else {
        panic!("the source holds the marker: {marker:?}")
    };
    (marker, copy)
}

/// V1: a GET meeting a live MIGRATE copy must not follow the copy's `prev`.
/// Without location hints: the GET reads the copy first and waits.
#[test]
fn v1_get_does_not_follow_a_copys_prev() {
    v1_schedule(false);
}

/// The same schedule with location hints: the GET's hint is the entry of
/// its own PUT, linked and committed, so it answers from it at once
/// (docs/design.md#location-hints) and never meets the copy.
#[test]
fn v1_a_hinted_get_answers_past_the_live_copy() {
    v1_schedule(true);
}

fn v1_schedule(hints: bool) {
    let mut config = tiny_config(3, 2);
    config.optimizations.hints = hints;
    let script = Script::new(config, 2);
    let (k1, k2) = layout_a(&script);
    let d1 = script.ite(0);
    let (k1a, k1b) = (k1.clone(), k1.clone());
    let c0 = script.spawn(0, move |c| c.put(&k2, b"v4"));
    let c1 = script.spawn(1, move |c| {
        c.put(&k1a, b"v5").unwrap();
        c.get(&k1b)
    });
    // 1. c0 PUT(k2) migrates k1 from s0 towards s1: about to install the copy.
    script
        .sched
        .run_until(0, cas_at(script.slot(1)))
        .expect("c0 stops at the destination CAS");
    // 2. c1 PUT(k1, v5) replaces s0 and passes its reverse pass.
    script
        .sched
        .run_until(1, state_cas())
        .expect("c1 stops before its commit");
    // 3. c0 installs the copy in s1; its source CAS will fail later.
    script
        .sched
        .run_until(0, any_cas())
        .expect("c0 stops before its source CAS");
    let copy = script.ite(1);
    let (_, h, key) = script.target(copy);
    assert_eq!(key, k1);
    assert!(h.state.is_migrated() && h.state.status() == DteStatus::Invalid);
    assert_eq!(h.prev, d1.0, "the copy's prev is k1's old version");
    let (_, old, _) = script.target(d1);
    assert_eq!(
        old.state.status(),
        DteStatus::Valid,
        "and that old version is still VALID: following it would be stale"
    );
    // 4. c1 commits v5, then GETs k1: without a hint it meets the live
    //    copy first and must wait, not answer v1; with one it answers v5.
    assert_eq!(
        script.sched.run_until(1, backoff()).is_some(),
        !hints,
        "the GET backs off at the copy unless its hint answers"
    );
    script.sched.run_to_end(0);
    script.sched.run_to_end(1);
    assert!(c0.join().unwrap().is_some());
    assert_eq!(
        c1.join().unwrap().unwrap().unwrap().as_deref(),
        Some(&b"v5"[..])
    );
}

/// V2: a dead migrator's copy is rolled forward only if the source holds
/// its marker; otherwise rolling it forward would resurrect a deleted key.
#[test]
fn v2_dead_copy_without_marker_is_rolled_back() {
    let script = Script::new(tiny_config(3, 2), 3);
    let (k1, k2) = layout_a(&script);
    let (k1a, k1b) = (k1.clone(), k1.clone());
    let c0 = script.spawn(0, move |c| c.put(&k2, b"v4"));
    let c1 = script.spawn(1, move |c| c.delete(&k1a));
    let c2 = script.spawn(2, move |c| (c.get(&k1b), c.stats()));
    script.sched.run_until(0, cas_at(script.slot(1))).unwrap();
    script.sched.run_until(1, state_cas()).unwrap();
    script.sched.run_until(0, any_cas()).unwrap();
    script.sched.crash(0);
    script.sched.run_to_end(1);
    assert!(c1.join().unwrap().unwrap().unwrap(), "the DELETE found k1");
    // The racy state: a dead INVALID copy of k1 in s1, its source cleared.
    let (_, h, key) = script.target(script.ite(1));
    assert!(key == k1 && h.state.is_migrated() && h.state.status() == DteStatus::Invalid);
    assert!(
        !script.ite(0).is_moved(),
        "the source does not hold the marker"
    );
    script.let_owners_die();
    script.sched.run_to_end(2);
    let (got, stats) = c2.join().unwrap().unwrap();
    assert_eq!(got.unwrap(), None, "the deleted key stays deleted");
    assert!(c0.join().unwrap().is_none(), "c0 crashed");
    assert!(script.ite(1).is_empty(), "the copy was rolled back");
    assert_eq!(stats.get.recoveries, 2, "the copy's abort and its restore");
}

/// V3: GET's reverse pass must see a slot that was emptied, refilled and
/// emptied again (empty values never repeat).
#[test]
fn v3_reverse_pass_sees_a_repeated_empty_slot() {
    let mut config = tiny_config(3, 2);
    config.optimizations = Optimizations {
        batched_reads: false,
        ..Optimizations::default()
    };
    let script = Script::new(config, 3);
    let k1 = script.key_with("k1-", &[0, 1]);
    let k2 = script.key_with("k2-", &[1, 2]);
    let k3 = script.key_with("k3-", &[0, 2]);
    let filler = script.key_first("f-", 2);
    let parker = script.key_first("t-", 0);
    let _c = script.put_around_parked(&parker, &[(&k1, b"v1"), (&filler, b"f")]);
    let e0 = script.ite(0);
    assert!(e0.is_empty());
    assert_eq!(script.target(script.ite(1)).2, k1, "k1 sits in s1");
    let k1a = k1.clone();
    let c0 = script.spawn(0, move |c| c.get(&k1a));
    let c1 = script.spawn(1, move |c| c.put(&k2, b"v2"));
    let c2 = script.spawn(2, move |c| c.put(&k3, b"v3"));
    // c0 reads s0 (empty) and is about to read s1.
    script.sched.run_until(0, read_at(script.slot(1))).unwrap();
    // c1 migrates k1 from s1 to s0, and is about to put k2 into s1.
    let nonzero_empty = |i: Ite| i.is_empty() && i != Ite::ZERO;
    script
        .sched
        .run_until(1, cas_at_if(script.slot(1), nonzero_empty))
        .unwrap();
    // c0 finds nothing in s1 and starts its reverse pass: s1, then s0.
    script.sched.run_until(0, read_at(script.slot(0))).unwrap();
    // c2 migrates k1 back from s0 to s1, and is about to put k3 into s0.
    script
        .sched
        .run_until(2, cas_at_if(script.slot(0), Ite::is_empty))
        .unwrap();
    // The racy state: s0 is empty again, k1 is in s1 where c0 looked.
    let e1 = script.ite(0);
    assert!(e1.is_empty(), "s0 is empty again");
    assert_ne!(e1, e0, "but with a different empty value than c0 read");
    assert_eq!(script.target(script.ite(1)).2, k1);
    script.sched.run_to_end(0);
    assert_eq!(
        c0.join().unwrap().unwrap().unwrap().as_deref(),
        Some(&b"v1"[..])
    );
    script.sched.run_to_end(1);
    script.sched.run_to_end(2);
    for h in [c1, c2] {
        match h.join().unwrap().unwrap() {
            Ok(()) | Err(Error::IndexFull) => {}
            Err(e) => panic!("unexpected {e}"),
        }
    }
}

/// V4: an ABORTED entry whose owner crashed before restoring is restored by
/// whoever meets it; nothing wedges.
#[test]
fn v4_anyone_restores_an_aborted_entry() {
    let script = Script::new(tiny_config(2, 2), 3);
    let k1 = script.key_with("k1-", &[0, 1]);
    let k2 = script.key_with("k2-", &[0, 1]);
    let parker = script.key_with("t-", &[0, 1]);
    let _c = script.put_around_parked(&parker, &[(&k1, b"v1")]);
    assert_eq!(script.target(script.ite(1)).2, k1, "k1 sits in s1");
    let (k1a, k1b, k2a, k2b) = (k1.clone(), k1.clone(), k2.clone(), k2.clone());
    let c0 = script.spawn(0, move |c| c.put(&k1a, b"v2"));
    let c1 = script.spawn(1, move |c| c.put(&k2a, b"w"));
    let c2 = script.spawn(2, move |c| {
        let got = (c.get(&k2b), c.get(&k1b));
        (got, c.put(&k2b, b"w2"), c.get(&k2b))
    });
    script.sched.run_until(1, cas_at(script.slot(0))).unwrap();
    script.sched.run_until(0, state_cas()).unwrap();
    script
        .sched
        .run_until(1, cas_at_if(script.slot(0), Ite::is_occupied))
        .unwrap();
    script.sched.crash(1);
    // The racy state: s0 holds c1's entry, ABORTED, with nobody to restore it.
    let (_, h, key) = script.target(script.ite(0));
    assert_eq!(key, k2);
    assert_eq!(h.state.status(), DteStatus::Aborted);
    script.sched.run_to_end(0);
    assert!(c0.join().unwrap().unwrap().is_ok());
    script.sched.run_to_end(2);
    let ((g2, g1), p, g2b) = c2.join().unwrap().unwrap();
    assert_eq!(g2.unwrap(), None);
    assert_eq!(g1.unwrap().as_deref(), Some(&b"v2"[..]));
    p.unwrap();
    assert_eq!(g2b.unwrap().as_deref(), Some(&b"w2"[..]));
    assert!(c1.join().unwrap().is_none());
}

/// Z1 and Z1b: a zombie migrator's late source CAS installs a marker after
/// its copy was rolled back; the marker is restored to the copy's `prev`,
/// and a GET that meets it looks behind it instead of answering None.
#[test]
fn z1_late_marker_of_a_zombie_migrator_is_restored() {
    let script = Script::new(tiny_config(3, 2), 3);
    let (k1, k2) = layout_a(&script);
    let d1 = script.ite(0);
    let (k1a, k1b, k1c) = (k1.clone(), k1.clone(), k1.clone());
    let c0 = script.spawn(0, move |c| c.put(&k2, b"v4"));
    let c1 = script.spawn(1, move |c| {
        c.put(&k1a, b"v5").unwrap();
        c.get(&k1b)
    });
    let c2 = script.spawn(2, move |c| (c.get(&k1c), c.stats()));
    // c0 installs its copy in s1 and passes the deadline check of its
    // source CAS; then it stalls past its death.
    script.sched.run_until(0, cas_at(script.slot(1))).unwrap();
    script.sched.run_until(0, cas_at(script.slot(0))).unwrap();
    script.let_owners_die();
    // c1 meets the dead copy; the source holds D1, so it rolls back.
    script.sched.run_until(1, state_cas()).unwrap();
    // The zombie's late source CAS lands; its next check fails.
    script.sched.run_to_end(0);
    assert!(matches!(c0.join().unwrap().unwrap(), Err(Error::Timeout)));
    let marker = script.ite(0);
    let IteKind::Moved { copy } = marker.kind() else {
        panic!("the late CAS installed a marker: {marker:?}")
    };
    // c1 aborts the copy and restores s1, then is about to deal with the
    // marker. The racy state: s0 = MOVED(copy), the copy ABORTED, s1 empty.
    script.sched.run_until(1, cas_at(script.slot(0))).unwrap();
    assert_eq!(script.entry(copy).0.state.status(), DteStatus::Aborted);
    assert!(script.ite(1).is_empty());
    assert_eq!(script.entry(copy).0.prev, d1.0);
    // Z1b: a GET now must look behind the marker and find v1.
    script.sched.run_to_end(2);
    let (got, stats) = c2.join().unwrap().unwrap();
    assert_eq!(got.unwrap().as_deref(), Some(&b"v1"[..]));
    assert_eq!(
        script.ite(0),
        d1,
        "the marker was restored to the copy's prev"
    );
    assert_eq!(stats.get.marker_restores, 1, "by the GET");
    script.sched.run_to_end(1);
    assert_eq!(
        c1.join().unwrap().unwrap().unwrap().as_deref(),
        Some(&b"v5"[..])
    );
}

/// The stale marker of REPORT.md (after Fix C): a migrator that commits its
/// copy and crashes before clearing the source's marker leaves `MOVED(copy)`
/// behind; the next writer of a key with that slot as a candidate clears it
/// (staging the old entry) instead of waiting for ever.
#[test]
fn stale_marker_of_a_crashed_migrator_is_cleared() {
    let script = Script::new(tiny_config(3, 2), 2);
    let (k1, k2) = layout_a(&script);
    let d1 = script.ite(0);
    let (k2a, k2b) = (k2.clone(), k2.clone());
    let c0 = script.spawn(0, move |c| c.put(&k2a, b"v4"));
    let c1 = script.spawn(1, move |c| c.put(&k2b, b"v5"));
    script
        .sched
        .run_until(0, marker_cas(&script, 0))
        .expect("c0 stops before clearing its marker");
    script.sched.crash(0);
    let marker = script.ite(0);
    let (copy, h, key) = script.target(marker);
    assert!(marker.is_moved() && key == k1);
    assert_eq!(h.state.status(), DteStatus::Valid, "the copy committed");
    assert_eq!(script.target(script.ite(1)).0, copy, "and is linked in s1");
    script.sched.run_to_end(1);
    c1.join().unwrap().unwrap().unwrap();
    assert!(c0.join().unwrap().is_none());
    let (_, old, _) = script.target(d1);
    assert_ne!(old.expires_at, 0, "the clearer staged k1's old entry");
    let mut c = script.direct_client();
    assert_eq!(c.get(&k1).unwrap().as_deref(), Some(&b"v1"[..]));
    assert_eq!(c.get(&k2).unwrap().as_deref(), Some(&b"v5"[..]));
}

/// Z2 and CV (REPORT-zombies.md): an owner that misses its own death. The
/// helper's wall clock runs ahead (skew beyond the bound), so it aborts a
/// copy whose migrator still passes its own (monotonic) deadline checks;
/// the migrator's late marker then lands and its commit finds the copy
/// ABORTED. CV: it must leave the marker to the Z1 restore, not clear it
/// (clearing it would lose k1).
#[test]
fn z2_migrator_whose_copy_was_aborted_leaves_its_marker() {
    let script = Script::new(tiny_config(3, 2), 2);
    let (k1, k2) = layout_a(&script);
    let d1 = script.ite(0);
    let k1a = k1.clone();
    let c0 = script.spawn_on(0, 0, move |c| (c.put(&k2, b"v4"), c.stats()));
    let c1 = script.spawn_on(1, 1, move |c| c.put(&k1a, b"v5"));
    // 1. c0 installs its copy in s1 and stops before its source CAS.
    script.sched.run_until(0, cas_at(script.slot(1))).unwrap();
    script.sched.run_until(0, cas_at(script.slot(0))).unwrap();
    // 2. Node 1's clock steps past c0's death.
    let config = script.config();
    let ahead = (config.op_timeout + config.max_clock_skew * 2).as_micros() as i64 + 1;
    script.sched.set_offset(1, ahead);
    // 3. c1 meets the "dead" copy: the source holds D1, so it rolls back.
    script.sched.run_until(1, state_cas()).unwrap();
    // 4. c0 lands its marker and stops before its commit.
    script.sched.run_until(0, state_cas()).unwrap();
    assert!(script.ite(0).is_moved());
    // 5. c1 aborts the copy and stops before restoring s1.
    script.sched.run_until(1, cas_at(script.slot(1))).unwrap();
    let (copy, h, _) = script.target(script.ite(1));
    assert_eq!(h.state.status(), DteStatus::Aborted);
    // 6. c0's commit finds ABORTED. Its next CAS on s0 must restore D1 (Z1),
    //    not clear the marker.
    let p = script
        .sched
        .run_until(0, marker_cas(&script, 0))
        .expect("c0 meets its marker again");
    assert_eq!(p.expected, Ite::moved(copy).0);
    assert_eq!(
        p.new, d1.0,
        "CV: the marker of an aborted copy is restored, not cleared"
    );
    script.sched.run_to_end(0);
    script.sched.run_to_end(1);
    c1.join().unwrap().unwrap().unwrap();
    let (put, stats) = c0.join().unwrap().unwrap();
    put.unwrap();
    assert_eq!(stats.put.markers_left, 1, "c0 left its marker");
    script.sched.set_offset(1, 0);
    let mut c = script.direct_client();
    assert_eq!(c.get(&k1).unwrap().as_deref(), Some(&b"v5"[..]));
}

/// V2's other half: a dead migrator's copy whose source holds `MOVED(copy)`
/// is rolled *forward* — committed, the marker cleared and the source's old
/// entry staged — by the first helper that meets it.
#[test]
fn v2_dead_copy_with_its_marker_is_rolled_forward() {
    let script = Script::new(tiny_config(3, 2), 1);
    let (k1, k2) = layout_a(&script);
    let d1 = script.ite(0);
    let c0 = script.spawn(0, move |c| c.put(&k2, b"v4"));
    let (marker, copy) = migrator_before_its_commit(&script);
    script.sched.crash(0);
    assert!(c0.join().unwrap().is_none());
    assert_eq!(script.entry(copy).0.state.status(), DteStatus::Invalid);
    script.let_owners_die();
    let mut c = script.direct_client();
    assert_eq!(c.get(&k1).unwrap().as_deref(), Some(&b"v1"[..]));
    assert_eq!(
        script.entry(copy).0.state.status(),
        DteStatus::Valid,
        "rolled forward"
    );
    assert_eq!(script.ite(0), marker.emptied(), "the marker was cleared");
    assert_ne!(
        script.target(d1).1.expires_at,
        0,
        "k1's old entry was staged"
    );
    assert_eq!(c.stats().get.recoveries, 1, "one copy committed");
}

/// Helping a dead owner's uncommitted PUT costs exactly its abort and its
/// restore: a GET that meets it spends two CASes and no READ beyond its own
/// passes (a copy's helper would also read the copy's source slot).
#[test]
fn helping_a_dead_put_aborts_and_restores_it() {
    let script = Script::new(tiny_config(4, 2), 1);
    let key = script.key_first("h-", 0);
    let k = key.clone();
    let c0 = script.spawn(0, move |c| c.put(&k, b"v"));
    script
        .sched
        .run_until(0, state_cas())
        .expect("c0 stops before its commit");
    script.sched.crash(0);
    assert!(c0.join().unwrap().is_none());
    let linked = script.ite(0);
    script.let_owners_die();
    let mut c = script.cluster.client(1).unwrap();
    assert_eq!(c.get(&key).unwrap(), None);
    let s = c.stats().get;
    assert_eq!(s.verbs.cas, 2, "abort, then restore");
    let candidates = script.hasher().candidates(&key).len() as u64;
    // First pass: the candidates and the entry; then a pass and its reverse
    // pass over the candidates.
    assert_eq!(s.verbs.reads, candidates + 1 + 2 * candidates);
    assert_eq!(s.recoveries, 2, "the abort and the restore");
    assert_eq!(script.ite(0), Ite(script.target(linked).1.replaced));
}

/// A dead copy met only through its marker — by a key whose candidates
/// hold the source but not the copy — is rolled forward by that reader.
#[test]
fn dead_copy_met_through_its_marker_is_rolled_forward() {
    let script = Script::new(tiny_config(3, 2), 1);
    let (k1, k2) = layout_a(&script);
    let k2a = k2.clone();
    let c0 = script.spawn(0, move |c| c.put(&k2a, b"v4"));
    let (marker, copy) = migrator_before_its_commit(&script);
    script.sched.crash(0);
    assert!(c0.join().unwrap().is_none());
    script.let_owners_die();
    // k2's candidates are (s0, s2): it meets the marker, not the copy.
    let mut c = script.direct_client();
    assert_eq!(c.get(&k2).unwrap(), None);
    assert_eq!(
        script.entry(copy).0.state.status(),
        DteStatus::Valid,
        "rolled forward"
    );
    assert_eq!(script.ite(0), marker.emptied());
    assert_eq!(c.get(&k1).unwrap().as_deref(), Some(&b"v1"[..]));
}

/// A live migrator's copy behind its marker is its owner's to commit: a
/// GET that meets the marker first (k2's candidates start with the source)
/// looks behind it, finds the copy live, and leaves it alone.
#[test]
fn live_copy_behind_its_marker_is_left_to_its_owner() {
    let script = Script::new(tiny_config(3, 2), 2);
    let (k1, k2) = layout_a(&script);
    let k2a = k2.clone();
    let c0 = script.spawn(0, move |c| c.put(&k2a, b"v4"));
    let c1 = script.spawn(1, move |c| c.get(&k2));
    let (_, copy) = migrator_before_its_commit(&script);
    script.sched.run_to_end(1);
    assert_eq!(c1.join().unwrap().unwrap().unwrap(), None);
    assert_eq!(
        script.entry(copy).0.state.status(),
        DteStatus::Invalid,
        "nobody but the owner commits a live copy"
    );
    script.sched.run_to_end(0);
    c0.join().unwrap().unwrap().unwrap();
    let mut c = script.direct_client();
    assert_eq!(c.get(&k1).unwrap().as_deref(), Some(&b"v1"[..]));
}
