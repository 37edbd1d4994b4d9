//! The fabric conformance suite and the bootstrap suite on the `verbs`
//! backend.
//!
//! These tests need an RDMA device, so they are `#[ignore]`d: run them with
//! `--ignored` and the device's name in `NESSIE_VERBS_DEVICE` (optionally a
//! GID index in `NESSIE_VERBS_GID`), e.g. Soft-RoCE's `rxe0` inside the VM
//! of `scripts/rxe-vm.sh`. Each cluster is three `VerbsFabric`s opened in
//! this process, every one with its own device context and queue pairs,
//! meeting through the authenticated rendezvous on 127.0.0.1, so every
//! verb (even node 0's to node 1) goes through the NIC
//! (`nessie_fabric::conformance::verbs`). The bootstrap suite (other
//! secret, replayed and tampered messages, duplicate id, other node count)
//! runs here too, and so does `a_fenced_node_is_refused_both_ways`
//! ([`Fabric::fence_node`]). `a_missing_device_is_a_typed_error` needs no hardware and
//! always runs. The store's half (its verbs against `shm`'s) is
//! `nessie-check/tests/verbs_store.rs`.

#![cfg(feature = "verbs")]

use nessie_fabric::conformance::bootstrap::reason;
use nessie_fabric::conformance::verbs::{
    device, gid_index, next_cluster, open_all, open_cluster, options, rendezvous_listener, SECRET,
};
use nessie_fabric::conformance::{self, ClusterSpec, Factory, FORMAT_VERSION, LARGE, SMALL};
use nessie_fabric::{
    Fabric, FabricError, HandshakeFailure, Joins, Membership, RcTimeouts, RegionSpec, RemoteAddr,
    RendezvousFailure, RendezvousOptions, Verb, VerbsFabric, VerbsOptions,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn verbs(check: impl FnOnce(Factory<'_>)) {
    let make = |spec: &ClusterSpec| {
        open_cluster(spec)
            .into_iter()
            .map(|f| Arc::new(f) as Arc<dyn Fabric>)
            .collect()
    };
    check(&make);
}

// More threads than lanes: some threads share queue pairs.
nessie_fabric::fabric_conformance_tests!(
    verbs,
    threads: 6,
    per_thread: 300,
    rounds: 300,
    #[ignore = "needs an RDMA device: set NESSIE_VERBS_DEVICE and run with --ignored"]
);

#[test]
fn a_missing_device_is_a_typed_error() {
    let (_listener, addr) = rendezvous_listener();
    let mut o = VerbsOptions {
        device: Some("nessie-no-such-device".into()),
        gid_index: None,
        rendezvous: RendezvousOptions {
            membership: Membership {
                cluster_id: 1,
                format_version: FORMAT_VERSION,
                node: 0,
                nodes: 1,
                regions: conformance::suite_spec().regions,
            },
            secret: SECRET.into(),
            address: addr,
            serve: true,
            timeout: Duration::from_secs(1),
        },
        lanes: 1,
        retransmission: RcTimeouts::default(),
        joins: Joins::Off,
    };
    match VerbsFabric::open(&o) {
        Err(FabricError::NoDevice { wanted, found }) => {
            assert_eq!(wanted.as_deref(), Some("nessie-no-such-device"));
            assert!(!found.iter().any(|d| d == "nessie-no-such-device"));
        }
        other => panic!("expected NoDevice, got {other:?}"),
    }
    o.rendezvous.membership.node = 3;
    assert!(matches!(
        VerbsFabric::open(&o),
        Err(FabricError::UnknownNode { node: 3, nodes: 1 })
    ));
}

/// Opens a verbs node for the bootstrap suite.
fn open_verbs(rendezvous: RendezvousOptions) -> Result<Arc<dyn Fabric>, FabricError> {
    let options = VerbsOptions {
        device: Some(device()),
        gid_index: gid_index(),
        rendezvous,
        lanes: 2,
        retransmission: RcTimeouts::default(),
        joins: Joins::Off,
    };
    Ok(Arc::new(VerbsFabric::open(&options)?))
}

// Another secret, replayed and tampered messages, a duplicate node id and
// another node count: typed errors, and the honest nodes still open.
nessie_fabric::bootstrap_tests!(
    open_verbs,
    next_cluster,
    #[ignore = "needs an RDMA device: set NESSIE_VERBS_DEVICE and run with --ignored"]
);

#[test]
#[ignore = "needs an RDMA device: set NESSIE_VERBS_DEVICE and run with --ignored"]
fn peers_of_another_cluster_or_configuration_are_refused_on_both_sides() {
    let spec = conformance::suite_spec();
    let short = |mut o: VerbsOptions| {
        o.rendezvous.timeout = Duration::from_secs(5);
        o
    };
    // Another cluster id: the registering node is refused, naming both;
    // the serving node never hears from a node of its own cluster.
    let (l, addr) = rendezvous_listener();
    let all = vec![
        short(options(0, 2, &addr, next_cluster(), &spec.regions)),
        short(options(1, 2, &addr, next_cluster(), &spec.regions)),
    ];
    let results = open_all(all, l);
    let e = results[1].as_ref().expect_err("clusters differ");
    assert!(
        matches!(
            reason(e),
            RendezvousFailure::Membership(HandshakeFailure::Cluster { .. })
        ),
        "{e}"
    );
    let e = results[0].as_ref().expect_err("node 1 never registered");
    assert!(
        matches!(reason(e), RendezvousFailure::Missing { nodes, .. } if nodes == &[1]),
        "{e}"
    );
    // Another region size: refused naming the region.
    let (l, addr) = rendezvous_listener();
    let id = next_cluster();
    let mut smaller = spec.regions.clone();
    smaller[1].len /= 2;
    let all = vec![
        short(options(0, 2, &addr, id, &spec.regions)),
        short(options(1, 2, &addr, id, &smaller)),
    ];
    let results = open_all(all, l);
    let e = results[1].as_ref().expect_err("region sizes differ");
    assert!(
        matches!(reason(e), RendezvousFailure::Membership(HandshakeFailure::RegionSize { region, .. }) if *region == spec.regions[1].id),
        "{e}"
    );
    // A rendezvous nobody serves.
    let (l, addr) = rendezvous_listener();
    drop(l);
    let mut lonely = options(1, 2, &addr, next_cluster(), &spec.regions);
    lonely.rendezvous.timeout = Duration::from_secs(1);
    let e = VerbsFabric::open(&lonely).expect_err("no server");
    assert!(
        matches!(reason(&e), RendezvousFailure::Unreachable { .. }),
        "{e}"
    );
}

#[test]
#[ignore = "needs an RDMA device: set NESSIE_VERBS_DEVICE and run with --ignored"]
fn large_batches_are_split_and_large_verbs_staged() {
    let spec = ClusterSpec {
        nodes: 2,
        regions: vec![RegionSpec {
            id: LARGE,
            len: 8 << 20,
        }],
    };
    let views = open_cluster(&spec);
    // A 6 MiB WRITE and READ: split into 1 MiB work requests, staged in two
    // chunks.
    let big: Vec<u8> = (0..6 << 20).map(|i: u32| (i % 251) as u8).collect();
    let at = RemoteAddr::new(1, LARGE, 8);
    views[0].write(at, &big).expect("big WRITE");
    let mut back = vec![0u8; big.len()];
    views[0].read(at, &mut back).expect("big READ");
    assert!(back == big, "big READ returns the big WRITE");
    // A split READ and a CAS in one batch: the CAS result comes back too.
    let mut part = vec![0u8; 2 << 20];
    let word = RemoteAddr::new(0, LARGE, 0);
    let mut mixed = [
        Verb::Read {
            addr: at,
            buf: &mut part,
        },
        Verb::Cas {
            addr: word,
            expected: 0,
            new: 42,
            old: 7,
        },
    ];
    views[1].post(&mut mixed).expect("mixed batch");
    assert!(matches!(mixed[1], Verb::Cas { old: 0, .. }));
    assert!(part[..] == big[..2 << 20]);
    assert_eq!(views[1].cas(word, 42, 0).unwrap(), 42);
    // 200 verbs in one batch: several chunks, both nodes.
    let mut bufs = vec![[0u8; 8]; 100];
    let mut batch: Vec<Verb<'_>> = Vec::new();
    for (i, buf) in bufs.iter_mut().enumerate() {
        batch.push(Verb::Read {
            addr: RemoteAddr::new(i % 2, LARGE, 8 * (1 + i as u64)),
            buf,
        });
    }
    for i in 0..100u64 {
        batch.push(Verb::Cas {
            addr: RemoteAddr::new((i % 2) as usize, LARGE, (8 << 20) - 8 * (1 + i)),
            expected: 0,
            new: i + 1,
            old: 99,
        });
    }
    views[1].post(&mut batch).expect("batch of 200");
    assert!(batch[100..]
        .iter()
        .all(|v| matches!(v, Verb::Cas { old: 0, .. })));
    drop(batch);
    for (i, buf) in bufs.iter().enumerate() {
        let expected: [u8; 8] = if i % 2 == 1 {
            big[8 * i..8 * i + 8].try_into().unwrap()
        } else {
            [0; 8]
        };
        assert_eq!(*buf, expected, "READ {i} of the batch");
    }
    for i in 0..100u64 {
        let mut w = [0u8; 8];
        views[0]
            .read(
                RemoteAddr::new((i % 2) as usize, LARGE, (8 << 20) - 8 * (1 + i)),
                &mut w,
            )
            .unwrap();
        assert_eq!(u64::from_le_bytes(w), i + 1);
    }
}

/// Node 0 fences node 2, as a member does when the view names 2 lost:
/// node 0's verbs to node 2 are refused before anything is posted, and
/// node 2, a zombie whose memory is still registered, reaches none of node
/// 0's memory from any lane. Node 1, which fenced no one, still talks to
/// both.
#[test]
#[ignore = "needs an RDMA device: set NESSIE_VERBS_DEVICE and run with --ignored"]
fn a_fenced_node_is_refused_both_ways() {
    let spec = ClusterSpec {
        nodes: 3,
        regions: vec![RegionSpec {
            id: SMALL,
            len: 4096,
        }],
    };
    let views = open_cluster(&spec);
    let word = |node| RemoteAddr::new(node, SMALL, 64);
    let value = |f: &VerbsFabric, at| {
        let mut w = [0u8; 8];
        f.read(at, &mut w).expect("a READ between members");
        u64::from_le_bytes(w)
    };
    views[0].write(word(0), &1u64.to_le_bytes()).unwrap();
    views[2].write(word(2), &5u64.to_le_bytes()).unwrap();
    assert_eq!(
        views[2].cas(word(0), 1, 2).unwrap(),
        1,
        "node 2 reaches node 0"
    );
    views[0].fence_node(2);
    views[0].fence_node(0); // itself: nothing happens
    views[0].fence_node(7); // not a node: nothing happens
    assert_eq!(views[0].fenced_nodes(), [2]);

    // Node 0's verbs to node 2: refused, none posted.
    let mut w = [0u8; 8];
    let mine = [
        views[0].read(word(2), &mut w).err(),
        views[0].write(word(2), &9u64.to_le_bytes()).err(),
        views[0].cas(word(2), 5, 9).err(),
        views[0]
            .post(&mut [Verb::Read {
                addr: word(2),
                buf: &mut w,
            }])
            .err(),
    ];
    for e in &mine {
        assert!(
            matches!(e, Some(FabricError::Lost { node: 2 })),
            "node 0's verb to node 2: {e:?}"
        );
    }

    // Node 2's verbs to node 0, from more threads than lanes: every one
    // fails (its queue pair meets a responder in the error state).
    let threads = 2 * nessie_fabric::DEFAULT_LANES;
    let reached: usize = std::thread::scope(|s| {
        let zombie = &views[2];
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut w = [0u8; 8];
                    let verbs = [
                        zombie
                            .write(word(0), &(100 + t as u64).to_le_bytes())
                            .is_ok(),
                        zombie.cas(word(0), 2, 200 + t as u64).is_ok(),
                        zombie.read(word(0), &mut w).is_ok(),
                    ];
                    verbs.iter().filter(|&&ok| ok).count()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(reached, 0, "verbs of the fenced node that reached node 0");
    assert_eq!(
        value(&views[0], word(0)),
        2,
        "node 0's word, read by itself"
    );
    assert_eq!(
        value(&views[1], word(0)),
        2,
        "node 0's word, read by node 1"
    );

    // Node 1 fenced no one: it reaches both, and node 2 reaches it.
    assert_eq!(value(&views[1], word(2)), 5);
    views[2].write(word(1), &7u64.to_le_bytes()).unwrap();
    assert_eq!(value(&views[1], word(1)), 7);
    assert_eq!(value(&views[0], word(1)), 7);
    assert!(views[1].fenced_nodes().is_empty());
}

/// A replacement of a lost node (same id, a new device context, new queue
/// pairs, newly registered regions) reconnects to every member through
/// their reconnection service: refused while the members have not fenced
/// the node, refused under another secret; then it reaches the members'
/// memory at once, while their verbs to it stay refused until they
/// readmit it, and then reach its new memory, not its predecessor's.
#[test]
#[ignore = "needs an RDMA device: set NESSIE_VERBS_DEVICE and run with --ignored"]
fn a_replacement_reconnects_and_is_refused_until_readmitted() {
    let (nodes, regions) = (
        3,
        vec![RegionSpec {
            id: SMALL,
            len: 4096,
        }],
    );
    let (listener, addr) = rendezvous_listener();
    let id = next_cluster();
    let node = |n: usize, joins: Joins| VerbsOptions {
        joins,
        ..options(n, nodes, &addr, id, &regions)
    };
    let all = (0..nodes).map(|n| node(n, Joins::Serve)).collect();
    let mut views: Vec<VerbsFabric> = open_all(all, listener)
        .into_iter()
        .map(|f| f.expect("a member opens"))
        .collect();
    let word = |n| RemoteAddr::new(n, SMALL, 64);
    let value = |f: &VerbsFabric, at| {
        let mut w = [0u8; 8];
        f.read(at, &mut w).expect("a READ");
        u64::from_le_bytes(w)
    };
    views[0].write(word(0), &1u64.to_le_bytes()).unwrap();
    views[2].write(word(2), &5u64.to_le_bytes()).unwrap();
    assert_eq!(value(&views[0], word(2)), 5);
    // Node 2 is lost: its process ends (its queue pairs and services go).
    drop(views.pop());
    let replacement = |timeout: Duration, secret: &str| {
        let mut o = node(2, Joins::Replace { also: Vec::new() });
        o.rendezvous.timeout = timeout;
        o.rendezvous.secret = secret.into();
        VerbsFabric::open(&o)
    };
    // Not fenced yet: the members count node 2 alive and refuse it.
    match replacement(Duration::from_secs(4), SECRET) {
        Err(FabricError::Rendezvous {
            reason: RendezvousFailure::Refused(why),
            ..
        }) => assert!(matches!(*why, RendezvousFailure::Duplicate(2)), "{why}"),
        other => panic!("a replacement of an unfenced node: {other:?}"),
    }
    for v in &views {
        v.fence_node(2);
    }
    // Another secret: refused, and the members keep node 2 fenced.
    let stranger = replacement(Duration::from_secs(4), "not-the-cluster-secret");
    assert!(
        matches!(&stranger, Err(FabricError::Rendezvous { .. })),
        "a replacement under another secret: {stranger:?}"
    );
    let fresh = replacement(Duration::from_secs(60), SECRET).expect("the replacement opens");
    // It reaches the members at once; their verbs to it stay refused.
    assert_eq!(value(&fresh, word(0)), 1);
    assert_eq!(fresh.cas(word(1), 0, 3).unwrap(), 0);
    assert_eq!(value(&views[1], word(1)), 3);
    for v in &views {
        assert_eq!(v.fenced_nodes(), [2]);
        let mut w = [0u8; 8];
        assert!(
            matches!(v.read(word(2), &mut w), Err(FabricError::Lost { node: 2 })),
            "a member's verb to the fenced node"
        );
    }
    // Readmitted: they reach its new memory (its predecessor's 5 is gone).
    for v in &views {
        v.readmit_node(2);
        assert!(v.fenced_nodes().is_empty());
    }
    assert_eq!(value(&views[0], word(2)), 0);
    views[0].write(word(2), &7u64.to_le_bytes()).unwrap();
    assert_eq!(views[1].cas(word(2), 7, 8).unwrap(), 7);
    assert_eq!(value(&fresh, word(2)), 8);
    assert_eq!(value(&views[0], word(2)), 8);
    assert!(fresh.fenced_nodes().is_empty());
}

fn median_us(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1e6
}

fn time(n: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..n / 10 {
        f();
    }
    median_us(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

#[test]
#[ignore = "needs an RDMA device: set NESSIE_VERBS_DEVICE and run with --ignored"]
fn latency_report() {
    let spec = ClusterSpec {
        nodes: 2,
        regions: vec![
            RegionSpec {
                id: SMALL,
                len: 64 << 10,
            },
            RegionSpec {
                id: LARGE,
                len: 1 << 20,
            },
        ],
    };
    let views = open_cluster(&spec);
    let f = &views[0];
    for (target, label) in [(1, "remote"), (0, "loopback")] {
        let word = RemoteAddr::new(target, SMALL, 4096);
        let block = RemoteAddr::new(target, LARGE, 64 << 10);
        let mut b8 = [0u8; 8];
        let mut b16k = vec![0u8; 16 << 10];
        let data = vec![0x5au8; 16 << 10];
        let read8 = time(500, || f.read(word, &mut b8).unwrap());
        let read16k = time(200, || f.read(block, &mut b16k).unwrap());
        let write16k = time(200, || f.write(block, &data).unwrap());
        let mut v = 0u64;
        let cas = time(500, || {
            v = f.cas(word, v, v + 1).unwrap() + 1;
        });
        let mut c = [[0u8; 8]; 3];
        let batch3 = time(300, || {
            let [x, y, z] = &mut c;
            f.post(&mut [
                Verb::Read { addr: word, buf: x },
                Verb::Read {
                    addr: word.add(8),
                    buf: y,
                },
                Verb::Read {
                    addr: word.add(16),
                    buf: z,
                },
            ])
            .unwrap();
        });
        println!(
            "VERBS-LATENCY {label} (median µs): READ 8 B {read8:.1}, READ 16 KiB {read16k:.1}, WRITE 16 KiB {write16k:.1}, CAS {cas:.1}, 3 READs in one batch {batch3:.1}"
        );
    }
}
