//! The rendezvous on 127.0.0.1 against connections that never
//! authenticate: strangers dribbling bytes do not keep an honest node from
//! registering, and a node whose connection is reset or closed before the
//! server's hello tries again.

use nessie_fabric::conformance::hostile::dribblers;
use nessie_fabric::wire::rendezvous::{RvHello, HELLO_BYTES, KIND_CLIENT_HELLO};
use nessie_fabric::{
    rendezvous, serve_rendezvous, FabricError, Membership, RegionId, RegionSpec, RendezvousOptions,
    RendezvousOutcome,
};
use std::io::Read;
use std::net::{Shutdown, TcpListener};
use std::thread::JoinHandle;
use std::time::Duration;

const SECRET: &str = "rendezvous-hostile-test-secret";

fn options(node: usize, nodes: usize, address: &str, timeout: Duration) -> RendezvousOptions {
    RendezvousOptions {
        membership: Membership {
            cluster_id: 0x0bad_5eed,
            format_version: 1,
            node,
            nodes,
            regions: vec![RegionSpec {
                id: RegionId(0),
                len: 4096,
            }],
        },
        secret: SECRET.into(),
        address: address.into(),
        serve: node == 0,
        timeout,
    }
}

fn blob(node: usize) -> Vec<u8> {
    format!("blob of node {node}").into_bytes()
}

/// Node 0 of `nodes` serving on `listener`, in a thread.
fn serve(
    listener: TcpListener,
    nodes: usize,
    timeout: Duration,
) -> JoinHandle<Result<RendezvousOutcome, FabricError>> {
    let opts = options(
        0,
        nodes,
        &listener.local_addr().unwrap().to_string(),
        timeout,
    );
    std::thread::spawn(move || serve_rendezvous(&opts, listener, |_| blob(0)))
}

/// More strangers than the server runs handlers for (2·nodes + 16 = 20),
/// each dribbling a hello a byte at a time, connected before the honest
/// node: the honest node still registers, the rendezvous completes, and
/// no stranger's connection outlives the server.
#[test]
fn dribbling_strangers_do_not_lock_an_honest_node_out() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let timeout = Duration::from_secs(5);
    let srv = serve(listener, 2, timeout);
    let hello = RvHello {
        kind: KIND_CLIENT_HELLO,
        nonce: [3; 32],
    }
    .encode();
    // The hello, then zeros: a sealed header still to come.
    let strangers = dribblers(
        &addr,
        24,
        move |at| hello.get(at).copied().unwrap_or(0),
        Duration::from_secs(10),
    );
    let got = rendezvous(&options(1, 2, &addr, timeout), &blob(1))
        .unwrap_or_else(|e| panic!("the honest node was locked out: {e}"));
    assert_eq!(got, vec![blob(0), blob(1)]);
    let outcome = srv
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("the server gave up: {e}"));
    assert_eq!(outcome.blobs, got);
    assert_eq!(
        strangers.join().unwrap(),
        0,
        "strangers' connections outlived the server"
    );
}

/// The server side of a connection that goes away before the server's
/// hello: once the node's hello arrived, a reset (unread bytes left
/// behind) or an orderly close.
fn hang_up(listener: &TcpListener, reset: bool) {
    let (mut s, _) = listener.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut first = [0u8; 1];
    s.read_exact(&mut first).unwrap();
    if !reset {
        let mut rest = [0u8; HELLO_BYTES - 1];
        s.read_exact(&mut rest).unwrap();
        s.shutdown(Shutdown::Both).unwrap();
    }
}

/// A registering node whose connection is reset, then closed, before the
/// server's hello connects again and registers.
#[test]
fn a_node_reset_or_closed_before_the_hello_tries_again() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let timeout = Duration::from_secs(10);
    let srv = std::thread::spawn(move || {
        hang_up(&listener, true);
        hang_up(&listener, false);
        serve(listener, 2, timeout).join().unwrap()
    });
    let got = rendezvous(&options(1, 2, &addr, timeout), &blob(1))
        .unwrap_or_else(|e| panic!("the node did not try again: {e}"));
    assert_eq!(got, vec![blob(0), blob(1)]);
    let outcome = srv.join().unwrap().unwrap();
    assert_eq!(outcome.blobs, got);
}
