//! The `tcp` fabric between nodes of one process on 127.0.0.1: verb
//! semantics, batches, refusals and their counters, concurrent CAS,
//! handshake failures, unreachable peers, reconnection, and strangers that
//! hold connections open without ever authenticating.

use nessie_fabric::conformance::hostile::{dribblers, Relay};
use nessie_fabric::wire::frame::Hello;
use nessie_fabric::{
    Endpoint, Fabric, FabricError, HandshakeFailure, Membership, RegionId, RegionSpec, RemoteAddr,
    TcpFabric, TcpOptions, Verb,
};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SMALL: RegionId = RegionId(0);
const LARGE: RegionId = RegionId(1);

fn regions() -> Vec<RegionSpec> {
    vec![
        RegionSpec {
            id: SMALL,
            len: 4096,
        },
        RegionSpec {
            id: LARGE,
            len: 256 << 10,
        },
    ]
}

fn options(node: usize, peers: &[String]) -> TcpOptions {
    TcpOptions {
        closed: false,
        joins: nessie_fabric::Joins::Off,
        membership: Membership {
            cluster_id: 0x7c9,
            format_version: 1,
            node,
            nodes: peers.len(),
            regions: regions(),
        },
        peers: peers.to_vec(),
        secret: "tcp-fabric-test-secret".into(),
        threads: 2,
        attach_timeout: Duration::from_secs(20),
        handshake_timeout: Duration::from_secs(5),
        io_timeout: Duration::from_secs(20),
        frame_limit: 64 << 10,
        rendezvous: None,
    }
}

fn listeners(n: usize) -> (Vec<TcpListener>, Vec<String>) {
    let ls: Vec<_> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs = ls
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect();
    (ls, addrs)
}

/// Opens every node of a cluster concurrently (each waits for the others).
fn open_all(opts: Vec<TcpOptions>, ls: Vec<TcpListener>) -> Vec<Arc<TcpFabric>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = opts
            .iter()
            .zip(ls)
            .map(|(o, l)| s.spawn(move || TcpFabric::with_listener(o, l)))
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(n, h)| {
                Arc::new(
                    h.join()
                        .unwrap()
                        .unwrap_or_else(|e| panic!("node {n}: {e}")),
                )
            })
            .collect()
    })
}

fn cluster(n: usize) -> Vec<Arc<TcpFabric>> {
    let (ls, addrs) = listeners(n);
    open_all((0..n).map(|i| options(i, &addrs)).collect(), ls)
}

/// Waits (boundedly) for a condition another thread makes true.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn reads_writes_and_cas_reach_every_node() {
    let f = cluster(3);
    for (i, fab) in f.iter().enumerate() {
        assert_eq!(fab.nodes(), 3);
        assert_eq!(fab.region_len(i, LARGE), Some(256 << 10));
        assert_eq!(fab.region_len(3, LARGE), None);
        assert_eq!(fab.region_len(1, RegionId(6)), None);
    }
    // Fresh memory is zero; a WRITE through one node is read through all.
    let a = RemoteAddr::new(1, LARGE, 8192);
    let mut buf = vec![1u8; 16 << 10];
    f[0].read(a, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
    let data = pattern(16 << 10, 3);
    f[0].write(a, &data).unwrap();
    for fab in &f {
        let mut back = vec![0u8; data.len()];
        fab.read(a, &mut back).unwrap();
        assert_eq!(back, data);
    }
    // Neighbouring words are untouched.
    let mut w = [9u8; 8];
    f[2].read(a.add(16 << 10), &mut w).unwrap();
    assert_eq!(w, [0; 8]);
    // CAS: swaps on a match only, returns the old value, agrees with READ
    // on the little-endian word, locally and remotely alike.
    for (node, via) in [(2, 0), (0, 0), (1, 2)] {
        let word = RemoteAddr::new(node, SMALL, 64);
        assert_eq!(f[via].cas(word, 0, 0xdead_beef).unwrap(), 0);
        assert_eq!(f[via].cas(word, 0, 5).unwrap(), 0xdead_beef);
        let mut b = [0u8; 8];
        f[(via + 1) % 3].read(word, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), 0xdead_beef);
        f[via].write(word, &7u64.to_le_bytes()).unwrap();
        assert_eq!(f[(via + 2) % 3].cas(word, 7, 8).unwrap(), 7);
    }
    // One thread's verbs went over the connections opened at attach.
    for fab in &f {
        assert_eq!(fab.stats().connections_opened, 2);
    }
}

