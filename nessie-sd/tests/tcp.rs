//! Three nodes on the `tcp` fabric (the software NIC), started in this
//! process on 127.0.0.1 ports: the store works unchanged over it.

mod common;

#[test]
fn three_nodes_on_the_tcp_fabric() {
    let nodes = common::tcp_nodes(nessie_sd::Node::start);
    let mut clients: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
    common::across_nodes(&mut clients);
}
