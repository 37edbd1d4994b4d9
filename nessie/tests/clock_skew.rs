//! Clock skew: within `max_clock_skew` the store works; beyond it, nodes
//! detect the disagreement through their heartbeats and refuse operations
//! with `Error::ClockSkew` instead of risking stale reads.

use nessie::{Clock, Cluster, Config, Error, WallClock};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn cluster(offsets_ms: [i64; 3]) -> Cluster {
    let clocks: Vec<Arc<dyn Clock>> = offsets_ms
        .iter()
        .map(|&ms| Arc::new(WallClock::skewed(ms * 1000)) as Arc<dyn Clock>)
        .collect();
    Cluster::builder(Config {
        index_slots_per_node: 1024,
        data_bytes_per_node: 8 << 20,
        max_clock_skew: Duration::from_millis(10),
        ..Config::default()
    })
    .clocks(clocks)
    .build()
    .unwrap()
}

/// Heartbeats run every 5 ms; give the watch many periods.
fn settle() {
    std::thread::sleep(Duration::from_millis(200));
}

#[test]
fn skew_within_bounds_is_tolerated() {
    let cluster = cluster([0, 4, -4]);
    settle();
    for node in 0..3 {
        let mut c = cluster.client(node).unwrap();
        c.put(format!("k{node}").as_bytes(), b"v").unwrap();
        assert_eq!(
            c.get(format!("k{node}").as_bytes()).unwrap().as_deref(),
            Some(&b"v"[..])
        );
    }
}

#[test]
fn skew_beyond_bounds_is_refused_on_both_sides() {
    let cluster = cluster([0, 60, 0]);
    let deadline = Instant::now() + Duration::from_secs(20);
    for node in [1, 0] {
        let mut c = cluster.client(node).unwrap();
        loop {
            match c.put(b"k", b"v") {
                Err(Error::ClockSkew { skew_us, .. }) => {
                    assert!(skew_us >= 10_000, "reported skew {skew_us} µs");
                    break;
                }
                Ok(()) => {}
                Err(e) => panic!("unexpected {e}"),
            }
            assert!(
                Instant::now() < deadline,
                "node {node} never noticed the skew"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(matches!(c.get(b"k"), Err(Error::ClockSkew { .. })));
    }
}
