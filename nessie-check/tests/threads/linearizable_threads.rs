//! Six OS threads per store, few keys, mixed operations: the recorded
//! history is linearizable — for the client-driven store and both
//! baselines, with the same test code.

use nessie::{Config, KvClient, Optimizations};
use nessie_check::process::stress::{stress, StressPlan};

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

/// The stores under test, each built from the same configuration.
fn each_store(config: &Config, seed: u64, prepare: impl Fn(&mut dyn KvClient)) {
    let cd = nessie::Cluster::local(config.clone()).unwrap();
    prepare(&mut cd.client(0).unwrap());
    stress(plan(seed), |t| cd.client(t % 3).unwrap()).unwrap_or_else(|e| panic!("CD: {e}"));
    let sd = nessie_sd::Cluster::local(config.clone()).unwrap();
    prepare(&mut sd.client(0).unwrap());
    stress(plan(seed), |t| sd.client(t % 3).unwrap()).unwrap_or_else(|e| panic!("SD: {e}"));
    let hy = nessie_hy::Cluster::local(config.clone()).unwrap();
    prepare(&mut hy.client(0).unwrap());
    stress(plan(seed), |t| hy.client(t % 3).unwrap()).unwrap_or_else(|e| panic!("HY: {e}"));
}

#[test]
fn six_threads_default_switches() {
    each_store(&config(Optimizations::default()), 1, |_| {});
}

#[test]
fn six_threads_every_switch_off() {
    // The switches only change the client-driven store.
    let cluster = nessie::Cluster::local(config(Optimizations::none())).unwrap();
    stress(plan(2), |t| cluster.client(t % 3).unwrap()).unwrap();
}

#[test]
fn six_threads_crowded_index() {
    // 30 fillers in 48 slots, plus 5 hot keys: load ≥ 0.7, so writes migrate.
    let crowded = Config {
        index_slots_per_node: 16,
        ..config(Optimizations::default())
    };
    each_store(&crowded, 3, |c| {
        for i in 0..30 {
            let _ = c.put(format!("filler-{i}").as_bytes(), b"f");
        }
    });
}
