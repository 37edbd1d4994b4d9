//! A PUT whose linking CAS the fabric refuses (an error that says the CAS
//! certainly did not execute) gives its fresh slot back at once; only a CAS
//! of unknown outcome leaves the slot in doubt for the recycler, and so
//! does any error of a batch where the reverse pass rides behind the CAS
//! (the error may be a READ's, after the CAS took effect).

use nessie::fabric::{Fabric, FabricError, NodeId, RegionId, RemoteAddr};
use nessie::layout::region;
use nessie::{Cluster, Config, Error};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Which verb of the next link on an index region fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refuse {
    /// The CAS: with an error of unknown outcome (a broken connection) or
    /// a certain refusal.
    Cas { unknown_outcome: bool },
    /// The first index READ after the CAS, which executed: a certain
    /// refusal of that READ.
    ReadAfterCas,
}

/// Fails a verb of the next CAS on an index region once armed.
#[derive(Debug)]
struct RefuseIndexVerb {
    inner: Arc<dyn Fabric>,
    armed: Arc<AtomicBool>,
    refuse: Refuse,
    /// What `keeps_batch_order` says (the default `post`, used here, runs
    /// verbs in batch order either way).
    ordered: bool,
    read_armed: AtomicBool,
}

impl Fabric for RefuseIndexVerb {
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
    fn keeps_batch_order(&self) -> bool {
        self.ordered
    }
    fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
        if addr.region == region::INDEX && self.read_armed.swap(false, Ordering::Relaxed) {
            return Err(FabricError::UnknownRegion {
                node: addr.node,
                region: addr.region,
            });
        }
        self.inner.read(addr, buf)
    }
    fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
        self.inner.write(addr, data)
    }
    fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
        if addr.region != region::INDEX || !self.armed.swap(false, Ordering::Relaxed) {
            return self.inner.cas(addr, expected, new);
        }
        match self.refuse {
            Refuse::Cas {
                unknown_outcome: true,
            } => Err(FabricError::Disconnected {
                node: addr.node,
                source: std::io::Error::other("the test cut the link"),
            }),
            Refuse::Cas {
                unknown_outcome: false,
            } => Err(FabricError::UnknownRegion {
                node: addr.node,
                region: addr.region,
            }),
            Refuse::ReadAfterCas => {
                let old = self.inner.cas(addr, expected, new);
                self.read_armed.store(true, Ordering::Relaxed);
                old
            }
        }
    }
}

/// Free slots of every class of node 0 after one refused PUT from node 0,
/// and the free slots before it.
fn free_slots_around_a_refused_put(refuse: Refuse, ordered: bool) -> (usize, usize) {
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
            Arc::new(RefuseIndexVerb {
                inner,
                armed: switch,
                refuse,
                ordered,
                read_armed: AtomicBool::new(false),
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

/// Alone, a refused CAS is known not to have executed. With the reverse
/// pass riding behind it, the batch's error may be a READ's after the CAS
/// took effect, so the slot is left in doubt either way.
#[test]
fn a_refused_link_gives_the_slot_back_unless_reads_ride_it() {
    for ordered in [false, true] {
        let refuse = Refuse::Cas {
            unknown_outcome: false,
        };
        let (before, after) = free_slots_around_a_refused_put(refuse, ordered);
        assert_eq!(after + usize::from(ordered), before, "ordered: {ordered}");
    }
}

#[test]
fn a_link_of_unknown_outcome_keeps_the_slot_in_doubt() {
    for ordered in [false, true] {
        let refuse = Refuse::Cas {
            unknown_outcome: true,
        };
        let (before, after) = free_slots_around_a_refused_put(refuse, ordered);
        assert_eq!(
            after + 1,
            before,
            "the slot of a CAS that may have landed was reused (ordered: {ordered})"
        );
    }
}

/// The reverse pass riding behind the link (docs/design.md#put, step 7):
/// its READ's refusal says nothing of the CAS before it, which linked.
#[test]
fn a_refused_read_behind_a_link_keeps_the_slot_in_doubt() {
    let (before, after) = free_slots_around_a_refused_put(Refuse::ReadAfterCas, true);
    assert_eq!(
        after + 1,
        before,
        "the slot of a linked entry was given back"
    );
}
