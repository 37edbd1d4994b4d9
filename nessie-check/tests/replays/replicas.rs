//! Replication (docs/replication.md) replayed: the schedules of the flaws
//! the simulator's replicated runs found, step by step, and the seeds of
//! randomized replicated runs that caught them and the rules reverted one
//! at a time (docs/testing-reverts.md#reverted-replication-rules), on the real
//! code.

use nessie::data::Geometry;
use nessie::fabric::{Fabric, RemoteAddr};
use nessie::layout::dte::EXPIRES_AT_OFFSET;
use nessie::layout::{Ite, IteKind};
use nessie::Config;
use nessie_check::scripted::{cas_at, nth, tiny_config, Script};
use nessie_check::sim::{divergent_duplicates, run, Point, Scenario};
use std::time::Duration;

/// Three nodes, two replicas of every share, two index slots per node and
/// two candidates per key; a landing bound short enough that a reader's
/// cache entry outlives a view change's drain.
fn replicated() -> Config {
    Config {
        nodes: 3,
        replicas: 2,
        index_slots_per_node: 2,
        cas_landing_bound: Some(Duration::from_millis(2)),
        ..tiny_config(6, 2)
    }
}

fn word(fabric: &dyn Fabric, at: RemoteAddr) -> u64 {
    let mut w = [0u8; 8];
    fabric.read(at, &mut w).unwrap();
    u64::from_le_bytes(w)
}

/// A DELETE commits its tombstone and unlinks it, but its deadline passes
/// between the unlink and the unlink's sync: the mirror still links the
/// committed tombstone (`mirrors_behind`). A PUT of the key then lands in
/// its first candidate, which another key's DELETE vacated. Were the
/// mirror promoted as it stands, the key would have two linked committed
/// entries that differ: the tombstone in its second candidate and the new
/// value in its first, and a reader that cached the tombstone would answer
/// "absent" from it. The PUT's reverse pass reads its candidates' mirrors
/// and brings the lagging one forward before it commits
/// (docs/replication.md#rp4b), so after the loss of the tombstone's
/// primary the key reads its value, cache or not.
#[test]
fn a_tombstone_whose_unlink_never_reached_the_mirror_does_not_come_back() {
    let script = Script::new(replicated(), 1);
    let geometry = Geometry::new(script.config());
    let hasher = script.hasher().clone();
    let key = script.find("k-", |k| {
        let c = hasher.candidates(k);
        c[0].node != c[1].node
    });
    let cands = hasher.candidates(&key);
    let b = cands[1].addr();
    let global = |c: nessie::index::Candidate| (c.node * 2) as u64 + c.slot;
    let filler = script.key_first("f-", global(cands[0]));
    let lost = b.node;
    let (deleter_node, reader_node) = ((lost + 1) % 3, (lost + 2) % 3);
    let mut setup = script.direct_client();
    setup.put(&filler, b"f").unwrap();
    setup.put(&key, b"v1").unwrap();
    let k = key.clone();
    let deleter = script.spawn_on(0, deleter_node, move |c| {
        (c.delete(&k).unwrap(), c.stats().delete.mirrors_behind)
    });
    // Stop before the unlink of the committed tombstone: the second CAS on
    // the key's second candidate (the first linked the tombstone).
    script
        .sched
        .run_until(0, nth(2, cas_at(b)))
        .expect("the DELETE unlinks its tombstone");
    let tombstone = Ite(word(&*script.cluster.fabric(), b));
    // A reader on a third node reads the committed tombstone and caches it.
    let mut reader = script.cluster.client(reader_node).unwrap();
    assert_eq!(reader.get(&key).unwrap(), None);
    // The unlink passed its deadline check; the sync after it does not.
    script
        .sched
        .advance(script.config().op_timeout.as_micros() as u64 + 1);
    script.sched.run_to_end(0);
    let (existed, behind) = deleter.join().unwrap().unwrap();
    assert!(existed);
    assert_eq!(behind, 1, "the unlink's sync was cut short");
    let mirror = geometry.mirrors(b).next().unwrap();
    assert!(script.ite(global(cands[1])).is_empty());
    assert_eq!(Ite(word(&*script.cluster.fabric(), mirror)), tombstone);
    // The key is written again, into its first candidate.
    assert!(setup.delete(&filler).unwrap());
    setup.put(&key, b"v2").unwrap();
    assert!(matches!(
        script.ite(global(cands[0])).kind(),
        IteKind::Occupied { .. }
    ));
    script.lose_host(lost);
    assert_eq!(reader.get(&key).unwrap().as_deref(), Some(&b"v2"[..]));
    let config = script.config();
    let duplicates = divergent_duplicates(&*script.cluster.fabric(), config, &geometry);
    assert_eq!(duplicates, None);
    let mut fresh = script.cluster.client(reader_node).unwrap();
    assert_eq!(fresh.get(&key).unwrap().as_deref(), Some(&b"v2"[..]));
    assert_eq!(fresh.get(&filler).unwrap(), None);
}

