//! Behaviour of the server-driven store of its own: its full data table,
//! client slots, configuration and servers. What every store does is
//! checked by nessie-check's `KvClient` conformance suite.

use nessie::{Config, Error, KvClient};
use nessie_sd::{Cluster, CLIENT_SLOTS};
use std::time::Duration;

/// Small tables, as in the conformance suite.
fn small_config() -> Config {
    Config {
        index_slots_per_node: 1024,
        data_bytes_per_node: 8 << 20,
        ..Config::default()
    }
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
            c.put(key.as_bytes(), &[7u8; 1000]).unwrap();
        }
    }
    assert!(matches!(cluster.client(3), Err(Error::Config(_))));
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

#[test]
fn servers_survive_malformed_requests() {
    use nessie::fabric::RemoteAddr;
    use nessie_sd::ring::{
        begin_frame, finish_frame, ReplyHeader, ReplyStatus, RequestHeader, RingGeometry,
        REQUEST_RINGS, RESPONSE_RINGS,
    };
    let config = small_config();
    let cluster = Cluster::local(config.clone()).unwrap();
    let fabric = cluster.fabric();
    let g = RingGeometry::new(
        config.nodes,
        CLIENT_SLOTS,
        config.key_size_max,
        config.value_size_max,
    )
    .unwrap();
    // Slot 7 of node 0 sends node 1 a frame whose header is garbage: the
    // ring is abandoned, nothing else happens.
    let ring = |slot| {
        RemoteAddr::new(
            1,
            REQUEST_RINGS,
            g.request_ring_offset(g.request_ring_index(0, slot)),
        )
    };
    fabric.write(ring(7), &u64::MAX.to_le_bytes()).unwrap();
    // Slot 8 sends a well-framed request with an unknown op and absurd
    // lengths: the server answers with an error where the request said.
    let mut frame = Vec::new();
    begin_frame(&mut frame);
    RequestHeader {
        op: 99,
        key_len: 3,
        seq: 1,
        reply_offset: 0,
        created_at: 0,
        value_len: u64::MAX,
    }
    .encode_into(&mut frame);
    frame.extend_from_slice(b"key\0\0\0\0\0");
    finish_frame(&mut frame);
    fabric.write(ring(8), &frame).unwrap();
    let reply_at = RemoteAddr::new(0, RESPONSE_RINGS, g.response_ring_offset(8));
    let mut reply = vec![0u8; 64];
    loop {
        fabric.read(reply_at, &mut reply).unwrap();
        if ReplyHeader::decode(&reply[8..]).is_some_and(|h| h.seq == 1) {
            break;
        }
        std::thread::yield_now();
    }
    let header = ReplyHeader::decode(&reply[8..]).unwrap();
    assert_eq!(header.status, ReplyStatus::Corrupt as u8);
    assert_eq!(header.seq, 1);
    // Real clients are served as before.
    let mut c = cluster.client(0).unwrap();
    for i in 0..20 {
        let key = format!("after-{i}");
        c.put(key.as_bytes(), b"v").unwrap();
        assert_eq!(c.get(key.as_bytes()).unwrap(), Some(b"v".to_vec()));
    }
}
