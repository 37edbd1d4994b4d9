//! Deterministic costs of operations, in verbs, bytes and round trips.
//!
//! With one key in an otherwise empty store no filter bits can match by
//! accident, so every count below is exact.

mod common;

use common::key_away_from;
use nessie::fabric::VerbCounts;
use nessie::index::KeyHasher;
use nessie::layout::region;
use nessie::{Cluster, Config, Optimizations, Placement};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn config(optimizations: Optimizations) -> Config {
    Config {
        index_slots_per_node: 4096,
        data_bytes_per_node: 16 << 20,
        value_size_max: 16 << 10,
        optimizations,
        ..Config::default()
    }
}

fn delta(after: VerbCounts, before: VerbCounts) -> VerbCounts {
    after - before
}

#[test]
fn get_costs_with_default_switches() {
    let config = config(Optimizations::default());
    let key = key_away_from(&config, 0);
    let slot = config.class_slot_bytes(config.class_for(16 << 10).unwrap()) as u64;
    let cluster = Cluster::local(config).unwrap();
    let mut writer = cluster.client(1).unwrap();
    let mut reader = cluster.client(0).unwrap();

    // Miss: one batch of 3 ITE READs, and the reverse pass's batch.
    let before = reader.stats().get.verbs;
    assert_eq!(reader.get(&key).unwrap(), None);
    let miss = delta(reader.stats().get.verbs, before);
    assert_eq!((miss.reads, miss.round_trips, miss.read_bytes), (6, 2, 48));

    writer.put(&key, &vec![7u8; 16 << 10]).unwrap();

    // Remote hit: the ITE batch, then the whole DTE in one READ.
    let before = reader.stats().get.verbs;
    assert!(reader.get(&key).unwrap().is_some());
    let hit = delta(reader.stats().get.verbs, before);
    assert_eq!(
        (hit.reads, hit.round_trips, hit.cas, hit.writes),
        (4, 2, 0, 0)
    );
    assert_eq!(hit.read_bytes, 24 + slot);

    // Cached: the ITE batch confirms the cached entry.
    let before = reader.stats().get;
    assert!(reader.get(&key).unwrap().is_some());
    let after = reader.stats().get;
    let cached = delta(after.verbs, before.verbs);
    assert_eq!(
        (cached.reads, cached.round_trips, cached.read_bytes),
        (3, 1, 24)
    );
    assert_eq!(after.cache_hits - before.cache_hits, 1);

    // Local DTE (the writer's own node): the DTE READ is local, no round trip.
    let before = writer.stats().get.verbs;
    assert!(writer.get(&key).unwrap().is_some());
    let local = delta(writer.stats().get.verbs, before);
    assert_eq!((local.reads, local.round_trips, local.local), (4, 1, 1));
}

#[test]
fn put_of_a_new_key_takes_at_most_four_round_trips() {
    let config = config(Optimizations::default());
    let h = KeyHasher::new(&config);
    // The first key with three candidates whose nodes, in order and
    // without repeats, satisfy `nodes`.
    let key = |nodes: &dyn Fn(&[usize]) -> bool| {
        (0..)
            .map(|i| format!("key-{i}").into_bytes())
            .find(|k| {
                let c = h.candidates(k);
                let mut n: Vec<usize> = c.iter().map(|c| c.node).collect();
                n.dedup();
                c.len() == 3 && nodes(&n)
            })
            .unwrap()
    };
    let cluster = Cluster::local(config.clone()).unwrap();
    // ITE batch; the link's CAS with the reverse pass's READs behind it on
    // its node (docs/design.md#put, step 7): remote. DTE WRITE and commit
    // CAS: local.
    let mut c = cluster.client(0).unwrap();
    c.put(&key(&|n| n == [1]), b"value").unwrap();
    let put = c.stats().put.verbs;
    assert_eq!((put.reads, put.writes, put.cas), (6, 1, 2));
    assert_eq!(put.round_trips, 2);
    // Candidates on two other nodes: those off the link's node are read
    // once its CAS has returned, a round trip more.
    let mut c = cluster.client(0).unwrap();
    c.put(&key(&|n| n.len() > 1 && !n.contains(&0)), b"value")
        .unwrap();
    let put = c.stats().put.verbs;
    assert_eq!((put.reads, put.writes, put.cas), (6, 1, 2));
    assert_eq!(put.round_trips, 3);
    assert!(put.round_trips <= 4);
}

