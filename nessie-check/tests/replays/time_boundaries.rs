//! The store's local time thresholds, replayed at their exact boundaries on
//! virtual clocks (each scripted step takes 1 µs): when an operation's
//! deadline has passed, when an owner counts as dead, and when a reader
//! must verify a checksum under `ChecksumPolicy::AfterStall`.

use nessie::data::dte_addr;
use nessie::layout::dte::{self, DteStatus};
use nessie::{ChecksumPolicy, Config, RetryCounts};
use nessie_check::scripted::{
    backoff, cas_at, dte_read, owner_stopped_before_commit, read_at, state_cas, tiny_config, Script,
};
use nessie_check::sim::Point;
use std::time::Duration;

/// A PUT of a fresh key by scripted client 0 (`put` runs it), stopped
/// after its link CAS, before the re-read of the slot that is its last step
/// before the commit; the clocks then move by what `stall` returns, given
/// the time and the PUT's deadline, and the PUT runs to its end.
fn put_stalled_after_its_link<T: Send + 'static>(
    put: fn(&mut nessie::Client, &[u8]) -> T,
    stall: impl FnOnce(u64, u64) -> u64,
) -> T {
    let script = Script::new(tiny_config(2, 1), 1);
    let k = script.key_first("k-", 0);
    // The operation starts when the client first runs: now.
    let deadline = script.sched.now() + script.config().op_timeout.as_micros() as u64;
    let slot = script.slot(0);
    let joined = script.spawn(0, move |c| put(c, &k));
    script
        .sched
        .run_until(0, cas_at(slot))
        .expect("the PUT links");
    script
        .sched
        .run_until(0, read_at(slot))
        .expect("the PUT re-reads the slot after linking");
    script.sched.advance(stall(script.sched.now(), deadline));
    script.sched.run_to_end(0);
    joined.join().unwrap().unwrap()
}

/// A PUT of a fresh key whose commit CAS is checked against its deadline
/// `late_us` microseconds after that deadline (0: exactly at it).
fn put_committing_at(late_us: u64) -> Result<(), nessie::Error> {
    put_stalled_after_its_link(
        |c, k| c.put(k, b"v"),
        |now, deadline| deadline + late_us - now,
    )
}

/// The deadline is the last instant at which an operation may still issue
/// a CAS: a commit checked exactly at it goes ahead, one a microsecond
/// later is refused (and the PUT reports `Timeout`).
#[test]
fn a_cas_may_be_issued_at_the_deadline_not_after() {
    put_committing_at(0).unwrap();
    assert!(matches!(put_committing_at(1), Err(nessie::Error::Timeout)));
}

/// The late CASes counted when a PUT's commit CAS returns `stall_us`
/// microseconds after its scheduling step.
fn late_cases_of_a_commit_stalled_for(stall_us: u64) -> u64 {
    let script = Script::new(tiny_config(2, 1), 1);
    let k = script.key_first("k-", 0);
    let put = script.spawn(0, move |c| (c.put(&k, b"v"), c.stats().put.late_cas));
    script
        .sched
        .run_until(0, state_cas())
        .expect("the PUT stops at its commit");
    script.sched.advance(stall_us);
    script.sched.run_to_end(0);
    let (done, late) = put.join().unwrap().unwrap();
    done.unwrap();
    late
}

/// A CAS is late when it returns more than the landing bound after its
/// deadline check (the check, the CAS's own step of 1 µs, then the stall).
#[test]
fn a_cas_is_late_only_beyond_the_landing_bound() {
    let landing = tiny_config(2, 1).landing_bound().as_micros() as u64;
    assert_eq!(late_cases_of_a_commit_stalled_for(0), 0);
    assert_eq!(late_cases_of_a_commit_stalled_for(landing - 1), 0);
    assert_eq!(late_cases_of_a_commit_stalled_for(landing), 1);
}

/// Whether a PUT that stalls `stall_us` after its link CAS returned, before
/// the re-read of the slot that precedes its commit, succeeds, and the late
/// CASes it counts.
fn late_cases_of_a_put_stalled_after_its_link_for(stall_us: u64) -> (bool, u64) {
    put_stalled_after_its_link(
        |c, k| (c.put(k, b"v").is_ok(), c.stats().put.late_cas),
        |_, _| stall_us,
    )
}

/// A CAS's landing is measured at the operation's next clock reading (here
/// the commit's deadline check), which can only overstate it: a stall after
/// the link returned counts against the link, although it ends the PUT at
/// that check (the landing bound exceeds `op_timeout` here) and no other
/// CAS follows (docs/design.md#the-landing-bound).
#[test]
fn a_cas_landing_is_measured_at_the_next_clock_reading() {
    let landing = tiny_config(2, 1).landing_bound().as_micros() as u64;
    assert_eq!(late_cases_of_a_put_stalled_after_its_link_for(0), (true, 0));
    assert_eq!(
        late_cases_of_a_put_stalled_after_its_link_for(landing),
        (false, 1)
    );
}

