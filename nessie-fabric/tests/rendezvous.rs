//! The rendezvous on 127.0.0.1: nodes exchange blobs, a `tcp` cluster opens
//! through it, and every attack or mismatch is a typed error on each side
//! that sees it (other secret, replayed and tampered messages, duplicate
//! node id, other node count, missing nodes, no server).

use nessie_fabric::conformance::bootstrap::{Tap, Tape};
use nessie_fabric::{
    rendezvous, rendezvous_connected, rendezvous_with, serve_rendezvous, Fabric, FabricError,
    HandshakeFailure, Membership, RegionId, RegionSpec, RemoteAddr, RendezvousFailure,
    RendezvousOptions, RendezvousOutcome, TcpFabric, TcpOptions,
};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

const SECRET: &str = "rendezvous-test-secret";
const REGION: RegionId = RegionId(0);
use nessie_fabric::wire::rendezvous::{HELLO_BYTES as HELLO, SEALED_HEADER_BYTES as SEALED_HEADER};

fn membership(node: usize, nodes: usize) -> Membership {
    Membership {
        cluster_id: 0x5eed,
        format_version: 1,
        node,
        nodes,
        regions: vec![RegionSpec {
            id: REGION,
            len: 4096,
        }],
    }
}

fn options(node: usize, nodes: usize, address: &str, timeout_ms: u64) -> RendezvousOptions {
    RendezvousOptions {
        membership: membership(node, nodes),
        secret: SECRET.into(),
        address: address.into(),
        serve: node == 0,
        timeout: Duration::from_millis(timeout_ms),
    }
}

/// Node 0 of a cluster of `nodes` serving on an ephemeral port: its
/// address and the thread that returns its outcome.
fn server(
    nodes: usize,
    timeout_ms: u64,
) -> (String, JoinHandle<Result<RendezvousOutcome, FabricError>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let opts = options(0, nodes, &addr, timeout_ms);
    let handle = std::thread::spawn(move || serve_rendezvous(&opts, listener, |_| blob(0)));
    (addr, handle)
}

fn blob(node: usize) -> Vec<u8> {
    format!("blob of node {node}").into_bytes()
}

fn table(nodes: usize) -> Vec<Vec<u8>> {
    (0..nodes).map(blob).collect()
}

/// The reason of a rendezvous error.
fn reason(e: &FabricError) -> &RendezvousFailure {
    match e {
        FabricError::Rendezvous { reason, .. } => reason,
        other => panic!("not a rendezvous error: {other}"),
    }
}

/// The reason the server gave, as the refused node reports it.
fn refused(e: &FabricError) -> &RendezvousFailure {
    match reason(e) {
        RendezvousFailure::Refused(why) => why,
        other => panic!("not refused by the server: {other}"),
    }
}

/// The server's outcome, once it handed every node the table.
fn served(
    handle: JoinHandle<Result<RendezvousOutcome, FabricError>>,
    nodes: usize,
) -> RendezvousOutcome {
    let outcome = handle.join().unwrap().unwrap();
    assert_eq!(outcome.blobs, table(nodes));
    outcome
}

#[test]
fn three_nodes_exchange_blobs() {
    let (addr, srv) = server(3, 10_000);
    let nodes: Vec<_> = (1..3)
        .map(|n| {
            let opts = options(n, 3, &addr, 10_000);
            std::thread::spawn(move || rendezvous_with(&opts, |_| blob(n)))
        })
        .collect();
    for node in nodes {
        let outcome = node.join().unwrap().unwrap();
        assert_eq!(outcome.blobs, table(3));
        assert_eq!(outcome.server, 0);
        // The server saw the connection come from where this node sent it.
        assert_eq!(outcome.seen_from, outcome.local_addr);
        assert_eq!(outcome.server_addr.unwrap().to_string(), addr);
    }
    assert!(served(srv, 3).refused.is_empty());
}

#[test]
fn a_tcp_cluster_opens_through_the_rendezvous() {
    // A port for the rendezvous, which the serving node binds itself.
    let rv = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let fabrics: Vec<Arc<TcpFabric>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|node| {
                let rv = rv.clone();
                s.spawn(move || {
                    let opts = TcpOptions {
                        closed: false,
                        membership: membership(node, 3),
                        peers: Vec::new(),
                        secret: SECRET.into(),
                        threads: 2,
                        attach_timeout: Duration::from_secs(20),
                        handshake_timeout: Duration::from_secs(5),
                        io_timeout: Duration::from_secs(20),
                        frame_limit: 64 << 10,
                        rendezvous: Some(options(node, 3, &rv, 20_000)),
                        joins: nessie_fabric::Joins::Off,
                    };
                    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                    TcpFabric::with_listener(&opts, listener)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| Arc::new(h.join().unwrap().unwrap()))
            .collect()
    });
    let at = |node, offset| RemoteAddr::new(node, REGION, offset);
    fabrics[0].write(at(2, 64), &[7u8; 16]).unwrap();
    let mut buf = [0u8; 16];
    fabrics[1].read(at(2, 64), &mut buf).unwrap();
    assert_eq!(buf, [7u8; 16]);
    assert_eq!(fabrics[2].cas(at(0, 8), 0, 41).unwrap(), 0);
    assert_eq!(fabrics[1].cas(at(0, 8), 0, 42).unwrap(), 41);
    assert_eq!(fabrics[1].cas(at(0, 8), 41, 43).unwrap(), 41);
    let mut word = [0u8; 8];
    fabrics[2].read(at(0, 8), &mut word).unwrap();
    assert_eq!(u64::from_le_bytes(word), 43);
    fabrics[2].write(at(1, 0), &[9u8; 8]).unwrap();
    fabrics[0].read(at(1, 0), &mut word).unwrap();
    assert_eq!(word, [9u8; 8]);
}

