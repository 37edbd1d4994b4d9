//! The serving side of the rendezvous: accepts connections, checks each
//! registration (a handler thread per connection, so hostile or slow
//! connections never hold up the honest nodes), hands every node the
//! table, and runs the barrier.
//!
//! A handler's whole exchange (hellos, registration, any refusal) must end
//! within one deadline from accept, however the peer paces its bytes. At
//! most `2·nodes + 16` connections are in their exchange at once; a
//! newcomer beyond that evicts the oldest (see [`crate::admission`]), so
//! strangers cannot keep an honest node out: its connection is among the
//! youngest and its exchange takes a fraction of the deadline. When the
//! server returns, whether with the table or giving up, it shuts down the
//! connections still in their exchange and joins every handler thread.

use super::sealed::{decode_failure, refusal, seal, unseal, Session};
use super::{checked_blob, set_timeouts, step, RendezvousOptions, RendezvousOutcome};
use crate::admission::{Admission, Deadline};
use crate::membership::{claimed_regions, PeerClaim};
use crate::tcp::handshake::fresh_nonce;
use crate::wire::rendezvous::{
    Registration, Reply, RvHello, HELLO_BYTES, KIND_CLIENT_HELLO, KIND_GO, KIND_READY,
    KIND_REGISTER, KIND_REPLY, KIND_SERVER_HELLO, MAX_REGISTER_BODY, MAX_REPLY_BODY, STATUS_GO,
};
use crate::{FabricError, Membership, NodeId, RendezvousFailure};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the server looks for new connections while it waits.
const POLL: Duration = Duration::from_millis(5);

/// Serves the rendezvous on `listener`, registering `mine` for this node;
/// returns the outcome once every node has the table, and the connections
/// to the other nodes, still open (for a barrier).
pub(super) fn serve(
    options: &RendezvousOptions,
    listener: &TcpListener,
    mine: impl FnOnce(Option<SocketAddr>) -> Vec<u8>,
) -> Result<(RendezvousOutcome, Held), FabricError> {
    serve_counting(options, listener, mine, &Arc::default())
}

/// As [`serve`]; `live` counts the handler threads running (none are left
/// when it returns).
fn serve_counting(
    options: &RendezvousOptions,
    listener: &TcpListener,
    mine: impl FnOnce(Option<SocketAddr>) -> Vec<u8>,
    live: &Arc<AtomicUsize>,
) -> Result<(RendezvousOutcome, Held), FabricError> {
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
        handlers: Handlers {
            admission: Arc::new(Admission::new(2 * me.nodes + 16, usize::MAX)),
            threads: Vec::new(),
            live: Arc::clone(live),
        },
    };
    server.blobs[me.node] = Some(blob);
    let started = Instant::now();
    let (tx, rx) = mpsc::channel();
    while server.blobs.iter().any(Option::is_none) {
        if started.elapsed() >= options.timeout {
            let reason = server.give_up(started.elapsed());
            return Err(fail(reason));
        }
        server.accept_all(listener, &tx);
        if let Ok((peer, result)) = rx.recv_timeout(POLL) {
            server.admit(peer, result);
        }
    }
    Ok(server.finish(listener.local_addr().ok()))
}

/// How often the join service looks for new connections.
const JOIN_POLL: Duration = Duration::from_millis(50);

/// What a member answers an authenticated request with: the blobs of an
/// acceptance, or why it refuses.
pub(crate) type Answer = Result<Vec<Vec<u8>>, RendezvousFailure>;

/// Serves requests after start-up on `listener` until `stop` is set: every
/// registration that checks out (sealed, the secret proven, the
/// membership this member's) is answered at once, sealed, with what
/// `answer` makes of the requesting node's id and blob: the start-up table
/// to a join (docs/replication.md#joining-after-start-up), a member's new
/// queue pairs to a `verbs` replacement. The same handlers, deadlines and
/// cap on connections in their exchange as at start-up keep strangers
/// from holding it up.
pub(super) fn serve_requests(
    options: &RendezvousOptions,
    listener: &TcpListener,
    stop: &AtomicBool,
    mut answer: impl FnMut(NodeId, &[u8]) -> Answer,
) -> Result<(), FabricError> {
    let me = &options.membership;
    me.validate()?;
    listener
        .set_nonblocking(true)
        .map_err(|e| FabricError::Rendezvous {
            addr: options.address.clone(),
            reason: RendezvousFailure::Io(e),
        })?;
    let mut server = Server {
        ctx: Arc::new(Ctx {
            membership: me.clone(),
            secret: options.secret.as_bytes().to_vec(),
            step: step(options.timeout),
        }),
        blobs: Vec::new(),
        waiting: Vec::new(),
        refused: Vec::new(),
        handlers: Handlers {
            admission: Arc::new(Admission::new(2 * me.nodes + 16, usize::MAX)),
            threads: Vec::new(),
            live: Arc::default(),
        },
    };
    let (tx, rx) = mpsc::channel();
    while !stop.load(Ordering::Acquire) {
        server.accept_all(listener, &tx);
        if let Ok((peer, result)) = rx.recv_timeout(JOIN_POLL) {
            server.answer_request(peer, result, &mut answer);
        }
    }
    Ok(())
}

