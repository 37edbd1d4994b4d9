//! The store end to end on the `tcp` fabric: three `Node`s started with
//! `Node::start` in this process (threads), on 127.0.0.1 ports. PUT, GET
//! and DELETE work across nodes, and every operation issues exactly the
//! verbs it issues on the `local` fabric (the protocol is unchanged; only
//! the transport differs).

use nessie::bootstrap::Launch;
use nessie::fabric::VerbCounts;
use nessie::{Cluster, Config, Error, FabricConfig, Node, Stats};
use std::time::Duration;

const NODES: usize = 3;

fn config(fabric: FabricConfig) -> Config {
    Config {
        cluster: "tcp-store".into(),
        nodes: NODES,
        index_slots_per_node: 4096,
        data_bytes_per_node: 16 << 20,
        value_size_max: 16 << 10,
        attach_timeout: Duration::from_secs(20),
        fabric,
        ..Config::default()
    }
}

fn tcp_config() -> Config {
    // Ports below the ephemeral range, so that no parallel test's port-0
    // listener or outgoing connection takes one meanwhile.
    config(FabricConfig::Tcp {
        peers: (0..NODES)
            .map(|_| {
                let port = nessie_fabric::conformance::bootstrap::free_port();
                format!("127.0.0.1:{port}")
            })
            .collect(),
        rendezvous: None,
        join: Vec::new(),
        secret: "tcp-store-test-secret".into(),
        threads: 2,
    })
}

