//! The background recycler of an in-process cluster: it reclaims slots
//! other nodes' clients staged without any allocation asking, also while
//! the class has plenty of room (so that allocations reuse them rather
//! than touch fresh memory), and stops with its cluster. How much it scans
//! per period is tested on `NodeData::recycle_period` itself.

use nessie::{Cluster, Config};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `nodes` nodes, one size class of `slots` slots, an expiry of
/// `expiry_ms`, an index roomy enough that no MIGRATE stages a slot behind
/// the test's back.
fn config(nodes: usize, slots: usize, expiry_ms: u64) -> Config {
    let mut config = Config {
        nodes,
        index_slots_per_node: 1024,
        value_size_max: 256,
        expiry: Duration::from_millis(expiry_ms),
        op_timeout: Duration::from_millis(10),
        max_clock_skew: Duration::from_millis(1),
        ..Config::default()
    };
    config.data_bytes_per_node = slots * config.class_slot_bytes(0);
    config
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
fn reclaims_what_other_nodes_staged_while_there_is_room_and_stops_with_its_cluster() {
    let cluster = Cluster::local(config(2, 64, 40)).unwrap();
    let data = cluster.node_data(0).unwrap();
    assert_eq!(data.capacity(0) - data.reserve(0), 64, "slots for entries");
    let mut local = cluster.client(0).unwrap();
    let mut remote = cluster.client(1).unwrap();
    // 13 slots of node 0 hold entries; node 1's client replaces 12 of them.
    // Node 0 has 51 of 64 slots free, far from running low, and its own
    // client's queue holds none of the 12: only a scan finds them.
    let keys: Vec<Vec<u8>> = (0..13).map(|k| format!("k{k}").into_bytes()).collect();
    for k in &keys {
        local.put(k, b"local").unwrap();
    }
    for k in &keys[..12] {
        remote.put(k, b"remote").unwrap();
    }
    assert_eq!((data.in_use(0), data.queued(0)), (13, 0));
    assert!(
        eventually(|| data.in_use(0) == 1),
        "the recycler reclaimed the staged slots by itself: {:?}",
        data.recycle_counts()
    );
    let counts = data.recycle_counts();
    assert!(counts.reclaimed == 12 && counts.scans > 0, "{counts:?}");
    assert_eq!(counts.reclaimed_from_queue, 0);
    for (i, k) in keys.iter().enumerate() {
        let want: &[u8] = if i < 12 { b"remote" } else { b"local" };
        assert_eq!(local.get(k).unwrap().as_deref(), Some(want), "key {i}");
    }
    drop((local, remote));
    drop(cluster);
    assert_eq!(
        Arc::strong_count(&data),
        1,
        "the recycler thread ended with its cluster"
    );
}
