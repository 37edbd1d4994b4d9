//! Memory no host has is a typed error, never an abort: configurations
//! within the field widths but beyond the host are refused before anything
//! is allocated, and the sizing example of the README is still accepted
//! (its data tables are address space, touched only where written).

use nessie::{Cluster, Config, Error};

#[test]
fn an_index_no_host_has_is_an_error_not_an_abort() {
    let config = Config {
        index_slots_per_node: 1 << 40,
        ..Config::default()
    };
    config.validate().expect("within the layout's field widths");
    let e = Cluster::local(config).expect_err("8 TiB of index per node");
    let Error::OutOfMemory {
        what,
        bytes,
        available,
    } = &e
    else {
        panic!("not OutOfMemory: {e:?}");
    };
    assert!(
        *bytes >= 3 << 43,
        "three nodes of 2^40 eight-byte slots: {bytes}"
    );
    assert!(available.is_some_and(|a| a < *bytes), "{available:?}");
    assert!(what.contains("1099511627776 index slots"), "{what}");
    let message = e.to_string();
    for figure in [
        bytes.to_string(),
        "3 node(s)".to_owned(),
        "RAM and swap".to_owned(),
    ] {
        assert!(message.contains(&figure), "{figure}: {message}");
    }
}

#[test]
fn data_tables_no_index_entry_can_address_are_a_config_error() {
    for data_bytes_per_node in [1 << 50, usize::MAX] {
        let e = Cluster::local(Config {
            data_bytes_per_node,
            ..Config::default()
        })
        .expect_err("more slots than an index entry addresses");
        assert!(
            matches!(&e, Error::Config(m) if m.contains("slots, more than an index entry can address")),
            "{data_bytes_per_node}: {e}"
        );
    }
}

#[test]
fn the_readme_sizing_example_is_accepted() {
    // 100,000 live 16 KiB values at 20,000 PUTs/s: about 19.9 GB of data
    // address space per node, of which nothing is touched here.
    let mut config = Config {
        nodes: 1,
        ..Config::default()
    };
    config.data_bytes_per_node = config.data_bytes_for(16 << 10, 100_000, 20_000.0).unwrap();
    assert!(
        config.data_bytes_per_node > 19_000_000_000,
        "{}",
        config.data_bytes_per_node
    );
    let cluster = Cluster::local(config).expect("sparse data tables are accepted");
    let mut client = cluster.client(0).unwrap();
    client.put(b"k", &[7; 16 << 10]).unwrap();
    assert_eq!(client.get(b"k").unwrap(), Some(vec![7; 16 << 10]));
}
