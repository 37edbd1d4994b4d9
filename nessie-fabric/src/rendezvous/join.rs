//! Joining after start-up: the rendezvous's table, served for the
//! cluster's lifetime so that a replacement for a lost node can learn
//! where its peers listen (docs/replication.md#joining-after-start-up).
//!
//! The start-up rendezvous is served once, by node 0. Afterwards every
//! member that keeps the table runs a [`JoinService`]: it tries to bind
//! the rendezvous address (or, where that host is not its own, the same
//! port on every interface) and, once it holds it, answers every
//! authenticated registration with the table. Of the members on one host
//! one holds the port; the others try again every [`BIND_RETRY`], so
//! when the holder is lost another member of the host takes its place.
//! A replacement ([`join`]) tries the rendezvous address and then every
//! further address it was given (the port on each of the job's hosts),
//! until one answers. The exchange is the start-up one (sealed hellos,
//! registration and reply, one deadline, bounded lengths), so a join
//! proves the cluster secret as a start-up registration does.

use super::server::{serve_requests, Answer};
use super::{dial, exchange, wildcard_for, Attempt, RendezvousOptions, RendezvousOutcome};
use crate::wire::rendezvous::Reply;
use crate::{FabricError, NodeId, RendezvousFailure};
use std::io::ErrorKind;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often a member that does not hold the join port tries to bind it.
pub const BIND_RETRY: Duration = Duration::from_secs(1);
/// Longest a replacement waits for one address before it tries the next.
const PER_ADDRESS: Duration = Duration::from_secs(2);
/// Pause between two rounds over every address.
const ROUND_PAUSE: Duration = Duration::from_millis(200);

/// What a node with a rendezvous does about joins after start-up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Joins {
    /// Nothing: the table is forgotten once the node has started.
    #[default]
    Off,
    /// It serves the table to replacements ([`JoinService`]) for as long
    /// as it runs.
    Serve,
    /// It replaces a lost node: it takes the table from a member's join
    /// service (at the rendezvous address, then at each of `also`), takes
    /// its predecessor's place in it, and then serves joins too.
    Replace {
        /// Further addresses where members may serve joins.
        also: Vec<String>,
    },
}

/// Serves the rendezvous's table to replacements for as long as it lives;
/// dropping it stops the service and joins its thread.
#[derive(Debug)]
pub struct JoinService {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl JoinService {
    /// Starts serving `table` (every node's blob, by node id) at the port
    /// of `options.address`, once this member can bind it.
    ///
    /// # Errors
    /// [`FabricError::Options`] for a table of another length than the
    /// cluster's node count, or when the thread cannot start.
    pub fn start(options: &RendezvousOptions, table: Vec<Vec<u8>>) -> Result<Self, FabricError> {
        if table.len() != options.membership.nodes {
            return Err(FabricError::Options {
                reason: "a join service's table has one blob per node",
            });
        }
        let me = options.membership.node;
        let answer = move |node: NodeId, _: &[u8]| -> Answer {
            // A claim of this member's own id: it is alive, so not lost.
            if node == me {
                Err(RendezvousFailure::Duplicate(me))
            } else {
                Ok(table.clone())
            }
        };
        let options = options.clone();
        Self::spawn("nessie-join", move |stop| {
            serve_while(&options, stop, answer);
        })
    }

    /// Answers authenticated requests on `listener` (bound by the caller)
    /// with `answer`, for as long as the returned service lives: a `verbs`
    /// member's reconnection service.
    #[cfg(feature = "verbs")]
    pub(crate) fn answer_on(
        options: &RendezvousOptions,
        listener: TcpListener,
        answer: impl FnMut(NodeId, &[u8]) -> Answer + Send + 'static,
    ) -> Result<Self, FabricError> {
        let options = options.clone();
        Self::spawn("nessie-rejoin", move |stop| {
            if let Err(e) = serve_requests(&options, &listener, stop, answer) {
                tracing::warn!("the reconnection service stopped: {e}");
            }
        })
    }