/// A node faults its own memory in ahead of use (its heap, allocated
/// lazily): a prefaulted half of a region takes at most a twentieth of the
/// faults of the cold half at its first write. A peer's memory is the
/// peer's business (nothing to do), and a range past the end is refused.
#[test]
fn a_node_faults_its_own_memory_in_and_leaves_its_peers_alone() {
    use nessie_fabric::conformance::thread_minor_faults;
    let fabrics = cluster(2);
    let half: u64 = 128 << 10;
    let chunk = vec![0x5au8; 16 << 10];
    let write_half = |from: u64| {
        let before = thread_minor_faults();
        for at in (from..from + half).step_by(chunk.len()) {
            fabrics[0]
                .write(RemoteAddr::new(0, LARGE, at), &chunk)
                .unwrap();
        }
        thread_minor_faults() - before
    };
    let cold = write_half(0);
    fabrics[0]
        .prefault(RemoteAddr::new(0, LARGE, half), half)
        .unwrap();
    let warm = write_half(half);
    let pages = half / 4096;
    assert!(cold >= pages / 2, "{cold} faults for {pages} cold pages");
    assert!(warm * 20 <= cold, "prefaulted: {warm} faults; cold: {cold}");
    fabrics[0]
        .prefault(RemoteAddr::new(1, LARGE, 0), 2 * half)
        .expect("a peer's memory: nothing to do");
    assert!(matches!(
        fabrics[0].prefault(RemoteAddr::new(0, LARGE, 2 * half - 8), 16),
        Err(FabricError::OutOfBounds { .. })
    ));
}

#[test]
fn batches_span_nodes_split_into_frames_and_fill_results() {
    let f = cluster(3);
    let big = pattern(40 << 10, 1);
    let small = pattern(64, 2);
    f[0].write(RemoteAddr::new(2, SMALL, 0), &11u64.to_le_bytes())
        .unwrap();
    let (mut r1, mut r2, mut r3) = (vec![0u8; 40 << 10], vec![0u8; 64], vec![0u8; 8]);
    // Writes first (a batch's verbs may run in any order, so the reads of
    // the same words come in a second batch).
    let mut writes = [
        Verb::Write {
            addr: RemoteAddr::new(1, LARGE, 0),
            data: &big,
        },
        Verb::Write {
            addr: RemoteAddr::new(1, LARGE, 64 << 10),
            data: &big, // with the first: over the 64 KiB frame limit
        },
        Verb::Write {
            addr: RemoteAddr::new(0, SMALL, 128),
            data: &small,
        },
        Verb::Cas {
            addr: RemoteAddr::new(2, SMALL, 0),
            expected: 11,
            new: 12,
            old: 0,
        },
    ];
    f[0].post(&mut writes).unwrap();
    assert!(matches!(writes[3], Verb::Cas { old: 11, .. }));
    {
        let mut reads = [
            Verb::Read {
                addr: RemoteAddr::new(1, LARGE, 64 << 10),
                buf: &mut r1,
            },
            Verb::Read {
                addr: RemoteAddr::new(0, SMALL, 128),
                buf: &mut r2,
            },
            Verb::Read {
                addr: RemoteAddr::new(2, SMALL, 0),
                buf: &mut r3,
            },
            Verb::Cas {
                addr: RemoteAddr::new(0, SMALL, 8),
                expected: 1,
                new: 2,
                old: 99,
            },
        ];
        f[1].post(&mut reads).unwrap();
        assert!(
            matches!(reads[3], Verb::Cas { old: 0, .. }),
            "failed CAS reports the word"
        );
    }
    assert_eq!(r1, big);
    assert_eq!(r2, small);
    assert_eq!(u64::from_le_bytes(r3.try_into().unwrap()), 12);
    // A batch of many small verbs to one peer.
    let mut bufs = vec![[0u8; 8]; 300];
    {
        let mut many: Vec<Verb<'_>> = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| Verb::Read {
                addr: RemoteAddr::new(1, LARGE, (i * 8) as u64),
                buf: b,
            })
            .collect();
        f[2].post(&mut many).unwrap();
    }
    assert_eq!(bufs.concat(), big[..2400]);
    // An empty batch does nothing.
    f[2].post(&mut []).unwrap();
}

