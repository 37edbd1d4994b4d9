//! A replacement of a lost node reconnects to the members
//! (docs/replication.md#joining-after-start-up).
//!
//! Queue pairs are connected once, at start-up, through the rendezvous; a
//! member fences a lost node's (`Fabric::fence_node`). A replacement is a
//! new process with the lost node's id: a new device context, new queue
//! pairs and newly registered regions (new rkeys). So with
//! [`Joins::Serve`] every member also answers reconnections, for the
//! fabric's lifetime, at a TCP listener of its own (the unspecified
//! address, an ephemeral port), whose `host:port` its start-up card names.
//! Every member keeps every node's such address and serves that table to
//! replacements through a [`JoinService`] at the rendezvous port. A
//! replacement of node n ([`Joins::Replace`]):
//!
//! 1. takes the table from a member's join service
//!    ([`crate::rendezvous::join`]) and binds its predecessor's port;
//! 2. asks every other member in turn, at its address, with a
//!    registration whose blob is its card (its initiators, a fresh
//!    responder per lane and peer, its regions): the rendezvous's exchange,
//!    so sealed, proving the cluster secret, with the member's membership
//!    checked, one deadline and bounded lengths;
//! 3. the member refuses unless it has fenced n (with
//!    `RendezvousFailure::Duplicate(n)`: n is a live member there, and the
//!    replacement asks again until its timeout); otherwise it opens, per
//!    lane, a fresh initiator and a fresh responder, connects them to the
//!    replacement's, puts them in place of n's old queue pairs (which stay
//!    in the error state), replaces n's region table, and answers with a
//!    card naming them (its regions as at start-up); the replacement
//!    connects its queue pairs to them.
//!
//! The member's fence of n stays up through all this: its verbs to n are
//! refused until [`crate::Fabric::readmit_node`], which the membership
//! calls once a decided view names n a member again (restoring), that is
//! after the replacement's memory is open. Until then the replacement
//! reads the members' memory, while none of them reads its own.
//! A replacement needs every other node to answer within its timeout.

use super::card::Card;
use super::device::{Device, QpInfo};
use super::lane::CHUNK;
use super::{region_table, Core, VerbsOptions};
use crate::rendezvous::{self, JoinService, RendezvousOptions, RendezvousOutcome};
use crate::{FabricError, HandshakeFailure, NodeId, RendezvousFailure};
use std::io::ErrorKind;
use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

/// Longest one attempt at a member's reconnection may take.
const PER_ATTEMPT: Duration = Duration::from_secs(10);
/// Pause before asking a member again that has not fenced the node yet,
/// or did not answer.
const ASK_PAUSE: Duration = Duration::from_millis(200);

/// The listener a member answers reconnections at: every interface of the
/// rendezvous address's family, an ephemeral port.
pub(super) fn listener(rv: &RendezvousOptions) -> Result<TcpListener, FabricError> {
    let addr = rendezvous::wildcard_for(&rv.address);
    TcpListener::bind(addr).map_err(|source| FabricError::Bind {
        addr: addr.to_owned(),
        source,
    })
}

fn malformed(rv: &RendezvousOptions) -> FabricError {
    FabricError::Rendezvous {
        addr: rv.address.clone(),
        reason: RendezvousFailure::Malformed,
    }
}

/// Every node's reconnection address from the start-up table of cards.
pub(super) fn addresses(
    outcome: &RendezvousOutcome,
    rv: &RendezvousOptions,
) -> Result<Vec<String>, FabricError> {
    let rejoins: Option<Vec<Vec<u8>>> = outcome
        .blobs
        .iter()
        .map(|blob| Card::decode(blob).map(|card| card.rejoin))
        .collect();
    rejoins
        .and_then(|r| rendezvous::addresses(&r, outcome.server, outcome.server_addr))
        .ok_or_else(|| malformed(rv))
}