/// An owner is dead only once `created_at + op_timeout + 2·skew` lies
/// strictly in the past of the helper's wall clock: at equality a writer
/// meeting its entry backs off; a microsecond later it aborts the entry.
#[test]
fn an_owner_is_dead_strictly_after_its_death_time() {
    let (script, k, owner, writer) = owner_stopped_before_commit(
        |c, k| (c.put(k, b"v2"), c.stats().put.retries),
        |c, k| (c.put(k, b"v3"), c.stats().put.retries),
    );
    let (_, h, _) = script.target(script.ite(0));
    assert_eq!(h.state.status(), DteStatus::Invalid);
    let c = script.config();
    let dead_at = h.created_at + (c.op_timeout + c.max_clock_skew * 2).as_micros() as u64;
    // The writer starts shortly before the owner's death time (so that its
    // own deadline is far) and stops before it reads the owner's entry.
    script.sched.advance(dead_at - 100 - script.sched.wall(1));
    script
        .sched
        .run_until(1, dte_read())
        .expect("the writer stops before it reads the owner's entry");
    script.sched.advance(dead_at - script.sched.wall(1));
    let stop = script
        .sched
        .run_until(1, |p| backoff()(p) || state_cas()(p))
        .expect("the writer stops");
    assert_eq!(stop.kind, Point::Sleep, "at its death time the owner lives");
    assert_eq!(
        script.target(script.ite(0)).1.state.status(),
        DteStatus::Invalid
    );
    // The writer backs off once (busy), then aborts the dead owner's entry
    // (helped) and writes.
    script.sched.run_to_end(1);
    let (done, retries) = writer.join().unwrap().unwrap();
    done.unwrap();
    let (busy, helped) = (1, 1);
    assert_eq!(
        retries,
        RetryCounts {
            busy,
            helped,
            ..RetryCounts::default()
        }
    );
    // The owner's commit, checked before its stall, finds its entry
    // aborted; its deadline has passed, so it reports `Timeout`.
    script.sched.run_to_end(0);
    let (done, retries) = owner.join().unwrap().unwrap();
    assert!(matches!(done, Err(nessie::Error::Timeout)), "{done:?}");
    let aborted_by_helper = 1;
    assert_eq!(
        retries,
        RetryCounts {
            aborted_by_helper,
            ..RetryCounts::default()
        }
    );
    let mut c = script.direct_client();
    assert_eq!(c.get(&k).unwrap().as_deref(), Some(&b"v3"[..]));
}

/// A committed value rotted in memory behind the store's back (not a torn
/// read), then read by a client on the other node that stalls for `stall`
/// between its index read and its DTE read. Returns what the GET answered
/// and how many passes it retried as torn.
fn read_rotted_after(
    policy: ChecksumPolicy,
    stall: Duration,
) -> (Result<Option<Vec<u8>>, nessie::Error>, u64) {
    // An operation deadline beyond half the expiry, so that the stalled
    // reader may still retry.
    let config = Config {
        verify_checksums: policy,
        op_timeout: Duration::from_millis(12),
        ..tiny_config(2, 1)
    };
    let script = Script::new(config, 1);
    let k = script.key_first("k-", 0);
    script
        .direct_client()
        .put(&k, b"a value that will rot")
        .unwrap();
    let (at, _, _) = script.target(script.ite(0));
    let slot = script.config().class_slot_bytes(usize::from(at.class));
    let value_at = dte_addr(at, slot).add(dte::value_offset(k.len()) as u64);
    let fabric = script.cluster.fabric();
    let mut word = [0u8; 8];
    fabric.read(value_at, &mut word).unwrap();
    word[0] ^= 0xff;
    fabric.write(value_at, &word).unwrap();
    let reader = script.spawn(0, move |c| {
        let got = c.get(&k);
        (got, c.stats().get.retries.torn)
    });
    script
        .sched
        .run_until(0, dte_read())
        .expect("the reader stops before its DTE read");
    script.sched.advance(stall.as_micros() as u64);
    script.sched.run_to_end(0);
    let (got, torn) = reader.join().unwrap().unwrap();
    (got, torn)
}

#[test]
fn checksums_are_verified_from_a_wait_of_half_the_expiry() {
    let half = tiny_config(2, 1).expiry / 2;
    let mut rotted = b"a value that will rot".to_vec();
    rotted[0] ^= 0xff;
    // The wait runs from the start of the index read; the ITE and the DTE
    // read take one 1 µs step each: a stall of `half - 2µs` makes it
    // exactly `half`.
    let tick = Duration::from_micros(1);
    for stall in [Duration::ZERO, half.checked_sub(tick * 3).unwrap()] {
        let (got, torn) = read_rotted_after(ChecksumPolicy::AfterStall, stall);
        assert_eq!(
            got.unwrap().as_deref(),
            Some(&rotted[..]),
            "a read {stall:?} after the index read is trusted unverified"
        );
        assert_eq!(torn, 0, "{stall:?}");
    }
    // A wait of half the expiry: verified, found torn, read again (fresh
    // now, so trusted).
    let (got, torn) = read_rotted_after(
        ChecksumPolicy::AfterStall,
        half.checked_sub(tick * 2).unwrap(),
    );
    assert_eq!(got.unwrap().as_deref(), Some(&rotted[..]));
    assert_eq!(torn, 1, "the stalled read was verified");
}
