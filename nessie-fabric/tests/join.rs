//! The join service on 127.0.0.1: members serve the start-up table to a
//! replacement for as long as they run, whichever of them holds the port;
//! a join proves the cluster secret, strangers cannot keep it out, and a
//! claim of a live member's id is refused.

use nessie_fabric::conformance::bootstrap::free_address;
use nessie_fabric::{
    join, FabricError, JoinService, Membership, RegionId, RegionSpec, RendezvousFailure,
    RendezvousOptions, BIND_RETRY,
};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const SECRET: &str = "join-test-secret";
const NODES: usize = 3;

fn options(node: usize, address: &str, secret: &str, timeout: Duration) -> RendezvousOptions {
    RendezvousOptions {
        membership: Membership {
            cluster_id: 0x701e,
            format_version: 1,
            node,
            nodes: NODES,
            regions: vec![RegionSpec {
                id: RegionId(0),
                len: 4096,
            }],
        },
        secret: secret.into(),
        address: address.into(),
        serve: false,
        timeout,
    }
}

fn table() -> Vec<Vec<u8>> {
    (0..NODES)
        .map(|n| format!("127.0.0.1:{}", 7000 + n).into_bytes())
        .collect()
}

fn serving(node: usize, address: &str) -> JoinService {
    let o = options(node, address, SECRET, Duration::from_secs(5));
    JoinService::start(&o, table()).unwrap()
}

fn refusal(e: &FabricError) -> &RendezvousFailure {
    match e {
        FabricError::Rendezvous {
            reason: RendezvousFailure::Refused(inner),
            ..
        } => inner,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_replacement_gets_the_table_and_a_stranger_does_not() {
    let address = free_address();
    let _service = serving(1, &address);
    let o = options(0, &address, SECRET, Duration::from_secs(10));
    let outcome = join(&o, &[]).unwrap();
    assert_eq!(outcome.blobs, table());
    assert_eq!(outcome.server, 1);
    // Another secret: refused, and nothing of the table is learned.
    let o = options(0, &address, "not-the-secret", Duration::from_secs(10));
    let e = join(&o, &[]).unwrap_err();
    assert!(
        matches!(
            e,
            FabricError::Rendezvous {
                reason: RendezvousFailure::Authentication | RendezvousFailure::Refused(_),
                ..
            }
        ),
        "{e:?}"
    );
    // A live member's id is not lost: refused.
    let o = options(1, &address, SECRET, Duration::from_secs(10));
    let e = join(&o, &[]).unwrap_err();
    assert!(
        matches!(refusal(&e), RendezvousFailure::Duplicate(1)),
        "{e:?}"
    );
}

#[test]
fn silent_strangers_do_not_keep_a_replacement_out() {
    let address = free_address();
    let _service = serving(2, &address);
    let o = options(0, &address, SECRET, Duration::from_secs(10));
    join(&o, &[]).unwrap();
    // Far more silent connections than the service admits at once.
    let strangers: Vec<TcpStream> = (0..60)
        .filter_map(|_| TcpStream::connect(&address).ok())
        .collect();
    assert!(strangers.len() > 2 * NODES + 16);
    let outcome = join(&o, &[]).unwrap();
    assert_eq!(outcome.blobs, table());
}

#[test]
fn another_member_takes_the_port_when_its_holder_is_gone() {
    let address = free_address();
    // One of nodes 1 and 2 holds the port; the other keeps trying.
    let mut services = vec![(1, serving(1, &address)), (2, serving(2, &address))];
    let o = options(0, &address, SECRET, Duration::from_secs(10));
    let holder = join(&o, &[]).unwrap().server;
    services.retain(|(node, _)| *node != holder);
    let started = Instant::now();
    let outcome = join(&o, &[]).unwrap();
    assert_eq!(outcome.server, services[0].0);
    eprintln!("served again after {:?}", started.elapsed());
}

#[test]
fn a_replacement_tries_every_address_it_was_given() {
    let (dead, alive) = (free_address(), free_address());
    let _service = serving(1, &alive);
    let o = options(0, &dead, SECRET, Duration::from_secs(10));
    let outcome = join(&o, std::slice::from_ref(&alive)).unwrap();
    assert_eq!(outcome.server, 1);
    // With nobody serving anywhere it gives up once its time is up.
    let o = options(0, &dead, SECRET, BIND_RETRY);
    let e = join(&o, &[free_address()]).unwrap_err();
    assert!(
        matches!(
            e,
            FabricError::Rendezvous {
                reason: RendezvousFailure::Unreachable { .. },
                ..
            }
        ),
        "{e:?}"
    );
}
