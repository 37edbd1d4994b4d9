//! The background recycler of an in-process cluster: it scans a class only
//! once fewer than a quarter of its slots are free or queued by the node's
//! own clients, reclaims slots other nodes' clients staged there without
//! any allocation asking, and stops with its cluster; a client's own
//! expired stagings come back at its next allocation, without a scan.

use nessie::{Cluster, Config};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `nodes` nodes, one size class of 16 slots, an expiry of `expiry_ms`.
fn config(nodes: usize, expiry_ms: u64) -> Config {
    Config {
        nodes,
        index_slots_per_node: 64,
        value_size_max: 256,
        data_bytes_per_node: 16 * nessie::layout::dte::entry_bytes(128, 256),
        expiry: Duration::from_millis(expiry_ms),
        op_timeout: Duration::from_millis(10),
        max_clock_skew: Duration::from_millis(1),
        ..Config::default()
    }
}

/// Polls `cond` every few milliseconds for up to ten seconds (a bound on
/// progress, not a timing measurement).
fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let give_up = Instant::now() + Duration::from_secs(10);
    while Instant::now() < give_up {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    cond()
}

#[test]
fn scans_only_below_a_quarter_free_and_stops_with_its_cluster() {
    let cluster = Cluster::local(config(1, 40)).unwrap();
    let data = cluster.node_data(0).unwrap();
    assert_eq!(data.capacity(0), 16);
    let mut c = cluster.client(0).unwrap();
    // 13 slots used (one live, 12 staged by this node's own client): fewer
    // than a quarter free, but the client's queue returns the 12.
    for i in 0..13u32 {
        c.put(b"key", &i.to_le_bytes()).unwrap();
    }
    assert_eq!((data.available(0), data.queued(0)), (3, 12));
    let scans = data.recycle_counts().scans;
    // Several periods (expiry / 10) and past the expiry: no scan.
    std::thread::sleep(config(1, 40).expiry * 2);
    assert_eq!(
        data.recycle_counts().scans,
        scans,
        "queued slots come back without a scan"
    );
    assert_eq!(data.available(0), 3);
    // The next PUT takes the oldest expired staging of this node's own
    // client, without a scan, rather than a free slot.
    c.put(b"key", b"next").unwrap();
    assert_eq!((data.available(0), data.queued(0)), (3, 12));
    let counts = data.recycle_counts();
    assert_eq!((counts.reclaimed_from_queue, counts.scans), (1, scans));
    drop(c);
    assert_eq!(data.queued(0), 0, "a client's queue goes with it");
    drop(cluster);
    assert_eq!(
        Arc::strong_count(&data),
        1,
        "the recycler thread ended with its cluster"
    );

    // A longer expiry, so nothing expires during the burst below.
    let cluster = Cluster::local(config(2, 1000)).unwrap();
    let data = cluster.node_data(0).unwrap();
    let mut local = cluster.client(0).unwrap();
    let mut remote = cluster.client(1).unwrap();
    // 13 slots of node 0 hold entries; node 1's client replaces 12 of them,
    // so node 0 has fewer than a quarter free or queued: the slots
    // come back once expired without any allocation asking, at least until
    // a quarter is free again (the stagings expire over a few
    // milliseconds, so one scan may catch only some of them).
    let keys: Vec<Vec<u8>> = (0..13).map(|k| format!("k{k}").into_bytes()).collect();
    for k in &keys {
        local.put(k, b"local").unwrap();
    }
    for k in &keys[..12] {
        remote.put(k, b"remote").unwrap();
    }
    // (A MIGRATE by node 0's client may have staged a slot of its own.)
    let coming = || data.available(0) + data.queued(0);
    assert!(coming() * 4 < data.capacity(0), "{data:?}");
    assert!(
        eventually(|| coming() * 4 >= data.capacity(0)),
        "the recycler reclaimed staged slots by itself: {:?}",
        data.recycle_counts()
    );
    let counts = data.recycle_counts();
    assert!(counts.reclaimed >= 1 && counts.scans > 0, "{counts:?}");
    assert_eq!(counts.reclaimed_from_queue, 0);
    for (i, k) in keys.iter().enumerate() {
        let want: &[u8] = if i < 12 { b"remote" } else { b"local" };
        assert_eq!(local.get(k).unwrap().as_deref(), Some(want), "key {i}");
    }
}

/// The trigger's boundary: free plus queued slots at exactly a quarter of
/// the class is enough (no scan, though slots other nodes staged have
/// expired); one fewer starts scans, which take those slots back.
#[test]
fn free_and_queued_slots_at_a_quarter_are_enough_and_one_fewer_is_not() {
    let mut config = config(2, 40);
    // A roomy index: no MIGRATE stages a slot of its own behind the test's
    // back.
    config.index_slots_per_node = 1024;
    let cluster = Cluster::local(config.clone()).unwrap();
    let data = cluster.node_data(0).unwrap();
    let mut local = cluster.client(0).unwrap();
    let mut remote = cluster.client(1).unwrap();
    local.put(b"a", b"1").unwrap();
    local.put(b"a", b"2").unwrap();
    let keys: Vec<Vec<u8>> = (0..11).map(|k| format!("k{k}").into_bytes()).collect();
    for k in &keys {
        local.put(k, b"local").unwrap();
    }
    for k in &keys {
        remote.put(k, b"remote").unwrap();
    }
    // 13 slots in use: 2 live, 1 queued by node 0's client, 11 staged by
    // node 1's; 3 free. 3 + 1 = 4 = 16 / 4.
    assert_eq!((data.available(0), data.queued(0)), (3, 1));
    std::thread::sleep(config.expiry * 3);
    assert_eq!(
        data.recycle_counts().scans,
        0,
        "a quarter free or queued: no scan"
    );
    // One more entry: 2 free + 1 queued is below a quarter.
    local.put(b"b", b"1").unwrap();
    assert!(
        eventually(|| data.recycle_counts().scans > 0 && data.available(0) >= 11),
        "the recycler scans and takes back what node 1 staged: {:?}",
        data.recycle_counts()
    );
    assert_eq!(local.get(b"a").unwrap().as_deref(), Some(&b"2"[..]));
    for k in &keys {
        assert_eq!(local.get(k).unwrap().as_deref(), Some(&b"remote"[..]));
    }
}
