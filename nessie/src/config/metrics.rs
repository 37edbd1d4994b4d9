//! The opt-in Prometheus endpoint of each node ([`MetricsConfig`]).

use super::bad;
use crate::Error;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Where each node serves its metrics in the Prometheus text format
/// (`GET /metrics`): node `n` listens on `bind:base_port + n`, so the
/// processes of one host never collide. Off unless configured
/// (`Config::metrics = None`): no thread, no listening socket, and no
/// bookkeeping on the operations' path.
///
/// The endpoint is **unauthenticated** and read-only: anyone who can reach
/// it reads the node's counters (operation counts, table occupancy, peer
/// ids), never keys or values. It binds to the loopback address unless
/// `bind` says otherwise; bind a cluster-internal address only on a network
/// where that is acceptable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// The port of node 0; node `n` uses `base_port + n`. 0: every node
    /// takes a free port of the system's choosing (tests; see
    /// `Node::metrics_address`).
    pub base_port: u16,
    /// The address to bind (default `127.0.0.1`).
    pub bind: IpAddr,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            base_port: 9464,
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }
}

impl MetricsConfig {
    /// The address node `node` serves on.
    #[must_use]
    pub fn address(&self, node: usize) -> SocketAddr {
        let port = if self.base_port == 0 {
            0
        } else {
            u16::try_from(usize::from(self.base_port) + node).unwrap_or(0)
        };
        SocketAddr::new(self.bind, port)
    }

    /// Checks that every node's port exists.
    pub(crate) fn validate(&self, nodes: usize) -> Result<(), Error> {
        if self.base_port != 0
            && usize::from(self.base_port) + nodes.saturating_sub(1) > usize::from(u16::MAX)
        {
            return Err(bad(format!(
                "metrics.base_port = {} leaves no port for node {} (base_port + node id must be \
                 at most 65535)",
                self.base_port,
                nodes - 1
            )));
        }
        Ok(())
    }
}
