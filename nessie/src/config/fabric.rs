//! Which fabric carries the verbs, and how the nodes of a network fabric
//! meet: [`FabricConfig`].

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Which fabric backend carries the verbs. `Debug` does not print the tcp
/// secret (configurations get logged).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase", tag = "kind", deny_unknown_fields)]
pub enum FabricConfig {
    /// All nodes in one process.
    #[default]
    Local,
    /// One process per node, verbs on RDMA NICs (cargo feature `verbs`;
    /// see `nessie::fabric::VerbsFabric`). Queue-pair numbers, regions and
    /// rkeys travel only through the authenticated rendezvous node 0 serves:
    /// at `rendezvous`, or at node 0's entry of a static `peers` list.
    Verbs {
        /// RDMA device name (e.g. `mlx5_0`, `rxe0`); `None`: the first.
        #[serde(default)]
        device: Option<String>,
        /// `host:port` of every node, indexed by node id; node 0 serves the
        /// exchange of queue-pair information at its entry (the other
        /// entries are checked but not used). Empty: `rendezvous` says
        /// where.
        #[serde(default)]
        peers: Vec<String>,
        /// `host:port` of the authenticated rendezvous node 0 serves, used
        /// when `peers` is empty (a launcher's bootstrap fills it in).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rendezvous: Option<String>,
        /// With replicas, where else a replacement asks to rejoin after
        /// `rendezvous` (`host:port`, the rendezvous port on each of the
        /// job's hosts; a launcher's bootstrap fills it in).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        join: Vec<String>,
        /// Cluster secret: every message of the exchange is sealed with it
        /// (HMAC-SHA256), so only its holders learn the rkeys of the
        /// cluster's memory. Use 16 bytes or more of randomness.
        secret: String,
        /// GID index of port 1 (`None`: a RoCE v2 entry with an IPv4
        /// address if there is one).
        #[serde(default)]
        gid_index: Option<u32>,
    },
    /// One process per node on one host; regions are files in `dir`
    /// (default `/dev/shm/nessie-<cluster>`).
    Shm {
        /// Directory of region files.
        #[serde(default)]
        dir: Option<PathBuf>,
    },
    /// One process per node on any hosts; verbs travel over TCP to a
    /// software NIC in each node (see [`crate::fabric::TcpFabric`]).
    Tcp {
        /// `host:port` of every node, indexed by node id; a node listens on
        /// its own entry. Empty: the nodes find each other through the
        /// `rendezvous` instead (ephemeral ports).
        #[serde(default)]
        peers: Vec<String>,
        /// `host:port` of the authenticated rendezvous node 0 serves, used
        /// when `peers` is empty (a launcher's bootstrap fills it in, see
        /// [`crate::bootstrap`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rendezvous: Option<String>,
        /// With replicas, where else a replacement asks for the peers'
        /// addresses after `rendezvous` (`host:port`, the rendezvous port
        /// on each of the job's hosts; a launcher's bootstrap fills it in).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        join: Vec<String>,
        /// Cluster secret: every connection proves both sides know it
        /// (HMAC-SHA256 challenge–response). Use 16 bytes or more of
        /// randomness.
        secret: String,
        /// Connections a node opens to each peer at most (so worker threads
        /// a node runs per peer).
        #[serde(default = "default_tcp_threads")]
        threads: usize,
    },
}

impl std::fmt::Debug for FabricConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FabricConfig::Local => f.write_str("Local"),
            FabricConfig::Shm { dir } => f.debug_struct("Shm").field("dir", dir).finish(),
            FabricConfig::Tcp {
                peers,
                rendezvous,
                join,
                threads,
                ..
            } => f
                .debug_struct("Tcp")
                .field("peers", peers)
                .field("rendezvous", rendezvous)
                .field("join", join)
                .field("secret", &"<redacted>")
                .field("threads", threads)
                .finish(),
            FabricConfig::Verbs {
                device,
                peers,
                rendezvous,
                join,
                gid_index,
                ..
            } => f
                .debug_struct("Verbs")
                .field("device", device)
                .field("peers", peers)
                .field("rendezvous", rendezvous)
                .field("join", join)
                .field("secret", &"<redacted>")
                .field("gid_index", gid_index)
                .finish(),
        }
    }
}

impl FabricConfig {
    /// The cluster secret of a fabric that has one (`tcp`, `verbs`).
    #[must_use]
    pub fn secret(&self) -> Option<&str> {
        match self {
            FabricConfig::Tcp { secret, .. } | FabricConfig::Verbs { secret, .. } => Some(secret),
            FabricConfig::Local | FabricConfig::Shm { .. } => None,
        }
    }

    /// The static peer list, the rendezvous address and the secret of a
    /// fabric whose nodes meet over the network (`tcp`, `verbs`), to fill
    /// in; `None` for the others.
    pub fn meeting_mut(&mut self) -> Option<(&mut Vec<String>, &mut Option<String>, &mut String)> {
        match self {
            FabricConfig::Tcp {
                peers,
                rendezvous,
                secret,
                ..
            }
            | FabricConfig::Verbs {
                peers,
                rendezvous,
                secret,
                ..
            } => Some((peers, rendezvous, secret)),
            FabricConfig::Local | FabricConfig::Shm { .. } => None,
        }
    }
}

fn default_tcp_threads() -> usize {
    4
}
