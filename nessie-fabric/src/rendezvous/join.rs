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

use super::server::serve_joins;
use super::{dial, exchange, wildcard_for, Attempt, RendezvousOptions, RendezvousOutcome};
use crate::wire::rendezvous::Reply;
use crate::{FabricError, RendezvousFailure};
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
        let stop = Arc::new(AtomicBool::new(false));
        let (options, halt) = (options.clone(), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("nessie-join".into())
            .spawn(move || serve_while(&options, &table, &halt))
            .map_err(|_| FabricError::Options {
                reason: "cannot start the join service's thread",
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
fn serve_while(options: &RendezvousOptions, table: &[Vec<u8>], stop: &AtomicBool) {
    let mut told = false;
    while !stop.load(Ordering::Acquire) {
        match bind_join_port(&options.address) {
            Ok(listener) => {
                tracing::info!(
                    node = options.membership.node,
                    "serving joins at {:?}",
                    listener.local_addr().ok()
                );
                if let Err(e) = serve_joins(options, &listener, table, stop) {
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
    let stream = dial(address, within)?;
    let io = RendezvousFailure::Io;
    let attempt = RendezvousOptions {
        address: address.to_owned(),
        timeout: within,
        ..options.clone()
    };
    let (reply, _) = exchange(&stream, &attempt, &[]).map_err(|a| match a {
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
            if blobs.len() != me.nodes || server >= me.nodes || server == me.node {
                return Err(RendezvousFailure::Malformed);
            }
            Ok(RendezvousOutcome {
                blobs,
                server,
                local_addr: Some(stream.local_addr().map_err(io)?),
                server_addr: Some(stream.peer_addr().map_err(io)?),
                seen_from: Some(seen_from),
                refused: Vec::new(),
            })
        }
        Reply::Refuse { status, detail } => Err(RendezvousFailure::Refused(Box::new(
            super::sealed::refusal_reason(status, &detail),
        ))),
    }
}
