//! Writers racing for the same slots, replayed step by step: what the loser
//! of a link CAS does, and how back-off delays grow while an owner works.

use nessie::RetryCounts;
use nessie_check::scripted::{backoff, cas_at, owner_stopped_before_commit, tiny_config, Script};

/// Two PUTs of different keys both want the empty s0. The one that links
/// second loses its CAS, counts it, and retries into its other candidate.
#[test]
fn the_loser_of_a_link_race_retries_into_another_candidate() {
    let script = Script::new(tiny_config(2, 2), 2);
    let ka = script.key_with("a-", &[0, 1]);
    let kb = script.key_with("b-", &[0, 1]);
    let (ka2, kb2) = (ka.clone(), kb.clone());
    let slow = script.spawn(0, move |c| (c.put(&ka2, b"va"), c.stats().put.retries));
    let fast = script.spawn(1, move |c| c.put(&kb2, b"vb"));
    script
        .sched
        .run_until(0, cas_at(script.slot(0)))
        .expect("the slow PUT is about to link into s0");
    script.sched.run_to_end(1);
    fast.join().unwrap().unwrap().unwrap();
    script.sched.run_to_end(0);
    let (done, retries) = slow.join().unwrap().unwrap();
    done.unwrap();
    let cas_failed = 1;
    assert_eq!(
        retries,
        RetryCounts {
            cas_failed,
            ..RetryCounts::default()
        }
    );
    assert_eq!(script.target(script.ite(0)).2, kb);
    assert_eq!(script.target(script.ite(1)).2, ka);
    let mut c = script.direct_client();
    assert_eq!(c.get(&ka).unwrap().as_deref(), Some(&b"va"[..]));
    assert_eq!(c.get(&kb).unwrap().as_deref(), Some(&b"vb"[..]));
}

/// A writer meeting a live owner's entry backs off again and again: each
/// delay is drawn from the upper half of a ceiling that doubles from 2 µs up
/// to 2 ms. Virtual time between its back-offs shows the growth.
#[test]
fn back_off_delays_double_while_an_owner_works() {
    let (script, _, owner, writer) =
        owner_stopped_before_commit(|c, k| c.put(k, b"v2"), |c, k| c.put(k, b"v3"));
    let mut woke = Vec::new();
    for _ in 0..10 {
        script
            .sched
            .run_until(1, backoff())
            .expect("the writer backs off");
        woke.push(script.sched.now());
    }
    // The n-th delay (from 0) is at least half of min(2 µs · 2ⁿ, 2 ms); the
    // steps between two back-offs take a few µs more.
    for (n, pair) in woke.windows(2).enumerate() {
        let ceiling = (2u64 << (n + 1)).min(2000);
        let waited = pair[1] - pair[0];
        assert!(
            waited >= ceiling / 2 && waited <= ceiling + 20,
            "back-off {} waited {waited} µs, ceiling {ceiling} µs",
            n + 1
        );
    }
    script.sched.crash(0);
    script.sched.crash(1);
    assert!(owner.join().unwrap().is_none());
    assert!(writer.join().unwrap().is_none());
}

/// A GET meeting a live owner's uncommitted PUT answers at once from the
/// entry it replaces (`prev`), without backing off.
#[test]
fn a_get_answers_from_the_previous_version_of_a_put_in_progress() {
    let (script, _, owner, reader) = owner_stopped_before_commit(
        |c, k| c.put(k, b"v2"),
        |c, k| (c.get(k), c.stats().get.retries),
    );
    script.sched.run_to_end(1);
    let (got, retries) = reader.join().unwrap().unwrap();
    assert_eq!(got.unwrap().as_deref(), Some(&b"v1"[..]));
    assert_eq!(retries, RetryCounts::default(), "no retry, no back-off");
    script.sched.run_to_end(0);
    owner.join().unwrap().unwrap().unwrap();
}
