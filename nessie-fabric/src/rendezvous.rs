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
//! nor a recorded reply verifies on a new connection. Every read has a
//! timeout and every length is bounded before anything is allocated.
//!
//! The server checks each registration's membership with
//! [`Membership::check`], refuses a node id that is already registered
//! (the first claimant keeps it) and answers every refusal with its reason,
//! sealed, so both sides report the same [`RendezvousFailure`]. Hostile
//! connections never stop it from serving the honest nodes.

use crate::membership::{claimed_regions, PeerClaim};
use crate::tcp::handshake::{fresh_nonce, keyed_mac};
use crate::wire::frame::{MAC_BYTES, NONCE_BYTES};
use crate::wire::rendezvous::{
    DecodeError, Registration, Reply, RvHello, SealedHeader, HELLO_BYTES, KIND_CLIENT_HELLO,
    KIND_REGISTER, KIND_REPLY, KIND_SERVER_HELLO, MAX_BLOB_BYTES, MAX_DETAIL_WORDS,
    MAX_REGISTER_BODY, MAX_REPLY_BODY, NO_REGION, REGISTER_LABEL, REGISTER_PROOF_LABEL,
    REPLY_LABEL, REPLY_PROOF_LABEL, SEALED_HEADER_BYTES, STATUS_AUTHENTICATION, STATUS_CLUSTER,
    STATUS_DUPLICATE, STATUS_MALFORMED, STATUS_MISSING, STATUS_NODE, STATUS_NODES, STATUS_REGION,
    STATUS_REPLAYED, STATUS_TAMPERED, STATUS_VERSION,
};
use crate::{FabricError, HandshakeFailure, Membership, NodeId, RegionId, RendezvousFailure};
use hmac::Mac;
use std::fmt;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Longest a single read or write of the exchange may take (before the
/// wait for the table).
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// How much longer than its own timeout a registered node waits for the
/// server's answer (the server started its clock first).
const ANSWER_GRACE: Duration = Duration::from_secs(2);
/// How often the server looks for new connections while it waits.
const POLL: Duration = Duration::from_millis(5);

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
/// address its peers reach); the serving node calls it with `None` before
/// it waits for the others.
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
        let listener =
            TcpListener::bind(options.address.as_str()).map_err(|source| FabricError::Bind {
                addr: options.address.clone(),
                source,
            })?;
        serve_rendezvous(options, listener, mine)
    } else {
        register(options, mine)
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
    let me = &options.membership;
    me.validate()?;
    let fail = |reason| FabricError::Rendezvous {
        addr: options.address.clone(),
        reason,
    };
    let blob = checked_blob(mine(None)).map_err(fail)?;
    listener
        .set_nonblocking(true)
        .map_err(|e| fail(RendezvousFailure::Io(e)))?;
    let mut server = Server {
        ctx: Arc::new(Ctx {
            membership: me.clone(),
            secret: options.secret.as_bytes().to_vec(),
            step: step(options.timeout),
        }),
        blobs: vec![None; me.nodes],
        waiting: Vec::new(),
        refused: Vec::new(),
    };
    server.blobs[me.node] = Some(blob);
    let started = Instant::now();
    let active = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel();
    while server.blobs.iter().any(Option::is_none) {
        if started.elapsed() >= options.timeout {
            let reason = server.give_up(started.elapsed());
            return Err(fail(reason));
        }
        server.accept_all(&listener, &active, &tx);
        if let Ok((peer, result)) = rx.recv_timeout(POLL) {
            server.admit(peer, result);
        }
    }
    Ok(server.finish(listener.local_addr().ok()))
}

/// A registration whose proofs and membership checked out.
struct Registered {
    node: NodeId,
    blob: Vec<u8>,
    stream: TcpStream,
    session: Session,
}

/// What every handler of the server shares.
struct Ctx {
    membership: Membership,
    secret: Vec<u8>,
    step: Duration,
}

