//! An in-process cluster on the `local` fabric, and its builder (custom
//! clocks and fabric wrappers are how the deterministic simulator and the
//! skew tests drive the store).

use crate::client::Client;
use crate::clock::Clock;
use crate::data::{NodeData, TableAccess};
use crate::fabric::{Fabric, NodeId};
use crate::metrics::MetricsServer;
use crate::runtime::store::{store_regions, Shared};
use crate::runtime::watch::ClockWatch;
use crate::runtime::{Hosting, LocalStart};
use crate::{Config, Error};
use std::fmt;
use std::sync::Arc;

/// Every node of a cluster in this process, on the `local` fabric.
#[derive(Debug)]
pub struct Cluster {
    shared: Arc<Shared>,
    // Field order is drop order: the metrics endpoints stop first, the
    // watch before the recycler.
    metrics: Vec<MetricsServer>,
    _watch: Option<ClockWatch>,
    _hosting: Hosting,
}

impl Cluster {
    /// A cluster of `config.nodes` nodes in this process, with wall clocks
    /// and a background recycler.
    ///
    /// # Errors
    /// [`Error::Config`] if the configuration is invalid;
    /// [`Error::OutOfMemory`] when this host cannot back the nodes' index
    /// and tables (e.g. an index larger than its RAM and swap), never an
    /// abort; [`Error::Io`] if the recycler cannot start.
    pub fn local(config: Config) -> Result<Cluster, Error> {
        Cluster::builder(config).build()
    }

    /// A builder for a cluster with custom clocks, fabric or seed.
    #[must_use]
    pub fn builder(config: Config) -> ClusterBuilder {
        ClusterBuilder {
            config,
            start: LocalStart::default(),
            seed: 0x6e65_7373_6965,
            clock_checks: false,
        }
    }

    /// A client running on `node`.
    ///
    /// # Errors
    /// [`Error::Config`] if `node` is not in the cluster.
    pub fn client(&self, node: NodeId) -> Result<Client, Error> {
        self.shared.client(node)
    }

    /// The address of node `node`'s Prometheus endpoint, when
    /// `Config::metrics` turned them on (one per node, as in a cluster of
    /// processes).
    #[must_use]
    pub fn metrics_address(&self, node: NodeId) -> Option<std::net::SocketAddr> {
        self.metrics.get(node).map(MetricsServer::address)
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &Config {
        self.shared.config()
    }

    /// The views the cluster serves in: activating one that counts a node
    /// lost moves its shares to their next replicas
    /// (docs/replication.md#a-view-change-step-by-step).
    #[must_use]
    pub fn views(&self) -> &Arc<crate::Views> {
        self.shared.views()
    }

    /// Readies node `node`'s memory for a restore after its host was lost
    /// and a view without it is active: its tables hold values no primary
    /// holds until copied (docs/replication.md#restore). Then: a view with
    /// the node restoring (after the drain), [`Cluster::copy_replicas`], a
    /// view with it active, [`Cluster::catch_up_replicas`]. A cluster of processes does all of this in
    /// [`crate::Node::rejoin`].
    ///
    /// # Errors
    /// A failed WRITE of the node's memory.
    pub fn prepare_replacement(&self, node: NodeId) -> Result<(), Error> {
        let geometry = crate::data::Geometry::new(self.config());
        Ok(crate::replica::prepare(
            self.shared.scan_fabric().as_ref(),
            &geometry,
            node,
        )?)
    }

    /// Copies every replica node `node` holds from the primaries, while
    /// the cluster serves, and rebuilds its allocator from the copies; the
    /// active view must name the node restoring.
    ///
    /// # Errors
    /// A failed verb, a slot that kept changing while it was copied
    /// ([`Error::RejoinRefused`]), or a node this cluster does not host.
    pub fn copy_replicas(&self, node: NodeId) -> Result<crate::RestoreFigures, Error> {
        let data = self.shared.data(node).ok_or_else(|| Error::RejoinRefused {
            reason: format!("node {node} is not in this cluster"),
        })?;
        let time = crate::replica::CopyTime {
            clock: self.shared.clock(node).as_ref(),
            landing_us: self.config().landing_bound().as_micros() as u64,
        };
        crate::replica::restore(
            self.shared.fabric().as_ref(),
            self.shared.scan_fabric().as_ref(),
            data.geometry(),
            data,
            node,
            time,
        )
    }

    /// The last step of node `node`'s restore, once the view naming it
    /// active is active: the other replicas of its share catch up with the
    /// commits it took first as a restoring mirror
    /// (docs/replication.md#rp3c). The restore is done, and another host
    /// may be lost, only once this has returned. Returns the state words
    /// moved forward.
    ///
    /// # Errors
    /// A failed verb (the pass may run again), or a node this cluster does
    /// not host.
    pub fn catch_up_replicas(&self, node: NodeId) -> Result<u64, Error> {
        let data = self.shared.data(node).ok_or_else(|| Error::RejoinRefused {
            reason: format!("node {node} is not in this cluster"),
        })?;
        Ok(crate::replica::catch_up(
            self.shared.fabric().as_ref(),
            self.shared.scan_fabric().as_ref(),
            data.geometry(),
            node,
        )?)
    }

    /// The fabric every client uses (e.g. to inspect memory in tests).
    #[must_use]
    pub fn fabric(&self) -> Arc<dyn Fabric> {
        Arc::clone(self.shared.fabric())
    }

    /// The allocation state of node `node`'s data tables, for tests and
    /// tools that inspect or drive recycling (see [`Cluster::table_access`]).
    #[must_use]
    pub fn node_data(&self, node: NodeId) -> Option<Arc<NodeData>> {
        self.shared.data(node).cloned()
    }

    /// How node `node`'s allocator reaches memory and time: its own memory
    /// without the fabric wrapper, the cluster through it, and its clock.
    ///
    /// # Panics
    /// If `node` is not in the cluster.
    #[must_use]
    pub fn table_access(&self, node: NodeId) -> TableAccess<'_> {
        TableAccess {
            local: self.shared.scan_fabric().as_ref(),
            cluster: self.shared.fabric().as_ref(),
            views: Some(self.shared.views()),
            wall_read_us: None,
            clock: self.shared.clock(node).as_ref(),
        }
    }