/// A scatter READ is one frame, alone through an endpoint (its single-verb
/// path) or from the fabric; the conformance suite checks its bytes.
#[test]
fn a_lone_scatter_read_is_one_frame() {
    let f = cluster(2);
    let at = RemoteAddr::new(1, LARGE, 8192);
    let mut ep = Endpoint::new(f[0].clone(), 0);
    let (mut head, mut tail) = ([0u8; 64], [0u8; 192]);
    let before = f[1].stats().frames_served;
    let (h, t) = (&mut head[..], &mut tail[..]);
    ep.post(&mut [Verb::ReadScatter {
        addr: at,
        head: h,
        tail: t,
    }])
    .unwrap();
    f[0].read_scatter(at, &mut head, &mut tail).unwrap();
    assert_eq!(f[1].stats().frames_served - before, 2, "one frame each");
    assert_eq!(ep.counts().round_trips, 1);
}

#[test]
fn bad_verbs_are_refused_counted_and_change_nothing() {
    let f = cluster(2);
    let before = f[1].stats();
    let mut buf = [0u8; 16];
    let e = f[0]
        .read(RemoteAddr::new(1, SMALL, 4088), &mut buf)
        .unwrap_err();
    assert!(
        matches!(
            e,
            FabricError::OutOfBounds {
                node: 1,
                offset: 4088,
                len: 16,
                region_len: 4096,
                ..
            }
        ),
        "{e}"
    );
    let e = f[0]
        .write(RemoteAddr::new(1, SMALL, u64::MAX - 7), &buf)
        .unwrap_err();
    assert!(matches!(e, FabricError::OutOfBounds { .. }), "{e}");
    let e = f[0].cas(RemoteAddr::new(1, SMALL, 4), 0, 1).unwrap_err();
    assert!(
        matches!(
            e,
            FabricError::Misaligned {
                node: 1,
                offset: 4,
                ..
            }
        ),
        "{e}"
    );
    let e = f[0]
        .write(RemoteAddr::new(1, SMALL, 0), &[1u8; 12])
        .unwrap_err();
    assert!(matches!(e, FabricError::Misaligned { len: 12, .. }), "{e}");
    let e = f[0]
        .read(RemoteAddr::new(1, RegionId(10), 0), &mut buf)
        .unwrap_err();
    assert!(
        matches!(e, FabricError::UnknownRegion { node: 1, .. }),
        "{e}"
    );
    let e = f[0].cas(RemoteAddr::new(2, SMALL, 0), 0, 1).unwrap_err();
    assert!(
        matches!(e, FabricError::UnknownNode { node: 2, nodes: 2 }),
        "{e}"
    );
    // In a batch: the first bad verb is reported, the good ones still ran.
    let data = [5u8; 8];
    let mut batch = [
        Verb::Write {
            addr: RemoteAddr::new(1, SMALL, 0),
            data: &data,
        },
        Verb::Write {
            addr: RemoteAddr::new(1, SMALL, 4096),
            data: &data,
        },
    ];
    let e = f[0].post(&mut batch).unwrap_err();
    assert!(
        matches!(e, FabricError::OutOfBounds { offset: 4096, .. }),
        "{e}"
    );
    let after = f[1].stats();
    assert_eq!(
        after.refused_out_of_bounds - before.refused_out_of_bounds,
        3
    );
    assert_eq!(after.refused_misaligned - before.refused_misaligned, 2);
    assert_eq!(
        after.refused_unknown_region - before.refused_unknown_region,
        1
    );
    assert_eq!(after.refused() - before.refused(), 6);
    // Nothing changed but the one good WRITE; the connection still works.
    let mut all = vec![0u8; 4096];
    f[0].read(RemoteAddr::new(1, SMALL, 0), &mut all).unwrap();
    assert_eq!(&all[..8], &data);
    assert!(all[8..].iter().all(|&b| b == 0));
    assert_eq!(f[0].stats().connections_broken, 0);
}

