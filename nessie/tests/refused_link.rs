//! A PUT whose linking CAS the fabric refuses (an error that says the CAS
//! certainly did not execute) gives its fresh slot back at once; only a CAS
//! of unknown outcome leaves the slot in doubt for the recycler.

use nessie::fabric::{Fabric, FabricError, NodeId, RegionId, RemoteAddr};
use nessie::layout::region;
use nessie::{Cluster, Config, Error};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Fails the next CAS on an index region once armed: with an error of
/// unknown outcome (a broken connection) or a certain refusal.
#[derive(Debug)]
struct RefuseIndexCas {
    inner: Arc<dyn Fabric>,
    armed: Arc<AtomicBool>,
    unknown_outcome: bool,
}

impl Fabric for RefuseIndexCas {
    fn nodes(&self) -> usize {
        self.inner.nodes()
    }

    fn fence_node(&self, node: usize) {
        self.inner.fence_node(node);
    }

    fn readmit_node(&self, node: usize) {
        self.inner.readmit_node(node);
    }
    fn region_len(&self, node: NodeId, region: RegionId) -> Option<u64> {
        self.inner.region_len(node, region)
    }
    fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
        self.inner.read(addr, buf)
    }
    fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
        self.inner.write(addr, data)
    }
    fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
        if addr.region == region::INDEX && self.armed.swap(false, Ordering::Relaxed) {
            return Err(if self.unknown_outcome {
                FabricError::Disconnected {
                    node: addr.node,
                    source: std::io::Error::other("the test cut the link"),
                }
            } else {
                FabricError::UnknownRegion {
                    node: addr.node,
                    region: addr.region,
                }
            });
        }
        self.inner.cas(addr, expected, new)
    }
}

/// Free slots of every class of node 0 after one refused PUT from node 0,
/// and the free slots before it.
fn free_slots_around_a_refused_put(unknown_outcome: bool) -> (usize, usize) {
    let armed = Arc::new(AtomicBool::new(false));
    let switch = Arc::clone(&armed);
    let config = Config {
        index_slots_per_node: 1024,
        data_bytes_per_node: 16 << 20,
        value_size_max: 16 << 10,
        ..Config::default()
    };
    let cluster = Cluster::builder(config)
        .recycler(false)
        .wrap_fabric(move |inner| {
            Arc::new(RefuseIndexCas {
                inner,
                armed: switch,
                unknown_outcome,
            })
        })
        .build()
        .unwrap();
    let data = cluster.node_data(0).unwrap();
    let free = || {
        (0..data.classes() as u8)
            .map(|c| data.available(c))
            .sum::<usize>()
    };
    let mut client = cluster.client(0).unwrap();
    client.put(b"warm-up", b"w").unwrap();
    let before = free();
    armed.store(true, Ordering::Relaxed);
    let e = client.put(b"refused", b"value").unwrap_err();
    assert!(matches!(e, Error::Fabric(_)), "{e}");
    (before, free())
}

#[test]
fn a_refused_link_gives_the_slot_back() {
    let (before, after) = free_slots_around_a_refused_put(false);
    assert_eq!(
        after, before,
        "the slot of a CAS that never executed was kept"
    );
}

#[test]
fn a_link_of_unknown_outcome_keeps_the_slot_in_doubt() {
    let (before, after) = free_slots_around_a_refused_put(true);
    assert_eq!(
        after + 1,
        before,
        "the slot of a CAS that may have landed was reused"
    );
}