/// The server's state while it waits.
struct Server {
    ctx: Arc<Ctx>,
    blobs: Vec<Option<Vec<u8>>>,
    /// Registered nodes waiting for the table.
    waiting: Vec<(SocketAddr, TcpStream, Session)>,
    refused: Vec<FabricError>,
}

/// What a handler thread reports: where the connection came from, and
/// the registration or why it was refused.
type Handled = (SocketAddr, Result<Registered, RendezvousFailure>);

impl Server {
    /// Starts a handler for every pending connection (up to a bound on
    /// handlers running at once; connections over it are closed at once).
    fn accept_all(
        &self,
        listener: &TcpListener,
        active: &Arc<AtomicUsize>,
        tx: &mpsc::Sender<Handled>,
    ) {
        let max_active = 2 * self.ctx.membership.nodes + 16;
        loop {
            let (stream, peer) = match listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::warn!("rendezvous: accept failed: {e}");
                    return;
                }
            };
            if active.load(Ordering::Acquire) >= max_active {
                tracing::warn!("rendezvous: too many connections, closing {peer}");
                continue;
            }
            active.fetch_add(1, Ordering::AcqRel);
            let (ctx, running, tx) = (Arc::clone(&self.ctx), Arc::clone(active), tx.clone());
            let spawned = std::thread::Builder::new()
                .name("nessie-rendezvous".into())
                .spawn(move || {
                    let result = handle(stream, peer, &ctx);
                    running.fetch_sub(1, Ordering::AcqRel);
                    let _ = tx.send((peer, result));
                });
            if let Err(e) = spawned {
                tracing::warn!("rendezvous: cannot start a handler: {e}");
                active.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    fn refuse(&mut self, peer: SocketAddr, reason: RendezvousFailure) {
        tracing::warn!("rendezvous: refused the registration from {peer}: {reason}");
        self.refused.push(FabricError::Rendezvous {
            addr: peer.to_string(),
            reason,
        });
    }

    /// Takes a handler's result: the first claimant of a node id keeps it.
    fn admit(&mut self, peer: SocketAddr, result: Result<Registered, RendezvousFailure>) {
        match result {
            Ok(mut reg) if self.blobs[reg.node].is_some() => {
                let reason = RendezvousFailure::Duplicate(reg.node);
                let reply = seal(
                    &self.ctx.secret,
                    KIND_REPLY,
                    &reg.session,
                    &refusal(&reason),
                );
                let _ = reg.stream.write_all(&reply);
                self.refuse(peer, reason);
            }
            Ok(reg) => {
                self.blobs[reg.node] = Some(reg.blob);
                self.waiting.push((peer, reg.stream, reg.session));
            }
            Err(reason) => self.refuse(peer, reason),
        }
    }

    /// Tells every registered node which nodes are missing.
    fn give_up(&mut self, waited: Duration) -> RendezvousFailure {
        let nodes: Vec<NodeId> = (0..self.blobs.len())
            .filter(|&n| self.blobs[n].is_none())
            .collect();
        let reason = RendezvousFailure::Missing { nodes, waited };
        let body = refusal(&reason);
        for (_, stream, session) in &mut self.waiting {
            let _ = stream.write_all(&seal(&self.ctx.secret, KIND_REPLY, session, &body));
        }
        reason
    }

    /// Sends every registered node the table.
    fn finish(mut self, local: Option<SocketAddr>) -> RendezvousOutcome {
        let blobs: Vec<Vec<u8>> = self.blobs.into_iter().flatten().collect();
        let server = self.ctx.membership.node;
        for (peer, stream, session) in &mut self.waiting {
            let mut body = Reply::Accept {
                server: server as u32,
                seen_from: *peer,
                blobs: blobs.clone(),
            }
            .encode();
            if body.len() > MAX_REPLY_BODY {
                // No node would read a table this large.
                tracing::warn!("rendezvous: a table of {} bytes is too large", body.len());
                body = refusal(&RendezvousFailure::Malformed);
            }
            if let Err(e) = stream.write_all(&seal(&self.ctx.secret, KIND_REPLY, session, &body)) {
                tracing::warn!("rendezvous: cannot send the table to {peer}: {e}");
            }
        }
        RendezvousOutcome {
            blobs,
            server,
            local_addr: None,
            server_addr: local,
            seen_from: None,
            refused: std::mem::take(&mut self.refused),
        }
    }
}

/// The server's side of one connection: hellos, then the registration,
/// checked; a refusal is answered (sealed) before it is returned.
fn handle(
    mut stream: TcpStream,
    peer: SocketAddr,
    ctx: &Ctx,
) -> Result<Registered, RendezvousFailure> {
    let io = RendezvousFailure::Io;
    stream.set_nonblocking(false).map_err(io)?;
    set_timeouts(&stream, ctx.step).map_err(io)?;
    let mut hello = [0u8; HELLO_BYTES];
    stream.read_exact(&mut hello).map_err(io)?;
    let client = RvHello::decode(&hello, KIND_CLIENT_HELLO)
        .map_err(decode_failure)?
        .nonce;
    let session = Session {
        client,
        server: fresh_nonce(),
    };
    let hello = RvHello {
        kind: KIND_SERVER_HELLO,
        nonce: session.server,
    };
    stream.write_all(&hello.encode()).map_err(io)?;
    let checked = unseal(
        &mut stream,
        &ctx.secret,
        KIND_REGISTER,
        &session,
        MAX_REGISTER_BODY,
    )
    .and_then(|body| Registration::decode(&body).map_err(decode_failure))
    .and_then(|reg| check_registration(&ctx.membership, &reg).map(|()| reg));
    match checked {
        Ok(reg) => Ok(Registered {
            node: reg.node as NodeId,
            blob: reg.blob,
            stream,
            session,
        }),
        Err(reason) => {
            if !matches!(reason, RendezvousFailure::Io(_)) {
                let reply = seal(&ctx.secret, KIND_REPLY, &session, &refusal(&reason));
                if let Err(e) = stream.write_all(&reply) {
                    tracing::debug!("rendezvous: cannot tell {peer} why it was refused: {e}");
                }
            }
            Err(reason)
        }
    }
}

/// The one membership check: the registration is addressed to whichever
/// node serves, so the receiver it names is the server.
fn check_registration(me: &Membership, reg: &Registration) -> Result<(), RendezvousFailure> {
    let regions = claimed_regions(&reg.regions);
    let claim = PeerClaim {
        format_version: reg.format_version,
        cluster_id: reg.cluster_id,
        from: u64::from(reg.node),
        to_of: Some((me.node as u64, u64::from(reg.nodes))),
        regions: &regions,
    };
    // Any node id of the cluster may register (the server's own included:
    // that is a duplicate, found when it is admitted).
    let from = reg.node as NodeId;
    me.check(&claim, (from < me.nodes).then_some(from), &me.regions)
        .map_err(RendezvousFailure::Membership)
}

/// A registering node: connect, register, wait for the table.
fn register(
    options: &RendezvousOptions,
    mine: impl FnOnce(Option<SocketAddr>) -> Vec<u8>,
) -> Result<RendezvousOutcome, FabricError> {
    let fail = |reason| FabricError::Rendezvous {
        addr: options.address.clone(),
        reason,
    };
    let io = |e| fail(RendezvousFailure::Io(e));
    let mut stream = dial(&options.address, options.timeout).map_err(fail)?;
    let local_addr = stream.local_addr().map_err(io)?;
    let server_addr = stream.peer_addr().map_err(io)?;
    let blob = checked_blob(mine(Some(local_addr))).map_err(fail)?;
    let reply = exchange(&mut stream, options, &blob).map_err(fail)?;
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
            Ok(RendezvousOutcome {
                blobs,
                server: server as NodeId,
                local_addr: Some(local_addr),
                server_addr: Some(server_addr),
                seen_from: Some(seen_from),
                refused: Vec::new(),
            })
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

/// The registering side of the exchange on a connected stream.
fn exchange(
    stream: &mut TcpStream,
    options: &RendezvousOptions,
    blob: &[u8],
) -> Result<Reply, RendezvousFailure> {
    let io = RendezvousFailure::Io;
    set_timeouts(stream, step(options.timeout)).map_err(io)?;
    let hello = RvHello {
        kind: KIND_CLIENT_HELLO,
        nonce: fresh_nonce(),
    };
    stream.write_all(&hello.encode()).map_err(io)?;
    let mut answer = [0u8; HELLO_BYTES];
    stream.read_exact(&mut answer).map_err(io)?;
    let session = Session {
        client: hello.nonce,
        server: RvHello::decode(&answer, KIND_SERVER_HELLO)
            .map_err(decode_failure)?
            .nonce,
    };
    let me = &options.membership;
    let registration = Registration {
        format_version: me.format_version,
        node: me.node as u32,
        cluster_id: me.cluster_id,
        nodes: me.nodes as u32,
        regions: me.regions.iter().map(|r| (r.id.0, r.len)).collect(),
        blob: blob.to_vec(),
    };
    let secret = options.secret.as_bytes();
    let sealed = seal(secret, KIND_REGISTER, &session, &registration.encode());
    stream.write_all(&sealed).map_err(io)?;
    stream
        .set_read_timeout(Some(options.timeout + ANSWER_GRACE))
        .map_err(io)?;
    let body = unseal(stream, secret, KIND_REPLY, &session, MAX_REPLY_BODY)?;
    Reply::decode(&body).map_err(decode_failure)
}

fn step(timeout: Duration) -> Duration {
    timeout.clamp(Duration::from_millis(100), STEP_TIMEOUT)
}

fn set_timeouts(stream: &TcpStream, t: Duration) -> io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(t))?;
    stream.set_write_timeout(Some(t))
}

