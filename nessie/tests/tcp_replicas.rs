//! A node of a replicated cluster on `tcp` goes away with its memory (its
//! `Node` is dropped: its verb service closes and its tables are freed, as
//! when its process is killed). The survivors suspect it from its silent
//! heartbeat, agree on a view without it, drain, and serve every
//! acknowledged value again (docs/replication.md#a-view-change-step-by-step).

use nessie::{Config, Error, FabricConfig, Node};
use std::collections::HashMap;
use std::net::TcpListener;
use std::time::{Duration, Instant};

const NODES: usize = 3;

fn tcp_config() -> Config {
    let ls: Vec<_> = (0..NODES)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    Config {
        cluster: "tcp-replicas".into(),
        nodes: NODES,
        replicas: 2,
        index_slots_per_node: 4096,
        data_bytes_per_node: 8 << 20,
        value_size_max: 4096,
        op_timeout: Duration::from_millis(300),
        lease: Duration::from_millis(1500),
        failure_timeout: Duration::from_millis(400),
        attach_timeout: Duration::from_secs(20),
        fabric: FabricConfig::Tcp {
            peers: ls
                .iter()
                .map(|l| l.local_addr().unwrap().to_string())
                .collect(),
            rendezvous: None,
            secret: "tcp-replicas-test-secret".into(),
            threads: 2,
        },
        ..Config::default()
    }
}

fn start_nodes() -> Vec<Node> {
    for _ in 0..5 {
        let config = tcp_config();
        let started: Result<Vec<Node>, Error> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..NODES)
                .map(|n| {
                    let c = config.clone();
                    s.spawn(move || Node::start(c, n))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        match started {
            Ok(nodes) => return nodes,
            Err(e) => eprintln!("retrying with other ports: {e}"),
        }
    }
    panic!("could not start a tcp cluster");
}

/// Retries `op` while the cluster changes its view; panics on anything else
/// or after `limit`.
fn until_served<T>(limit: Instant, mut op: impl FnMut() -> Result<T, Error>) -> T {
    loop {
        match op() {
            Ok(v) => return v,
            Err(
                e @ (Error::ViewChanging { .. }
                | Error::NoQuorum { .. }
                | Error::Timeout
                | Error::Fabric(_)),
            ) => {
                assert!(Instant::now() < limit, "not served again in time: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn the_survivors_of_a_lost_node_agree_on_a_view_and_serve_every_acknowledged_value() {
    let mut nodes = start_nodes();
    let mut model = HashMap::new();
    {
        let mut clients: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
        for i in 0..240u32 {
            let key = format!("key-{}", i % 90);
            let value = vec![i as u8; (i as usize * 31) % 3000];
            clients[i as usize % NODES]
                .put(key.as_bytes(), &value)
                .unwrap();
            model.insert(key, value);
        }
    }
    let lost_at = Instant::now();
    drop(nodes.remove(1));
    let limit = lost_at + Duration::from_secs(30);
    let mut readers: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
    let mut first_served = None;
    for (key, value) in &model {
        for reader in &mut readers {
            let got = until_served(limit, || reader.get(key.as_bytes()));
            first_served.get_or_insert_with(|| lost_at.elapsed());
            assert_eq!(got.as_deref(), Some(&value[..]), "{key}");
        }
    }
    eprintln!(
        "served again {:?} after the loss",
        first_served.unwrap_or_default()
    );
    // The survivors write on, also into the lost node's shares.
    for (i, key) in model.keys().enumerate() {
        let value = vec![(i % 7) as u8; 100];
        until_served(limit, || readers[i % 2].put(key.as_bytes(), &value));
        let back = until_served(limit, || readers[(i + 1) % 2].get(key.as_bytes()));
        assert_eq!(back, Some(value));
    }
}