#[test]
fn concurrent_cas_increments_from_every_node_lose_nothing() {
    let f = cluster(3);
    // Four threads per node share its 2 connections per peer, so threads
    // wait for a connection, with no bound: one never woken would hang.
    const THREADS: usize = 12;
    const PER_THREAD: u64 = 400;
    let words = [RemoteAddr::new(0, SMALL, 0), RemoteAddr::new(2, SMALL, 8)];
    let (done, finished) = std::sync::mpsc::channel();
    let fabrics = f.clone();
    let workers = std::thread::spawn(move || {
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let fab = Arc::clone(&fabrics[t % 3]);
                s.spawn(move || {
                    for _ in 0..PER_THREAD {
                        for w in words {
                            let mut cur = 0;
                            loop {
                                let old = fab.cas(w, cur, cur + 1).unwrap();
                                if old == cur {
                                    break;
                                }
                                cur = old;
                            }
                        }
                    }
                });
            }
        });
        let _ = done.send(());
    });
    finished
        .recv_timeout(Duration::from_secs(120))
        .expect("a thread waiting for a pooled connection was never woken");
    workers.join().unwrap();
    for w in words {
        let mut b = [0u8; 8];
        f[1].read(w, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), THREADS as u64 * PER_THREAD);
    }
}

/// A node of the cluster and an impostor claiming to be node 0 that
/// differs in one respect.
fn impostor_error(change: impl FnOnce(&mut TcpOptions)) -> (FabricError, Arc<TcpFabric>) {
    // Node 1 of a two-node cluster, attached to a real node 0.
    let f = cluster(2);
    let (ls, mut addrs) = listeners(1);
    addrs.push(f[1].local_addr().to_string());
    let mut o = options(0, &addrs);
    o.attach_timeout = Duration::from_millis(500);
    change(&mut o);
    let e = TcpFabric::with_listener(&o, ls.into_iter().next().unwrap()).unwrap_err();
    (e, Arc::clone(&f[1]))
}

#[test]
fn wrong_secret_is_a_handshake_error_on_both_sides() {
    let (e, node1) = impostor_error(|o| o.secret = "not the secret".into());
    assert!(
        matches!(
            e,
            FabricError::Handshake {
                node: 1,
                reason: HandshakeFailure::Authentication,
                ..
            }
        ),
        "{e}"
    );
    // The serving side counts it once it sees the connection go.
    eventually("node 1 counts the failed handshake", || {
        node1.stats().handshake_failures == 1
    });
}

#[test]
fn other_cluster_or_sizes_are_typed_handshake_errors() {
    let (e, _) = impostor_error(|o| o.membership.cluster_id = 0xbad);
    assert!(
        matches!(
            e,
            FabricError::Handshake {
                reason: HandshakeFailure::Cluster {
                    found: 0x7c9,
                    expected: 0xbad
                },
                ..
            }
        ),
        "{e}"
    );
    let (e, _) = impostor_error(|o| o.membership.regions[1].len *= 2);
    assert!(
        matches!(
            e,
            FabricError::Handshake {
                reason: HandshakeFailure::RegionSize {
                    region: LARGE,
                    found: Some(262_144),
                    expected: Some(524_288)
                },
                ..
            }
        ),
        "{e}"
    );
    let (e, node1) = impostor_error(|o| {
        o.membership.nodes = 3;
        o.peers.push("127.0.0.1:1".into());
    });
    assert!(
        matches!(
            e,
            FabricError::Handshake {
                reason: HandshakeFailure::Nodes {
                    found: 2,
                    expected: 3
                },
                ..
            }
        ),
        "{e}"
    );
    eventually("node 1 counts the failed handshake", || {
        node1.stats().handshake_failures >= 1
    });
}

