//! One process's node of a multi-process cluster (the `shm` fabric).

use crate::client::Client;
use crate::clock::{Clock, WallClock};
use crate::cluster::recycle_period;
use crate::data::Recycler;
use crate::fabric::{Fabric, NodeId, ShmFabric, ShmOptions};
use crate::store::{store_regions, Shared};
use crate::watch::ClockWatch;
use crate::{Config, Error, FabricConfig};
use std::sync::Arc;

/// This process's node: it owns an index table and data tables in shared
/// memory, maps every peer's, and hands out clients.
#[derive(Debug)]
pub struct Node {
    shared: Arc<Shared>,
    id: NodeId,
    _recycler: Recycler,
    _watch: ClockWatch,
}

impl Node {
    /// Creates this node's regions on the fabric named by `config.fabric`
    /// (`shm`), waits for every peer's (up to `attach_timeout`) and starts
    /// the recycler. Nodes may start in any order.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration, a node id out of
    /// range or a fabric other than `shm`; [`Error::Fabric`] when a peer's
    /// region is missing, of another cluster, version or size.
    pub fn start(config: Config, node_id: NodeId) -> Result<Node, Error> {
        config.validate()?;
        if node_id >= config.nodes {
            return Err(Error::Config(format!(
                "node id {node_id} is out of range for {} nodes",
                config.nodes
            )));
        }
        if let FabricConfig::Verbs { .. } = config.fabric {
            return Node::start_verbs(config, node_id);
        }
        let FabricConfig::Shm { .. } = config.fabric else {
            return Err(Error::Config(
                "Node::start needs fabric = shm (use Cluster::local for an in-process cluster)"
                    .into(),
            ));
        };
        let fabric = ShmFabric::open(&ShmOptions {
            dir: config.shm_dir(),
            cluster_id: config.cluster_id(),
            node: node_id,
            nodes: config.nodes,
            regions: store_regions(&config),
            attach_timeout: config.attach_timeout,
        })?;
        Node::with_fabric(config, node_id, Arc::new(fabric))
    }

    /// Runs node `node_id` on a fabric the caller opened (whose regions are
    /// [`crate::store_regions`] of `config` on every node).
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration; [`Error::Io`] if the
    /// recycler cannot start.
    pub fn with_fabric(
        config: Config,
        node_id: NodeId,
        fabric: Arc<dyn Fabric>,
    ) -> Result<Node, Error> {
        config.validate()?;
        let clock: Arc<dyn Clock> = Arc::new(WallClock::default());
        let period = recycle_period(&config);
        let seed = 0x6e6f_6465 ^ (node_id as u64) << 32 ^ u64::from(std::process::id());
        let shared = Arc::new(Shared::new(
            config.clone(),
            Arc::clone(&fabric),
            Arc::clone(&fabric),
            &[node_id],
            vec![Arc::clone(&clock); config.nodes],
            seed,
        ));
        let recycler = Recycler::start(shared.hosted_data(), fabric, clock, period)?;
        let watch = ClockWatch::start(Arc::clone(&shared), vec![node_id])?;
        Ok(Node {
            shared,
            id: node_id,
            _recycler: recycler,
            _watch: watch,
        })
    }

    /// A client running on this node.
    ///
    /// # Errors
    /// None in practice; the signature matches [`crate::Cluster::client`].
    pub fn client(&self) -> Result<Client, Error> {
        self.shared.client(self.id)
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

impl Node {
    /// [`Node::start`] on the `verbs` fabric: opens the RDMA device, listens
    /// on `peers[node_id]` and connects a queue pair per lane to every peer.
    #[cfg(feature = "verbs")]
    fn start_verbs(config: Config, node_id: NodeId) -> Result<Node, Error> {
        use crate::fabric::{VerbsFabric, VerbsOptions, DEFAULT_LANES};
        let FabricConfig::Verbs {
            device,
            peers,
            gid_index,
        } = &config.fabric
        else {
            return Err(Error::Config("fabric is not verbs".into()));
        };
        let fabric = VerbsFabric::open(&VerbsOptions {
            device: device.clone(),
            gid_index: *gid_index,
            peers: peers.clone(),
            cluster_id: config.cluster_id(),
            node: node_id,
            regions: store_regions(&config),
            attach_timeout: config.attach_timeout,
            lanes: DEFAULT_LANES,
        })?;
        Node::with_fabric(config, node_id, Arc::new(fabric))
    }

    /// Without the `verbs` feature there is no RDMA backend.
    #[cfg(not(feature = "verbs"))]
    fn start_verbs(_config: Config, _node_id: NodeId) -> Result<Node, Error> {
        Err(Error::Config(
            "fabric = verbs needs nessie built with the `verbs` cargo feature".into(),
        ))
    }
}
