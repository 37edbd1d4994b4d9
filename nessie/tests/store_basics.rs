//! Single-client behaviour of the client-driven store on the local fabric.

use nessie::{Cluster, Config, Error, Optimizations};
use std::collections::HashMap;

fn small(config: Config) -> Config {
    Config {
        index_slots_per_node: 1024,
        data_bytes_per_node: 8 << 20,
        value_size_max: 64 << 10,
        ..config
    }
}

#[test]
fn put_get_delete_round_trip() {
    let cluster = Cluster::local(small(Config::default())).unwrap();
    let mut c = cluster.client(0).unwrap();
    assert_eq!(c.get(b"k").unwrap(), None);
    c.put(b"k", b"v1").unwrap();
    assert_eq!(c.get(b"k").unwrap().as_deref(), Some(&b"v1"[..]));
    c.put(b"k", b"v2").unwrap();
    assert_eq!(c.get(b"k").unwrap().as_deref(), Some(&b"v2"[..]));
    assert!(c.delete(b"k").unwrap());
    assert_eq!(c.get(b"k").unwrap(), None);
    assert!(!c.delete(b"k").unwrap());
    c.put(b"k", b"").unwrap();
    assert_eq!(c.get(b"k").unwrap().as_deref(), Some(&b""[..]));
}

#[test]
fn every_client_sees_every_write() {
    let cluster = Cluster::local(small(Config::default())).unwrap();
    let mut clients: Vec<_> = (0..3).map(|n| cluster.client(n).unwrap()).collect();
    for i in 0..200u32 {
        let key = format!("key-{i}");
        let value = vec![i as u8; (i as usize * 37) % 5000];
        clients[i as usize % 3].put(key.as_bytes(), &value).unwrap();
    }
    for i in 0..200u32 {
        let key = format!("key-{i}");
        let value = vec![i as u8; (i as usize * 37) % 5000];
        for c in &mut clients {
            assert_eq!(
                c.get(key.as_bytes()).unwrap().as_deref(),
                Some(&value[..]),
                "{key}"
            );
        }
    }
}