    /// Checks every node's clock once, as the clock watch does every
    /// heartbeat period: publishes heartbeats and alarms, stops or lets go
    /// the clients, and gates the reuse of staged slots. For a cluster
    /// without background threads whose driver runs the checks (see
    /// [`ClusterBuilder::clock_checks`]); the node's own memory is reached
    /// without the fabric wrapper, as by the watch.
    pub fn check_clocks(&self) {
        for node in 0..self.shared.config().nodes {
            crate::runtime::watch::check(&self.shared, self.shared.scan_fabric().as_ref(), node);
        }
    }
}

/// Builds a [`Cluster`].
pub struct ClusterBuilder {
    config: Config,
    start: LocalStart,
    seed: u64,
    clock_checks: bool,
}

impl fmt::Debug for ClusterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterBuilder")
            .field("config", &self.config)
            .field("start", &self.start)
            .field("seed", &self.seed)
            .field("clock_checks", &self.clock_checks)
            .finish()
    }
}

impl ClusterBuilder {
    /// One clock per node (default: the wall clock for all). Use
    /// [`crate::WallClock::skewed`] to emulate clock skew between nodes.
    #[must_use]
    pub fn clocks(mut self, clocks: Vec<Arc<dyn Clock>>) -> Self {
        self.start.clocks = Some(clocks);
        self
    }

    /// Wraps the local fabric (e.g. to interpose a scheduler on every verb).
    #[must_use]
    pub fn wrap_fabric(
        mut self,
        wrap: impl FnOnce(Arc<dyn Fabric>) -> Arc<dyn Fabric> + 'static,
    ) -> Self {
        self.start.wrap = Some(Box::new(wrap));
        self
    }

    /// Whether to run the background threads (default on): the recycler
    /// (slots are also recycled on demand when a free list runs dry) and the
    /// clock watch (skew detection). The deterministic simulator turns them
    /// off.
    #[must_use]
    pub fn recycler(mut self, on: bool) -> Self {
        self.start.background = on;
        self
    }

    /// Without background threads: whether the nodes reuse staged slots
    /// only on the word of clock checks that the caller runs with
    /// [`Cluster::check_clocks`] (default off: the skew bound is assumed).
    /// With background threads the clock watch always decides.
    #[must_use]
    pub fn clock_checks(mut self, on: bool) -> Self {
        self.clock_checks = on;
        self
    }

    /// Seed of the clients' back-off jitter.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Builds the cluster.
    ///
    /// # Errors
    /// [`Error::Config`] if the configuration is invalid or the clocks do not
    /// match the node count; [`Error::OutOfMemory`] when this host cannot
    /// back the nodes' index and tables; [`Error::Io`] if the recycler
    /// cannot start.
    pub fn build(self) -> Result<Cluster, Error> {
        let regions = store_regions(&self.config);
        let hosting = Hosting::local(self.config, &regions, self.start)?;
        let shared = Arc::new(Shared::new(&hosting, self.seed));
        let watch = if hosting.background() {
            Some(ClockWatch::start(
                Arc::clone(&shared),
                hosting.hosted().to_vec(),
            )?)
        } else {
            if self.clock_checks {
                crate::runtime::watch::arm(&shared, hosting.hosted());
            }
            None
        };
        let mut metrics = Vec::new();
        for &node in hosting.hosted() {
            metrics.extend(MetricsServer::start(Arc::clone(&shared), node, None)?);
        }
        Ok(Cluster {
            shared,
            metrics,
            _watch: watch,
            _hosting: hosting,
        })
    }
}