/// Starts what a member serves for the fabric's lifetime: the table of
/// reconnection addresses at the rendezvous port, and its own answers to
/// reconnections on `answering`.
pub(super) fn serve(
    core: &Arc<Core>,
    rv: &RendezvousOptions,
    table: Vec<String>,
    answering: TcpListener,
) -> Result<Vec<JoinService>, FabricError> {
    let member = Arc::clone(core);
    let reconnections = JoinService::answer_on(rv, answering, move |node, blob| {
        member.reconnect(node, blob)
    })?;
    let joins = JoinService::start(rv, table.into_iter().map(String::into_bytes).collect())?;
    Ok(vec![reconnections, joins])
}

impl Core {
    /// A member's answer to the replacement of `peer` whose card is `blob`
    /// (authenticated, its membership checked): fresh queue pairs connected
    /// to the replacement's in place of the old ones, its new region table,
    /// and this member's card naming them.
    pub(super) fn reconnect(
        &self,
        peer: NodeId,
        blob: &[u8],
    ) -> Result<Vec<Vec<u8>>, RendezvousFailure> {
        let me = self.node;
        // One reconnection or fence at a time.
        let _one = self
            .reconnecting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let fenced = self
            .fenced
            .get(peer)
            .is_some_and(|f| f.load(Ordering::Acquire));
        if peer == me || !fenced {
            // Not lost here (yet): this member still counts it alive.
            return Err(RendezvousFailure::Duplicate(peer));
        }
        let theirs = Card::decode(blob).ok_or(RendezvousFailure::Malformed)?;
        let lanes = self.lanes.len();
        theirs
            .check(&self.membership, lanes)
            .map_err(RendezvousFailure::Membership)?;
        let failed = |e: FabricError| {
            tracing::warn!(node = me, replaced = peer, "cannot reconnect: {e}");
            RendezvousFailure::NotReady {
                nodes: vec![me],
                waited: Duration::ZERO,
            }
        };
        let nodes = self.table.len();
        let none = QpInfo { qpn: 0, psn: 0 };
        let mut card = Card {
            address: self.device.address,
            initiators: vec![vec![none; nodes]; lanes],
            responders: vec![vec![none; nodes]; lanes],
            regions: self.own_table.clone(),
            rejoin: Vec::new(),
        };
        let mut fresh = Vec::with_capacity(lanes);
        for (l, lane) in self.lanes.iter().enumerate() {
            let cq = Arc::clone(lane.lock().unwrap_or_else(PoisonError::into_inner).cq());
            let (mut initiator, info) = self.device.qp(&cq, CHUNK as u32).map_err(failed)?;
            self.device
                .connect(
                    &mut initiator,
                    info,
                    theirs.responder(l, me),
                    &theirs.address,
                    peer,
                )
                .map_err(failed)?;
            let (mut responder, back) = self.device.qp(&self.idle_cq, 1).map_err(failed)?;
            self.device
                .connect(
                    &mut responder,
                    back,
                    theirs.initiator(l, me),
                    &theirs.address,
                    peer,
                )
                .map_err(failed)?;
            card.initiators[l][peer] = info;
            card.responders[l][peer] = back;
            fresh.push((initiator, responder));
        }
        // Verbs to the node stay refused (it is fenced) while they change.
        let mut responders = Vec::with_capacity(lanes);
        for (lane, (initiator, responder)) in self.lanes.iter().zip(fresh) {
            lane.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .replace(peer, initiator);
            responders.push(responder);
        }
        {
            let mut own = self
                .responders
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let mut replaced = self.replaced.lock().unwrap_or_else(PoisonError::into_inner);
            let (old, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut *own)
                .into_iter()
                .partition(|(node, _)| *node == peer);
            *own = kept;
            for (_, mut qp) in old {
                Device::fail(&mut qp);
                replaced.push(qp);
            }
            own.extend(responders.into_iter().map(|qp| (peer, qp)));
        }
        *self.table[peer]
            .write()
            .unwrap_or_else(PoisonError::into_inner) = region_table(&theirs.regions);
        tracing::warn!(
            node = me,
            replaced = peer,
            "queue pairs reconnected to a replacement; its verbs stay refused until a view \
             names it a member"
        );
        Ok(vec![card.encode()])
    }

