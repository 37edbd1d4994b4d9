//! The bootstrap suite: every fabric whose nodes meet through the
//! authenticated rendezvous (`tcp` and `verbs`) must refuse, with typed
//! errors, a node of another secret, replayed and tampered messages, a
//! duplicate node id and another node count, and must still open for the
//! honest nodes. [`bootstrap_tests!`](crate::bootstrap_tests) instantiates
//! the suite for a backend from one function that opens a node from its
//! [`RendezvousOptions`].
//!
//! The attacks run through [`Tap`], a man in the middle on 127.0.0.1 that
//! records both directions of one connection and can flip a byte of
//! either.

use crate::wire::rendezvous::{HELLO_BYTES, SEALED_HEADER_BYTES};
use crate::{
    Fabric, FabricError, HandshakeFailure, Membership, RegionId, RegionSpec, RemoteAddr,
    RendezvousFailure, RendezvousOptions,
};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Opens one node of a cluster that meets through the rendezvous.
pub type Open = fn(RendezvousOptions) -> Result<Arc<dyn Fabric>, FabricError>;

/// The secret of the honest nodes.
pub const SECRET: &str = "bootstrap-suite-secret-0123456789";
/// The one region every node registers.
pub const REGION: RegionId = RegionId(0);
/// How long an honest node waits for the others.
const PATIENT: Duration = Duration::from_secs(30);
/// How long a node waits when the test expects it to give up (room for a
/// slow device open under an emulated CPU).
const IMPATIENT: Duration = Duration::from_secs(10);

/// What a [`Tap`] forwarded in one direction.
pub type Tape = Arc<Mutex<Vec<u8>>>;

/// A man in the middle for one connection to `target`.
#[derive(Debug)]
pub struct Tap {
    /// Where to connect instead of the target.
    pub addr: String,
    /// Bytes from the connecting side to the target.
    pub up: Tape,
    /// Bytes from the target back.
    pub down: Tape,
}