/// The serving node's connections to the registered nodes after the
/// table went out.
pub(super) struct Held {
    waiting: Vec<Waiting>,
    secret: Vec<u8>,
}

impl Held {
    /// The barrier on the serving node: once this node connected
    /// (`connected`; if not, every node is told so at once), waits up to
    /// `timeout` for every other node's sealed ready report, then tells
    /// every node to go on, or which nodes did not report.
    pub(super) fn barrier(
        mut self,
        connected: bool,
        timeout: Duration,
        me: NodeId,
    ) -> Result<(), FabricError> {
        let started = Instant::now();
        let mut late: Vec<NodeId> = Vec::new();
        if connected {
            for w in &mut self.waiting {
                // A report already here counts even past the deadline.
                let by = (started + timeout).max(Instant::now() + Duration::from_millis(1));
                let mut timed = Deadline::new(&w.stream, by);
                let ready = unseal(&mut timed, &self.secret, KIND_READY, &w.session, 0);
                if let Err(reason) = ready {
                    tracing::warn!("rendezvous: node {} did not report ready: {reason}", w.node);
                    late.push(w.node);
                }
            }
        } else {
            late.push(me);
        }
        late.sort_unstable();
        let failure = (!late.is_empty()).then(|| RendezvousFailure::NotReady {
            nodes: late,
            waited: started.elapsed(),
        });
        let verdict = match &failure {
            None => Reply::Refuse {
                status: STATUS_GO,
                detail: Vec::new(),
            }
            .encode(),
            Some(reason) => refusal(reason),
        };
        for w in &mut self.waiting {
            let go = seal(&self.secret, KIND_GO, &w.session, &verdict);
            if let Err(e) = w.stream.write_all(&go) {
                tracing::warn!("rendezvous: cannot tell node {} to go on: {e}", w.node);
            }
        }
        match failure {
            None => Ok(()),
            Some(reason) => Err(FabricError::Rendezvous {
                addr: format!("node {me} (serving)"),
                reason,
            }),
        }
    }
}

/// A registered node's connection, kept open while it waits.
struct Waiting {
    node: NodeId,
    peer: SocketAddr,
    stream: TcpStream,
    session: Session,
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
    /// How long a whole exchange may take, from accept.
    step: Duration,
}

/// The handler threads and the connections still in their exchange.
struct Handlers {
    admission: Arc<Admission>,
    threads: Vec<JoinHandle<()>>,
    live: Arc<AtomicUsize>,
}

