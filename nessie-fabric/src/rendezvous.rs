//! The rendezvous: how the nodes of a cluster find each other without a
//! hand-written peer list.
//!
//! One node serves it at a `host:port` every node knows; every node (the
//! server too, in-process) registers an opaque blob (a `tcp` node its
//! listening address; a `verbs` node what its peers need to reach its
//! queue pairs and regions) and receives every node's blob, by node id,
//! once all have registered. Each registering node opens one connection to
//! the server (layout in [`crate::wire::rendezvous`]):
//!
//! ```text
//! node → server   hello(nonce_c)
//! server → node   hello(nonce_s)
//! node → server   REGISTER sealed for (nonce_c, nonce_s): membership, blob
//! server → node   REPLY sealed for (nonce_c, nonce_s): the table, or a refusal
//! ```
//!
//! A sealed message carries the two nonces it was made for, a key proof
//! (HMAC-SHA256 over the nonces) and a tag (HMAC-SHA256 over the whole
//! message), under labels distinct per direction and per MAC. The receiver
//! checks, in constant time: the key proof (fails: the secrets differ, or
//! the nonces were altered), then the tag (fails: the message was altered
//! on the way), then that the nonces are those of this connection (they
//! differ: the message was recorded on another connection and replayed).
//! Each side contributes a fresh nonce, so neither a recorded registration
//! nor a recorded reply verifies on a new connection. Each exchange has one
//! deadline, which a peer pacing its bytes cannot stretch, and every length
//! is bounded before anything is allocated.
//!
//! The server checks each registration's membership with
//! [`Membership::check`], refuses a node id that is already registered
//! (the first claimant keeps it) and answers every refusal with its reason,
//! sealed, so both sides report the same [`RendezvousFailure`]. Hostile
//! connections never stop it from serving the honest nodes: connections in
//! their exchange are capped and the oldest is evicted for a newcomer, and
//! a registering node whose connection is closed or reset before the
//! server answered connects again, with back-off, until its timeout. No
//! handler thread of the server outlives it.
//!
//! [`rendezvous_connected`] adds a barrier on the same connections: every
//! node connects to its peers with the table, then sends a sealed READY;
//! the server answers every node with a sealed GO once all have reported
//! (or names those that did not, as [`RendezvousFailure::NotReady`]). So no
//! node issues a verb before every peer is ready to receive it, which the
//! `verbs` fabric needs: a queue pair drops requests until its peer has
//! connected its end.

mod join;
mod sealed;
mod server;

#[cfg(feature = "verbs")]
pub(crate) use join::request;
pub use join::{join, JoinService, Joins, BIND_RETRY};

