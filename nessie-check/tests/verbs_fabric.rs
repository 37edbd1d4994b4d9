//! The fabric conformance suite and the store on the `verbs` backend.
//!
//! These tests need an RDMA device, so they are `#[ignore]`d: run them with
//! `--ignored` and the device's name in `NESSIE_VERBS_DEVICE` (optionally a
//! GID index in `NESSIE_VERBS_GID`), e.g. Soft-RoCE's `rxe0` inside the VM
//! of `scripts/rxe-vm.sh`. Each cluster is three `VerbsFabric`s opened in
//! this process, every one with its own device context and queue pairs,
//! meeting through the authenticated rendezvous on 127.0.0.1, so every
//! verb (even node 0's to node 1) goes through the NIC. The bootstrap suite
//! (other secret, replayed and tampered messages, duplicate id, other node
//! count) runs here too. `a_missing_device_is_a_typed_error` needs no
//! hardware and always runs.

#![cfg(feature = "verbs")]

use nessie::fabric::Membership;
use nessie::fabric::{
    Fabric, FabricError, HandshakeFailure, RcTimeouts, RegionSpec, RemoteAddr, RendezvousFailure,
    RendezvousOptions, ShmFabric, ShmOptions, Verb, VerbCounts, VerbsFabric, VerbsOptions,
    DEFAULT_LANES,
};
use nessie::layout::{region, FORMAT_VERSION};
use nessie::{store_regions, Config, Node, Stats};
use nessie_check::conformance::bootstrap::reason;
use nessie_check::conformance::{self, ClusterSpec, Factory};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DEVICE_ENV: &str = "NESSIE_VERBS_DEVICE";
const GID_ENV: &str = "NESSIE_VERBS_GID";

fn device() -> String {
    std::env::var(DEVICE_ENV).unwrap_or_else(|_| {
        panic!("set {DEVICE_ENV} to an RDMA device (e.g. rxe0) to run the verbs tests")
    })
}

fn gid_index() -> Option<u32> {
    std::env::var(GID_ENV)
        .ok()
        .and_then(|v| v.trim().parse().ok())
}

/// A fresh cluster id per cluster, so no two clusters of a run can talk.
fn next_cluster() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    0x7665_7262_0000_0000
        | u64::from(std::process::id()) << 16
        | NEXT.fetch_add(1, Ordering::Relaxed)
}

const SECRET: &str = "verbs-fabric-test-secret-0123456789";

/// Node `node`'s options in a cluster of `nodes` meeting at `address`.
fn options(
    node: usize,
    nodes: usize,
    address: &str,
    cluster_id: u64,
    regions: &[RegionSpec],
) -> VerbsOptions {
    VerbsOptions {
        device: Some(device()),
        gid_index: gid_index(),
        rendezvous: RendezvousOptions {
            membership: Membership {
                cluster_id,
                format_version: FORMAT_VERSION,
                node,
                nodes,
                regions: regions.to_vec(),
            },
            secret: SECRET.into(),
            address: address.into(),
            serve: node == 0,
            timeout: Duration::from_secs(60),
        },
        lanes: DEFAULT_LANES,
        retransmission: RcTimeouts::default(),
    }
}

/// Opens one fabric per option set concurrently (each waits for the
/// others through the rendezvous), node 0 serving on `listener`.
fn open_all(
    all: Vec<VerbsOptions>,
    listener: TcpListener,
) -> Vec<Result<VerbsFabric, FabricError>> {
    let mut listener = Some(listener);
    std::thread::scope(|s| {
        let handles: Vec<_> = all
            .into_iter()
            .map(|o| {
                let serving = listener.take().filter(|_| o.rendezvous.serve);
                s.spawn(move || match serving {
                    Some(l) => VerbsFabric::open_serving(&o, l),
                    None => VerbsFabric::open(&o),
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("opening thread"))
            .collect()
    })
}

/// A listener for the serving node on 127.0.0.1 and its address.
fn rendezvous_listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind the rendezvous");
    let addr = l.local_addr().expect("bound address").to_string();
    (l, addr)
}

fn open_cluster(spec: &ClusterSpec) -> Vec<VerbsFabric> {
    let (listener, addr) = rendezvous_listener();
    let id = next_cluster();
    let all: Vec<_> = (0..spec.nodes)
        .map(|n| options(n, spec.nodes, &addr, id, &spec.regions))
        .collect();
    open_all(all, listener)
        .into_iter()
        .enumerate()
        .map(|(n, f)| f.unwrap_or_else(|e| panic!("node {n}: {e}")))
        .collect()
}

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
nessie_check::fabric_conformance_tests!(
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
    };
    Ok(Arc::new(VerbsFabric::open(&options)?))
}

// Another secret, replayed and tampered messages, a duplicate node id and
// another node count: typed errors, and the honest nodes still open.
nessie_check::bootstrap_tests!(
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
            id: region::data(0),
            len: 8 << 20,
        }],
    };
    let views = open_cluster(&spec);
    // A 6 MiB WRITE and READ: split into 1 MiB work requests, staged in two
    // chunks.
    let big: Vec<u8> = (0..6 << 20).map(|i: u32| (i % 251) as u8).collect();
    let at = RemoteAddr::new(1, region::data(0), 8);
    views[0].write(at, &big).expect("big WRITE");
    let mut back = vec![0u8; big.len()];
    views[0].read(at, &mut back).expect("big READ");
    assert!(back == big, "big READ returns the big WRITE");
    // A split READ and a CAS in one batch: the CAS result comes back too.
    let mut part = vec![0u8; 2 << 20];
    let word = RemoteAddr::new(0, region::data(0), 0);
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
            addr: RemoteAddr::new(i % 2, region::data(0), 8 * (1 + i as u64)),
            buf,
        });
    }
    for i in 0..100u64 {
        batch.push(Verb::Cas {
            addr: RemoteAddr::new((i % 2) as usize, region::data(0), (8 << 20) - 8 * (1 + i)),
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
                RemoteAddr::new((i % 2) as usize, region::data(0), (8 << 20) - 8 * (1 + i)),
                &mut w,
            )
            .unwrap();
        assert_eq!(u64::from_le_bytes(w), i + 1);
    }
}

