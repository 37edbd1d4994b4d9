//! The counterexample traces of the model check of the reverse passes
//! (`REPORT-reverse-pass.md`), replayed step by step on the real
//! implementation: `M2a`, where two PUTs of an absent key choose different
//! candidates because a DELETE of another key vacates one between their
//! forward passes (PUT's reverse pass must abort one of them), and `M3a`,
//! where a DELETE reads one candidate before a MIGRATE moves its key there
//! and the other after (the confirming re-read of a DELETE that finds its
//! key absent must catch the move). Each scripted cluster checks, after
//! every CAS, that no two linked committed entries of one key differ.

use nessie::layout::Ite;
use nessie_check::scripted::{cas_at, cas_at_if, read_at, tiny_config, Script};

/// Two nodes of two index slots, two candidates per key.
fn script(clients: usize) -> Script {
    Script::new(tiny_config(4, 2), clients)
}

/// `M2a`: k1 has candidates (s0, s1) and is absent; k2 has (s0, s2) and
/// sits in s0. c0 PUT(k1, v5) reads s0 (k2) and s1 (empty) and stops before
/// linking into s1; c1 DELETEs k2, PUTs (k1, v6) into the vacated s0 and
/// reads it back; c2 DELETEs k1. c0's reverse pass must see s0 changed and
/// abort: its retry replaces v6, and c2's DELETE leaves k1 absent.
#[test]
fn m2a_writers_of_an_absent_key_in_different_candidates() {
    let script = script(3);
    let k1 = script.key_with("k1-", &[0, 1]);
    let k2 = script.key_with("k2-", &[0, 2]);
    let mut direct = script.direct_client();
    direct.put(&k2, b"v2").unwrap();
    let (a, b, c) = (k1.clone(), k1.clone(), k1.clone());
    let c0 = script.spawn(0, move |cl| {
        cl.put(&a, b"v5").unwrap();
        cl.stats().put.retries.changed
    });
    let c1 = script.spawn(1, move |cl| {
        assert!(cl.delete(&k2).unwrap());
        cl.put(&b, b"v6").unwrap();
        cl.get(&b).unwrap()
    });
    let c2 = script.spawn(2, move |cl| cl.delete(&c).unwrap());
    // 1. c0's forward pass chose s1 (s0 holds k2): it stops before the link.
    script
        .sched
        .run_until(0, cas_at(script.slot(1)))
        .expect("c0 stops before linking into s1");
    // 2. c1 vacates s0 and writes k1 there, committed: v6 is the value.
    script.sched.run_to_end(1);
    assert_eq!(c1.join().unwrap().unwrap().as_deref(), Some(&b"v6"[..]));
    // 3. c0 links v5 into s1; its reverse pass sees v6 in s0 and aborts.
    script.sched.run_to_end(0);
    assert!(
        c0.join().unwrap().unwrap() > 0,
        "c0's reverse pass saw the change"
    );
    assert_eq!(direct.get(&k1).unwrap().as_deref(), Some(&b"v5"[..]));
    // 4. c2's DELETE removes k1 for good: no older version comes back.
    script.sched.run_to_end(2);
    assert!(c2.join().unwrap().unwrap());
    script.let_slots_expire();
    script.reuse_slots();
    assert_eq!(direct.get(&k1).unwrap(), None);
    assert_eq!(script.sched.violations(), Vec::<String>::new());
}

/// `M3a`: k1 has candidates (s0, s1) and sits in s1; k2 has (s1, s2), and a
/// filler sits in s2. c0 DELETE(k1) reads s0 (empty) and stops before
/// reading s1; c1 PUT(k2) migrates k1 from s1 to s0 and takes s1. c0 then
/// reads s1 (k2): k1 looks absent, and only the re-read finds it in s0.
#[test]
fn m3a_delete_of_a_key_migrated_between_its_reads() {
    let script = script(2);
    let k1 = script.key_with("k1-", &[0, 1]);
    let k2 = script.key_with("k2-", &[1, 2]);
    let filler = script.key_first("f-", 2);
    let parker = script.key_first("t-", 0);
    let mut direct = script.put_around_parked(&parker, &[(&k1, b"v1"), (&filler, b"v9")]);
    let a = k1.clone();
    let c0 = script.spawn(0, move |cl| cl.delete(&a).unwrap());
    let c1 = script.spawn(1, move |cl| {
        cl.put(&k2, b"v5").unwrap();
        cl.stats().total().migrations
    });
    // 1. c0 read s0 (empty) and stops before reading s1.
    script
        .sched
        .run_until(0, read_at(script.slot(1)))
        .expect("c0 stops before reading s1");
    // 2. c1 moves k1 into s0 and puts k2 into s1.
    script.sched.run_to_end(1);
    assert_eq!(c1.join().unwrap().unwrap(), 1, "c1 migrated k1");
    // 3. c0 finds no k1 in s1; its re-read sees s0 changed, and it deletes.
    script.sched.run_to_end(0);
    assert!(c0.join().unwrap().unwrap(), "k1 was present throughout");
    assert_eq!(direct.get(&k1).unwrap(), None);
    assert_eq!(script.sched.violations(), Vec::<String>::new());
}

/// `M2a` again, its writers' candidates on two nodes and each batch
/// holding a CAS run with the other nodes' verbs first (a legal order):
/// the schedule of the model's mutant R1 (`protocol-model/REPORT.md`), in
/// which a reverse pass's READ of another node ran ahead of its link. k1
/// has candidates (s1, s2) on nodes 0 and 1; k2 has (s1, s0) and sits in
/// s1. c0 PUT(k1, v5) chooses s2 and stops before its link; c1 DELETEs k2
/// and stops before linking v6 into the vacated s1; c0 links, c1 links.
/// Only a READ to the link's node rides behind its CAS
/// (docs/design.md#put, step 7), so c0's reverse pass reads s1 after its
/// link, sees it vacated and retries; one version of k1 remains.
#[test]
fn r1_reverse_pass_reads_of_other_nodes_follow_the_link() {
    let script = script(2);
    script.sched.run_first_node_last();
    let k1 = script.key_with("k1-", &[1, 2]);
    let k2 = script.key_with("k2-", &[1, 0]);
    assert_ne!(script.slot(1).node, script.slot(2).node, "two nodes");
    let mut direct = script.direct_client();
    direct.put(&k2, b"v2").unwrap();
    let (a, b) = (k1.clone(), k1.clone());
    let c0 = script.spawn(0, move |cl| cl.put(&a, b"v5").unwrap());
    let c1 = script.spawn(1, move |cl| {
        assert!(cl.delete(&k2).unwrap());
        cl.put(&b, b"v6").unwrap();
    });
    // 1. c0's forward pass chose s2 (s1 holds k2): it stops before the link.
    script
        .sched
        .run_until(0, cas_at(script.slot(2)))
        .expect("c0 stops before linking into s2");
    // 2. c1 vacates s1 and stops before linking v6 there.
    script
        .sched
        .run_until(1, cas_at_if(script.slot(1), Ite::is_empty))
        .expect("c1 stops before linking into s1");
    // 3. c0 links v5 into s2, then c1 links v6 into s1.
    script.sched.run_to_end(0);
    script.sched.run_to_end(1);
    c0.join().unwrap().unwrap();
    c1.join().unwrap().unwrap();
    assert_eq!(script.sched.violations(), Vec::<String>::new());
    assert_eq!(direct.get(&k1).unwrap().as_deref(), Some(&b"v6"[..]));
}
