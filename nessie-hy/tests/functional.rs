//! Behaviour of the hybrid store of its own. What every store does is
//! checked by nessie-check's `KvClient` conformance suite.

use nessie::{Config, Error};

#[test]
fn node_start_needs_the_shm_fabric() {
    assert!(matches!(
        nessie_hy::Node::start(Config::default(), 0),
        Err(Error::Config(_))
    ));
}