fn store_config(cluster: &str) -> Config {
    Config {
        cluster: cluster.into(),
        nodes: 3,
        index_slots_per_node: 1024,
        data_bytes_per_node: 8 << 20,
        value_size_max: 16 << 10,
        ..Config::default()
    }
}

/// What [`scripted_ops`] measured: each client's statistics, and the verbs
/// of one PUT of a new key (node 0) and one GET of it (node 1, remote).
struct Measured {
    a: Stats,
    b: Stats,
    one_put: VerbCounts,
    one_get: VerbCounts,
}

/// Runs the same operations on a three-node cluster: node 0 writes and
/// reads, node 1 reads.
fn scripted_ops(nodes: &[Node]) -> Measured {
    let mut a = nodes[0].client().unwrap();
    let mut b = nodes[1].client().unwrap();
    let before = a.stats().put.verbs;
    a.put(b"verbs-count-first", &[7u8; 1000]).unwrap();
    let one_put = a.stats().put.verbs - before;
    let before = b.stats().get.verbs;
    assert_eq!(b.get(b"verbs-count-first").unwrap(), Some(vec![7u8; 1000]));
    let one_get = b.stats().get.verbs - before;
    for i in 0..8 {
        let key = format!("verbs-count-{i}");
        a.put(key.as_bytes(), &vec![i as u8; 100 + 1000 * i])
            .unwrap();
        assert_eq!(
            a.get(key.as_bytes()).unwrap().map(|v| v.len()),
            Some(100 + 1000 * i)
        );
        assert!(b.get(key.as_bytes()).unwrap().is_some());
        a.put(key.as_bytes(), b"second").unwrap();
        assert_eq!(
            b.get(key.as_bytes()).unwrap().as_deref(),
            Some(&b"second"[..])
        );
    }
    assert!(a.delete(b"verbs-count-3").unwrap());
    assert_eq!(b.get(b"verbs-count-3").unwrap(), None);
    Measured {
        a: a.stats(),
        b: b.stats(),
        one_put,
        one_get,
    }
}

fn show(c: &VerbCounts) -> String {
    format!(
        "{} READ, {} WRITE, {} CAS, {} B, {} round trips ({} local, {} remote verbs)",
        c.reads,
        c.writes,
        c.cas,
        c.bytes(),
        c.round_trips,
        c.local,
        c.remote
    )
}

#[test]
#[ignore = "needs an RDMA device: set NESSIE_VERBS_DEVICE and run with --ignored"]
fn store_on_verbs_issues_the_same_verbs_as_on_shm() {
    let config = store_config("verbs-counts");
    let regions = store_regions(&config);
    let spec = ClusterSpec {
        nodes: 3,
        regions: regions.clone(),
    };
    let verbs_nodes: Vec<Node> = open_cluster(&spec)
        .into_iter()
        .enumerate()
        .map(|(n, f)| Node::with_fabric(config.clone(), n, Arc::new(f)).unwrap())
        .collect();
    let on_verbs = scripted_ops(&verbs_nodes);
    drop(verbs_nodes);

    let dir = tempfile::tempdir().unwrap();
    let shm: Vec<ShmFabric> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|node| {
                let o = ShmOptions {
                    dir: dir.path().to_path_buf(),
                    membership: Membership {
                        cluster_id: config.cluster_id(),
                        format_version: FORMAT_VERSION,
                        node,
                        nodes: 3,
                        regions: regions.clone(),
                    },
                    attach_timeout: Duration::from_secs(10),
                };
                s.spawn(move || ShmFabric::open(&o).unwrap())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let shm_nodes: Vec<Node> = shm
        .into_iter()
        .enumerate()
        .map(|(n, f)| Node::with_fabric(config.clone(), n, Arc::new(f)).unwrap())
        .collect();
    let on_shm = scripted_ops(&shm_nodes);

    assert_eq!(on_verbs.one_put, on_shm.one_put, "one PUT");
    assert_eq!(on_verbs.one_get, on_shm.one_get, "one GET");
    for (who, v, s) in [
        ("node 0", on_verbs.a, on_shm.a),
        ("node 1", on_verbs.b, on_shm.b),
    ] {
        assert_eq!(v.get.verbs, s.get.verbs, "{who}: GET verbs");
        assert_eq!(v.put.verbs, s.put.verbs, "{who}: PUT verbs");
        assert_eq!(v.delete.verbs, s.delete.verbs, "{who}: DELETE verbs");
    }
    println!(
        "VERB-COUNTS one PUT of a new 1000 B value from node 0, on verbs and on shm: {}",
        show(&on_verbs.one_put)
    );
    println!(
        "VERB-COUNTS one GET of it from node 1, on verbs and on shm: {}",
        show(&on_verbs.one_get)
    );
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
                id: region::INDEX,
                len: 64 << 10,
            },
            RegionSpec {
                id: region::data(0),
                len: 1 << 20,
            },
        ],
    };
    let views = open_cluster(&spec);
    let f = &views[0];
    for (target, label) in [(1, "remote"), (0, "loopback")] {
        let word = RemoteAddr::new(target, region::INDEX, 4096);
        let block = RemoteAddr::new(target, region::data(0), 64 << 10);
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
