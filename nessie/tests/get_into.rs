//! `Client::get_into`: a GET into the caller's `Vec`, which may read the
//! value straight into it (docs/design.md#one-copy-gets). Whatever the
//! `Vec` held before, and whatever other entries the GET read on its way,
//! it ends holding exactly the answer, or nothing.

use nessie::{Cluster, Config, Error, Optimizations};

fn cluster(nodes: usize, index_slots_per_node: usize, optimizations: Optimizations) -> Cluster {
    Cluster::local(Config {
        nodes,
        index_slots_per_node,
        data_bytes_per_node: 16 << 20,
        value_size_max: 64 << 10,
        optimizations,
        ..Config::default()
    })
    .unwrap()
}

/// A value of `len` bytes that differs for every `seed`.
fn value(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

/// One `Vec` through GETs of values of every size, local and remote, with
/// and without the paper's optimizations (the cache keeps remote entries,
/// and those are copied, not landed): each GET leaves exactly its value.
#[test]
fn a_reused_vec_holds_exactly_each_answer() {
    let sizes = [16 << 10, 10, 0, 300, 60 << 10, 8, 4096];
    for opts in [Optimizations::default(), Optimizations::none()] {
        let cluster = cluster(3, 1024, opts);
        let mut writer = cluster.client(1).unwrap();
        let mut reader = cluster.client(0).unwrap();
        let mut out = vec![0xee; 100 << 10];
        for round in 0..2u8 {
            for (i, &len) in sizes.iter().enumerate() {
                let key = format!("key-{i}");
                let want = value(len, round.wrapping_add(i as u8));
                writer.put(key.as_bytes(), &want).unwrap();
                for client in [&mut reader, &mut writer] {
                    assert!(client.get_into(key.as_bytes(), &mut out).unwrap());
                    assert_eq!(out, want, "{key}, {len} bytes, round {round}");
                }
            }
        }
        assert_eq!(
            (reader.stats().get.errors, writer.stats().get.errors),
            (0, 0)
        );
        // The writer's GETs read its own node's entries, which land in the
        // `Vec` (whole reads only: `multi_read` is one of the switches);
        // the reader's read node 1's, which the cache keeps instead, or
        // are served from it.
        let landed = |c: &nessie::Client| c.stats().get.values_landed;
        let gets = 2 * sizes.len() as u64;
        let want = if opts.multi_read { gets } else { 0 };
        assert_eq!((landed(&writer), landed(&reader)), (want, 0), "{opts:?}");
    }
}

/// Keys of one length crowded into a tiny index with the filter off, so
/// that GETs read whole entries of other keys first (which land in the
/// `Vec` and must not stay there), and keys of other lengths beside them.
/// Without location hints: a hinted GET reads the key's own entry first.
#[test]
fn entries_of_other_keys_read_on_the_way_leave_nothing() {
    let opts = Optimizations {
        filter: false,
        hints: false,
        ..Optimizations::default()
    };
    let cluster = cluster(1, 16, opts);
    let mut c = cluster.client(0).unwrap();
    let keys: Vec<String> = (0..6)
        .map(|i| format!("same-length-{i}"))
        .chain((0..3).map(|i| format!("k{i}")))
        .collect();
    for (i, key) in keys.iter().enumerate() {
        c.put(key.as_bytes(), &value(40 + 24 * i, i as u8)).unwrap();
    }
    let mut out = Vec::new();
    for _ in 0..3 {
        let landed = c.stats().get.values_landed;
        for (i, key) in keys.iter().enumerate() {
            assert!(c.get_into(key.as_bytes(), &mut out).unwrap(), "{key}");
            assert_eq!(out, value(40 + 24 * i, i as u8), "{key}");
        }
        // Only a pass's first whole read lands: where that entry held
        // another key, the value came through a copy. Both happen here.
        let landed = c.stats().get.values_landed - landed;
        assert!(
            0 < landed && landed < keys.len() as u64,
            "{landed} of {} landed",
            keys.len()
        );
        for absent in ["same-length-9", "k9", "absent"] {
            out.extend_from_slice(b"left over");
            assert!(!c.get_into(absent.as_bytes(), &mut out).unwrap());
            assert!(out.is_empty(), "a miss leaves nothing ({absent})");
        }
    }
}

/// A miss, a deleted key and a refused key all leave the `Vec` empty.
#[test]
fn no_answer_leaves_nothing() {
    let cluster = cluster(3, 1024, Optimizations::default());
    let mut c = cluster.client(2).unwrap();
    let mut out = b"old bytes".to_vec();
    assert!(!c.get_into(b"nobody", &mut out).unwrap());
    assert!(out.is_empty());
    c.put(b"gone", &[3; 5000]).unwrap();
    assert!(c.get_into(b"gone", &mut out).unwrap());
    assert!(c.delete(b"gone").unwrap());
    assert!(!c.get_into(b"gone", &mut out).unwrap());
    assert!(out.is_empty());
    out.push(1);
    assert!(matches!(c.get_into(b"", &mut out), Err(Error::EmptyKey)));
    assert!(out.is_empty(), "an error leaves nothing either");
}
