//! Many client threads against the server-driven store.

mod common;

use common::{small_config, Store};
use nessie::{Config, Error, KvClient};
use nessie_sd::{Client, Cluster};
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
    common::concurrent_mixed(&cluster(3), 6, 3, 120);
}

#[test]
fn same_key_writers_through_different_workers_stay_ordered() {
    common::last_writer_wins(&cluster(3), 6, 40);
}

#[test]
fn readers_never_miss_keys_that_are_being_moved() {
    // One node, a small index and several workers: inserts displace the
    // resident keys while GETs (lock-free, on other workers) look for them.
    let cluster = Cluster::local(Config {
        nodes: 1,
        index_slots_per_node: 64,
        server_workers: 3,
        ..small_config()
    })
    .unwrap();
    let mut setup = cluster.client(0).unwrap();
    let resident: Vec<String> = (0..16).map(|i| format!("resident-{i}")).collect();
    for k in &resident {
        setup.put(k.as_bytes(), k.as_bytes()).unwrap();
    }
    let done = AtomicBool::new(false);
    let migrations = std::thread::scope(|s| {
        let readers: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let mut c = cluster.client(0).unwrap();
                    let mut rounds = 0;
                    while !done.load(Ordering::Relaxed) || rounds == 0 {
                        for k in &resident {
                            assert_eq!(
                                c.get(k.as_bytes()).unwrap().as_deref(),
                                Some(k.as_bytes()),
                                "{k} went missing"
                            );
                        }
                        rounds += 1;
                    }
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
        for r in readers {
            r.join().unwrap();
        }
        w.stats().put.migrations
    });
    assert!(migrations > 0, "the test must displace entries");
}
