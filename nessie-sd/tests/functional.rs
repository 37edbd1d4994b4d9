//! Single-threaded behaviour of the server-driven store on the local fabric.

mod common;

use common::{small_config, value, Store};
use nessie::fabric::FabricError;
use nessie::{Config, Error, KvClient};
use nessie_sd::{Client, Cluster, CLIENT_SLOTS};
use std::time::Duration;

impl Store for Cluster {
    type C = Client;
    fn client(&self, node: usize) -> Result<Client, Error> {
        Cluster::client(self, node)
    }
}

#[test]
fn put_get_delete_overwrite() {
    common::put_get_delete_overwrite(&Cluster::local(small_config()).unwrap());
}

#[test]
fn many_keys_fill_most_of_a_small_index() {
    // 250 keys in 3 × 128 index slots: a 65% load factor needs cuckoo
    // displacement for some of them.
    let cluster = Cluster::local(Config {
        index_slots_per_node: 128,
        ..small_config()
    })
    .unwrap();
    common::many_keys(&cluster, 250);
}

#[test]
fn values_of_every_size_class() {
    let config = small_config();
    let max = config.value_size_max;
    common::every_size_class(&Cluster::local(config).unwrap(), max);
}

#[test]
fn bad_input_gets_typed_errors_and_changes_nothing() {
    let config = small_config();
    common::bad_input_changes_nothing(&Cluster::local(config.clone()).unwrap(), &config);
}

#[test]
fn several_workers_per_node() {
    let cluster = Cluster::local(Config {
        server_workers: 3,
        ..small_config()
    })
    .unwrap();
    common::put_get_delete_overwrite(&cluster);
    common::many_keys(&cluster, 300);
}

#[test]
fn full_index_is_reported_and_keeps_what_it_has() {
    let cluster = Cluster::local(Config {
        nodes: 1,
        index_slots_per_node: 8,
        ..small_config()
    })
    .unwrap();
    let mut c = cluster.client(0).unwrap();
    let mut stored = Vec::new();
    let mut full = 0;
    for i in 0..40 {
        let key = format!("k{i}");
        match c.put(key.as_bytes(), key.as_bytes()) {
            Ok(()) => stored.push(key),
            Err(Error::IndexFull) => full += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        full > 0 && stored.len() <= 8 && stored.len() >= 4,
        "{stored:?}"
    );
    assert!(c.stats().put.migrations > 0, "displacement was tried");
    for key in &stored {
        assert_eq!(
            c.get(key.as_bytes()).unwrap(),
            Some(key.as_bytes().to_vec())
        );
    }
    // Overwriting a stored key needs no new index slot.
    c.put(stored[0].as_bytes(), b"new").unwrap();
    assert_eq!(c.get(stored[0].as_bytes()).unwrap(), Some(b"new".to_vec()));
}

#[test]
fn full_data_table_is_reported_and_slots_come_back_after_expiry() {
    // One size class of four slots.
    let config = Config {
        nodes: 1,
        value_size_max: 256,
        data_bytes_per_node: 4 * (56 + 128 + 256),
        expiry: Duration::from_millis(400),
        op_timeout: Duration::from_millis(150),
        ..small_config()
    };
    let cluster = Cluster::local(config).unwrap();
    let mut c = cluster.client(0).unwrap();
    for i in 0..4 {
        c.put(format!("k{i}").as_bytes(), b"v").unwrap();
    }
    assert!(matches!(c.put(b"k4", b"v"), Err(Error::DataTableFull)));
    assert_eq!(c.get(b"k4").unwrap(), None);
    assert!(c.stats().put.retries.no_free_slot > 0);
    // Deleting stages a slot; it is reused once it has expired.
    assert!(c.delete(b"k0").unwrap());
    let mut tries = 0;
    loop {
        match c.put(b"k4", b"v4") {
            Ok(()) => break,
            // Timeout: a slot came free too late in the operation.
            Err(Error::DataTableFull | Error::Timeout) if tries < 100 => tries += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(c.get(b"k4").unwrap(), Some(b"v4".to_vec()));
    assert_eq!(c.get(b"k1").unwrap(), Some(b"v".to_vec()));
}

#[test]
fn client_slots_are_limited_and_reused() {
    let cluster = Cluster::local(small_config()).unwrap();
    let clients: Vec<_> = (0..CLIENT_SLOTS)
        .map(|_| cluster.client(1).unwrap())
        .collect();
    assert!(matches!(cluster.client(1), Err(Error::Config(_))));
    assert!(
        cluster.client(0).is_ok(),
        "other nodes have their own slots"
    );
    drop(clients);
    // A reused slot continues its rings where the last client left them.
    let mut slot = None;
    for round in 0..3 {
        let mut c = cluster.client(1).unwrap();
        assert_eq!(*slot.get_or_insert(c.slot()), c.slot());
        for i in 0..200 {
            let key = format!("r{round}-{i}");
            c.put(key.as_bytes(), &value(&key, 1000)).unwrap();
        }
    }
    assert!(matches!(
        cluster.client(3),
        Err(Error::Fabric(FabricError::UnknownNode {
            node: 3,
            nodes: 3
        }))
    ));
}

#[test]
fn invalid_configs_are_refused() {
    assert!(matches!(
        Cluster::local(Config {
            nodes: 0,
            ..small_config()
        }),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        nessie_sd::Node::start(small_config(), 0),
        Err(Error::Config(_))
    ));
}

#[test]
fn dropping_a_cluster_with_live_clients_stops_cleanly() {
    let cluster = Cluster::local(small_config()).unwrap();
    let mut c = cluster.client(0).unwrap();
    c.put(b"a", b"b").unwrap();
    drop(cluster);
    // The servers are gone: requests fail instead of hanging.
    let key = (0..)
        .map(|i| format!("own{i}"))
        .find(|k| c.table().home(k.as_bytes()) == 0)
        .unwrap();
    assert!(matches!(c.get(key.as_bytes()), Err(Error::Timeout)));
}