fn checked_blob(blob: Vec<u8>) -> Result<Vec<u8>, RendezvousFailure> {
    if blob.len() > MAX_BLOB_BYTES {
        return Err(RendezvousFailure::TooLarge {
            len: blob.len(),
            limit: MAX_BLOB_BYTES,
        });
    }
    Ok(blob)
}

fn decode_failure(e: DecodeError) -> RendezvousFailure {
    match e {
        DecodeError::BadMagic => RendezvousFailure::BadMagic,
        DecodeError::Version(_) | DecodeError::Malformed | DecodeError::TooLarge => {
            RendezvousFailure::Malformed
        }
    }
}

/// The nonces of one connection, client's first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Session {
    client: [u8; NONCE_BYTES],
    server: [u8; NONCE_BYTES],
}

/// The key-proof and tag labels of a sealed message of `kind`.
fn labels(kind: u32) -> (&'static [u8], &'static [u8]) {
    if kind == KIND_REGISTER {
        (REGISTER_PROOF_LABEL, REGISTER_LABEL)
    } else {
        (REPLY_PROOF_LABEL, REPLY_LABEL)
    }
}

/// A sealed message of `kind` for `session`: header, body, tag.
fn seal(secret: &[u8], kind: u32, session: &Session, body: &[u8]) -> Vec<u8> {
    let (proof_label, label) = labels(kind);
    let proof = keyed_mac(secret, &[proof_label, &session.client, &session.server])
        .finalize()
        .into_bytes();
    let mut out = SealedHeader {
        kind,
        body_len: body.len() as u32,
        client_nonce: session.client,
        server_nonce: session.server,
        proof: proof.into(),
    }
    .encode();
    out.extend_from_slice(body);
    let tag = keyed_mac(secret, &[label, &out]).finalize().into_bytes();
    out.extend_from_slice(&tag);
    out
}