#[test]
fn a_peer_that_is_down_is_unreachable_after_the_deadline() {
    let (ls, addrs) = listeners(2);
    let mut ls = ls.into_iter();
    let mine = ls.next().unwrap();
    drop(ls); // node 1's port: nobody listens
    let mut o = options(0, &addrs);
    o.attach_timeout = Duration::from_millis(300);
    let start = Instant::now();
    let e = TcpFabric::with_listener(&o, mine).unwrap_err();
    assert!(
        matches!(&e, FabricError::Unreachable { node: 1, addr, .. } if *addr == addrs[1]),
        "{e}"
    );
    assert!(start.elapsed() >= o.attach_timeout);
}

#[test]
fn verbs_reconnect_after_the_serving_node_restarts() {
    let (ls, addrs) = listeners(2);
    let opts: Vec<_> = (0..2).map(|i| options(i, &addrs)).collect();
    let mut f = open_all(opts.clone(), ls);
    let word = RemoteAddr::new(1, SMALL, 0);
    f[0].write(word, &42u64.to_le_bytes()).unwrap();
    let node0 = Arc::clone(&f[0]);
    drop(f.pop()); // node 1 goes away: listener stopped, workers joined
    let mut b = [0u8; 8];
    let e = node0.read(word, &mut b).unwrap_err();
    assert!(
        matches!(
            e,
            FabricError::Disconnected { node: 1, .. } | FabricError::Unreachable { node: 1, .. }
        ),
        "{e}"
    );
    if let FabricError::Disconnected { source, .. } = &e {
        // A closed connection is not reported as a peer that fell silent.
        assert_ne!(source.kind(), std::io::ErrorKind::TimedOut, "{e}");
    }
    // Node 1 comes back on the same address (with fresh memory).
    let restarted = TcpFabric::open(&opts[1]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match node0.read(word, &mut b) {
            Ok(()) => break,
            Err(e @ (FabricError::Unreachable { .. } | FabricError::Disconnected { .. })) => {
                assert!(Instant::now() < deadline, "never reconnected: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(u64::from_le_bytes(b), 0);
    assert_eq!(node0.cas(word, 0, 3).unwrap(), 0);
    let mut mine = [0u8; 8];
    restarted.read(word, &mut mine).unwrap();
    assert_eq!(u64::from_le_bytes(mine), 3);
    assert!(node0.stats().connections_broken >= 1);
}

/// A CAS carries a land-by time; the serving node refuses one that arrives
/// after it (the landing bound, docs/design.md#the-landing-bound) without
/// executing it, says so, and counts it. A timely CAS executes.
#[test]
fn late_cas_is_refused_by_its_target_and_not_executed() {
    use nessie_fabric::clock::Clock;
    let nodes = cluster(2);
    assert!(nodes[0].enforces_land_by());
    let word = RemoteAddr::new(1, SMALL, 64);
    let now = nessie_fabric::clock::WallClock::default().now_us();
    let late = nodes[0].cas_by(word, 0, 7, now - 1_000);
    assert!(
        matches!(late, Err(FabricError::LateCas { node: 1, late_us }) if late_us >= 1_000),
        "{late:?}"
    );
    assert_eq!(
        nodes[0].cas(word, 0, 0).unwrap(),
        0,
        "the late CAS did not execute"
    );
    assert_eq!(nodes[1].stats().refused_late, 1);
    assert_eq!(nodes[0].cas_by(word, 0, 7, now + 60_000_000).unwrap(), 0);
    assert_eq!(nodes[0].cas(word, 7, 7).unwrap(), 7);
    // A CAS on the node's own memory is checked the same way.
    let own = RemoteAddr::new(0, SMALL, 64);
    assert!(matches!(
        nodes[0].cas_by(own, 0, 9, now - 1),
        Err(FabricError::LateCas { node: 0, .. })
    ));
    assert_eq!(nodes[0].cas(own, 0, 0).unwrap(), 0);
    // Without a land-by time (0), a CAS always executes.
    assert_eq!(nodes[0].cas_by(word, 7, 8, 0).unwrap(), 7);
}

/// More strangers than a node holds connections of any kind, each
/// dribbling a plausible hello a byte at a time and never proving the
/// secret, neither keep an honest peer out nor outlive the handshake
/// deadline.
#[test]
fn dribbling_strangers_neither_lock_out_a_peer_nor_outlive_the_deadline() {
    let (ls, addrs) = listeners(2);
    let mut opts: Vec<_> = (0..2).map(|i| options(i, &addrs)).collect();
    for o in &mut opts {
        o.threads = 1;
        o.handshake_timeout = Duration::from_secs(1);
    }
    // Node 1 gives up well before the strangers stop dribbling.
    opts[1].attach_timeout = Duration::from_secs(3);
    let mut ls = ls.into_iter();
    let (l0, l1) = (ls.next().unwrap(), ls.next().unwrap());
    let o0 = opts[0].clone();
    let node0 = std::thread::spawn(move || TcpFabric::with_listener(&o0, l0));
    // Node 0 holds 2·threads·nodes + 16 = 20 connections: 40 strangers,
    // all connected before node 1 is.
    let hello = Hello {
        format_version: 1,
        cluster_id: 0x7c9,
        from: 1,
        to: 0,
        nodes: 2,
        frame_limit: 64 << 10,
        nonce: [7; 32],
        regions: regions().iter().map(|r| (r.id.0, r.len)).collect(),
    }
    .encode();
    let strangers = dribblers(
        &addrs[0],
        40,
        move |at| hello[at % hello.len()],
        Duration::from_secs(8),
    );
    let node1 = TcpFabric::with_listener(&opts[1], l1)
        .unwrap_or_else(|e| panic!("node 1 was locked out: {e}"));
    let node0 = node0.join().unwrap().unwrap();
    let word = RemoteAddr::new(0, SMALL, 0);
    node1.write(word, &[5u8; 8]).unwrap();
    let mut b = [0u8; 8];
    node0.read(word, &mut b).unwrap();
    assert_eq!(b, [5u8; 8]);
    assert_eq!(
        strangers.join().unwrap(),
        0,
        "strangers' connections outlived the handshake deadline"
    );
    assert!(node0.stats().handshake_failures >= 1);
}

/// A peer that goes silent without a reset holds a verb only until the
/// thread's wait bound (the operation's deadline in the store), not for the
/// I/O timeout: the verb fails as a broken connection (outcome unknown),
/// and once the peer answers again the next verb reconnects.
/// docs/replication.md#failure-detection
#[test]
fn a_silent_peer_holds_a_verb_only_until_its_wait_bound() {
    let (ls, addrs) = listeners(2);
    let relay = Relay::to(addrs[1].clone());
    let mut via_relay = options(0, &[addrs[0].clone(), relay.addr.clone()]);
    // Long enough that only the wait bound can end the wait below.
    via_relay.io_timeout = Duration::from_secs(120);
    let f = open_all(vec![via_relay, options(1, &addrs)], ls);
    let word = RemoteAddr::new(1, SMALL, 8);
    f[0].write(word, &7u64.to_le_bytes()).unwrap();
    {
        // A bound far away changes nothing for a peer that answers.
        let _bound = nessie_fabric::WaitBound::until(Instant::now() + Duration::from_secs(30));
        for _ in 0..20 {
            let mut b = [0u8; 8];
            f[0].read(word, &mut b).unwrap();
            assert_eq!(u64::from_le_bytes(b), 7);
        }
    }

    relay.go_silent(true);
    let started = Instant::now();
    let e = {
        let _bound = nessie_fabric::WaitBound::until(started + Duration::from_millis(200));
        let mut b = [0u8; 8];
        f[0].read(word, &mut b).unwrap_err()
    };
    let waited = started.elapsed();
    match &e {
        FabricError::Disconnected { node: 1, source } => {
            assert_eq!(source.kind(), std::io::ErrorKind::TimedOut, "{e}");
        }
        other => panic!("expected a timed-out connection to node 1, got {other}"),
    }
    assert!(
        e.may_have_executed(),
        "a timed-out verb's outcome is unknown"
    );
    // Far below the I/O timeout: the bound, not the socket's default, ended
    // it. And not before the bound: a timer never fires early, so waiting
    // less would mean the time left was cut short.
    assert!(waited < Duration::from_secs(60), "waited {waited:?}");
    assert!(waited >= Duration::from_millis(200), "waited {waited:?}");

    relay.go_silent(false);
    let mut b = [0u8; 8];
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Err(e) = f[0].read(word, &mut b) {
        assert!(Instant::now() < deadline, "never reconnected: {e}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(u64::from_le_bytes(b), 7);
    assert!(f[0].stats().connections_broken >= 1);
}

/// A verb that must open a new connection to a silent peer (its pooled one
/// was dropped) waits no longer than its wait bound either: the handshake
/// that the peer never answers ends there, and so does another thread's
/// wait for that connection. Nothing was sent, so each verb's outcome is
/// known (it did not execute). Before the fix, the first verb waited for
/// the handshake timeout and the second for the first.
/// docs/replication.md#failure-detection
#[test]
fn a_silent_peer_holds_a_verb_that_must_reconnect_only_until_its_wait_bound() {
    let (ls, addrs) = listeners(2);
    let relay = Relay::to(addrs[1].clone());
    let mut via_relay = options(0, &[addrs[0].clone(), relay.addr.clone()]);
    // Long enough that only the wait bound can end the waits below; one
    // connection per peer, so the second verb waits for the first's.
    via_relay.io_timeout = Duration::from_secs(30);
    via_relay.handshake_timeout = Duration::from_secs(30);
    via_relay.threads = 1;
    let f = open_all(vec![via_relay, options(1, &addrs)], ls);
    let word = RemoteAddr::new(1, SMALL, 8);
    f[0].write(word, &5u64.to_le_bytes()).unwrap();
    relay.go_silent(true);
    {
        // The pooled connection goes at the first bound.
        let _bound = nessie_fabric::WaitBound::until(Instant::now() + Duration::from_millis(100));
        let mut b = [0u8; 8];
        f[0].read(word, &mut b).unwrap_err();
    }
    let bound = Duration::from_millis(300);
    let waits: Vec<(FabricError, Duration)> = std::thread::scope(|s| {
        let verbs: Vec<_> = (0..2)
            .map(|_| {
                let f = &f[0];
                s.spawn(move || {
                    let started = Instant::now();
                    let _bound = nessie_fabric::WaitBound::until(started + bound);
                    let mut b = [0u8; 8];
                    let e = f.read(word, &mut b).unwrap_err();
                    (e, started.elapsed())
                })
            })
            .collect();
        verbs.into_iter().map(|v| v.join().unwrap()).collect()
    });
    for (e, waited) in &waits {
        assert!(
            *waited < Duration::from_secs(5),
            "waited {waited:?} for a silent peer ({e})"
        );
        assert!(!e.may_have_executed(), "nothing was sent: {e}");
    }
    relay.go_silent(false);
    let mut b = [0u8; 8];
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Err(e) = f[0].read(word, &mut b) {
        assert!(Instant::now() < deadline, "never reconnected: {e}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(u64::from_le_bytes(b), 5);
}

/// Without a wait bound, the I/O timeout ends the wait for a silent peer,
/// and the error says which of the two did.
#[test]
fn without_a_wait_bound_the_io_timeout_ends_the_wait() {
    let (ls, addrs) = listeners(2);
    let relay = Relay::to(addrs[1].clone());
    let mut via_relay = options(0, &[addrs[0].clone(), relay.addr.clone()]);
    via_relay.io_timeout = Duration::from_millis(300);
    let f = open_all(vec![via_relay, options(1, &addrs)], ls);
    let word = RemoteAddr::new(1, SMALL, 8);
    f[0].write(word, &9u64.to_le_bytes()).unwrap();
    relay.go_silent(true);
    let mut b = [0u8; 8];
    match f[0].read(word, &mut b).unwrap_err() {
        FabricError::Disconnected { node: 1, source } => assert!(
            matches!(
                source.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) && !source.to_string().contains("wait bound"),
            "{source}"
        ),
        other => panic!("expected a broken connection to node 1, got {other}"),
    }
}