#[test]
fn with_every_switch_off_a_put_follows_the_papers_sequential_protocol() {
    let config = config(Optimizations::none());
    let key = key_away_from(&config, 0);
    let reads = Arc::new(AtomicU64::new(0));
    let cas = Arc::new(AtomicU64::new(0));
    // Counts verbs on index regions, on top of what `Endpoint` counts.
    let count_on_index = |n: &Arc<AtomicU64>| -> common::Hook {
        let n = Arc::clone(n);
        Box::new(move |addr| {
            if addr.region == region::INDEX {
                n.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let (before_read, before_cas) = (count_on_index(&reads), count_on_index(&cas));
    let cluster = Cluster::builder(config)
        .wrap_fabric(move |inner| {
            Arc::new(common::Hooked {
                inner,
                before_read,
                before_cas,
            })
        })
        .build()
        .unwrap();
    let mut c = cluster.client(0).unwrap();
    c.put(&key, b"value").unwrap();
    assert!(
        reads.load(Ordering::Relaxed) >= 5,
        "ITE READs: {}",
        reads.load(Ordering::Relaxed)
    );
    assert_eq!(cas.load(Ordering::Relaxed), 1);
    // One READ per round trip when reads are not batched.
    let put = c.stats().put.verbs;
    assert_eq!(put.round_trips, 6 + 1);

    // A GET of the key: 3 ITE READs one by one, then header and key, then
    // the value (no multi-read).
    let mut reader = cluster.client(0).unwrap();
    assert!(reader.get(&key).unwrap().is_some());
    let get = reader.stats().get.verbs;
    assert_eq!(get.reads, 3 + 2);
}

/// The cache keeps only entries read from other nodes: with room for one,
/// GETs of a key whose entry is local do not evict the cached remote one
/// (on every node, not only node 0).
#[test]
fn local_reads_leave_the_cached_remote_entry_alone() {
    for me in [0, 1] {
        let config = Config {
            cache_entries: 1,
            ..config(Optimizations::default())
        };
        let remote = key_away_from(&config, me);
        let local = b"a key written on this node".to_vec();
        let cluster = Cluster::local(config).unwrap();
        let mut reader = cluster.client(me).unwrap();
        cluster
            .client((me + 1) % 3)
            .unwrap()
            .put(&remote, b"r")
            .unwrap();
        reader.put(&local, b"l").unwrap();
        assert!(reader.get(&remote).unwrap().is_some());
        assert!(reader.get(&local).unwrap().is_some());
        assert!(reader.get(&remote).unwrap().is_some());
        assert_eq!(reader.stats().get.cache_hits, 1, "reader on node {me}");
    }
}

/// With two replicas a GET costs what it costs with one (it reads the
/// primaries only, docs/replication.md#rp6); a PUT pays for the mirrors'
/// image WRITE, the link's sync and the mirrors' commit
/// (docs/replication.md#round-trips).
#[test]
fn with_two_replicas_a_get_costs_the_same_and_a_put_pays_for_its_mirrors() {
    let mut costs = Vec::new();
    for replicas in [1, 2] {
        let config = Config {
            replicas,
            ..config(Optimizations::default())
        };
        // Every candidate on node 1: the index mirrors are on node 2, the
        // writer's data mirror on node 1, so no mirror verb is local.
        let h = KeyHasher::new(&config);
        let key = (0..)
            .map(|i| format!("key-{i}").into_bytes())
            .find(|k| h.candidates(k).iter().all(|c| c.node == 1))
            .unwrap();
        let cluster = Cluster::local(config).unwrap();
        let mut writer = cluster.client(0).unwrap();
        let mut reader = cluster.client(2).unwrap();
        writer.put(&key, b"first").unwrap();
        let new_key = writer.stats().put.verbs;
        writer.put(&key, b"second").unwrap();
        let overwrite = delta(writer.stats().put.verbs, new_key);
        let before = reader.stats().get.verbs;
        assert_eq!(reader.get(&key).unwrap().as_deref(), Some(&b"second"[..]));
        let get = delta(reader.stats().get.verbs, before);
        costs.push((new_key, overwrite, get));
    }
    let [(new1, over1, get1), (new2, over2, get2)] = costs[..] else {
        unreachable!()
    };
    assert_eq!(get2, get1, "a GET reads the primaries only");
    // New key: the image to the mirror, and the mirror's commit; the
    // link's sync rides with the reverse pass, which with one replica rides
    // in the link's batch instead (docs/design.md#put, step 7).
    assert_eq!(new2.round_trips, new1.round_trips + 3, "{new1:?} {new2:?}");
    assert_eq!(new2.writes, new1.writes + 1);
    assert_eq!(new2.cas, new1.cas + 2);
    // Overwrite: the same three, and the stage of the replaced entry,
    // local on replica 0, goes to its mirror too.
    assert_eq!(
        over2.round_trips,
        over1.round_trips + 4,
        "{over1:?} {over2:?}"
    );
    assert_eq!(over2.writes, over1.writes + 2);
    assert_eq!(over2.cas, over1.cas + 2);
}

#[test]
fn with_one_node_placement_the_keys_node_pays_no_round_trip_and_others_one_per_pass() {
    let config = Config {
        placement: Placement::OneNode,
        ..config(Optimizations::default())
    };
    let h = KeyHasher::new(&config);
    let key = (0..)
        .map(|i| format!("key-{i}").into_bytes())
        .find(|k| {
            let c = h.candidates(k);
            c.len() == 3 && c[0].node == 0
        })
        .unwrap();
    let cluster = Cluster::local(config).unwrap();
    let mut own = cluster.client(0).unwrap();

    // The same verbs as with the spread placement, all on node 0.
    own.put(&key, b"value").unwrap();
    let put = own.stats().put.verbs;
    assert_eq!((put.reads, put.writes, put.cas), (6, 1, 2));
    assert_eq!(put.round_trips, 0);
    let before = own.stats().get.verbs;
    assert!(own.get(&key).unwrap().is_some());
    let get = delta(own.stats().get.verbs, before);
    assert_eq!((get.reads, get.round_trips), (4, 0));

    // From another node: the ITE batch goes to node 0 alone, then the DTE.
    let mut other = cluster.client(2).unwrap();
    assert!(other.get(&key).unwrap().is_some());
    let get = other.stats().get.verbs;
    assert_eq!((get.reads, get.round_trips), (4, 2));
    // Its PUT: ITE batch, header READ, link CAS with the reverse pass
    // behind it, and the replaced entry's stage (a WRITE) to node 0; the
    // DTE WRITE and the commit CAS are its own.
    other.put(&key, b"other").unwrap();
    let put = other.stats().put.verbs;
    assert_eq!((put.reads, put.writes, put.cas), (7, 2, 2));
    assert_eq!(put.round_trips, 4);
}