    /// Lifts the fence of `node` ([`crate::Fabric::readmit_node`]).
    pub(super) fn readmit(&self, node: NodeId) {
        let _one = self
            .reconnecting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(flag) = self.fenced.get(node) else {
            return;
        };
        if node != self.node && flag.swap(false, Ordering::AcqRel) {
            tracing::warn!(
                node = self.node,
                readmitted = node,
                "verbs to a replaced node go again"
            );
        }
    }

    /// A replacement's start: the members' reconnection addresses from a
    /// join service, a listener on its predecessor's port, and its queue
    /// pairs connected to fresh ones of every member; returns the table
    /// and the listener, to serve them in turn.
    pub(super) fn replace(
        &mut self,
        options: &VerbsOptions,
        also: &[String],
        initiators: Vec<Vec<QpInfo>>,
    ) -> Result<(Vec<String>, TcpListener), FabricError> {
        let rv = &options.rendezvous;
        let deadline = Instant::now() + rv.timeout;
        let me = self.node;
        let outcome = rendezvous::join(rv, also)?;
        let table = rendezvous::addresses(&outcome.blobs, outcome.server, outcome.server_addr)
            .ok_or_else(|| malformed(rv))?;
        let port = table[me]
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse::<u16>().ok())
            .ok_or_else(|| malformed(rv))?;
        let any = rendezvous::wildcard_for(&table[me]).trim_end_matches(":0");
        let addr = format!("{any}:{port}");
        let answering = TcpListener::bind(addr.as_str())
            .map_err(|source| FabricError::Bind { addr, source })?;
        let (card, mut responders) = self.card(initiators)?;
        let blob = card.encode();
        for peer in (0..table.len()).filter(|&p| p != me) {
            let theirs = ask(rv, &table[peer], peer, &blob, card.lanes(), deadline)?;
            self.connect_peer(peer, &card, &theirs, &mut responders)?;
        }
        self.keep_responders(responders);
        tracing::warn!(node = me, "reconnected to every member as a replacement");
        Ok((table, answering))
    }
}

/// Asks the member `peer` at `address` to reconnect, until `deadline`:
/// again while it has not fenced this node or does not answer.
fn ask(
    rv: &RendezvousOptions,
    address: &str,
    peer: NodeId,
    blob: &[u8],
    lanes: usize,
    deadline: Instant,
) -> Result<Card, FabricError> {
    let me = rv.membership.node;
    let fail = |reason| FabricError::Rendezvous {
        addr: address.to_owned(),
        reason,
    };
    let mut last = RendezvousFailure::Unreachable {
        waited: Duration::ZERO,
        source: ErrorKind::NotFound.into(),
    };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(fail(last));
        }
        match rendezvous::request(rv, address, left.min(PER_ATTEMPT), blob) {
            Ok((outcome, _)) => {
                if outcome.server != peer || outcome.blobs.len() != 1 {
                    return Err(fail(RendezvousFailure::Malformed));
                }
                let handshake = |reason| FabricError::Handshake {
                    node: peer,
                    addr: address.to_owned(),
                    reason,
                };
                let card = Card::decode(&outcome.blobs[0])
                    .ok_or_else(|| handshake(HandshakeFailure::Malformed))?;
                card.check(&rv.membership, lanes).map_err(handshake)?;
                return Ok(card);
            }
            Err(reason) if worth_again(&reason, me) => {
                tracing::debug!("no reconnection with node {peer} at {address} yet: {reason}");
                last = reason;
            }
            Err(reason) => return Err(fail(reason)),
        }
        std::thread::sleep(ASK_PAUSE.min(deadline.saturating_duration_since(Instant::now())));
    }
}

/// Whether asking again may help: the member was not reached, or has not
/// fenced node `me` yet, or could not open its queue pairs.
fn worth_again(reason: &RendezvousFailure, me: NodeId) -> bool {
    match reason {
        RendezvousFailure::Unreachable { .. } | RendezvousFailure::Io(_) => true,
        RendezvousFailure::Refused(why) => match **why {
            RendezvousFailure::NotReady { .. } => true,
            RendezvousFailure::Duplicate(n) => n == me,
            _ => false,
        },
        _ => false,
    }
}
