//! A node of a replicated cluster on `tcp` goes away with its memory (its
//! `Node` is dropped: its verb service closes and its tables are freed, as
//! when its process is killed). The survivors suspect it from its silent
//! heartbeat, agree on a view without it, drain, and serve every
//! acknowledged value again (docs/replication.md#a-view-change-step-by-step).

mod common;

use common::{all_served, until_served};
use nessie::{Config, Error, FabricConfig, Node};
use std::collections::HashMap;
use std::net::TcpListener;
use std::time::{Duration, Instant};

const NODES: usize = 3;

fn tcp_config() -> Config {
    sized(NODES, 2)
}

fn sized(nodes: usize, replicas: usize) -> Config {
    let ls: Vec<_> = (0..nodes)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    Config {
        cluster: "tcp-replicas".into(),
        nodes,
        replicas,
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
            join: Vec::new(),
            secret: "tcp-replicas-test-secret".into(),
            threads: 2,
        },
        ..Config::default()
    }
}

fn start_nodes() -> (Config, Vec<Node>) {
    start_sized(NODES, 2)
}

fn start_sized(nodes: usize, replicas: usize) -> (Config, Vec<Node>) {
    start_with(|| sized(nodes, replicas))
}

/// Starts every node of a configuration `config` makes, with another one
/// (other ports) after a failed start, up to five times.
fn start_with(config: impl Fn() -> Config) -> (Config, Vec<Node>) {
    for _ in 0..5 {
        let config = config();
        let nodes = config.nodes;
        let started: Result<Vec<Node>, Error> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..nodes)
                .map(|n| {
                    let c = config.clone();
                    s.spawn(move || Node::start(c, n))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        match started {
            Ok(nodes) => return (config, nodes),
            Err(e) => eprintln!("retrying with other ports: {e}"),
        }
    }
    panic!("could not start a tcp cluster");
}

#[test]
fn the_survivors_of_a_lost_node_agree_on_a_view_and_serve_every_acknowledged_value() {
    let (_, mut nodes) = start_nodes();
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

#[test]
fn a_replacement_restores_every_copy_and_the_next_loss_loses_nothing() {
    let (config, mut nodes) = start_nodes();
    let mut model = HashMap::new();
    let mut writers: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
    for i in 0..200u32 {
        let key = format!("key-{}", i % 80);
        let value = vec![i as u8; (i as usize * 37) % 2500];
        writers[i as usize % NODES]
            .put(key.as_bytes(), &value)
            .unwrap();
        model.insert(key, value);
    }
    drop(writers);
    // Node 1 is lost; the survivors agree without it.
    let lost = nodes.remove(1);
    drop(lost);
    let limit = Instant::now() + Duration::from_secs(30);
    let mut survivors: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
    all_served(&mut survivors, &model, limit);
    // Writes while node 1 is gone go to the survivors only.
    for (i, key) in model
        .keys()
        .cloned()
        .collect::<Vec<_>>()
        .iter()
        .enumerate()
        .take(30)
    {
        let value = vec![0xa0 | (i % 16) as u8; 640];
        until_served(limit, || survivors[i % 2].put(key.as_bytes(), &value));
        model.insert(key.clone(), value);
    }
    // A replacement with node 1's id and empty memory joins and restores.
    let rejoined_at = Instant::now();
    let replacement = Node::rejoin(config.clone(), 1).expect("rejoin");
    let figures = replacement.restore_figures().unwrap();
    eprintln!("restored in {:?}: {figures:?}", rejoined_at.elapsed());
    assert!(figures.index_slots > 0 && figures.data_slots > 0);
    assert!(
        figures.entries_adopted > 0,
        "the allocator takes back the restored entries"
    );
    nodes.insert(1, replacement);
    let mut all: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
    let limit = Instant::now() + Duration::from_secs(30);
    all_served(&mut all, &model, limit);
    // The replacement's own clients write again: its allocator must hand
    // out only slots no restored entry holds.
    for i in 0..120u32 {
        let key = format!("new-{i}");
        let value = vec![0x5a ^ i as u8; 200 + (i as usize * 13) % 1500];
        until_served(limit, || all[1].put(key.as_bytes(), &value));
        model.insert(key, value);
    }
    all_served(&mut all, &model, limit);
    // Two copies of everything again: node 2 may go now.
    drop(all);
    drop(survivors);
    drop(nodes.remove(2));
    let limit = Instant::now() + Duration::from_secs(30);
    let mut last: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
    all_served(&mut last, &model, limit);
}

/// Nodes that met at a rendezvous (no peer list) lose node 0, which
/// served it: a replacement learns where its peers listen from a
/// survivor's join service, which took over the rendezvous port
/// (docs/replication.md#joining-after-start-up).
#[test]
fn under_a_rendezvous_a_replacement_of_node_0_learns_its_peers_from_a_survivor() {
    let (config, mut nodes) = start_at_rendezvous();
    let mut model = HashMap::new();
    let mut writers: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
    for i in 0..150u32 {
        let key = format!("key-{}", i % 60);
        let value = vec![i as u8; (i as usize * 41) % 2000];
        writers[i as usize % NODES]
            .put(key.as_bytes(), &value)
            .unwrap();
        model.insert(key, value);
    }
    drop(writers);
    drop(nodes.remove(0));
    let limit = Instant::now() + Duration::from_secs(30);
    let mut survivors: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
    all_served(&mut survivors, &model, limit);
    drop(survivors);
    let replacement = Node::rejoin(config.clone(), 0).expect("rejoin through a survivor");
    assert!(replacement.restore_figures().unwrap().entries_adopted > 0);
    nodes.insert(0, replacement);
    // Back to two copies: node 1 may go now, and its share is served from
    // the replacement's restored copy.
    drop(nodes.remove(1));
    let limit = Instant::now() + Duration::from_secs(30);
    let mut last: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
    all_served(&mut last, &model, limit);
}

/// Three nodes with two replicas meeting at a rendezvous on loopback.
fn start_at_rendezvous() -> (Config, Vec<Node>) {
    start_with(|| {
        let port = nessie_fabric::conformance::bootstrap::free_port();
        let mut config = tcp_config();
        config.fabric = FabricConfig::Tcp {
            peers: Vec::new(),
            rendezvous: Some(format!("127.0.0.1:{port}")),
            join: Vec::new(),
            secret: "tcp-replicas-test-secret".into(),
            threads: 2,
        };
        config
    })
}

#[test]
fn a_rejoin_is_refused_with_one_replica_or_while_the_node_is_a_member() {
    let one = Config {
        replicas: 1,
        ..tcp_config()
    };
    assert!(matches!(
        Node::rejoin(one, 1),
        Err(Error::RejoinRefused { reason }) if reason.contains("replicas = 1")
    ));
    let (config, nodes) = start_nodes();
    // Node 1 is alive: its id is not free. (The replacement cannot bind
    // node 1's address while node 1 holds it, so a refusal of either kind
    // is right; neither may succeed.)
    assert!(Node::rejoin(config, 1).is_err());
    drop(nodes);
}

#[test]
fn with_three_replicas_on_five_nodes_two_simultaneous_losses_lose_nothing() {
    let (_, mut nodes) = start_sized(5, 3);
    let mut model = HashMap::new();
    {
        let mut writers: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
        for i in 0..250u32 {
            let key = format!("key-{}", i % 100);
            let value = vec![i as u8; (i as usize * 41) % 2000];
            writers[i as usize % 5].put(key.as_bytes(), &value).unwrap();
            model.insert(key, value);
        }
    }
    // Nodes 1 and 2 go at once: every share keeps one copy, and three of
    // five members are a majority.
    drop(nodes.remove(2));
    drop(nodes.remove(1));
    let limit = Instant::now() + Duration::from_secs(40);
    let mut survivors: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
    all_served(&mut survivors, &model, limit);
}

/// A replacement started before the members have agreed that its node is
/// lost keeps its empty memory closed: while it holds the lost node's
/// address, no survivor's verb reads that memory as its predecessor's (the
/// survivors read every value, through the view without the node), and its
/// rejoin is refused.
#[test]
fn a_replacement_started_too_early_answers_nothing_and_is_refused() {
    let (config, mut nodes) = start_nodes();
    let mut model = HashMap::new();
    {
        let mut writers: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
        for i in 0..120u32 {
            let key = format!("key-{}", i % 60);
            let value = vec![i as u8; 100 + (i as usize * 7) % 900];
            writers[i as usize % NODES]
                .put(key.as_bytes(), &value)
                .unwrap();
            model.insert(key, value);
        }
    }
    drop(nodes.remove(1));
    // The replacement's node process comes up at once and stays up.
    let early =
        nessie::runtime::Hosting::replacement(config.clone(), 1, nessie::store_regions(&config))
            .expect("the replacement takes node 1's address");
    let limit = Instant::now() + Duration::from_secs(30);
    let mut survivors: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
    all_served(&mut survivors, &model, limit);
    drop(early);
    assert!(matches!(
        Node::rejoin(
            Config {
                attach_timeout: Duration::from_secs(2),
                ..config
            },
            0
        ),
        Err(Error::RejoinRefused { .. } | Error::Fabric(_))
    ));
}
