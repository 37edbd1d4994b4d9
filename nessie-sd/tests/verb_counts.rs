//! Deterministic verb counts of the server-driven store.

use nessie::layout::round_up_words;
use nessie::{Config, KvClient, OpKind, Stats};
use nessie_sd::ring::{frame_bytes, REPLY_HEADER_BYTES, REQUEST_HEADER_BYTES};
use nessie_sd::{Client, Cluster};

fn config() -> Config {
    Config {
        index_slots_per_node: 1024,
        data_bytes_per_node: 64 << 20,
        value_size_max: 16 << 10,
        ..Config::default()
    }
}

fn keys_homed_on(c: &Client, node: usize, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("key-{i}"))
        .filter(|k| c.table().home(k.as_bytes()) == node)
        .take(n)
        .collect()
}

fn request_bytes(key: &str, value: usize) -> u64 {
    frame_bytes(REQUEST_HEADER_BYTES + round_up_words(key.len()) + round_up_words(value)) as u64
}

fn reply_bytes(body: usize) -> u64 {
    frame_bytes(REPLY_HEADER_BYTES + round_up_words(body)) as u64
}

/// Runs `op` and checks it cost exactly one request WRITE of
/// `request` bytes and one reply WRITE of `reply` bytes, nothing else.
fn check(
    c: &mut Client,
    kind: OpKind,
    remote: bool,
    request: u64,
    reply: u64,
    op: impl FnOnce(&mut Client),
) {
    let before: Stats = c.stats();
    op(c);
    let after = c.stats();
    let d = after.of(kind).verbs - before.of(kind).verbs;
    assert_eq!((d.writes, d.reads, d.cas), (2, 0, 0), "{kind:?}: {d:?}");
    // One request/reply round trip; same-node verbs are no network trips.
    assert_eq!(d.round_trips, u64::from(remote), "{kind:?}");
    assert_eq!(d.write_bytes, request + reply, "{kind:?}");
    if remote {
        assert_eq!((d.remote, d.local, d.remote_bytes), (2, 0, request + reply));
    } else {
        assert_eq!((d.remote, d.local, d.remote_bytes), (0, 2, 0));
    }
}

fn every_operation_costs_two_writes(home: usize) {
    let cluster = Cluster::local(config()).unwrap();
    let mut c = cluster.client(0).unwrap();
    let remote = home != 0;
    let keys = keys_homed_on(&c, home, 8);
    let server_before = cluster.server_verbs();
    let len = 16 << 10;
    let value = vec![7u8; len];
    // Enough 16 KiB requests to go round the request ring several times,
    // so that the server publishes its head (and the ring wraps) while we
    // count: neither costs the client a verb.
    for round in 0..40 {
        let k = &keys[round % keys.len()];
        check(
            &mut c,
            OpKind::Put,
            remote,
            request_bytes(k, len),
            reply_bytes(0),
            |c| {
                c.put(k.as_bytes(), &value).unwrap();
            },
        );
        check(
            &mut c,
            OpKind::Get,
            remote,
            request_bytes(k, 0),
            reply_bytes(len),
            |c| {
                assert_eq!(c.get(k.as_bytes()).unwrap().map(|v| v.len()), Some(len));
            },
        );
        if round % 4 == 3 {
            check(
                &mut c,
                OpKind::Delete,
                remote,
                request_bytes(k, 0),
                reply_bytes(0),
                |c| {
                    assert!(c.delete(k.as_bytes()).unwrap());
                },
            );
            check(
                &mut c,
                OpKind::Get,
                remote,
                request_bytes(k, 0),
                reply_bytes(0),
                |c| {
                    assert_eq!(c.get(k.as_bytes()).unwrap(), None);
                },
            );
        }
    }
    let stats = c.stats();
    assert_eq!(stats.total().ops, 100);
    assert_eq!(stats.total().verbs.writes, 200);
    assert_eq!(stats.total().verbs.reads, 0);
    // The server did publish its head: WRITEs it issued beyond the 100
    // replies (table writes are local, so count only verbs to node 0's
    // memory, which are replies and head updates when home != 0).
    if remote {
        let server = cluster.server_verbs() - server_before;
        assert!(
            server.remote > 100,
            "head updates are server WRITEs: {server:?}"
        );
    }
}

#[test]
fn remote_operations_cost_the_client_two_writes_and_no_reads() {
    every_operation_costs_two_writes(1);
}

#[test]
fn same_node_operations_cost_two_local_writes() {
    every_operation_costs_two_writes(0);
}