use self::sealed::{decode_failure, refusal_reason, seal, unseal, Session};
use crate::admission::Deadline;
use crate::tcp::handshake::fresh_nonce;
use crate::wire::rendezvous::{
    self as wire, Reply, RvHello, HELLO_BYTES, KIND_CLIENT_HELLO, KIND_GO, KIND_READY,
    KIND_REGISTER, KIND_REPLY, KIND_SERVER_HELLO, MAX_BLOB_BYTES, MAX_DETAIL_WORDS, MAX_REPLY_BODY,
    STATUS_GO,
};
use crate::{FabricError, Membership, NodeId, RendezvousFailure};
use std::fmt;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Longest the hellos and the registration may take, together (before the
/// wait for the table).
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// First pause before a registering node whose connection the server
/// closed connects again; each further pause doubles, up to the next.
const RETRY_PAUSE_MIN: Duration = Duration::from_millis(10);
/// Longest pause between a registering node's connections.
const RETRY_PAUSE_MAX: Duration = Duration::from_millis(500);
/// How much longer than its own timeout a registered node waits for the
/// server's answer (the server started its clock first).
const ANSWER_GRACE: Duration = Duration::from_secs(2);

/// How a node takes part in a rendezvous.
#[derive(Clone)]
pub struct RendezvousOptions {
    /// This node and its cluster (cluster id, format version, node count,
    /// regions): the server checks every registration against its own.
    pub membership: Membership,
    /// The cluster secret every message is authenticated with.
    pub secret: String,
    /// `host:port` of the server: the address the other nodes connect to,
    /// and the one the serving node binds (which may be `0.0.0.0:port`).
    pub address: String,
    /// Whether this node serves the rendezvous.
    pub serve: bool,
    /// How long the server waits for every node to register, and a node
    /// for the server to be reachable and then for its answer.
    pub timeout: Duration,
}

impl fmt::Debug for RendezvousOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RendezvousOptions")
            .field("membership", &self.membership)
            .field("secret", &"<redacted>")
            .field("address", &self.address)
            .field("serve", &self.serve)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// What a node learns from a rendezvous.
#[derive(Debug)]
pub struct RendezvousOutcome {
    /// Every node's blob, by node id.
    pub blobs: Vec<Vec<u8>>,
    /// The node that served the rendezvous.
    pub server: NodeId,
    /// This end of the connection to the server: the address of this
    /// node on its route to the server (`None` on the serving node).
    pub local_addr: Option<SocketAddr>,
    /// The server's end of that connection (`None` on the serving node).
    pub server_addr: Option<SocketAddr>,
    /// The address the server saw this node's connection come from, as
    /// its authenticated reply says (`None` on the serving node).
    pub seen_from: Option<SocketAddr>,
    /// Serving node: every registration it refused, each as the
    /// [`FabricError::Rendezvous`] naming where it came from and why.
    pub refused: Vec<FabricError>,
}

/// Registers `mine` and returns every node's blob (index = node id).
///
/// # Errors
/// As [`rendezvous_with`].
pub fn rendezvous(options: &RendezvousOptions, mine: &[u8]) -> Result<Vec<Vec<u8>>, FabricError> {
    rendezvous_with(options, |_| mine.to_vec()).map(|outcome| outcome.blobs)
}

/// Registers the blob `mine` makes and returns what the rendezvous
/// taught this node. A registering node calls `mine` once connected, with
/// its own address on the route to the server (so it can advertise an
/// address its peers reach; if it has to connect again, it registers the
/// same blob); the serving node calls it with `None` before it waits for
/// the others.
///
/// # Errors
/// [`FabricError::UnknownNode`] or [`FabricError::Options`] for a bad
/// membership; [`FabricError::Bind`] if the serving node cannot bind
/// `address`; otherwise [`FabricError::Rendezvous`]:
/// [`RendezvousFailure::Unreachable`] (no server within `timeout`),
/// [`RendezvousFailure::Missing`] (serving node: nodes that never
/// registered), [`RendezvousFailure::Refused`] (the server's reason:
/// other secret, tampered or replayed registration, membership mismatch,
/// duplicate node id, missing nodes), [`RendezvousFailure::Authentication`],
/// [`RendezvousFailure::Tampered`] or [`RendezvousFailure::Replayed`] for a
/// reply that does not verify, [`RendezvousFailure::TooLarge`] for a blob
/// over [`MAX_BLOB_BYTES`], and I/O failures.
pub fn rendezvous_with(
    options: &RendezvousOptions,
    mine: impl FnOnce(Option<SocketAddr>) -> Vec<u8>,
) -> Result<RendezvousOutcome, FabricError> {
    options.membership.validate()?;
    if options.serve {
        serve_rendezvous(options, bind(options)?, mine)
    } else {
        register(options, mine).map(|(outcome, _)| outcome)
    }
}

/// Serves the rendezvous on a listener the caller bound (e.g. to port 0;
/// `options.address` then only names it in errors), registering `mine`
/// for this node; `serve` is ignored.
///
/// # Errors
/// As [`rendezvous_with`] on the serving node.
pub fn serve_rendezvous(
    options: &RendezvousOptions,
    listener: TcpListener,
    mine: impl FnOnce(Option<SocketAddr>) -> Vec<u8>,
) -> Result<RendezvousOutcome, FabricError> {
    server::serve(options, &listener, mine).map(|(outcome, _)| outcome)
}

/// As [`rendezvous_with`], then a barrier: `connect` turns the table into
/// this node's connections to its peers, and the call returns only once
/// every node has connected (each node's `connect` returned `Ok`), with
/// what `connect` returned. A serving node binds `options.address`, or
/// serves on `listener` if the caller bound one.
///
/// # Errors
/// As [`rendezvous_with`]; `connect`'s own error; and
/// [`RendezvousFailure::NotReady`] (on the serving node, or
/// [`RendezvousFailure::Refused`] with it on the others) naming the nodes
/// that did not connect within `timeout` of the table, or whose report did
/// not verify.
pub fn rendezvous_connected<T>(
    options: &RendezvousOptions,
    listener: Option<TcpListener>,
    mine: impl FnOnce(Option<SocketAddr>) -> Vec<u8>,
    connect: impl FnOnce(&RendezvousOutcome) -> Result<T, FabricError>,
) -> Result<(RendezvousOutcome, T), FabricError> {
    options.membership.validate()?;
    if options.serve {
        let listener = match listener {
            Some(l) => l,
            None => bind(options)?,
        };
        let (outcome, held) = server::serve(options, &listener, mine)?;
        let (timeout, me) = (options.timeout, options.membership.node);
        match connect(&outcome) {
            Ok(value) => {
                held.barrier(true, timeout, me)?;
                Ok((outcome, value))
            }
            Err(e) => {
                // The others learn that this node did not connect.
                let _ = held.barrier(false, timeout, me);
                Err(e)
            }
        }
    } else {
        let (outcome, mut held) = register(options, mine)?;
        let value = connect(&outcome)?;
        held.ready(options)?;
        Ok((outcome, value))
    }
}

fn bind(options: &RendezvousOptions) -> Result<TcpListener, FabricError> {
    TcpListener::bind(options.address.as_str()).map_err(|source| FabricError::Bind {
        addr: options.address.clone(),
        source,
    })
}

/// A registering node's connection to the server, after the table.
struct Registration {
    stream: TcpStream,
    session: Session,
}

impl Registration {
    /// The barrier on a registering node: reports ready, sealed, and waits
    /// for the server's go.
    fn ready(&mut self, options: &RendezvousOptions) -> Result<(), FabricError> {
        let fail = |reason| FabricError::Rendezvous {
            addr: options.address.clone(),
            reason,
        };
        let secret = options.secret.as_bytes();
        let io = RendezvousFailure::Io;
        let report = seal(secret, KIND_READY, &self.session, &[]);
        // The go comes once every node reported: up to the server's timeout.
        let mut timed = Deadline::new(
            &self.stream,
            Instant::now() + options.timeout + ANSWER_GRACE,
        );
        timed.write_all(&report).map_err(io).map_err(fail)?;
        let body = unseal(
            &mut timed,
            secret,
            KIND_GO,
            &self.session,
            // A refusal: its status word and at most MAX_DETAIL_WORDS more.
            (1 + MAX_DETAIL_WORDS) * crate::wire::WORD,
        )
        .map_err(fail)?;
        match Reply::decode(&body).map_err(decode_failure).map_err(fail)? {
            Reply::Refuse {
                status: STATUS_GO, ..
            } => Ok(()),
            Reply::Refuse { status, detail } => Err(fail(RendezvousFailure::Refused(Box::new(
                refusal_reason(status, &detail),
            )))),
            Reply::Accept { .. } => Err(fail(RendezvousFailure::Malformed)),
        }
    }
}

/// A registering node: connect, register, wait for the table; the
/// connection stays open for a barrier. Connects again (with back-off,
/// within `timeout`) if the server closes or resets the connection before
/// it answered.
fn register(
    options: &RendezvousOptions,
    mine: impl FnOnce(Option<SocketAddr>) -> Vec<u8>,
) -> Result<(RendezvousOutcome, Registration), FabricError> {
    let fail = |reason| FabricError::Rendezvous {
        addr: options.address.clone(),
        reason,
    };
    let io = |e| fail(RendezvousFailure::Io(e));
    let started = Instant::now();
    let mut mine = Some(mine);
    let mut blob = Vec::new();
    let mut pause = RETRY_PAUSE_MIN;
    let (stream, reply, session) = loop {
        let left = options.timeout.saturating_sub(started.elapsed());
        let stream = dial(&options.address, left).map_err(fail)?;
        if let Some(mine) = mine.take() {
            let local_addr = stream.local_addr().map_err(io)?;
            blob = checked_blob(mine(Some(local_addr))).map_err(fail)?;
        }
        match exchange(&stream, options, &blob) {
            Ok((reply, session)) => break (stream, reply, session),
            Err(Attempt::Closed(e)) if started.elapsed() + pause < options.timeout => {
                tracing::debug!(
                    "rendezvous: {} hung up ({e}); connecting again",
                    options.address
                );
                std::thread::sleep(pause);
                pause = (pause * 2).min(RETRY_PAUSE_MAX);
            }
            Err(Attempt::Closed(e)) => return Err(io(e)),
            Err(Attempt::Failed(reason)) => return Err(fail(reason)),
        }
    };
    let local_addr = stream.local_addr().map_err(io)?;
    let server_addr = stream.peer_addr().map_err(io)?;
    let me = &options.membership;
    match reply {
        Reply::Accept {
            server,
            seen_from,
            blobs,
        } => {
            if blobs.len() != me.nodes || server as usize >= me.nodes || blobs[me.node] != blob {
                return Err(fail(RendezvousFailure::Malformed));
            }
            let outcome = RendezvousOutcome {
                blobs,
                server: server as NodeId,
                local_addr: Some(local_addr),
                server_addr: Some(server_addr),
                seen_from: Some(seen_from),
                refused: Vec::new(),
            };
            Ok((outcome, Registration { stream, session }))
        }
        Reply::Refuse { status, detail } => Err(fail(RendezvousFailure::Refused(Box::new(
            refusal_reason(status, &detail),
        )))),
    }
}

/// Connects to the server, retrying with back-off until `timeout`.
fn dial(address: &str, timeout: Duration) -> Result<TcpStream, RendezvousFailure> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(10);
    loop {
        let left = timeout.saturating_sub(started.elapsed());
        let attempt = left.clamp(Duration::from_millis(10), Duration::from_secs(2));
        let mut last = io::Error::new(ErrorKind::AddrNotAvailable, "address resolves to nothing");
        match address.to_socket_addrs() {
            Ok(addrs) => {
                for a in addrs {
                    match TcpStream::connect_timeout(&a, attempt) {
                        Ok(s) => return Ok(s),
                        Err(e) => last = e,
                    }
                }
            }
            Err(e) => last = e,
        }
        let left = timeout.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(RendezvousFailure::Unreachable {
                waited: started.elapsed(),
                source: last,
            });
        }
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// Why an attempt at the exchange failed.
enum Attempt {
    /// The server closed or reset the connection before any of its answer
    /// arrived: it did not take the registration (it evicts the oldest
    /// connections in their exchange when strangers crowd it), so another
    /// connection may fare better.
    Closed(io::Error),
    /// Anything else: final.
    Failed(RendezvousFailure),
}

/// The peer hung up (rather than, say, the time running out).
fn hung_up(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::UnexpectedEof
            | ErrorKind::BrokenPipe
    )
}