impl Tap {
    /// Forwards the first connection to `addr` on to `target`, recording
    /// both directions and flipping the byte at offset `flip_up` (towards
    /// the target) or `flip_down` (back) if given.
    ///
    /// # Panics
    /// If it cannot listen on 127.0.0.1 (the test cannot run).
    #[must_use]
    pub fn new(target: &str, flip_up: Option<usize>, flip_down: Option<usize>) -> Tap {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen on 127.0.0.1");
        let addr = listener.local_addr().expect("bound address").to_string();
        let (up, down) = (Tape::default(), Tape::default());
        let (up2, down2, target) = (Arc::clone(&up), Arc::clone(&down), target.to_owned());
        std::thread::spawn(move || {
            let Ok((node, _)) = listener.accept() else {
                return;
            };
            // The target may not listen yet (its node is still starting).
            let mut attempts = 0;
            let server = loop {
                match TcpStream::connect(&target) {
                    Ok(s) => break s,
                    Err(_) if attempts < 1500 => {
                        attempts += 1;
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(_) => return,
                }
            };
            let (Ok(node2), Ok(server2)) = (node.try_clone(), server.try_clone()) else {
                return;
            };
            pump(node2, server2, flip_up, up2);
            pump(server, node, flip_down, down2);
        });
        Tap { addr, up, down }
    }

    /// What went up, so far.
    #[must_use]
    pub fn up(&self) -> Vec<u8> {
        self.up.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// What came down, so far.
    #[must_use]
    pub fn down(&self) -> Vec<u8> {
        self.down.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, flip: Option<usize>, tape: Tape) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut at = 0;
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            if let Some(f) = flip.filter(|f| (at..at + n).contains(f)) {
                buf[f - at] ^= 0x20;
            }
            at += n;
            if let Ok(mut t) = tape.lock() {
                t.extend_from_slice(&buf[..n]);
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

/// A free port on 127.0.0.1 for a server a test starts later (a
/// rendezvous the serving node binds, a metrics endpoint).
///
/// The port lies below Linux's ephemeral range (32768 and up), and each
/// call of a process takes the next one. A port bound to 0 and released
/// would be free only until the next listener bound to port 0 (another
/// test's node, in parallel) or the next outgoing connection took it, and
/// this test's client would then talk to that other server: a failure
/// seen once, as a rendezvous that never answered.
///
/// # Panics
/// If no port of the range can be bound.
#[must_use]
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    // Processes of a run start at different ports.
    let start = std::process::id().wrapping_mul(7919);
    for _ in 0..SPAN {
        let port = FIRST + start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN;
        let port = u16::try_from(port).expect("below 32000");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 in {FIRST}..{}", FIRST + SPAN)
}

/// `127.0.0.1:` and a [`free_port`].
///
/// # Panics
/// As [`free_port`].
#[must_use]
pub fn free_address() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// The rendezvous options of node `node` of `nodes` meeting at `address`
/// (node 0 serves), with the honest secret.
#[must_use]
pub fn options(
    cluster_id: u64,
    node: usize,
    nodes: usize,
    address: &str,
    timeout: Duration,
) -> RendezvousOptions {
    RendezvousOptions {
        membership: Membership {
            cluster_id,
            format_version: 1,
            node,
            nodes,
            regions: vec![RegionSpec {
                id: REGION,
                len: 64 << 10,
            }],
        },
        secret: SECRET.into(),
        address: address.into(),
        serve: node == 0,
        timeout,
    }
}

type Opening = JoinHandle<Result<Arc<dyn Fabric>, FabricError>>;

fn spawn(open: Open, o: RendezvousOptions) -> Opening {
    std::thread::spawn(move || open(o))
}

/// The rendezvous reason of an error, looking through a refusal.
///
/// # Panics
/// If `e` is not a rendezvous error.
#[must_use]
pub fn reason(e: &FabricError) -> &RendezvousFailure {
    match e {
        FabricError::Rendezvous {
            reason: RendezvousFailure::Refused(inner),
            ..
        } => inner,
        FabricError::Rendezvous { reason, .. } => reason,
        other => panic!("not a rendezvous error: {other}"),
    }
}

fn expect_err(r: Result<Arc<dyn Fabric>, FabricError>, what: &str) -> FabricError {
    match r {
        Ok(_) => panic!("{what}: the node opened"),
        Err(e) => e,
    }
}

fn joined(h: Opening) -> Result<Arc<dyn Fabric>, FabricError> {
    h.join().expect("opening thread")
}

/// Checks that the opened nodes reach each other's memory.
fn works(fabrics: &[Arc<dyn Fabric>]) {
    let n = fabrics.len();
    for (i, f) in fabrics.iter().enumerate() {
        let at = RemoteAddr::new((i + 1) % n, REGION, 8 * i as u64);
        f.write(at, &(i as u64 + 0x51).to_le_bytes())
            .expect("write");
    }
    for (i, f) in fabrics.iter().enumerate() {
        let mut word = [0u8; 8];
        let from = (i + n - 1) % n;
        f.read(RemoteAddr::new(i, REGION, 8 * from as u64), &mut word)
            .expect("read");
        assert_eq!(u64::from_le_bytes(word), from as u64 + 0x51);
    }
}

/// The honest node 1 joins the two-node cluster `server` serves at
/// `addr`, and the two reach each other's memory.
fn honest_node_joins(open: Open, cluster_id: u64, addr: &str, server: Opening) {
    let honest = open(options(cluster_id, 1, 2, addr, PATIENT)).expect("the honest node");
    works(&[joined(server).expect("the serving node"), honest]);
}

/// A node of another secret is refused (it learns `Authentication`), and
/// the serving node goes on to open with the honest node.
///
/// # Panics
/// If the backend does not behave so (the test fails).
pub fn another_secret_is_refused(open: Open, cluster_id: u64) {
    let addr = free_address();
    let server = spawn(open, options(cluster_id, 0, 2, &addr, PATIENT));
    let mut impostor = options(cluster_id, 1, 2, &addr, IMPATIENT);
    impostor.secret = "not the cluster secret at all!!".into();
    let e = expect_err(open(impostor), "another secret");
    assert!(
        matches!(reason(&e), RendezvousFailure::Authentication),
        "{e}"
    );
    honest_node_joins(open, cluster_id, &addr, server);
}

/// A registration recorded on one connection and replayed on another is
/// refused, and does not take the node's id: the honest node still joins.
///
/// # Panics
/// If the backend does not behave so (the test fails).
pub fn a_replayed_registration_is_refused(open: Open, cluster_id: u64) {
    // Record node 1's registration in an honest cluster.
    let addr = free_address();
    let server = spawn(open, options(cluster_id, 0, 2, &addr, PATIENT));
    let tap = Tap::new(&addr, None, None);
    let node = open(options(cluster_id, 1, 2, &tap.addr, PATIENT)).expect("node 1");
    let first = joined(server).expect("node 0");
    drop((node, first));
    // Play it to a new server of the same cluster and secret.
    let addr = free_address();
    let server = spawn(open, options(cluster_id, 0, 2, &addr, PATIENT));
    let mut s = loop {
        if let Ok(s) = TcpStream::connect(&addr) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s.write_all(&tap.up()).expect("replay");
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    assert!(
        answer.len() > HELLO_BYTES + SEALED_HEADER_BYTES,
        "the replayed registration got no refusal"
    );
    honest_node_joins(open, cluster_id, &addr, server);
}

/// A registration altered on the way is refused as tampered (the sender
/// learns it); the honest retry joins.
///
/// # Panics
/// If the backend does not behave so (the test fails).
pub fn a_tampered_registration_is_refused(open: Open, cluster_id: u64) {
    let addr = free_address();
    let server = spawn(open, options(cluster_id, 0, 2, &addr, PATIENT));
    // A byte of the registration's body (its cluster id).
    let tap = Tap::new(&addr, Some(HELLO_BYTES + SEALED_HEADER_BYTES + 8), None);
    let e = expect_err(
        open(options(cluster_id, 1, 2, &tap.addr, IMPATIENT)),
        "tampered registration",
    );
    assert!(matches!(reason(&e), RendezvousFailure::Tampered), "{e}");
    honest_node_joins(open, cluster_id, &addr, server);
}

/// A table altered on the way is refused by the node that receives it;
/// the serving node, which handed it out, fails too (the node never
/// connects), each with a typed error.
///
/// # Panics
/// If the backend does not behave so (the test fails).
pub fn a_tampered_table_is_refused(open: Open, cluster_id: u64) {
    let addr = free_address();
    let server = spawn(open, options(cluster_id, 0, 2, &addr, IMPATIENT));
    // A byte of node 0's blob in the table.
    let tap = Tap::new(&addr, None, Some(HELLO_BYTES + SEALED_HEADER_BYTES + 48));
    let e = expect_err(
        open(options(cluster_id, 1, 2, &tap.addr, IMPATIENT)),
        "tampered table",
    );
    assert!(matches!(reason(&e), RendezvousFailure::Tampered), "{e}");
    let e = expect_err(joined(server), "the serving node's peer never connected");
    assert!(
        matches!(
            e,
            FabricError::Rendezvous { .. }
                | FabricError::Handshake { .. }
                | FabricError::Unreachable { .. }
        ),
        "{e}"
    );
}

/// Two claimants of one node id: the second is refused as a duplicate, and
/// the cluster opens with the first.
///
/// # Panics
/// If the backend does not behave so (the test fails).
pub fn a_duplicate_node_id_is_refused(open: Open, cluster_id: u64) {
    let addr = free_address();
    let server = spawn(open, options(cluster_id, 0, 3, &addr, PATIENT));
    let (tx, rx) = mpsc::channel();
    for claimant in 0..2 {
        let (o, tx) = (options(cluster_id, 1, 3, &addr, PATIENT), tx.clone());
        std::thread::spawn(move || {
            let _ = tx.send((claimant, open(o)));
        });
    }
    // The refused claimant returns at once; the other waits for node 2.
    let (_, refused) = rx
        .recv_timeout(PATIENT)
        .expect("one claimant is refused at once");
    let e = expect_err(refused, "duplicate node id");
    assert!(matches!(reason(&e), RendezvousFailure::Duplicate(1)), "{e}");
    let third = open(options(cluster_id, 2, 3, &addr, PATIENT)).expect("node 2");
    let (_, first) = rx.recv_timeout(PATIENT).expect("the first claimant");
    works(&[
        joined(server).expect("node 0"),
        first.expect("the first claimant opens"),
        third,
    ]);
}

/// A node of another node count is refused naming both counts; the
/// cluster then opens with a node of the right count.
///
/// # Panics
/// If the backend does not behave so (the test fails).
pub fn another_node_count_is_refused(open: Open, cluster_id: u64) {
    let addr = free_address();
    let server = spawn(open, options(cluster_id, 0, 2, &addr, PATIENT));
    let e = expect_err(
        open(options(cluster_id, 1, 3, &addr, IMPATIENT)),
        "another node count",
    );
    assert!(
        matches!(
            reason(&e),
            RendezvousFailure::Membership(HandshakeFailure::Nodes {
                found: 3,
                expected: 2
            })
        ),
        "{e}"
    );
    honest_node_joins(open, cluster_id, &addr, server);
}

/// Instantiates the bootstrap suite for a backend: `$open` is an
/// [`Open`](crate::conformance::bootstrap::Open), `$cluster` a `fn() ->
/// u64` giving a fresh cluster id per test, and the attributes (e.g.
/// `#[ignore = "…"]`) go on every test.
#[macro_export]
macro_rules! bootstrap_tests {
    ($open:expr, $cluster:expr, $(#[$attr:meta])*) => {
        $crate::bootstrap_tests!(@each $open, $cluster, [$(#[$attr])*],
            another_secret_is_refused,
            a_replayed_registration_is_refused,
            a_tampered_registration_is_refused,
            a_tampered_table_is_refused,
            a_duplicate_node_id_is_refused,
            another_node_count_is_refused);
    };
    (@each $open:expr, $cluster:expr, $attrs:tt, $($name:ident),*) => {
        $( $crate::bootstrap_tests!(@one $open, $cluster, $attrs, $name); )*
    };
    (@one $open:expr, $cluster:expr, [$(#[$attr:meta])*], $name:ident) => {
        #[test]
        $(#[$attr])*
        fn $name() {
            $crate::conformance::bootstrap::$name($open, $cluster());
        }
    };
}