impl Drop for Handlers {
    /// The server returns: no handler outlives it (each is woken by its
    /// connection's shutdown).
    fn drop(&mut self) {
        self.admission.close();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The server's state while it waits.
struct Server {
    ctx: Arc<Ctx>,
    blobs: Vec<Option<Vec<u8>>>,
    /// Registered nodes waiting for the table.
    waiting: Vec<Waiting>,
    refused: Vec<FabricError>,
    handlers: Handlers,
}

/// What a handler thread reports: where the connection came from, and
/// the registration or why it was refused.
type Handled = (SocketAddr, Result<Registered, RendezvousFailure>);

impl Server {
    /// Starts a handler for every pending connection; beyond the cap on
    /// connections in their exchange, the oldest is evicted.
    fn accept_all(&mut self, listener: &TcpListener, tx: &mpsc::Sender<Handled>) {
        let admission = &self.handlers.admission;
        // Evicted handlers take a moment to notice; past this many threads
        // a newcomer is closed (an honest node tries again) rather than
        // adding one more.
        let max_threads = 2 * (2 * self.ctx.membership.nodes + 16);
        loop {
            let (stream, peer) = match listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::warn!("rendezvous: accept failed: {e}");
                    return;
                }
            };
            let deadline = Instant::now() + self.ctx.step;
            self.handlers.threads.retain(|t| !t.is_finished());
            let admitted = if self.handlers.threads.len() < max_threads {
                admission.admit(&stream)
            } else {
                None
            };
            let Some(admitted) = admitted else {
                tracing::warn!("rendezvous: too many connections, closing {peer}");
                continue;
            };
            if admitted.evicted {
                tracing::warn!(
                    "rendezvous: too many connections in their exchange; closed the oldest"
                );
            }
            self.handlers.live.fetch_add(1, Ordering::AcqRel);
            let (ctx, tx) = (Arc::clone(&self.ctx), tx.clone());
            let (admission, live) = (Arc::clone(admission), Arc::clone(&self.handlers.live));
            let spawned = std::thread::Builder::new()
                .name("nessie-rendezvous".into())
                .spawn(move || {
                    let result = handle(stream, peer, &ctx, deadline);
                    // Handed over (or gone): no longer the admission's to shut.
                    admission.remove(admitted.id);
                    live.fetch_sub(1, Ordering::AcqRel);
                    let _ = tx.send((peer, result));
                });
            match spawned {
                Ok(thread) => self.handlers.threads.push(thread),
                Err(e) => {
                    tracing::warn!("rendezvous: cannot start a handler: {e}");
                    self.handlers.admission.remove(admitted.id);
                    self.handlers.live.fetch_sub(1, Ordering::AcqRel);
                }
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
                self.waiting.push(Waiting {
                    node: reg.node,
                    peer,
                    stream: reg.stream,
                    session: reg.session,
                });
            }
            Err(reason) => self.refuse(peer, reason),
        }
    }

    /// Answers a request after start-up with what `answer` makes of it.
    fn answer_request(
        &mut self,
        peer: SocketAddr,
        result: Result<Registered, RendezvousFailure>,
        answer: &mut impl FnMut(NodeId, &[u8]) -> Answer,
    ) {
        let mut reg = match result {
            Ok(reg) => reg,
            Err(reason) => {
                tracing::warn!("rendezvous: refused a request from {peer}: {reason}");
                return;
            }
        };
        let body = match answer(reg.node, &reg.blob) {
            Ok(blobs) => {
                tracing::info!("rendezvous: answered node {} at {peer}", reg.node);
                let body = Reply::Accept {
                    server: self.ctx.membership.node as u32,
                    seen_from: peer,
                    blobs,
                }
                .encode();
                if body.len() > MAX_REPLY_BODY {
                    refusal(&RendezvousFailure::Malformed)
                } else {
                    body
                }
            }
            Err(reason) => {
                tracing::warn!("rendezvous: refused node {} at {peer}: {reason}", reg.node);
                refusal(&reason)
            }
        };
        let sealed = seal(&self.ctx.secret, KIND_REPLY, &reg.session, &body);
        if let Err(e) = reg.stream.write_all(&sealed) {
            tracing::warn!("rendezvous: cannot answer {peer}: {e}");
        }
    }

    /// Tells every registered node which nodes are missing.
    fn give_up(&mut self, waited: Duration) -> RendezvousFailure {
        let nodes: Vec<NodeId> = (0..self.blobs.len())
            .filter(|&n| self.blobs[n].is_none())
            .collect();
        let reason = RendezvousFailure::Missing { nodes, waited };
        let body = refusal(&reason);
        for w in &mut self.waiting {
            let _ = w
                .stream
                .write_all(&seal(&self.ctx.secret, KIND_REPLY, &w.session, &body));
        }
        reason
    }