fn closed_or_io(e: io::Error) -> Attempt {
    if hung_up(&e) {
        Attempt::Closed(e)
    } else {
        Attempt::Failed(RendezvousFailure::Io(e))
    }
}

/// The registering side of the exchange on a connected stream: hellos and
/// registration within one deadline, then the wait for the table.
fn exchange(
    stream: &TcpStream,
    options: &RendezvousOptions,
    blob: &[u8],
) -> Result<(Reply, Session), Attempt> {
    let failed = Attempt::Failed;
    let decoded = |e| failed(decode_failure(e));
    stream
        .set_nodelay(true)
        .map_err(|e| failed(RendezvousFailure::Io(e)))?;
    let mut timed = Deadline::new(stream, Instant::now() + step(options.timeout));
    let hello = RvHello {
        kind: KIND_CLIENT_HELLO,
        nonce: fresh_nonce(),
    };
    timed.write_all(&hello.encode()).map_err(closed_or_io)?;
    let mut answer = [0u8; HELLO_BYTES];
    timed.read_exact(&mut answer).map_err(closed_or_io)?;
    let session = Session {
        client: hello.nonce,
        server: RvHello::decode(&answer, KIND_SERVER_HELLO)
            .map_err(decoded)?
            .nonce,
    };
    let me = &options.membership;
    let registration = wire::Registration {
        format_version: me.format_version,
        node: me.node as u32,
        cluster_id: me.cluster_id,
        nodes: me.nodes as u32,
        regions: me.regions.iter().map(|r| (r.id.0, r.len)).collect(),
        blob: blob.to_vec(),
    };
    let secret = options.secret.as_bytes();
    let sealed = seal(secret, KIND_REGISTER, &session, &registration.encode());
    timed.write_all(&sealed).map_err(closed_or_io)?;
    // The table comes once every node registered: up to the server's
    // timeout. Whether any of the answer came decides a retry.
    let mut timed = Deadline::new(stream, Instant::now() + options.timeout + ANSWER_GRACE);
    let mut first = [0u8; 1];
    let peeked = timed
        .left()
        .and_then(|left| stream.set_read_timeout(Some(left)))
        .and_then(|()| stream.peek(&mut first));
    match peeked {
        Ok(0) => return Err(Attempt::Closed(ErrorKind::UnexpectedEof.into())),
        Ok(_) => {}
        Err(e) => return Err(closed_or_io(e)),
    }
    let body = unseal(&mut timed, secret, KIND_REPLY, &session, MAX_REPLY_BODY).map_err(failed)?;
    Ok((Reply::decode(&body).map_err(decoded)?, session))
}