/// Reads a sealed message of `kind` and returns its body once its key
/// proof, its tag and its nonces check out (in that order).
fn unseal(
    stream: &mut impl Read,
    secret: &[u8],
    kind: u32,
    session: &Session,
    max_body: usize,
) -> Result<Vec<u8>, RendezvousFailure> {
    let mut head = [0u8; SEALED_HEADER_BYTES];
    stream
        .read_exact(&mut head)
        .map_err(RendezvousFailure::Io)?;
    let header = SealedHeader::decode(&head, kind, max_body).map_err(decode_failure)?;
    let body_len = header.body_len as usize;
    let mut rest = vec![0u8; body_len + MAC_BYTES];
    stream
        .read_exact(&mut rest)
        .map_err(RendezvousFailure::Io)?;
    let carried = Session {
        client: header.client_nonce,
        server: header.server_nonce,
    };
    let (proof_label, label) = labels(kind);
    let (body, tag) = rest.split_at(body_len);
    if keyed_mac(secret, &[proof_label, &carried.client, &carried.server])
        .verify_slice(&header.proof)
        .is_err()
    {
        // An honest peer of another secret names this connection's nonces;
        // other nonces that do not verify were altered.
        return Err(if carried == *session {
            RendezvousFailure::Authentication
        } else {
            RendezvousFailure::Tampered
        });
    }
    if keyed_mac(secret, &[label, &head, body])
        .verify_slice(tag)
        .is_err()
    {
        return Err(RendezvousFailure::Tampered);
    }
    if carried != *session {
        return Err(RendezvousFailure::Replayed);
    }
    rest.truncate(body_len);
    Ok(rest)
}