/// A PUT that replaced an entry stages it, and its WRITE of `expires_at`
/// to the entry's mirror is delayed past the entry's expiry. Were the
/// primary's stamp written first, the slot would be reused meanwhile and
/// the late stamp would land on the mirror of its next occupant; the
/// mirrors' stamps come first (docs/replication.md#rp5), so the slot is not
/// staged, and not reused, before every replica carries its stamp.
#[test]
fn a_late_stamp_on_a_mirror_never_lands_on_the_slots_next_occupant() {
    let script = Script::new(replicated(), 1);
    let geometry = Geometry::new(script.config());
    let key = script.key_first("k-", 0);
    let mut setup = script.direct_client();
    setup.put(&key, b"v1").unwrap();
    let (old, _, _) = script.target(script.ite(0));
    let at = geometry.dte_addr(old).unwrap();
    let primary = at.add(EXPIRES_AT_OFFSET as u64);
    let mirror = geometry.mirrors(primary).next().unwrap();
    let k = key.clone();
    let writer = script.spawn_on(0, 2, move |c| c.put(&k, b"v2").unwrap());
    script
        .sched
        .run_until(0, move |p| p.kind == Point::Write && p.addr == Some(mirror))
        .expect("the PUT stages the entry it replaced");
    script.let_slots_expire();
    script.reuse_slots();
    script.sched.run_to_end(0);
    writer.join().unwrap().unwrap();
    let fabric = script.cluster.fabric();
    let stamp = word(&*fabric, primary);
    assert_eq!(word(&*fabric, mirror), stamp, "the replicas' stamps differ");
    assert_ne!(stamp, 0, "the entry is staged once every stamp landed");
}

/// A PUT's mirror commit lands, then its deadline passes before the
/// primary's, and the PUT returns `Timeout` (RP3: mirrors commit first).
/// Were a reader to answer from the entry's `prev` while its owner is not
/// yet dead, and the entry's primary then be lost, the promoted mirror
/// would say VALID: the timed-out PUT would take effect after it returned
/// and after a reader saw the older value. With replicas a reader never
/// answers from `prev` (docs/replication.md#rp6b): it waits until the
/// owner is dead and aborts the entry on every replica first (docs/replication.md#rp3b).
#[test]
fn a_timed_out_put_committed_on_its_mirror_never_takes_effect_later() {
    let script = Script::new(replicated(), 1);
    let key = script.key_first("k-", 0);
    let mut setup = script.direct_client();
    setup.put(&key, b"v1").unwrap();
    let k = key.clone();
    let owner = script.spawn_on(0, 2, move |c| c.put(&k, b"v5"));
    let mirror_state = |p: &nessie_check::sim::PointInfo| {
        p.kind == Point::Cas
            && p.addr.is_some_and(|a| {
                a.region.0 >= nessie::layout::region::REPLICA_STRIDE
                    && nessie::layout::region::data_class(nessie::fabric::RegionId(
                        a.region.0 % nessie::layout::region::REPLICA_STRIDE,
                    ))
                    .is_some()
            })
    };
    script
        .sched
        .run_until(0, mirror_state)
        .expect("the PUT commits on its mirror");
    // The mirror's commit passed its deadline check; the primary's will not.
    script
        .sched
        .advance(script.config().op_timeout.as_micros() as u64 + 1);
    script.sched.run_to_end(0);
    assert!(matches!(
        owner.join().unwrap().unwrap(),
        Err(nessie::Error::Timeout)
    ));
    // The reader waits for the owner's death (it may time out meanwhile,
    // its back-off letting virtual time pass), then helps.
    let mut reader = script.cluster.client(1).unwrap();
    let read = (0..10).find_map(|_| reader.get(&key).ok());
    assert_eq!(read.flatten().as_deref(), Some(&b"v1"[..]));
    script.lose_host(2);
    assert_eq!(reader.get(&key).unwrap().as_deref(), Some(&b"v1"[..]));
}

