//! The serving side of the rendezvous: accepts connections, checks each
//! registration (a handler thread per connection, so hostile or slow
//! connections never hold up the honest nodes), hands every node the
//! table, and runs the barrier.

use super::sealed::{decode_failure, refusal, seal, unseal, Session};
use super::{checked_blob, set_timeouts, step, RendezvousOptions, RendezvousOutcome};
use crate::membership::{claimed_regions, PeerClaim};
use crate::tcp::handshake::fresh_nonce;
use crate::wire::rendezvous::{
    Registration, Reply, RvHello, HELLO_BYTES, KIND_CLIENT_HELLO, KIND_GO, KIND_READY,
    KIND_REGISTER, KIND_REPLY, KIND_SERVER_HELLO, MAX_REGISTER_BODY, MAX_REPLY_BODY, STATUS_GO,
};
use crate::{FabricError, Membership, NodeId, RendezvousFailure};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
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
        server.accept_all(listener, &active, &tx);
        if let Ok((peer, result)) = rx.recv_timeout(POLL) {
            server.admit(peer, result);
        }
    }
    Ok(server.finish(listener.local_addr().ok()))
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
                let left = timeout
                    .saturating_sub(started.elapsed())
                    .max(Duration::from_millis(1));
                let ready = w
                    .stream
                    .set_read_timeout(Some(left))
                    .map_err(RendezvousFailure::Io)
                    .and_then(|()| unseal(&mut w.stream, &self.secret, KIND_READY, &w.session, 0));
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
    step: Duration,
}

/// The server's state while it waits.
struct Server {
    ctx: Arc<Ctx>,
    blobs: Vec<Option<Vec<u8>>>,
    /// Registered nodes waiting for the table.
    waiting: Vec<Waiting>,
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