    fn spawn(
        name: &str,
        body: impl FnOnce(&AtomicBool) + Send + 'static,
    ) -> Result<Self, FabricError> {
        let stop = Arc::new(AtomicBool::new(false));
        let halt = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(&halt))
            .map_err(|_| FabricError::Options {
                reason: "cannot start a join service's thread",
            })?;
        Ok(JoinService {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for JoinService {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Holds the join port whenever it can, until `stop`.
fn serve_while(
    options: &RendezvousOptions,
    stop: &AtomicBool,
    answer: impl FnMut(NodeId, &[u8]) -> Answer,
) {
    let mut told = false;
    while !stop.load(Ordering::Acquire) {
        match bind_join_port(&options.address) {
            Ok(listener) => {
                tracing::info!(
                    node = options.membership.node,
                    "serving joins at {:?}",
                    listener.local_addr().ok()
                );
                if let Err(e) = serve_requests(options, &listener, stop, answer) {
                    tracing::warn!("the join service stopped: {e}");
                }
                return;
            }
            Err(e) => {
                if !told {
                    tracing::debug!("the join port {} is held elsewhere: {e}", options.address);
                    told = true;
                }
                let until = Instant::now() + BIND_RETRY;
                while Instant::now() < until && !stop.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
}

/// Binds `address`, or its port on every interface when its host is not
/// this one's.
fn bind_join_port(address: &str) -> std::io::Result<TcpListener> {
    match TcpListener::bind(address) {
        Err(e) if e.kind() != ErrorKind::AddrInUse => {
            let port = address
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok())
                .ok_or(e)?;
            let any = wildcard_for(address).trim_end_matches(":0");
            TcpListener::bind(format!("{any}:{port}"))
        }
        bound => bound,
    }
}

/// A replacement's join: asks the members serving joins, at
/// `options.address` and then at each of `also`, round after round until
/// `options.timeout`, for the table; returns it (the entry of
/// `options.membership.node` is its predecessor's blob).
///
/// # Errors
/// [`FabricError::Rendezvous`]: [`RendezvousFailure::Refused`] with a
/// member's reason (another cluster or configuration, or the id is a live
/// member's), [`RendezvousFailure::Authentication`] for an answer under
/// another secret, [`RendezvousFailure::Malformed`] for a table that does
/// not fit the cluster, and otherwise the last failure once the time
/// is up (no member answered anywhere).
pub fn join(
    options: &RendezvousOptions,
    also: &[String],
) -> Result<RendezvousOutcome, FabricError> {
    options.membership.validate()?;
    let started = Instant::now();
    let addresses: Vec<&str> = std::iter::once(options.address.as_str())
        .chain(also.iter().map(String::as_str))
        .collect();
    let mut last = RendezvousFailure::Unreachable {
        waited: Duration::ZERO,
        source: ErrorKind::NotFound.into(),
    };
    loop {
        for &address in &addresses {
            let left = options.timeout.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(FabricError::Rendezvous {
                    addr: addresses.join(","),
                    reason: last,
                });
            }
            let fail = |reason| FabricError::Rendezvous {
                addr: address.to_owned(),
                reason,
            };
            match ask(options, address, left.min(PER_ADDRESS)) {
                Ok(outcome) => return Ok(outcome),
                // A member answered: asking again cannot change its answer.
                Err(
                    reason @ (RendezvousFailure::Refused(_)
                    | RendezvousFailure::Malformed
                    | RendezvousFailure::Authentication),
                ) => return Err(fail(reason)),
                Err(reason) => {
                    tracing::debug!("no join served at {address}: {reason}");
                    last = reason;
                }
            }
        }
        std::thread::sleep(ROUND_PAUSE.min(options.timeout.saturating_sub(started.elapsed())));
    }
}

/// One attempt at `address` within `within`.
fn ask(
    options: &RendezvousOptions,
    address: &str,
    within: Duration,
) -> Result<RendezvousOutcome, RendezvousFailure> {
    let (outcome, _) = request(options, address, within, &[])?;
    let me = &options.membership;
    if outcome.blobs.len() != me.nodes {
        return Err(RendezvousFailure::Malformed);
    }
    Ok(outcome)
}

/// One authenticated request to a member at `address` within `within`,
/// registering `blob`: the member's answer, which names a node of the
/// cluster other than this one, and the connection it came on (closed by
/// dropping it).
///
/// # Errors
/// [`RendezvousFailure::Refused`] with the member's reason, and every
/// failure of the exchange (unreachable, another secret, tampered or
/// replayed messages, malformed answers, I/O).
pub(crate) fn request(
    options: &RendezvousOptions,
    address: &str,
    within: Duration,
    blob: &[u8],
) -> Result<(RendezvousOutcome, std::net::TcpStream), RendezvousFailure> {
    let stream = dial(address, within)?;
    let io = RendezvousFailure::Io;
    let attempt = RendezvousOptions {
        address: address.to_owned(),
        timeout: within,
        ..options.clone()
    };
    let (reply, _) = exchange(&stream, &attempt, blob).map_err(|a| match a {
        Attempt::Closed(e) => io(e),
        Attempt::Failed(reason) => reason,
    })?;
    let me = &options.membership;
    match reply {
        Reply::Accept {
            server,
            seen_from,
            blobs,
        } => {
            let server = server as usize;
            if server >= me.nodes || server == me.node {
                return Err(RendezvousFailure::Malformed);
            }
            let outcome = RendezvousOutcome {
                blobs,
                server,
                local_addr: Some(stream.local_addr().map_err(io)?),
                server_addr: Some(stream.peer_addr().map_err(io)?),
                seen_from: Some(seen_from),
                refused: Vec::new(),
            };
            Ok((outcome, stream))
        }
        Reply::Refuse { status, detail } => Err(RendezvousFailure::Refused(Box::new(
            super::sealed::refusal_reason(status, &detail),
        ))),
    }
}
