//! Replication on `shm`, where the loss of a host is emulated: node 1's
//! regions are declared lost (every process refuses its verbs, its memory is
//! wiped) and its `Node` goes; the survivors agree on a view without it and
//! serve every acknowledged value; a replacement takes node 1's files, copies
//! its replicas back, and the next loss (node 2) loses nothing
//! (docs/replication.md#restore). With three replicas on five nodes, two
//! hosts lost at once lose nothing either.

mod common;

use common::all_served;
use nessie::fabric::ShmFabric;
use nessie::{Config, FabricConfig, Node};
use std::collections::HashMap;
use std::time::{Duration, Instant};

const NODES: usize = 3;

fn config(dir: &std::path::Path) -> Config {
    sized(dir, NODES, 2)
}

fn sized(dir: &std::path::Path, nodes: usize, replicas: usize) -> Config {
    Config {
        cluster: format!("shm-replicas-{}", std::process::id()),
        nodes,
        replicas,
        index_slots_per_node: 2048,
        data_bytes_per_node: 4 << 20,
        value_size_max: 4096,
        op_timeout: Duration::from_millis(300),
        lease: Duration::from_millis(1500),
        failure_timeout: Duration::from_millis(400),
        attach_timeout: Duration::from_secs(20),
        fabric: FabricConfig::Shm {
            dir: Some(dir.to_path_buf()),
        },
        ..Config::default()
    }
}

fn every_node_serves(nodes: &[Node], model: &HashMap<String, Vec<u8>>) {
    let limit = Instant::now() + Duration::from_secs(30);
    let mut clients: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
    all_served(&mut clients, model, limit);
}

/// Declares `node`'s host lost and drops its `Node`.
fn lose(config: &Config, nodes: &mut Vec<Node>, node: usize) {
    let at = nodes.iter().position(|n| n.id() == node).unwrap();
    ShmFabric::lose(
        &config.shm_dir(),
        node,
        &nessie::store_regions(config),
        Duration::from_millis(20),
    )
    .unwrap();
    drop(nodes.remove(at));
}

/// Starts every node of `config`, each on a thread of its own.
fn start(config: &Config) -> Vec<Node> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..config.nodes)
            .map(|n| {
                let c = config.clone();
                s.spawn(move || Node::start(c, n).unwrap())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Writes `puts` values of various lengths to `keys` keys, from every node
/// in turn; returns each key's last value.
fn write_some(nodes: &[Node], puts: u32, keys: u32) -> HashMap<String, Vec<u8>> {
    let mut model = HashMap::new();
    let mut writers: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
    for i in 0..puts {
        let key = format!("key-{}", i % keys);
        let value = vec![i as u8; (i as usize * 53) % 3000];
        writers[i as usize % nodes.len()]
            .put(key.as_bytes(), &value)
            .unwrap();
        model.insert(key, value);
    }
    model
}

#[test]
fn a_lost_shm_node_is_survived_restored_and_the_next_loss_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let mut nodes = start(&config);
    let model = write_some(&nodes, 200, 70);
    lose(&config, &mut nodes, 1);
    every_node_serves(&nodes, &model);
    let replacement = Node::rejoin(config.clone(), 1).expect("rejoin on shm");
    assert!(replacement.restore_figures().unwrap().data_slots > 0);
    nodes.insert(1, replacement);
    every_node_serves(&nodes, &model);
    lose(&config, &mut nodes, 2);
    every_node_serves(&nodes, &model);
}

#[test]
fn with_three_replicas_on_five_nodes_two_hosts_lost_at_once_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = sized(dir.path(), 5, 3);
    let mut nodes = start(&config);
    let model = write_some(&nodes, 250, 100);
    // Nodes 1 and 3 go together: every share keeps one copy, and three of
    // five members are a majority.
    lose(&config, &mut nodes, 3);
    lose(&config, &mut nodes, 1);
    every_node_serves(&nodes, &model);
}

/// Two neighbours lost together with two replicas: share 1 (on nodes 1
/// and 2) has no copy left. Three of five members still agree on a view;
/// then a key that needs share 1 fails with `Error::DataLost` (never
/// "absent", never another value), and every other key is served.
#[test]
fn a_share_with_no_copy_left_is_reported_lost_never_absent() {
    let dir = tempfile::tempdir().unwrap();
    let config = sized(dir.path(), 5, 2);
    let mut nodes = start(&config);
    let model = write_some(&nodes, 250, 100);
    lose(&config, &mut nodes, 2);
    lose(&config, &mut nodes, 1);
    let limit = Instant::now() + Duration::from_secs(30);
    let mut client = nodes[0].client().unwrap();
    let (mut served, mut lost) = (0, 0);
    for (key, value) in &model {
        loop {
            match client.get(key.as_bytes()) {
                Ok(got) => {
                    assert_eq!(got.as_ref(), Some(value), "{key}");
                    served += 1;
                    break;
                }
                Err(nessie::Error::DataLost { share }) => {
                    assert_eq!(share, 1, "{key}");
                    lost += 1;
                    break;
                }
                Err(e) => {
                    assert!(Instant::now() < limit, "{key}: {e}");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
    assert!(served > 0 && lost > 0, "served {served}, lost {lost}");
    eprintln!("{served} keys served, {lost} reported lost");
}
