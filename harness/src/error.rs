//! The harness's error type: every way a benchmark can fail, each with a
//! message that says what to do about it.

use nessie_examples::StoreKind;
use std::path::PathBuf;

/// Why a harness command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// A flag or parameter combination that cannot be run.
    #[error("invalid parameters: {0}")]
    Usage(String),
    /// `--replicas` asks for a replication the cluster cannot hold: r > 1
    /// needs at least three nodes and no more replicas than nodes.
    #[error(
        "--replicas {replicas} with --nodes {nodes}: the client-driven store keeps r copies on \
         r consecutive nodes, so r > 1 needs at least 3 nodes, no more replicas than nodes and \
         r <= {max} (r = 1, unreplicated, runs on any number of nodes)",
        max = nessie::layout::region::MAX_REPLICAS
    )]
    Replicas {
        /// The copies asked for.
        replicas: usize,
        /// The cluster's node processes.
        nodes: usize,
    },
    /// The store rejected an operation or configuration.
    #[error("store: {0}")]
    Store(#[from] nessie::Error),
    /// A file or process operation failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What the harness was doing.
        what: &'static str,
        /// The file or program concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A system cannot run in this build or on this machine.
    #[error("{system} is not available: {why}")]
    NotAvailable {
        /// The system.
        system: StoreKind,
        /// Why not.
        why: String,
    },
    /// A node process failed (exited, crashed, hung or reported an error).
    #[error("node {node} failed: {why}")]
    NodeFailed {
        /// Node id.
        node: usize,
        /// What happened, with the tail of its stderr when there is one.
        why: String,
    },
    /// The launcher (`srun`, `mpirun`) of a run's node processes exited
    /// before the run ended, or failed at its end.
    #[error("{launcher} failed: {why}")]
    LauncherFailed {
        /// The launcher.
        launcher: &'static str,
        /// What happened, with the tails of its stderr and the nodes'.
        why: String,
    },
    /// A peer server (Redis, memcached) failed to start or answer.
    #[error("peer server {name}: {why}")]
    Peer {
        /// The server.
        name: &'static str,
        /// What went wrong.
        why: String,
    },
    /// The LMDB environment of a run cannot be made or used.
    #[error("LMDB: {0}")]
    Lmdb(#[from] lmdb_kv::LmdbError),
    /// A child spoke something the protocol does not know.
    #[error("node protocol: {0}")]
    Protocol(String),
    /// The user pressed Ctrl-C (or the harness got SIGTERM).
    #[error("interrupted")]
    Interrupted,
    /// JSON encoding or decoding failed.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// A plot could not be drawn.
    #[error("plot {name}: {why}")]
    Plot {
        /// The figure.
        name: String,
        /// The backend's error.
        why: String,
    },
}

impl HarnessError {
    /// An [`HarnessError::Io`] builder for `map_err`.
    pub fn io(what: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| HarnessError::Io { what, path, source }
    }
}

/// Shorthand for results of the harness.
pub type Result<T, E = HarnessError> = std::result::Result<T, E>;
