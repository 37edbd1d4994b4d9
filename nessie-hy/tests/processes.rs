//! A cluster of three node processes on shared memory.

#[path = "../../nessie-sd/tests/common/mod.rs"]
mod common;

#[test]
fn three_node_processes_share_one_store() {
    common::run_node_processes("node_process");
}

#[test]
#[ignore = "one node of three_node_processes_share_one_store, started by it"]
fn node_process() {
    common::node_process(nessie_hy::Node::start, nessie_hy::Node::client);
}
