//! Single-threaded behaviour of the hybrid store on the local fabric (the
//! scenarios are shared with nessie-sd's tests).

#[path = "../../nessie-sd/tests/common/mod.rs"]
mod common;

use common::{small_config, Store};
use nessie::{Config, Error, KvClient};
use nessie_hy::{Client, Cluster};

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
    // A 65% load factor: some keys sit in their second or third candidate,
    // behind other keys the one-sided GET must read past.
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
fn full_index_is_reported() {
    let cluster = Cluster::local(Config {
        nodes: 1,
        index_slots_per_node: 8,
        ..small_config()
    })
    .unwrap();
    let mut c = cluster.client(0).unwrap();
    let mut stored = Vec::new();
    for i in 0..40 {
        let key = format!("k{i}");
        match c.put(key.as_bytes(), key.as_bytes()) {
            Ok(()) => stored.push(key),
            Err(Error::IndexFull) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(stored.len() < 40);
    for key in &stored {
        assert_eq!(
            c.get(key.as_bytes()).unwrap(),
            Some(key.as_bytes().to_vec())
        );
    }
    assert_eq!(c.get(b"k-absent").unwrap(), None);
}

#[test]
fn node_start_needs_the_shm_fabric() {
    assert!(matches!(
        nessie_hy::Node::start(small_config(), 0),
        Err(Error::Config(_))
    ));
}
