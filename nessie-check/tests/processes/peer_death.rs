//! A peer killed on the `tcp` fabric (three node processes meeting through
//! the rendezvous on 127.0.0.1): the survivors' operations all return,
//! those that need the dead node's memory with typed errors within about
//! `op_timeout`, the others with success. This is a cluster without
//! replicas (r = 1): the dead node's share is gone with it. With r = 2 the
//! survivors take its share over and serve every key again; that is
//! `replicated_kill.rs`.

use nessie::{Config, FabricConfig};
use nessie_check::process::peer_death;
use nessie_check::process::workload::test_name;
use std::time::Duration;

fn tcp(cluster: &str, rendezvous: &str) -> Config {
    Config {
        cluster: cluster.into(),
        nodes: peer_death::NODES,
        index_slots_per_node: 1024,
        data_bytes_per_node: 8 << 20,
        value_size_max: 4096,
        fabric: FabricConfig::Tcp {
            peers: Vec::new(),
            rendezvous: Some(rendezvous.into()),
            join: Vec::new(),
            secret: "peer-death-test-secret-0123456789".into(),
            threads: 2,
        },
        attach_timeout: Duration::from_secs(30),
        ..Config::default()
    }
}

#[test]
fn a_killed_peer_fails_only_what_needs_it() {
    let _cluster = super::one_cluster_at_a_time();
    let rendezvous = nessie_fabric::conformance::bootstrap::free_address();
    let survivors = peer_death::run(&test_name(module_path!(), "child_node"), &rendezvous);
    let config = tcp("x", &rendezvous);
    for (node, s) in survivors.iter().enumerate() {
        println!(
            "PEER-DEATH tcp survivor {node}: {} ok, {} failed, slowest failure {:.1} ms, slowest op {:.1} ms (op_timeout {:?}); errors: {:?}",
            s.ok, s.failed, s.slowest_failure_ms, s.slowest_ms, config.op_timeout, s.errors
        );
    }
    peer_death::check(&survivors, config.op_timeout, Duration::from_secs(1));
}

/// One node process (run only when spawned by the test above).
#[test]
#[ignore = "run as a child process by a_killed_peer_fails_only_what_needs_it"]
fn child_node() {
    peer_death::child(tcp);
}