#[test]
fn another_secret_is_refused_on_both_sides() {
    let (addr, srv) = server(2, 10_000);
    let mut wrong = options(1, 2, &addr, 10_000);
    wrong.secret = "not the secret".into();
    let e = rendezvous(&wrong, b"impostor").unwrap_err();
    // The server's refusal is sealed with the real secret: it does not
    // verify here, which names the cause.
    assert!(
        matches!(reason(&e), RendezvousFailure::Authentication),
        "{e}"
    );
    // The server keeps serving the honest node.
    let got = rendezvous(&options(1, 2, &addr, 10_000), &blob(1)).unwrap();
    assert_eq!(got, table(2));
    let outcome = served(srv, 2);
    assert_eq!(outcome.refused.len(), 1);
    assert!(matches!(
        reason(&outcome.refused[0]),
        RendezvousFailure::Authentication
    ));
}

/// A man in the middle of one connection (see [`Tap`]): its address and
/// tapes.
fn proxy(target: String, flip_up: Option<usize>, flip_down: Option<usize>) -> (String, Tape, Tape) {
    let tap = Tap::new(&target, flip_up, flip_down);
    (tap.addr, tap.up, tap.down)
}

#[test]
fn replayed_registrations_and_replies_are_worthless() {
    // Record one honest exchange.
    let (addr, srv) = server(2, 10_000);
    let (via, up, down) = proxy(addr, None, None);
    rendezvous(&options(1, 2, &via, 10_000), &blob(1)).unwrap();
    served(srv, 2);
    let (up, down) = (up.lock().unwrap().clone(), down.lock().unwrap().clone());

    // The registration, played on a new connection to a new server (of the
    // same cluster and secret), is refused as a replay.
    let (addr, srv) = server(2, 10_000);
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&up).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    assert!(answer.len() > HELLO + SEALED_HEADER, "no refusal was sent");
    rendezvous(&options(1, 2, &addr, 10_000), &blob(1)).unwrap();
    let outcome = served(srv, 2);
    assert_eq!(outcome.refused.len(), 1);
    assert!(
        matches!(reason(&outcome.refused[0]), RendezvousFailure::Replayed),
        "{}",
        outcome.refused[0]
    );

    // The server's answer, played to a node on a new connection, is refused
    // as a replay too.
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake_addr = fake.local_addr().unwrap().to_string();
    let player = std::thread::spawn(move || {
        let (mut s, _) = fake.accept().unwrap();
        let mut hello = [0u8; HELLO];
        s.read_exact(&mut hello).unwrap();
        s.write_all(&down).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    });
    let e = rendezvous(&options(1, 2, &fake_addr, 10_000), &blob(1)).unwrap_err();
    assert!(matches!(reason(&e), RendezvousFailure::Replayed), "{e}");
    player.join().unwrap();
}

#[test]
fn a_tampered_registration_is_refused_on_both_sides() {
    let (addr, srv) = server(2, 10_000);
    // A byte of the registration's body (its cluster id).
    let (via, _, _) = proxy(addr.clone(), Some(HELLO + SEALED_HEADER + 8), None);
    let e = rendezvous(&options(1, 2, &via, 10_000), &blob(1)).unwrap_err();
    assert!(matches!(refused(&e), RendezvousFailure::Tampered), "{e}");
    rendezvous(&options(1, 2, &addr, 10_000), &blob(1)).unwrap();
    let outcome = served(srv, 2);
    assert_eq!(outcome.refused.len(), 1);
    assert!(matches!(
        reason(&outcome.refused[0]),
        RendezvousFailure::Tampered
    ));
}

#[test]
fn a_tampered_table_is_refused() {
    let (addr, srv) = server(2, 10_000);
    // A byte of node 0's blob in the table (after the reply's fixed words
    // and the blob's length word).
    let (via, _, _) = proxy(addr, None, Some(HELLO + SEALED_HEADER + 48));
    let e = rendezvous(&options(1, 2, &via, 10_000), &blob(1)).unwrap_err();
    assert!(matches!(reason(&e), RendezvousFailure::Tampered), "{e}");
    served(srv, 2);
}

