//! Six OS threads on an in-process cluster, few keys, mixed operations: the
//! recorded history is linearizable.

use nessie::{Cluster, Config, Optimizations};
use tests::stress::{stress, StressPlan};

fn plan(seed: u64) -> StressPlan {
    StressPlan {
        threads: 6,
        ops_per_thread: 1500,
        keys: 5,
        max_value: 3000,
        seed,
    }
}

fn config(optimizations: Optimizations) -> Config {
    Config {
        index_slots_per_node: 256,
        data_bytes_per_node: 32 << 20,
        value_size_max: 4096,
        optimizations,
        ..Config::default()
    }
}

#[test]
fn six_threads_default_switches() {
    let cluster = Cluster::local(config(Optimizations::default())).unwrap();
    let history = stress(plan(1), |t| cluster.client(t % 3).unwrap()).unwrap();
    assert_eq!(history.len(), 6 * 1500);
}

#[test]
fn six_threads_every_switch_off() {
    let cluster = Cluster::local(config(Optimizations::none())).unwrap();
    stress(plan(2), |t| cluster.client(t % 3).unwrap()).unwrap();
}

#[test]
fn six_threads_crowded_index() {
    // 30 fillers in 48 slots, plus 5 hot keys: load ≥ 0.7, so writes migrate.
    let cluster = Cluster::local(Config {
        index_slots_per_node: 16,
        ..config(Optimizations::default())
    })
    .unwrap();
    let mut c = cluster.client(0).unwrap();
    for i in 0..30 {
        let _ = c.put(format!("filler-{i}").as_bytes(), b"f");
    }
    stress(plan(3), |t| cluster.client(t % 3).unwrap()).unwrap();
}
