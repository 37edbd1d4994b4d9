//! One-sided GETs racing server-side PUTs, DELETEs and cuckoo moves.

#[path = "../../nessie-sd/tests/common/mod.rs"]
mod common;

use common::{small_config, Store};
use nessie::{Config, Error, KvClient};
use nessie_hy::{Client, Cluster};
use std::sync::atomic::{AtomicBool, Ordering};

impl Store for Cluster {
    type C = Client;
    fn client(&self, node: usize) -> Result<Client, Error> {
        Cluster::client(self, node)
    }
}

fn cluster(workers: usize) -> Cluster {
    Cluster::local(Config {
        server_workers: workers,
        ..small_config()
    })
    .unwrap()
}

#[test]
fn mixed_operations_on_few_keys_leave_values_someone_wrote() {
    common::concurrent_mixed(&cluster(1), 8, 4, 120);
}

#[test]
fn mixed_operations_with_several_workers_per_node() {
    common::concurrent_mixed(&cluster(2), 6, 3, 120);
}

#[test]
fn same_key_writers_through_different_workers_stay_ordered() {
    common::last_writer_wins(&cluster(3), 6, 40);
}

#[test]
fn one_sided_readers_never_miss_keys_that_are_being_moved() {
    let cluster = Cluster::local(Config {
        nodes: 1,
        index_slots_per_node: 64,
        ..small_config()
    })
    .unwrap();
    let mut setup = cluster.client(0).unwrap();
    let resident: Vec<String> = (0..16).map(|i| format!("resident-{i}")).collect();
    for k in &resident {
        setup.put(k.as_bytes(), k.as_bytes()).unwrap();
    }
    let done = AtomicBool::new(false);
    let (migrations, changed) = std::thread::scope(|s| {
        let readers: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let mut c = cluster.client(0).unwrap();
                    while !done.load(Ordering::Relaxed) {
                        for k in &resident {
                            assert_eq!(
                                c.get(k.as_bytes()).unwrap().as_deref(),
                                Some(k.as_bytes()),
                                "{k} went missing"
                            );
                        }
                    }
                    c.stats().get.retries.changed
                })
            })
            .collect();
        let mut w = cluster.client(0).unwrap();
        for i in 0..30 {
            match w.put(format!("filler-{i}").as_bytes(), b"f") {
                Ok(()) | Err(Error::IndexFull) => {}
                Err(e) => panic!("{e}"),
            }
        }
        done.store(true, Ordering::Relaxed);
        let changed: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
        (w.stats().put.migrations, changed)
    });
    assert!(migrations > 0, "the test must displace entries");
    // Not asserted: whether a reader happened to straddle a move.
    let _ = changed;
}

#[test]
fn readers_see_each_overwrite_whole() {
    // Values of different lengths and contents, overwritten while read:
    // every read must be one complete value (checksums catch torn ones).
    let cluster = cluster(1);
    let values: Vec<Vec<u8>> = (0..6)
        .map(|i| common::value(&format!("v{i}-"), 100 + i * 900))
        .collect();
    let mut w = cluster.client(1).unwrap();
    w.put(b"shared", &values[0]).unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for n in 0..3 {
            let (values, done, cluster) = (&values, &done, &cluster);
            s.spawn(move || {
                let mut c = cluster.client(n).unwrap();
                while !done.load(Ordering::Relaxed) {
                    let v = c.get(b"shared").unwrap().unwrap();
                    assert!(values.contains(&v), "a torn or foreign value");
                }
            });
        }
        for round in 0..60 {
            w.put(b"shared", &values[round % values.len()]).unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
}