pub(super) fn step(timeout: Duration) -> Duration {
    timeout.clamp(Duration::from_millis(100), STEP_TIMEOUT)
}

pub(super) fn set_timeouts(stream: &TcpStream, t: Duration) -> io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(t))?;
    stream.set_write_timeout(Some(t))
}

pub(super) fn checked_blob(blob: Vec<u8>) -> Result<Vec<u8>, RendezvousFailure> {
    if blob.len() > MAX_BLOB_BYTES {
        return Err(RendezvousFailure::TooLarge {
            len: blob.len(),
            limit: MAX_BLOB_BYTES,
        });
    }
    Ok(blob)
}

/// The address to bind a listener on for a node that reaches the
/// rendezvous at `address`: the unspecified address of the same family,
/// on an ephemeral port.
pub(crate) fn wildcard_for(address: &str) -> &'static str {
    let v6 = address
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| a.is_ipv6());
    if v6 {
        "[::]:0"
    } else {
        "0.0.0.0:0"
    }
}

/// The `host:port` a node advertises for a listener on `port`: `host` its
/// address on `route` to the server, or, on the server (no route), the
/// host of the rendezvous address `rv_address`.
pub(crate) fn advertised(route: Option<SocketAddr>, rv_address: &str, port: u16) -> String {
    if let Some(local) = route {
        SocketAddr::new(local.ip(), port).to_string()
    } else {
        let host = rv_address.rsplit_once(':').map_or("", |(host, _)| host);
        format!("{host}:{port}")
    }
}

/// Every node's `host:port` from a table of advertised addresses (`None`:
/// a blob is not one). The entry of `server`, if its host is unspecified,
/// takes the address the server was reached at, `server_addr`.
pub(crate) fn addresses(
    blobs: &[Vec<u8>],
    server: NodeId,
    server_addr: Option<SocketAddr>,
) -> Option<Vec<String>> {
    blobs
        .iter()
        .enumerate()
        .map(|(node, blob)| {
            let addr = std::str::from_utf8(blob).ok()?;
            let (host, port) = addr.rsplit_once(':')?;
            let port = port.parse::<u16>().ok()?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            match (host.parse::<std::net::IpAddr>(), server_addr) {
                (Ok(ip), Some(at)) if ip.is_unspecified() && node == server => {
                    Some(SocketAddr::new(at.ip(), port).to_string())
                }
                _ => Some(addr.to_owned()),
            }
        })
        .collect()
}