/// The refusal body that tells a node `reason`.
fn refusal(reason: &RendezvousFailure) -> Vec<u8> {
    use HandshakeFailure as H;
    use RendezvousFailure as R;
    let (status, detail): (u32, Vec<u64>) = match reason {
        R::Authentication => (STATUS_AUTHENTICATION, Vec::new()),
        R::Tampered => (STATUS_TAMPERED, Vec::new()),
        R::Replayed => (STATUS_REPLAYED, Vec::new()),
        R::Duplicate(node) => (STATUS_DUPLICATE, vec![*node as u64]),
        R::Missing { nodes, waited } => (
            STATUS_MISSING,
            std::iter::once(u64::try_from(waited.as_millis()).unwrap_or(u64::MAX))
                .chain(nodes.iter().map(|&n| n as u64))
                .take(MAX_DETAIL_WORDS)
                .collect(),
        ),
        R::Membership(H::Version { found, expected }) => {
            (STATUS_VERSION, vec![(*found).into(), (*expected).into()])
        }
        R::Membership(H::Cluster { found, expected }) => (STATUS_CLUSTER, vec![*found, *expected]),
        R::Membership(H::Nodes { found, expected }) => {
            (STATUS_NODES, vec![(*found).into(), (*expected).into()])
        }
        R::Membership(H::Node { found, expected }) => {
            (STATUS_NODE, vec![(*found).into(), (*expected).into()])
        }
        R::Membership(H::RegionSize {
            region,
            found,
            expected,
        }) => (
            STATUS_REGION,
            vec![
                region.0.into(),
                found.unwrap_or(NO_REGION),
                expected.unwrap_or(NO_REGION),
            ],
        ),
        _ => (STATUS_MALFORMED, Vec::new()),
    };
    Reply::Refuse { status, detail }.encode()
}

