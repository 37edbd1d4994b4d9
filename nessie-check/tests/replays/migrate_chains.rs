//! How far MIGRATE chains reach: a PUT whose candidates are all taken frees
//! one by moving entries cuckoo style, at most `max_migrate_depth` moves
//! deep, and reports `IndexFull` when only a longer chain would free one.

use nessie::Error;
use nessie_check::scripted::{tiny_config, Script};

/// Four global slots, two candidates per key: kA in s0 (s0, s1), kB in s1
/// (s1, s2), kC in s2 (s2, s3), s3 empty. A new key with candidates
/// (s0, s1) fits only after kC moves to s3 and kB to s2: a chain of two.
fn chain_of_two(max_migrate_depth: usize) -> (Script, [Vec<u8>; 4]) {
    let script = Script::new(
        nessie::Config {
            max_migrate_depth,
            ..tiny_config(4, 2)
        },
        1,
    );
    let ka = script.key_with("a-", &[0, 1]);
    let kb = script.key_with("b-", &[1, 2]);
    let kc = script.key_with("c-", &[2, 3]);
    let kn = script.key_with("n-", &[0, 1]);
    let mut c = script.direct_client();
    for (k, v) in [(&ka, b"va"), (&kb, b"vb"), (&kc, b"vc")] {
        c.put(k, v).unwrap();
    }
    for (slot, k) in [(0, &ka), (1, &kb), (2, &kc)] {
        assert_eq!(&script.target(script.ite(slot)).2, k);
    }
    assert!(script.ite(3).is_empty());
    (script, [ka, kb, kc, kn])
}

#[test]
fn a_chain_one_move_longer_than_the_depth_reports_index_full() {
    let (script, [ka, kb, kc, kn]) = chain_of_two(1);
    let mut c = script.direct_client();
    assert!(matches!(c.put(&kn, b"vn"), Err(Error::IndexFull)));
    assert_eq!(c.stats().put.migrations, 0);
    assert!(script.ite(3).is_empty(), "nothing moved");
    assert_eq!(c.get(&kn).unwrap(), None);
    for (k, v) in [(&ka, b"va"), (&kb, b"vb"), (&kc, b"vc")] {
        assert_eq!(c.get(k).unwrap().as_deref(), Some(&v[..]));
    }
}

#[test]
fn a_chain_as_long_as_the_depth_frees_a_slot() {
    let (script, [ka, kb, kc, kn]) = chain_of_two(2);
    let mut c = script.direct_client();
    c.put(&kn, b"vn").unwrap();
    let put = c.stats().put;
    assert_eq!(put.migrations, 2);
    assert_eq!(put.retries.changed, 1, "one retry after the chain moved");
    for (slot, k) in [(0, &ka), (1, &kn), (2, &kb), (3, &kc)] {
        assert_eq!(&script.target(script.ite(slot)).2, k, "s{slot}");
    }
    for (k, v) in [(&ka, b"va"), (&kb, b"vb"), (&kc, b"vc"), (&kn, b"vn")] {
        assert_eq!(c.get(k).unwrap().as_deref(), Some(&v[..]));
    }
}