/// The seeds at which the simulator's host-returns-empty fault caught two
/// flaws of the restore, and the restore's rules reverted one at a time by
/// `scripts/fix-reverts/RS*.patch`
/// (docs/testing-reverts.md#reverted-replication-rules), replayed on the real code
/// (each failed before its fix or with its rule reverted;
/// docs/replication.md#restore):
/// * R1: a sync whose first mirror CAS was posted in a batch went on at
///   the address the routed fabric had written into the batch, replica 0's
///   plain one, which routes to the share's primary while the mirror is
///   restoring: the loop never reached the restoring mirror, which kept
///   the restorer's stale copy of the slot and served it once active (a
///   wedged key after the restore);
/// * R2: the restorer wrote a slot read before its reuse over the newer
///   image the slot's owner had written to the restoring mirror since
///   (its `expires_at` included): a stager's stamp then landed on a
///   stamped slot (DOUBLE-STAGE on the mirror), and a mirror could lose a
///   stamp written before the primary's;
/// * RS3: a slot its owner took (and wrote) between the restorer's check
///   and its WRITEs got the older entry's image and stamp.
#[test]
fn seeds_that_caught_restore_flaws() {
    let caught = [
        // R1.
        (Scenario::host_returns(Scenario::recycling()), 36),
        // R2.
        (Scenario::host_returns_mirrored(), 241),
        // RS1 reverted: the restorer's state words not moved forward only
        // (931 before RP0b, the others since).
        (Scenario::host_returns_mirrored(), 931),
        (Scenario::host_returns(Scenario::contended()), 471),
        (Scenario::host_returns(Scenario::combined()), 1190),
        (Scenario::host_returns_mirrored(), 2386),
        (Scenario::host_returns_twice(Scenario::combined()), 1107),
        // RS2 reverted: the copy without its verification (205 before
        // RP0b, 454 since).
        (Scenario::host_returns(Scenario::contended()), 227),
        (Scenario::host_returns_twice(Scenario::combined()), 205),
        (Scenario::host_returns_twice(Scenario::combined()), 454),
        // RS3 reverted: slots written that their owner may take first.
        (Scenario::host_returns(Scenario::combined()), 1980),
        (Scenario::host_returns_mirrored(), 2161),
        (Scenario::host_returns(Scenario::recycling()), 2389),
        (Scenario::host_returns_twice(Scenario::combined()), 1637),
    ];
    for (scenario, seed) in caught {
        if let Err(e) = run(&scenario, seed) {
            panic!("scenario {}: {e}", scenario.name);
        }
    }
}

/// The seeds at which randomized replicated runs caught the flaws above
/// (before their fixes) and the replication rules reverted one at a time
/// in the library by `scripts/fix-reverts/RP*.patch`
/// (docs/testing-reverts.md#reverted-replication-rules), replayed on the real
/// code: each must pass.
#[test]
fn seeds_that_caught_replication_flaws() {
    let replicated = Scenario::replicated;
    let lost = Scenario::host_lost;
    let caught = [
        // The late mirror stamp (S1): DOUBLE-STAGE on a mirror.
        (Scenario::mirrored_zombies(), 121),
        (replicated(Scenario::recycling()), 109),
        (lost(Scenario::recycling()), 574),
        // The tombstone whose unlink never reached the mirror (S2).
        (Scenario::mirrored_zombies(), 3109),
        // The timed-out write answered from `prev` (S3).
        (lost(Scenario::contended()), 59),
        (lost(Scenario::combined()), 96),
        // RP3 reverted: the primary committed first.
        (Scenario::mirrored_zombies(), 8),
        (replicated(Scenario::contended()), 184),
        (lost(Scenario::recycling()), 121),
        (replicated(Scenario::recycling()), 11),
        (replicated(Scenario::crowded()), 12),
        (lost(Scenario::contended()), 54),
        // RP3b reverted: no mirror aborted before a restore.
        (replicated(Scenario::crowded()), 966),
        (replicated(Scenario::combined()), 2292),
        (replicated(Scenario::combined()), 2980),
        // RP4 reverted: the link's sync after the commit.
        (replicated(Scenario::crowded()), 21),
        (replicated(Scenario::combined()), 21),
        (lost(Scenario::contended()), 59),
        // RP2b reverted: owners dead before their mirror CASes landed.
        (replicated(Scenario::recycling()), 127),
        (lost(Scenario::combined()), 177),
        // RP4b reverted (S2 again).
        (replicated(Scenario::contended()), 2051),
        // RP5's order reverted (S1 again).
        (Scenario::mirrored_zombies(), 12),
        (replicated(Scenario::combined()), 12),
    ];
    for (scenario, seed) in caught {
        if let Err(e) = run(&scenario, seed) {
            panic!("scenario {}: {e}", scenario.name);
        }
    }
}

