//! The background recycler of an in-process cluster: it scans a class only
//! once fewer than a quarter of its slots are free, reclaims staged slots
//! there without any allocation asking, and stops with its cluster; a
//! client's own expired stagings come back at its next allocation, without
//! a scan.

use nessie::{Cluster, Config};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One node, one size class of 16 slots, an expiry of `expiry_ms`.
fn config(expiry_ms: u64) -> Config {
    Config {
        nodes: 1,
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
    let cluster = Cluster::local(config(40)).unwrap();
    let data = cluster.node_data(0).unwrap();
    assert_eq!(data.capacity(0), 16);
    let mut c = cluster.client(0).unwrap();
    // Exactly a quarter free: 12 slots used (one live, 11 staged).
    for i in 0..12u32 {
        c.put(b"key", &i.to_le_bytes()).unwrap();
    }
    assert_eq!(data.available(0), 4);
    let scans = data.recycle_counts().scans;
    // Several periods (expiry / 10) and past the expiry: no scan.
    std::thread::sleep(config(40).expiry * 2);
    assert_eq!(
        data.recycle_counts().scans,
        scans,
        "a quarter free: no scan"
    );
    assert_eq!(data.available(0), 4);
    // The next PUT takes the oldest expired staging of this node's own
    // client, without a scan, rather than a fresh slot.
    c.put(b"key", b"next").unwrap();
    assert_eq!(data.available(0), 4);
    let counts = data.recycle_counts();
    assert_eq!((counts.reclaimed_from_queue, counts.scans), (1, scans));
    drop(c);
    drop(cluster);
    assert_eq!(
        Arc::strong_count(&data),
        1,
        "the recycler thread ended with its cluster"
    );

    // A longer expiry, so nothing expires during the burst below.
    let cluster = Cluster::local(config(1000)).unwrap();
    let data = cluster.node_data(0).unwrap();
    let mut c = cluster.client(0).unwrap();
    // 13 slots used (one live, 12 staged): fewer than a quarter free. The
    // staged slots come back once expired without any allocation asking,
    // at least until a quarter is free again (the recycler's policy; the
    // stagings expire over a few milliseconds, so one scan may catch only
    // some of them).
    for i in 0..13u32 {
        c.put(b"key", &i.to_le_bytes()).unwrap();
    }
    assert_eq!(data.available(0), 3);
    assert!(
        eventually(|| data.available(0) * 4 >= data.capacity(0)),
        "the recycler reclaimed staged slots by itself: {:?}",
        data.recycle_counts()
    );
    let counts = data.recycle_counts();
    assert!(counts.reclaimed >= 1 && counts.scans > 0, "{counts:?}");
    assert_eq!(counts.reclaimed_from_queue, 0);
    assert_eq!(
        c.get(b"key").unwrap().as_deref(),
        Some(&12u32.to_le_bytes()[..])
    );
}