#[test]
fn matches_a_model_under_random_operations_with_every_switch_setting() {
    use rand::{Rng, SeedableRng};
    for opts in [Optimizations::default(), Optimizations::none()] {
        let cluster = Cluster::local(small(Config {
            optimizations: opts,
            ..Config::default()
        }))
        .unwrap();
        let mut clients: Vec<_> = (0..3).map(|n| cluster.client(n).unwrap()).collect();
        let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for step in 0..3000u32 {
            let key = format!("k{}", rng.gen_range(0..150)).into_bytes();
            let c = &mut clients[rng.gen_range(0..3)];
            match rng.gen_range(0..10) {
                0..=3 => {
                    let v = vec![(step % 251) as u8; rng.gen_range(0..3000)];
                    c.put(&key, &v).unwrap();
                    model.insert(key, v);
                }
                4 => assert_eq!(c.delete(&key).unwrap(), model.remove(&key).is_some()),
                _ => assert_eq!(
                    c.get(&key).unwrap(),
                    model.get(&key).cloned(),
                    "step {step}"
                ),
            }
        }
    }
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let cluster = Cluster::local(small(Config::default())).unwrap();
    let mut c = cluster.client(1).unwrap();
    c.put(b"k", b"v").unwrap();
    assert!(matches!(c.put(b"", b"v"), Err(Error::EmptyKey)));
    assert!(matches!(c.get(b""), Err(Error::EmptyKey)));
    assert!(matches!(c.put(&[1u8; 129], b"v"), Err(Error::KeyTooLarge)));
    assert!(matches!(c.delete(&[1u8; 129]), Err(Error::KeyTooLarge)));
    assert!(matches!(
        c.put(b"k", &vec![0u8; (64 << 10) + 1]),
        Err(Error::ValueTooLarge)
    ));
    assert_eq!(c.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    assert!(matches!(cluster.client(3), Err(Error::Config(_))));
}

#[test]
fn a_crowded_index_migrates_then_reports_index_full() {
    let cluster = Cluster::local(Config {
        nodes: 2,
        index_slots_per_node: 64,
        data_bytes_per_node: 4 << 20,
        value_size_max: 1024,
        ..Config::default()
    })
    .unwrap();
    let mut c = cluster.client(0).unwrap();
    let mut stored = Vec::new();
    let mut full = false;
    for i in 0..128u32 {
        let key = format!("crowd-{i}");
        match c.put(key.as_bytes(), &i.to_le_bytes()) {
            Ok(()) => stored.push((key, i)),
            Err(Error::IndexFull) => {
                full = true;
                break;
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert!(full, "128 keys cannot fit 128 slots with 3 hashes");
    assert!(
        stored.len() as f64 >= 0.8 * 128.0,
        "load factor {} too low",
        stored.len()
    );
    assert!(c.stats().put.migrations > 0);
    for (key, i) in &stored {
        assert_eq!(
            c.get(key.as_bytes()).unwrap(),
            Some(i.to_le_bytes().to_vec()),
            "{key}"
        );
    }
}

#[test]
fn a_corrupt_entry_is_reported_not_returned() {
    use nessie::index::KeyHasher;
    use nessie::layout::Ite;
    // Corruption (not a torn read) is caught only when every read is
    // verified: see `ChecksumPolicy`.
    let config = small(Config {
        verify_checksums: nessie::ChecksumPolicy::Always,
        ..Config::default()
    });
    let cluster = Cluster::local(config.clone()).unwrap();
    let mut c = cluster.client(0).unwrap();
    c.put(b"k", b"a value that will rot").unwrap();
    // Flip a byte of the value in the node's memory, behind the store's back.
    let fabric = cluster.fabric();
    let hasher = KeyHasher::new(&config);
    let ite = hasher
        .candidates(b"k")
        .into_iter()
        .map(|cand| {
            let mut w = [0u8; 8];
            fabric.read(cand.addr(), &mut w).unwrap();
            Ite(u64::from_le_bytes(w))
        })
        .find(|i| i.is_occupied())
        .unwrap();
    let at = ite.target().unwrap();
    let slot = config.class_slot_bytes(usize::from(at.class));
    let value_at =
        nessie::data::dte_addr(at, slot).add(nessie::layout::dte::value_offset(1) as u64);
    let mut word = [0u8; 8];
    fabric.read(value_at, &mut word).unwrap();
    word[0] ^= 0xff;
    fabric.write(value_at, &word).unwrap();
    let mut other = cluster.client(1).unwrap();
    assert!(matches!(other.get(b"k"), Err(Error::Corrupt { .. })));
    assert!(other.stats().get.retries.torn > 0);
}

#[test]
fn an_index_entry_naming_a_slot_that_does_not_exist_is_corrupt_not_a_panic() {
    use nessie::index::KeyHasher;
    use nessie::layout::{Ite, SlotRef};
    // A long deadline: the GET must give up on the torn count, not the clock.
    let config = small(Config {
        op_timeout: std::time::Duration::from_secs(5),
        expiry: std::time::Duration::from_secs(20),
        ..Config::default()
    });
    let cluster = Cluster::local(config.clone()).unwrap();
    let hasher = KeyHasher::new(&config);
    let nowhere = SlotRef {
        node: 0,
        class: 0,
        slot: 1 << 20,
        generation: 1,
    };
    let dangling = Ite::occupied(nowhere, hasher.filter(b"k"));
    assert_eq!(dangling.target(), Some(nowhere));
    let fabric = cluster.fabric();
    for cand in hasher.candidates(b"k") {
        fabric
            .write(cand.addr(), &dangling.0.to_le_bytes())
            .unwrap();
    }
    let mut c = cluster.client(1).unwrap();
    let e = c.get(b"k").unwrap_err();
    // The error names the entry it is about.
    assert!(
        matches!(&e, Error::Corrupt { entry: Some(at), .. } if *at == nowhere),
        "{e:?}"
    );
    assert!(e.to_string().contains("node 0 class 0 slot 1048576"), "{e}");
    // 64 torn passes in a row are retried; the 65th is reported.
    assert_eq!(c.stats().get.retries.torn, 65);
}