/// R3, the switch back (docs/replication.md#rp3c), at seed 511 of
/// `host_returns_combined` and of `host_returns_twice` (the same first
/// run): a client's MIGRATE copy of a preloaded key links its copy and
/// installs its marker, then its host (node 1) is lost; while node 1
/// restores, a helper rolls the dead copy forward (V2) and commits it on
/// node 1, a mirror then (RP3: mirrors first), but its deadline passes
/// before the commit on node 2, the share's primary. The view naming node
/// 1 active makes it primary again with the copy VALID over node 2's
/// INVALID; a client reads the copy committed and clears its marker. When
/// node 1 is lost again, node 2's copy is INVALID with no marker left, is
/// aborted, and the key reads as absent. The catch-up after the switch
/// back commits the copy on node 2 first.
#[test]
fn a_commit_on_the_restoring_mirror_only_is_caught_up_after_the_switch_back() {
    // Seed 511 of the combined scenarios found it; RP0b and RS3 have moved
    // those schedules since, and so has the recycler's scan order and pace
    // (seed 529 of the mirrored one did until then). A search of the
    // mirrored one from seed 0 then found 8490 and 14618, none below 4,000,
    // that still leave a commit on the restoring mirror only; since writes
    // read their hinted entry with the index, 8490 no longer does, and a
    // new search from seed 0 found 14618 first. It loses no host afterwards,
    // so without the catch-up it fails on the count alone; the loss itself
    // is shown by `protocol-model/replicas_switch.py`.
    for (scenario, seed) in [
        (Scenario::host_returns(Scenario::combined()), 511),
        (Scenario::host_returns_twice(Scenario::combined()), 511),
        (Scenario::host_returns_mirrored(), 529),
        (Scenario::host_returns_mirrored(), 8490),
        (Scenario::host_returns_mirrored(), 14618),
    ] {
        if let Err(e) = run(&scenario, seed) {
            panic!("scenario {}: {e}", scenario.name);
        }
    }
    let o = run(&Scenario::host_returns_mirrored(), 14618).expect("seed 14618");
    assert!(o.sim.caught_up > 0, "nothing was caught up");
}

/// R4, an answer from reads alone after the view changed twice
/// (docs/replication.md#rp0b), at seed 2095 of `host_returns_contended`:
/// a client on node 0 acknowledges a PUT of a key whose entry is on node
/// 1; another client's DELETE of the key reads the key's ITE, which names
/// that entry, and stalls before reading the entry's header. Node 1's host
/// is lost, and its replacement's memory is open and being restored when
/// the DELETE's READ of the header goes on: torn, its state word from the
/// lost host and its key from the replacement's memory, not yet copied. The
/// DELETE finds another key there and, its reverse pass reading the same
/// ITEs, would answer "absent" ten deadlines after it started; the same
/// client's next GET reads the value from the promoted replica. The answer
/// is checked against the deadline first, and the DELETE returns `Timeout`.
#[test]
fn a_delete_stalled_across_a_return_does_not_answer_absent() {
    let scenario = Scenario::host_returns(Scenario::contended());
    match run(&scenario, 2095) {
        Ok(o) => assert_eq!(o.sim.restores, 1, "node 1 was restored"),
        Err(e) => panic!("scenario {}: {e}", scenario.name),
    }
}