/// The reason a refusal names.
fn refusal_reason(status: u32, detail: &[u64]) -> RendezvousFailure {
    use HandshakeFailure as H;
    use RendezvousFailure as R;
    let d = |i: usize| detail.get(i).copied().unwrap_or_default();
    let d32 = |i: usize| u32::try_from(d(i)).unwrap_or(u32::MAX);
    let size = |i: usize| Some(d(i)).filter(|&v| v != NO_REGION);
    match status {
        STATUS_AUTHENTICATION => R::Authentication,
        STATUS_TAMPERED => R::Tampered,
        STATUS_REPLAYED => R::Replayed,
        STATUS_DUPLICATE => R::Duplicate(d(0) as NodeId),
        STATUS_MISSING => R::Missing {
            nodes: detail.iter().skip(1).map(|&n| n as NodeId).collect(),
            waited: Duration::from_millis(d(0)),
        },
        STATUS_VERSION | STATUS_NODES | STATUS_NODE => {
            // (found, expected) pairs of 32-bit fields.
            let (found, expected) = (d32(0), d32(1));
            R::Membership(match status {
                STATUS_VERSION => H::Version { found, expected },
                STATUS_NODES => H::Nodes { found, expected },
                _ => H::Node { found, expected },
            })
        }
        STATUS_CLUSTER => R::Membership(H::Cluster {
            found: d(0),
            expected: d(1),
        }),
        STATUS_REGION => R::Membership(H::RegionSize {
            region: RegionId(d(0) as u16),
            found: size(1),
            expected: size(2),
        }),
        _ => R::Malformed,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_survives_the_wire() {
        use HandshakeFailure as H;
        use RendezvousFailure as R;
        let m = R::Membership;
        let reasons = [
            R::Authentication,
            R::Tampered,
            R::Replayed,
            R::Duplicate(2),
            R::Missing {
                nodes: vec![1, 4],
                waited: Duration::from_millis(1500),
            },
            m(H::Version {
                found: 2,
                expected: 1,
            }),
            m(H::Cluster {
                found: 9,
                expected: 8,
            }),
            m(H::Nodes {
                found: 4,
                expected: 3,
            }),
            m(H::Node {
                found: 7,
                expected: 0,
            }),
            R::Membership(H::RegionSize {
                region: RegionId(3),
                found: None,
                expected: Some(64),
            }),
            R::Malformed,
        ];
        for reason in reasons {
            let Reply::Refuse { status, detail } = Reply::decode(&refusal(&reason)).unwrap() else {
                panic!("not a refusal");
            };
            let back = refusal_reason(status, &detail);
            assert_eq!(back.to_string(), reason.to_string());
        }
    }

    #[test]
    fn sealed_messages_name_what_is_wrong() {
        let session = Session {
            client: [1; NONCE_BYTES],
            server: [2; NONCE_BYTES],
        };
        let other = Session {
            server: [3; NONCE_BYTES],
            ..session
        };
        let sealed = seal(b"k", KIND_REGISTER, &session, &[5; 16]);
        let open = |bytes: &[u8], secret: &[u8], s: &Session| {
            unseal(&mut &bytes[..], secret, KIND_REGISTER, s, 64)
        };
        assert_eq!(open(&sealed, b"k", &session).unwrap(), vec![5; 16]);
        assert!(matches!(
            open(&sealed, b"other", &session),
            Err(RendezvousFailure::Authentication)
        ));
        assert!(matches!(
            open(&sealed, b"k", &other),
            Err(RendezvousFailure::Replayed)
        ));
        let mut body = sealed.clone();
        body[SEALED_HEADER_BYTES + 3] ^= 1;
        assert!(matches!(
            open(&body, b"k", &session),
            Err(RendezvousFailure::Tampered)
        ));
        let mut nonce = sealed.clone();
        nonce[2 * 8 + 40] ^= 1;
        assert!(matches!(
            open(&nonce, b"k", &session),
            Err(RendezvousFailure::Tampered)
        ));
        // A reply's labels differ: a registration is no reply.
        assert!(matches!(
            unseal(&mut &sealed[..], b"k", KIND_REPLY, &session, 64),
            Err(RendezvousFailure::Malformed)
        ));
    }
}
