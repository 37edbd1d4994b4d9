//! How a `tcp` node learns where its peers listen when it has no peer
//! list: at start-up from the rendezvous; afterwards, as a replacement of a
//! lost node, from the members' join service
//! (docs/replication.md#joining-after-start-up).

use super::{bad_options, TcpFabric, TcpOptions};
use crate::rendezvous::{self, JoinService, Joins, RendezvousOptions, RendezvousOutcome};
use crate::{FabricError, RendezvousFailure};
use std::net::TcpListener;

/// `options` with the peers' addresses the rendezvous taught: each node
/// registers `host:port` of `listener`, `host` its address on the route
/// to the server (the server: the host of the rendezvous address, or, if
/// that is unspecified, the address each node reached it at).
pub(super) fn find_peers(
    options: &TcpOptions,
    rv: &RendezvousOptions,
    listener: &TcpListener,
) -> Result<TcpOptions, FabricError> {
    if rv.membership != options.membership {
        return Err(bad_options(
            "the rendezvous's membership differs from the fabric's",
        ));
    }
    let port = listener
        .local_addr()
        .map_err(|source| FabricError::Bind {
            addr: rv.address.clone(),
            source,
        })?
        .port();
    let outcome = rendezvous::rendezvous_with(rv, |route| {
        rendezvous::advertised(route, &rv.address, port).into_bytes()
    })?;
    with_peers(options, rv, &outcome)
}

/// `options` with every node's address from `outcome`.
fn with_peers(
    options: &TcpOptions,
    rv: &RendezvousOptions,
    outcome: &RendezvousOutcome,
) -> Result<TcpOptions, FabricError> {
    let peers = peer_addresses(outcome).ok_or_else(|| FabricError::Rendezvous {
        addr: rv.address.clone(),
        reason: RendezvousFailure::Malformed,
    })?;
    Ok(TcpOptions {
        peers,
        ..options.clone()
    })
}

/// The join service a node with a rendezvous runs after start-up, if its
/// options ask for one: it serves the peers' addresses it learned.
pub(super) fn serve_joins(options: &TcpOptions) -> Result<Option<JoinService>, FabricError> {
    match (&options.joins, &options.rendezvous) {
        (Joins::Off, _) | (_, None) => Ok(None),
        (Joins::Serve | Joins::Replace { .. }, Some(rv)) => {
            let table = options
                .peers
                .iter()
                .map(|p| p.clone().into_bytes())
                .collect();
            JoinService::start(rv, table).map(Some)
        }
    }
}

impl TcpFabric {
    /// A replacement's start: the peers' addresses from a member's join
    /// service, then a listener on its predecessor's port (on every
    /// interface, as the predecessor bound it), then as a node with a
    /// peer list; then it serves joins itself.
    pub(super) fn replace(
        options: &TcpOptions,
        rv: &RendezvousOptions,
        also: &[String],
    ) -> Result<TcpFabric, FabricError> {
        if rv.membership != options.membership {
            return Err(bad_options(
                "the rendezvous's membership differs from the fabric's",
            ));
        }
        let outcome = rendezvous::join(rv, also)?;
        let found = with_peers(options, rv, &outcome)?;
        let mine = &found.peers[options.membership.node];
        let port = mine.rsplit_once(':').map_or("", |(_, port)| port);
        let any = rendezvous::wildcard_for(mine).trim_end_matches(":0");
        let addr = format!("{any}:{port}");
        let listener = TcpListener::bind(addr.as_str())
            .map_err(|source| FabricError::Bind { addr, source })?;
        let mut fabric = TcpFabric::serve(&found, listener)?;
        fabric.attach(found.attach_timeout)?;
        fabric.joins = serve_joins(&found)?;
        Ok(fabric)
    }
}

/// Every node's `host:port` from a rendezvous (`None`: a blob is not
/// one).
fn peer_addresses(outcome: &RendezvousOutcome) -> Option<Vec<String>> {
    rendezvous::addresses(&outcome.blobs, outcome.server, outcome.server_addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_unspecified_host_becomes_the_address_it_was_reached_at() {
        let outcome = RendezvousOutcome {
            blobs: vec![
                b"0.0.0.0:7000".to_vec(),
                b"10.0.0.2:7001".to_vec(),
                b"[::]:7002".to_vec(),
            ],
            server: 0,
            local_addr: None,
            server_addr: Some("10.0.0.1:6000".parse().unwrap()),
            seen_from: None,
            refused: Vec::new(),
        };
        assert_eq!(
            peer_addresses(&outcome).unwrap(),
            ["10.0.0.1:7000", "10.0.0.2:7001", "[::]:7002"]
        );
        let bad = RendezvousOutcome {
            blobs: vec![b"no port".to_vec()],
            ..outcome
        };
        assert_eq!(peer_addresses(&bad), None);
    }
}