    /// Sends every registered node the table.
    fn finish(mut self, local: Option<SocketAddr>) -> (RendezvousOutcome, Held) {
        let blobs: Vec<Vec<u8>> = self.blobs.into_iter().flatten().collect();
        let server = self.ctx.membership.node;
        for w in &mut self.waiting {
            let mut body = Reply::Accept {
                server: server as u32,
                seen_from: w.peer,
                blobs: blobs.clone(),
            }
            .encode();
            if body.len() > MAX_REPLY_BODY {
                // No node would read a table this large.
                tracing::warn!("rendezvous: a table of {} bytes is too large", body.len());
                body = refusal(&RendezvousFailure::Malformed);
            }
            let sealed = seal(&self.ctx.secret, KIND_REPLY, &w.session, &body);
            if let Err(e) = w.stream.write_all(&sealed) {
                tracing::warn!("rendezvous: cannot send the table to {}: {e}", w.peer);
            }
        }
        let outcome = RendezvousOutcome {
            blobs,
            server,
            local_addr: None,
            server_addr: local,
            seen_from: None,
            refused: std::mem::take(&mut self.refused),
        };
        let held = Held {
            waiting: self.waiting,
            secret: self.ctx.secret.clone(),
        };
        (outcome, held)
    }
}

/// The server's side of one connection: hellos, then the registration,
/// checked; a refusal is answered (sealed) before it is returned. All of
/// it by `deadline`.
fn handle(
    stream: TcpStream,
    peer: SocketAddr,
    ctx: &Ctx,
    deadline: Instant,
) -> Result<Registered, RendezvousFailure> {
    let io = RendezvousFailure::Io;
    stream.set_nonblocking(false).map_err(io)?;
    stream.set_nodelay(true).map_err(io)?;
    let mut timed = Deadline::new(&stream, deadline);
    let mut hello = [0u8; HELLO_BYTES];
    timed.read_exact(&mut hello).map_err(io)?;
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
    timed.write_all(&hello.encode()).map_err(io)?;
    let checked = unseal(
        &mut timed,
        &ctx.secret,
        KIND_REGISTER,
        &session,
        MAX_REGISTER_BODY,
    )
    .and_then(|body| Registration::decode(&body).map_err(decode_failure))
    .and_then(|reg| check_registration(&ctx.membership, &reg).map(|()| reg));
    match checked {
        Ok(reg) => {
            // Authenticated: the table and the barrier have their own
            // time limits, not what is left of this exchange's.
            set_timeouts(&stream, ctx.step).map_err(io)?;
            Ok(Registered {
                node: reg.node as NodeId,
                blob: reg.blob,
                stream,
                session,
            })
        }
        Err(reason) => {
            if !matches!(reason, RendezvousFailure::Io(_)) {
                let reply = seal(&ctx.secret, KIND_REPLY, &session, &refusal(&reason));
                if let Err(e) = timed.write_all(&reply) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RegionId, RegionSpec};

    fn options(node: NodeId, address: &str, timeout: Duration) -> RendezvousOptions {
        RendezvousOptions {
            membership: Membership {
                cluster_id: 0x11fe,
                format_version: 1,
                node,
                nodes: 2,
                regions: vec![RegionSpec {
                    id: RegionId(0),
                    len: 4096,
                }],
            },
            secret: "handler-lifetime-secret".into(),
            address: address.into(),
            serve: node == 0,
            timeout,
        }
    }

    /// Strangers still in their exchange when the server returns, with
    /// the table or giving up, neither keep a handler thread running nor
    /// their connection open.
    #[test]
    fn no_handler_outlives_the_server() {
        for honest in [true, false] {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            // With the table, the server returns long before the strangers'
            // deadline (10 s from accept).
            let timeout = Duration::from_secs(if honest { 10 } else { 1 });
            let strangers: Vec<TcpStream> =
                (0..5).map(|_| TcpStream::connect(&addr).unwrap()).collect();
            let node = honest.then(|| {
                let opts = options(1, &addr, timeout);
                std::thread::spawn(move || crate::rendezvous(&opts, b"node 1"))
            });
            let live = Arc::new(AtomicUsize::new(0));
            let served = serve_counting(
                &options(0, &addr, timeout),
                &listener,
                |_| b"node 0".to_vec(),
                &live,
            );
            assert_eq!(
                live.load(Ordering::SeqCst),
                0,
                "handlers outlived the server"
            );
            assert_eq!(served.is_ok(), honest);
            if let Some(node) = node {
                node.join().unwrap().unwrap();
            }
            for mut s in strangers {
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let mut b = [0u8; 1];
                let read = s.read(&mut b);
                assert!(
                    matches!(&read, Ok(0))
                        || matches!(&read, Err(e) if e.kind() != ErrorKind::WouldBlock
                            && e.kind() != ErrorKind::TimedOut),
                    "a stranger's connection outlived the server: {read:?}"
                );
            }
        }
    }
}
