//! One process's node of a multi-process cluster (the `shm` or `tcp` fabric).

use crate::client::Client;
use crate::clock::{Clock, WallClock};
use crate::cluster::recycle_period;
use crate::data::Recycler;
use crate::fabric::{Fabric, NodeId, ShmFabric, ShmOptions, TcpFabric, TcpOptions};
use crate::store::{store_regions, Shared};
use crate::watch::ClockWatch;
use crate::{Config, Error, FabricConfig};
use std::sync::Arc;

/// This process's node: it owns an index table and data tables (in shared
/// memory on `shm`, in its heap behind a verb service on `tcp`), reaches
/// every peer's, and hands out clients.
#[derive(Debug)]
pub struct Node {
    shared: Arc<Shared>,
    id: NodeId,
    /// The tcp fabric when `Node::start` opened one (for its counters).
    tcp: Option<Arc<TcpFabric>>,
    _recycler: Recycler,
    _watch: ClockWatch,
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
    /// secret, or the node's address cannot be bound.
    pub fn start(config: Config, node_id: NodeId) -> Result<Node, Error> {
        config.validate()?;
        if node_id >= config.nodes {
            return Err(Error::Config(format!(
                "node id {node_id} is out of range for {} nodes",
                config.nodes
            )));
        }
        let opened = open_fabric(&config, node_id, store_regions(&config))?;
        let mut node = Node::with_fabric(config, node_id, opened.fabric)?;
        node.tcp = opened.tcp;
        Ok(node)
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
        let recycler = Recycler::start(
            shared.hosted_data(),
            Arc::clone(&fabric),
            fabric,
            clock,
            period,
        )?;
        let watch = ClockWatch::start(Arc::clone(&shared), vec![node_id])?;
        Ok(Node {
            shared,
            id: node_id,
            tcp: None,
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

    /// Counters of the tcp fabric's verb service and connections, if this
    /// node runs on `tcp` (opened by [`Node::start`]).
    #[must_use]
    pub fn tcp_stats(&self) -> Option<crate::fabric::TcpStats> {
        self.tcp.as_ref().map(|t| t.stats())
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

/// A node's view of the fabric [`open_fabric`] opened.
#[derive(Debug)]
pub struct OpenFabric {
    /// The fabric.
    pub fabric: Arc<dyn Fabric>,
    /// The same fabric when it is `tcp` (for its service counters).
    pub tcp: Option<Arc<TcpFabric>>,
}

/// Opens node `node_id`'s view of the fabric `config.fabric` names, every
/// node registering `regions`: creates or maps the region files (`shm`), or
/// binds `peers[node_id]` and connects to every peer (`tcp`, `verbs`),
/// waiting up to `attach_timeout`. Every store of the project (the
/// baselines too, with their own regions) opens its fabric here.
///
/// # Errors
/// [`Error::Config`] for the `local` fabric (use an in-process cluster) or
/// `verbs` in a build without the `verbs` feature; [`Error::Fabric`] when a
/// peer is missing, unreachable or mismatched, or the address cannot be
/// bound.
pub fn open_fabric(
    config: &Config,
    node_id: NodeId,
    regions: Vec<crate::fabric::RegionSpec>,
) -> Result<OpenFabric, Error> {
    let plain = |fabric: Arc<dyn Fabric>| OpenFabric { fabric, tcp: None };
    match config.fabric {
        FabricConfig::Shm { .. } => Ok(plain(Arc::new(ShmFabric::open(&ShmOptions {
            dir: config.shm_dir(),
            cluster_id: config.cluster_id(),
            node: node_id,
            nodes: config.nodes,
            regions,
            attach_timeout: config.attach_timeout,
        })?))),
        FabricConfig::Tcp { .. } => {
            let tcp = Arc::new(TcpFabric::open(&TcpOptions::from_config(
                config, node_id, regions,
            )?)?);
            Ok(OpenFabric {
                fabric: Arc::clone(&tcp) as Arc<dyn Fabric>,
                tcp: Some(tcp),
            })
        }
        FabricConfig::Verbs { .. } => Ok(plain(open_verbs_fabric(config, node_id, regions)?)),
        FabricConfig::Local => Err(Error::Config(
            "a node process needs fabric = shm, tcp or verbs (use an in-process cluster for local)"
                .into(),
        )),
    }
}

/// Opens node `node_id`'s view of the `verbs` fabric of `config`
/// (`fabric = verbs`), every node registering `regions`: opens the RDMA
/// device, listens on `peers[node_id]` and connects queue pairs to every
/// peer. Stores other than the client-driven one (the baselines) use this
/// with their own regions.
///
/// # Errors
/// [`Error::Config`] if `config.fabric` is not `verbs` or nessie was built
/// without the `verbs` feature; [`Error::Fabric`] as
/// `nessie::fabric::VerbsFabric::open`.
#[cfg(feature = "verbs")]
fn open_verbs_fabric(
    config: &Config,
    node_id: NodeId,
    regions: Vec<crate::fabric::RegionSpec>,
) -> Result<Arc<dyn Fabric>, Error> {
    use crate::fabric::{VerbsFabric, VerbsOptions, DEFAULT_LANES};
    let FabricConfig::Verbs {
        device,
        peers,
        gid_index,
    } = &config.fabric
    else {
        return Err(Error::Config("fabric is not verbs".into()));
    };
    Ok(Arc::new(VerbsFabric::open(&VerbsOptions {
        device: device.clone(),
        gid_index: *gid_index,
        peers: peers.clone(),
        cluster_id: config.cluster_id(),
        node: node_id,
        regions,
        attach_timeout: config.attach_timeout,
        lanes: DEFAULT_LANES,
        retransmission: crate::fabric::RcTimeouts::within(config.landing_bound()).ok_or_else(
            || Error::Config("the landing bound is too short for RDMA retransmissions".into()),
        )?,
    })?))
}

/// Opens node `node_id`'s view of the `verbs` fabric: without the `verbs`
/// feature there is none.
///
/// # Errors
/// Always [`Error::Config`].
#[cfg(not(feature = "verbs"))]
fn open_verbs_fabric(
    _config: &Config,
    _node_id: NodeId,
    _regions: Vec<crate::fabric::RegionSpec>,
) -> Result<Arc<dyn Fabric>, Error> {
    Err(Error::Config(
        "fabric = verbs needs nessie built with the `verbs` cargo feature".into(),
    ))
}