#[test]
fn a_duplicate_node_id_is_refused_and_the_first_claimant_kept() {
    let (addr, srv) = server(3, 10_000);
    let (tx, rx) = mpsc::channel();
    for claim in [b"first".to_vec(), b"second".to_vec()] {
        let (opts, tx) = (options(1, 3, &addr, 10_000), tx.clone());
        std::thread::spawn(move || {
            let r = rendezvous(&opts, &claim);
            tx.send((claim, r)).unwrap();
        });
    }
    // The refused claimant returns at once; the one that registered waits
    // for node 2.
    let (loser, r) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let e = r.unwrap_err();
    assert!(
        matches!(refused(&e), RendezvousFailure::Duplicate(1)),
        "{e}"
    );
    // Nor may a node claim the server's id.
    let e = rendezvous(&options(0, 3, &addr, 10_000).with_serve(false), b"x").unwrap_err();
    assert!(
        matches!(refused(&e), RendezvousFailure::Duplicate(0)),
        "{e}"
    );
    let got = rendezvous(&options(2, 3, &addr, 10_000), &blob(2)).unwrap();
    let (winner, r) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_ne!(winner, loser);
    assert_eq!(r.unwrap(), got);
    assert_eq!(got[1], winner);
    let outcome = srv.join().unwrap().unwrap();
    assert_eq!(outcome.blobs, got);
    let reasons: Vec<String> = outcome.refused.iter().map(ToString::to_string).collect();
    assert_eq!(outcome.refused.len(), 2, "{reasons:?}");
    assert!(outcome
        .refused
        .iter()
        .all(|e| matches!(reason(e), RendezvousFailure::Duplicate(_))));
}

trait WithServe {
    fn with_serve(self, serve: bool) -> Self;
}

impl WithServe for RendezvousOptions {
    fn with_serve(mut self, serve: bool) -> Self {
        self.serve = serve;
        self
    }
}

#[test]
fn another_node_count_is_refused_on_both_sides() {
    let (addr, srv) = server(2, 10_000);
    let e = rendezvous(&options(1, 3, &addr, 10_000), &blob(1)).unwrap_err();
    assert!(
        matches!(
            refused(&e),
            RendezvousFailure::Membership(HandshakeFailure::Nodes {
                found: 3,
                expected: 2
            })
        ),
        "{e}"
    );
    rendezvous(&options(1, 2, &addr, 10_000), &blob(1)).unwrap();
    let outcome = served(srv, 2);
    assert!(matches!(
        reason(&outcome.refused[0]),
        RendezvousFailure::Membership(HandshakeFailure::Nodes { .. })
    ));
}

#[test]
fn a_missing_node_times_out_naming_it() {
    let (addr, srv) = server(3, 1_000);
    let e = rendezvous(&options(1, 3, &addr, 1_000), &blob(1)).unwrap_err();
    assert!(
        matches!(refused(&e), RendezvousFailure::Missing { nodes, .. } if nodes == &[2]),
        "{e}"
    );
    assert!(e.to_string().contains("[2]"), "{e}");
    let e = srv.join().unwrap().unwrap_err();
    assert!(
        matches!(reason(&e), RendezvousFailure::Missing { nodes, .. } if nodes == &[2]),
        "{e}"
    );
    assert!(e.to_string().contains("[2] never registered"), "{e}");
}

#[test]
fn an_absent_server_is_unreachable() {
    let addr: SocketAddr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let e = rendezvous(&options(1, 2, &addr.to_string(), 300), &blob(1)).unwrap_err();
    assert!(
        matches!(reason(&e), RendezvousFailure::Unreachable { .. }),
        "{e}"
    );
}

/// Opens a cluster of `nodes` through `rendezvous_connected`, node
/// `failing` (if any) failing its connect step; returns every node's
/// result.
fn barrier_run(nodes: usize, failing: Option<usize>) -> Vec<Result<usize, FabricError>> {
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let handles: Vec<_> = (0..nodes)
        .map(|node| {
            let opts = options(node, nodes, &addr, 5_000);
            std::thread::spawn(move || {
                rendezvous_connected(
                    &opts,
                    None,
                    |_| blob(node),
                    |outcome| {
                        if failing == Some(node) {
                            return Err(FabricError::Options {
                                reason: "this node cannot connect",
                            });
                        }
                        Ok(outcome.blobs.len())
                    },
                )
                .map(|(_, connected)| connected)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn the_barrier_lets_every_node_go_once_all_connected() {
    for r in barrier_run(3, None) {
        assert_eq!(r.unwrap(), 3);
    }
}

#[test]
fn a_node_that_cannot_connect_holds_back_every_node_naming_it() {
    for failing in [0, 2] {
        for (node, r) in barrier_run(3, Some(failing)).into_iter().enumerate() {
            let e = r.unwrap_err();
            if node == failing {
                assert!(matches!(e, FabricError::Options { .. }), "{e}");
            } else {
                let why = match reason(&e) {
                    RendezvousFailure::Refused(why) => why,
                    other => other,
                };
                assert!(
                    matches!(why, RendezvousFailure::NotReady { nodes, .. } if nodes == &[failing]),
                    "node {node}: {e}"
                );
            }
        }
    }
}