/// Starts every node concurrently, as separate processes would, node `n`
/// with `config_of(n)`; returns each node's outcome.
fn start_each(config_of: impl Fn(usize) -> Config) -> Vec<Result<Node, Error>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..NODES)
            .map(|n| {
                let c = config_of(n);
                s.spawn(move || Node::start(c, n))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Starts every node of `config` concurrently.
fn start_nodes(config: &Config) -> Result<Vec<Node>, Error> {
    start_each(|_| config.clone()).into_iter().collect()
}

fn tcp_nodes() -> Vec<Node> {
    for _ in 0..5 {
        match start_nodes(&tcp_config()) {
            Ok(nodes) => return nodes,
            Err(e) => eprintln!("retrying with other ports: {e}"),
        }
    }
    panic!("could not start a tcp cluster");
}

/// What each operation of a fixed sequence cost, in verbs.
#[derive(Debug, PartialEq, Eq)]
struct Costs {
    puts: Vec<VerbCounts>,
    gets: Vec<VerbCounts>,
    deletes: Vec<VerbCounts>,
}

/// Runs the same sequence on any cluster: node 1 writes, node 0 and node 2
/// read and delete. Checks the answers and returns each operation's cost.
fn workload(clients: &mut [nessie::Client]) -> Costs {
    let mut costs = Costs {
        puts: Vec::new(),
        gets: Vec::new(),
        deletes: Vec::new(),
    };
    let delta = |after: Stats, before: Stats, f: fn(&Stats) -> VerbCounts| f(&after) - f(&before);
    for i in 0..24 {
        let key = format!("job/{i}/partition").into_bytes();
        let value = vec![i as u8; 100 + i * 500];
        let c = &mut clients[1];
        let before = c.stats();
        c.put(&key, &value).unwrap();
        costs.puts.push(delta(c.stats(), before, |s| s.put.verbs));
        for reader in [0, 2] {
            let c = &mut clients[reader];
            let before = c.stats();
            assert_eq!(c.get(&key).unwrap().as_deref(), Some(&value[..]));
            costs.gets.push(delta(c.stats(), before, |s| s.get.verbs));
        }
        if i % 3 == 0 {
            let c = &mut clients[2];
            let before = c.stats();
            assert!(c.delete(&key).unwrap());
            costs
                .deletes
                .push(delta(c.stats(), before, |s| s.delete.verbs));
            assert_eq!(clients[0].get(&key).unwrap(), None);
        }
    }
    costs
}

#[test]
fn store_on_tcp_works_and_costs_the_same_verbs_as_local() {
    let nodes = tcp_nodes();
    let mut tcp_clients: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
    let tcp = workload(&mut tcp_clients);

    let local = Cluster::local(config(FabricConfig::Local)).unwrap();
    let mut local_clients: Vec<_> = (0..NODES).map(|n| local.client(n).unwrap()).collect();
    let expected = workload(&mut local_clients);

    assert_eq!(tcp, expected, "the same operations cost other verbs on tcp");
    eprintln!(
        "first PUT (100 B, from node 1): {:?}\nits GETs from node 0 and node 2: {:?}",
        tcp.puts[0],
        &tcp.gets[..2]
    );
    // The nodes served each other's verbs and refused none.
    for n in &nodes {
        let stats = n.tcp_stats().expect("a tcp node has tcp stats");
        assert!(stats.verbs_served > 0 && stats.refused() == 0, "{stats:?}");
        assert_eq!(stats.handshake_failures, 0);
    }
    // Every node sees every other node's writes.
    for (n, c) in tcp_clients.iter_mut().enumerate() {
        let key = format!("from-{n}").into_bytes();
        c.put(&key, &[n as u8; 64]).unwrap();
    }
    for c in &mut tcp_clients {
        for n in 0..NODES {
            let key = format!("from-{n}").into_bytes();
            assert_eq!(c.get(&key).unwrap(), Some(vec![n as u8; 64]));
        }
    }
}

/// Without a peer list the nodes meet at node 0's rendezvous, each on a
/// port the OS picked; the node id and count come from a launcher's
/// environment (here Open MPI's, on one host), and the secret from the
/// environment, not the configuration.
#[test]
fn nodes_of_a_launched_job_meet_at_the_rendezvous() {
    let port = nessie_fabric::conformance::bootstrap::free_port();
    let nodes = std::thread::scope(|s| {
        let handles: Vec<_> = (0..NODES)
            .map(|rank| {
                s.spawn(move || {
                    let vars = |name: &str| match name {
                        "OMPI_COMM_WORLD_RANK" | "OMPI_COMM_WORLD_LOCAL_RANK" => {
                            Some(rank.to_string())
                        }
                        "OMPI_COMM_WORLD_SIZE" | "OMPI_COMM_WORLD_LOCAL_SIZE" => {
                            Some(NODES.to_string())
                        }
                        "NESSIE_RENDEZVOUS_PORT" => Some(port.to_string()),
                        _ => None,
                    };
                    let launch = Launch::from_vars(vars).unwrap().unwrap();
                    let mut c = config(FabricConfig::Tcp {
                        peers: Vec::new(),
                        rendezvous: None,
                        join: Vec::new(),
                        secret: "launched-job-secret-0123".into(),
                        threads: 2,
                    });
                    c.nodes = 1; // the launch knows better
                    launch.configure(&mut c).unwrap();
                    assert_eq!(c.nodes, NODES);
                    Node::start(c, launch.node)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect::<Vec<_>>()
    });
    let mut clients: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
    let costs = workload(&mut clients);
    let local = Cluster::local(config(FabricConfig::Local)).unwrap();
    let mut local_clients: Vec<_> = (0..NODES).map(|n| local.client(n).unwrap()).collect();
    assert_eq!(costs, workload(&mut local_clients));
    for n in &nodes {
        let stats = n.tcp_stats().expect("a tcp node has tcp stats");
        assert!(stats.verbs_served > 0 && stats.refused() == 0, "{stats:?}");
    }
}

/// A node that is told to meet the others at a rendezvous but has no
/// secret anywhere is refused before it opens anything.
#[test]
fn a_launched_tcp_node_needs_a_secret() {
    let launch = Launch::from_vars(|name| match name {
        "NESSIE_NODE_ID" => Some("0".into()),
        "NESSIE_NODES" => Some("3".into()),
        "NESSIE_RENDEZVOUS" => Some("127.0.0.1:1".into()),
        _ => None,
    })
    .unwrap()
    .unwrap();
    let mut c = config(FabricConfig::Tcp {
        peers: Vec::new(),
        rendezvous: None,
        join: Vec::new(),
        secret: String::new(),
        threads: 2,
    });
    // The process environment may carry a secret; only check the message
    // when it does not.
    let result = launch.configure(&mut c);
    if std::env::var_os("NESSIE_SECRET").is_none()
        && std::env::var_os("NESSIE_SECRET_FILE").is_none()
    {
        assert!(matches!(result, Err(Error::Config(m)) if m.contains("NESSIE_SECRET")));
    }
}

/// A peer that falls silent without a reset costs an operation its
/// deadline (plus the landing bound), not the fabric's I/O timeout: the
/// gate gives every operation a wait bound (docs/replication.md#failure-detection).
#[test]
fn an_operation_waits_for_a_silent_peer_only_until_its_deadline() {
    use nessie_fabric::conformance::hostile::Relay;
    // Ports the OS picked a moment ago may be taken meanwhile: retried with
    // others, as `tcp_nodes` does.
    let (relay, nodes) = (0..5)
        .find_map(|_| {
            let base = tcp_config();
            let FabricConfig::Tcp { peers, .. } = &base.fabric else {
                unreachable!("tcp_config is tcp")
            };
            // Node 0 reaches node 1 through a relay; the others directly.
            let relay = Relay::to(peers[1].clone());
            let mut via_relay = base.clone();
            // Its I/O timeout is then 5 s, still ten times the operation's
            // deadline.
            via_relay.attach_timeout = Duration::from_secs(5);
            if let FabricConfig::Tcp { peers, .. } = &mut via_relay.fabric {
                peers[1] = relay.addr.clone();
            }
            let started: Result<Vec<Node>, Error> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..NODES)
                    .map(|n| {
                        let c = if n == 0 {
                            via_relay.clone()
                        } else {
                            base.clone()
                        };
                        s.spawn(move || Node::start(c, n))
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            match started {
                Ok(nodes) => Some((relay, nodes)),
                Err(e) => {
                    eprintln!("retrying with other ports: {e}");
                    None
                }
            }
        })
        .expect("a tcp cluster behind a relay");
    let mut c0 = nodes[0].client().unwrap();
    // Keys whose GET from node 0 touches node 1 (an index slot or the entry).
    let keys: Vec<Vec<u8>> = (0..64).map(|i| format!("k{i}").into_bytes()).collect();
    let mut c1 = nodes[1].client().unwrap();
    for k in &keys {
        c1.put(k, b"v").unwrap();
    }
    for k in &keys {
        assert_eq!(c0.get(k).unwrap().as_deref(), Some(&b"v"[..]));
    }

    relay.go_silent(true);
    let started = std::time::Instant::now();
    let failed = c0.get(&keys[0]).unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(failed, Error::Fabric(_)), "{failed}");
    // Without the bound the GET would wait out node 0's 5 s I/O timeout.
    assert!(waited < Duration::from_secs(4), "waited {waited:?}");
}

#[test]
fn a_node_that_places_keys_differently_is_refused_at_attach() {
    let config = Config {
        attach_timeout: Duration::from_secs(5),
        ..tcp_config()
    };
    let results = start_each(|n| {
        let mut c = config.clone();
        if n == 2 {
            c.placement = nessie::Placement::OneNode;
        }
        c
    });
    let refused = results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .filter(|e| e.to_string().contains("place keys differently"))
        .count();
    // Node 2 refuses both peers' hellos and they refuse its own.
    assert!(refused >= 1, "{results:?}");
    assert!(results[2].is_err(), "{results:?}");
}
