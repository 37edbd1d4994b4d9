//! One process's node of a multi-process cluster (the `shm` or `tcp` fabric).

use crate::bootstrap::Launch;
use crate::client::Client;
use crate::fabric::{Fabric, NodeId, TcpStats};
use crate::layout::membership::ViewRecord;
use crate::membership::Membership;
use crate::replica::RestoreFigures;

mod rejoin;
use crate::metrics::MetricsServer;
use crate::runtime::store::{store_regions, Shared};
use crate::runtime::watch::ClockWatch;
use crate::runtime::Hosting;
use crate::{Config, Error};
use std::sync::Arc;

/// This process's node: it owns an index table and data tables (in shared
/// memory on `shm`, in its heap behind a verb service on `tcp`), reaches
/// every peer's, and hands out clients.
#[derive(Debug)]
pub struct Node {
    shared: Arc<Shared>,
    id: NodeId,
    // Field order is drop order: the metrics endpoint stops first, the
    // watch before the recycler.
    metrics: Option<MetricsServer>,
    /// With replicas: the membership thread (before the watch, whose
    /// heartbeats it reads).
    membership: Option<Membership>,
    _watch: ClockWatch,
    hosting: Hosting,
    /// What this node's restore copied, if it joined as a replacement.
    restored: Option<RestoreFigures>,
}

impl Node {
    /// Creates this node's regions on the fabric named by `config.fabric`
    /// (`shm`, `tcp` or `verbs`), waits for every peer (up to
    /// `attach_timeout`) and starts the recycler. Nodes may start in any
    /// order. On `tcp` and `verbs` the node listens on `peers[node_id]` and
    /// connects to every other entry.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration, a node id out of
    /// range, the `local` fabric, or `verbs` in a build without the `verbs`
    /// feature; [`Error::Fabric`] when a peer's region
    /// is missing or unreachable, of another cluster, version, size or
    /// secret, or the node's address cannot be bound;
    /// [`Error::OutOfMemory`] when this host cannot back the node's index
    /// and tables.
    pub fn start(config: Config, node_id: NodeId) -> Result<Node, Error> {
        let regions = store_regions(&config);
        let view = ViewRecord::first(config.nodes);
        Node::run(Hosting::node(config, node_id, regions)?, node_id, view)
    }

    /// Starts this process's node of a job a launcher started (Slurm, Open
    /// MPI, PMI, torchrun) or that `NESSIE_NODE_ID` and `NESSIE_NODES` name:
    /// the node id and count come from the environment, and on `tcp`
    /// without a peer list the nodes meet at the launcher's rendezvous (see
    /// [`crate::bootstrap`]). Then as [`Node::start`].
    ///
    /// # Errors
    /// [`Error::Config`] if no launcher is found or its environment is
    /// inconsistent, or as [`Node::start`].
    pub fn launched(mut config: Config) -> Result<Node, Error> {
        let launch = Launch::detect()?.ok_or_else(|| {
            Error::Config(
                "no launcher found: start the job with srun, mpirun or torchrun, or set \
                 NESSIE_NODE_ID and NESSIE_NODES"
                    .into(),
            )
        })?;
        launch.configure(&mut config)?;
        Node::start(config, launch.node)
    }

    /// Runs node `node_id` on a fabric the caller opened (whose regions are
    /// [`crate::store_regions`] of `config` on every node).
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration or a node id out of
    /// range; [`Error::OutOfMemory`] when this host cannot back the node's
    /// tables; [`Error::Io`] if the recycler cannot start.
    pub fn with_fabric(
        config: Config,
        node_id: NodeId,
        fabric: Arc<dyn Fabric>,
    ) -> Result<Node, Error> {
        let view = ViewRecord::first(config.nodes);
        Node::run(Hosting::node_on(config, node_id, fabric)?, node_id, view)
    }

    fn run(hosting: Hosting, node_id: NodeId, view: ViewRecord) -> Result<Node, Error> {
        // Back-off jitter differs between the processes of one host.
        let seed = 0x6e6f_6465 ^ (node_id as u64) << 32 ^ u64::from(std::process::id());
        let shared = Arc::new(Shared::new(&hosting, seed));
        let watch = ClockWatch::start(Arc::clone(&shared), vec![node_id])?;
        let membership = if shared.config().replicas > 1 {
            Some(Membership::start(
                node_id,
                shared.config(),
                Arc::clone(shared.fabric()),
                Arc::clone(shared.clock(node_id)),
                Arc::clone(shared.views()),
                view,
            )?)
        } else {
            None
        };
        let tcp = hosting.tcp().cloned();
        let metrics = MetricsServer::start(Arc::clone(&shared), node_id, tcp)?;
        Ok(Node {
            shared,
            id: node_id,
            metrics,
            membership,
            _watch: watch,
            hosting,
            restored: None,
        })
    }

    /// A client running on this node.
    ///
    /// # Errors
    /// None in practice; the signature matches [`crate::Cluster::client`].
    pub fn client(&self) -> Result<Client, Error> {
        self.shared.client(self.id)
    }

    /// Counters of the tcp fabric's verb service and connections, if this
    /// node runs on `tcp` (opened by [`Node::start`]).
    #[must_use]
    pub fn tcp_stats(&self) -> Option<TcpStats> {
        self.hosting.tcp().map(|t| t.stats())
    }

    /// What this node's recycling did so far (slots reclaimed, MIGRATE
    /// markers resolved before reuse).
    #[must_use]
    pub fn recycle_counts(&self) -> crate::data::RecycleCounts {
        self.shared
            .data(self.id)
            .map(|d| d.recycle_counts())
            .unwrap_or_default()
    }

    /// The figures of this node's data tables now, one per size class
    /// (slots, free, in use, and the most ever in use at once).
    #[must_use]
    pub fn data_table_figures(&self) -> Vec<crate::data::DataTableFigures> {
        self.shared.data(self.id).map_or_else(Vec::new, |d| {
            (0..d.classes()).map(|c| d.figures(c as u8)).collect()
        })
    }

    /// The address of this node's Prometheus endpoint (`GET /metrics`),
    /// when `Config::metrics` turned it on.
    #[must_use]
    pub fn metrics_address(&self) -> Option<std::net::SocketAddr> {
        self.metrics.as_ref().map(MetricsServer::address)
    }

    /// This node's id.
    #[must_use]
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &Config {
        self.shared.config()
    }
}
