//! How a process starts the nodes it hosts, for every store of the project
//! (the client-driven store here, and the SD and HY baselines): validate
//! the configuration, open the fabric its `fabric` section names (or the
//! `local` fabric for an in-process cluster), give every node a clock,
//! create the hosted nodes' data tables and start the background recycler
//! over them. Each store then starts what is its own on top (clients'
//! shared state and clock watch; server workers and rings).

use crate::clock::{Clock, WallClock};
use crate::data::{Geometry, NodeData, Recycler};
use crate::fabric::wire::{frame::DEFAULT_FRAME_LIMIT, round_up_words};
use crate::fabric::{
    Fabric, Joins, LocalFabric, Membership, NodeId, RegionSpec, RendezvousOptions, ShmFabric,
    ShmOptions, TcpFabric, TcpOptions,
};
use crate::layout::FORMAT_VERSION;
use crate::replica::{RoutedFabric, Views};
use crate::{Config, Error, FabricConfig};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub(crate) mod cluster;
mod memory;
pub(crate) mod node;
pub(crate) mod periodic;
pub(crate) mod store;
pub(crate) mod watch;

/// Wraps a fabric, e.g. to interpose a scheduler on every verb.
pub type FabricWrapper = Box<dyn FnOnce(Arc<dyn Fabric>) -> Arc<dyn Fabric>>;

/// How to start an in-process cluster ([`Hosting::local`]).
pub struct LocalStart {
    /// One clock per node (`None`: the wall clock for every node).
    pub clocks: Option<Vec<Arc<dyn Clock>>>,
    /// A wrapper around the local fabric for clients' verbs (allocation
    /// scans and the recycler's own-memory reads bypass it).
    pub wrap: Option<FabricWrapper>,
    /// Whether to run background threads (the recycler here, and whatever
    /// the store adds); the deterministic simulator turns them off.
    pub background: bool,
}

impl Default for LocalStart {
    fn default() -> LocalStart {
        LocalStart {
            clocks: None,
            wrap: None,
            background: true,
        }
    }
}

impl fmt::Debug for LocalStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalStart")
            .field("clocks", &self.clocks.as_ref().map(Vec::len))
            .field("wrap", &self.wrap.is_some())
            .field("background", &self.background)
            .finish()
    }
}

/// The nodes a process hosts, and what runs for them whatever the store:
/// fabric, clocks, data tables and the recycler (stopped when this drops).
#[derive(Debug)]
pub struct Hosting {
    config: Config,
    hosted: Vec<NodeId>,
    fabric: Arc<dyn Fabric>,
    local: Arc<dyn Fabric>,
    tcp: Option<Arc<TcpFabric>>,
    clocks: Vec<Arc<dyn Clock>>,
    data: Vec<Arc<NodeData>>,
    /// The view the hosted nodes serve in.
    views: Arc<Views>,
    recycler: Option<Recycler>,
}

impl Hosting {
    /// Every node of the cluster in this process, on the `local` fabric
    /// with `regions` registered on every node.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration or clocks that do not
    /// match the node count; [`Error::OutOfMemory`] when this host cannot
    /// back the nodes' index and tables (nothing is left allocated);
    /// [`Error::Io`] if the recycler cannot start.
    pub fn local(
        config: Config,
        regions: &[RegionSpec],
        start: LocalStart,
    ) -> Result<Hosting, Error> {
        config.validate()?;
        let clocks = match start.clocks {
            Some(c) if c.len() == config.nodes => c,
            Some(c) => {
                return Err(Error::Config(format!(
                    "{} clocks given for {} nodes",
                    c.len(),
                    config.nodes
                )))
            }
            None => wall_clocks(config.nodes),
        };
        memory::check_dense(&config, config.nodes)?;
        let local: Arc<dyn Fabric> =
            Arc::new(LocalFabric::new(config.nodes, regions).map_err(memory::fabric_error)?);
        let fabric = match start.wrap {
            Some(wrap) => wrap(Arc::clone(&local)),
            None => Arc::clone(&local),
        };
        let hosted: Vec<NodeId> = (0..config.nodes).collect();
        Hosting::start(
            config,
            &hosted,
            fabric,
            local,
            None,
            clocks,
            start.background,
        )
    }

    /// Node `node_id` of a cluster whose nodes are processes, on the fabric
    /// `config.fabric` names, every node registering `regions`: creates or
    /// maps the region files (`shm`), or binds `peers[node_id]` and connects
    /// to every peer (`tcp`, `verbs`), waiting up to `attach_timeout`.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration, a node id out of
    /// range, the `local` fabric, or `verbs` in a build without the `verbs`
    /// feature; [`Error::Fabric`] when a peer is missing, unreachable or
    /// mismatched, or the address cannot be bound; [`Error::OutOfMemory`]
    /// when this host cannot back the node's index and tables;
    /// [`Error::Io`] if the recycler cannot start.
    pub fn node(
        config: Config,
        node_id: NodeId,
        regions: Vec<RegionSpec>,
    ) -> Result<Hosting, Error> {
        Hosting::process_node(config, node_id, regions, false)
    }

    /// As [`Hosting::node`], for a replacement of the lost node `node_id`:
    /// on `shm` it takes the lost node's wiped region files, which every
    /// peer has mapped (docs/replication.md#restore); on `tcp` and `verbs`
    /// it learns its peers from the members' join service, and on `verbs`
    /// reconnects its fresh queue pairs and regions to every member
    /// (docs/replication.md#joining-after-start-up).
    ///
    /// # Errors
    /// As [`Hosting::node`].
    pub fn replacement(
        config: Config,
        node_id: NodeId,
        regions: Vec<RegionSpec>,
    ) -> Result<Hosting, Error> {
        Hosting::process_node(config, node_id, regions, true)
    }

    fn process_node(
        config: Config,
        node_id: NodeId,
        regions: Vec<RegionSpec>,
        replace: bool,
    ) -> Result<Hosting, Error> {
        check_node(&config, node_id)?;
        memory::check_dense(&config, 1)?;
        let opened = open_fabric(&config, node_id, regions, replace)?;
        Hosting::one_node(config, node_id, opened.fabric, opened.tcp)
    }

    /// Node `node_id` on a fabric the caller opened (whose regions are the
    /// store's on every node).
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration or a node id out of
    /// range; [`Error::OutOfMemory`] when this host cannot back the node's
    /// tables; [`Error::Io`] if the recycler cannot start.
    pub fn node_on(
        config: Config,
        node_id: NodeId,
        fabric: Arc<dyn Fabric>,
    ) -> Result<Hosting, Error> {
        check_node(&config, node_id)?;
        memory::check_dense(&config, 1)?;
        Hosting::one_node(config, node_id, fabric, None)
    }

    /// Node `node_id` of a checked configuration on its opened fabric.
    fn one_node(
        config: Config,
        node_id: NodeId,
        fabric: Arc<dyn Fabric>,
        tcp: Option<Arc<TcpFabric>>,
    ) -> Result<Hosting, Error> {
        let clocks = wall_clocks(config.nodes);
        let local = Arc::clone(&fabric);
        Hosting::start(config, &[node_id], fabric, local, tcp, clocks, true)
    }

    fn start(
        config: Config,
        hosted: &[NodeId],
        fabric: Arc<dyn Fabric>,
        local: Arc<dyn Fabric>,
        tcp: Option<Arc<TcpFabric>>,
        clocks: Vec<Arc<dyn Clock>>,
        background: bool,
    ) -> Result<Hosting, Error> {
        let data = hosted
            .iter()
            .map(|&n| NodeData::new(&config, n).map(Arc::new))
            .collect::<Result<Vec<Arc<NodeData>>, Error>>()?;
        let views = Arc::new(Views::new(Geometry::new(&config)));
        // With replicas, verbs to a share go to its primary in the current
        // view (docs/replication.md#placement); with one, nothing is routed.
        let fabric: Arc<dyn Fabric> = if config.replicas > 1 {
            Arc::new(RoutedFabric::new(fabric, Arc::clone(&views)))
        } else {
            fabric
        };
        let recycler = if background {
            // The recycler of an in-process cluster works for every node on
            // the first node's clock: clocks differ only in simulations,
            // which run no recycler thread.
            Some(Recycler::start(
                data.clone(),
                Arc::clone(&local),
                Arc::clone(&fabric),
                Arc::clone(&clocks[hosted[0]]),
                Arc::clone(&views),
                config.recycler_period(),
            )?)
        } else {
            None
        };
        Ok(Hosting {
            config,
            hosted: hosted.to_vec(),
            fabric,
            local,
            tcp,
            clocks,
            data,
            views,
            recycler,
        })
    }

    /// The configuration (validated).
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The fabric clients' verbs go through (wrapped, if a wrapper was
    /// given).
    #[must_use]
    pub fn fabric(&self) -> &Arc<dyn Fabric> {
        &self.fabric
    }

    /// The views the hosted nodes serve in (docs/replication.md#placement).
    #[must_use]
    pub fn views(&self) -> &Arc<Views> {
        &self.views
    }

    /// The fabric without any wrapper: a node's bookkeeping of its own
    /// memory (allocation scans) goes through it.
    #[must_use]
    pub fn local_fabric(&self) -> &Arc<dyn Fabric> {
        &self.local
    }

    /// The `tcp` fabric, when [`Hosting::node`] opened one (for its
    /// counters).
    #[must_use]
    pub fn tcp(&self) -> Option<&Arc<TcpFabric>> {
        self.tcp.as_ref()
    }

    /// One clock per node of the cluster.
    #[must_use]
    pub fn clocks(&self) -> &[Arc<dyn Clock>] {
        &self.clocks
    }

    /// The nodes this process hosts, in order.
    #[must_use]
    pub fn hosted(&self) -> &[NodeId] {
        &self.hosted
    }

    /// The data tables of the hosted nodes, in the order of
    /// [`Hosting::hosted`].
    #[must_use]
    pub fn data(&self) -> &[Arc<NodeData>] {
        &self.data
    }

    /// Whether background threads run.
    #[must_use]
    pub fn background(&self) -> bool {
        self.recycler.is_some()
    }
}

fn wall_clocks(nodes: usize) -> Vec<Arc<dyn Clock>> {
    let wall: Arc<dyn Clock> = Arc::new(WallClock::default());
    vec![wall; nodes]
}

/// Validates `config` and checks that `node_id` is one of its nodes.
///
/// # Errors
/// [`Error::Config`].
pub fn check_node(config: &Config, node_id: NodeId) -> Result<(), Error> {
    config.validate()?;
    if node_id >= config.nodes {
        return Err(Error::Config(format!(
            "node id {node_id} is out of range for {} nodes",
            config.nodes
        )));
    }
    Ok(())
}

/// Node `node_id`'s membership in the cluster of `config`, every node
/// registering `regions`.
#[must_use]
pub fn membership(config: &Config, node_id: NodeId, regions: Vec<RegionSpec>) -> Membership {
    Membership {
        cluster_id: config.cluster_id(),
        format_version: FORMAT_VERSION,
        node: node_id,
        nodes: config.nodes,
        regions,
    }
}

/// A fabric a node opened; the `tcp` fabric also as itself (for its
/// counters).
struct Opened {
    fabric: Arc<dyn Fabric>,
    tcp: Option<Arc<TcpFabric>>,
}

impl Opened {
    fn plain(fabric: Arc<dyn Fabric>) -> Opened {
        Opened { fabric, tcp: None }
    }
}

/// Opens node `node_id`'s view of the fabric `config.fabric` names, every
/// node registering `regions`.
fn open_fabric(
    config: &Config,
    node_id: NodeId,
    regions: Vec<RegionSpec>,
    replace: bool,
) -> Result<Opened, Error> {
    let membership = membership(config, node_id, regions);
    match &config.fabric {
        FabricConfig::Shm { .. } => {
            let shm = ShmFabric::open(&ShmOptions {
                dir: config.shm_dir(),
                membership,
                attach_timeout: config.attach_timeout,
                replace,
            })?;
            Ok(Opened::plain(Arc::new(shm)))
        }
        FabricConfig::Tcp {
            peers,
            rendezvous,
            join,
            secret,
            threads,
        } => {
            // Node 0 serves the rendezvous; every node waits for the others
            // as long as it waits for peers.
            let rendezvous = rendezvous.as_ref().map(|address| RendezvousOptions {
                membership: membership.clone(),
                secret: secret.clone(),
                address: address.clone(),
                serve: node_id == 0,
                timeout: config.attach_timeout,
            });
            // With replicas the table outlives start-up
            // (docs/replication.md#joining-after-start-up).
            let joins = match (config.replicas > 1, replace) {
                (false, _) => Joins::Off,
                (true, false) => Joins::Serve,
                (true, true) => Joins::Replace { also: join.clone() },
            };
            let options = TcpOptions {
                closed: replace,
                joins,
                membership,
                peers: peers.clone(),
                secret: secret.clone(),
                threads: *threads,
                attach_timeout: config.attach_timeout,
                handshake_timeout: config
                    .attach_timeout
                    .clamp(Duration::from_secs(1), Duration::from_secs(10)),
                io_timeout: config.attach_timeout.max(Duration::from_secs(5)),
                frame_limit: tcp_frame_limit(config),
                rendezvous,
            };
            let tcp = Arc::new(TcpFabric::open(&options).map_err(memory::fabric_error)?);
            Ok(Opened {
                fabric: Arc::clone(&tcp) as Arc<dyn Fabric>,
                tcp: Some(tcp),
            })
        }
        FabricConfig::Verbs { .. } => Ok(Opened::plain(open_verbs(config, membership, replace)?)),
        FabricConfig::Local => Err(Error::Config(
            "a node process needs fabric = shm, tcp or verbs (use an in-process cluster for local)"
                .into(),
        )),
    }
}

/// The `tcp` frame limit: room for the largest DTE slot and then some, so
/// that a READ of a whole entry fits one frame.
fn tcp_frame_limit(config: &Config) -> u64 {
    let largest_slot = config.class_slot_bytes(config.size_classes().len().saturating_sub(1));
    DEFAULT_FRAME_LIMIT.max(round_up_words(largest_slot + (64 << 10)) as u64)
}

#[cfg(feature = "verbs")]
fn open_verbs(
    config: &Config,
    membership: Membership,
    replace: bool,
) -> Result<Arc<dyn Fabric>, Error> {
    use crate::fabric::{RcTimeouts, VerbsFabric, VerbsOptions, DEFAULT_LANES};
    let FabricConfig::Verbs {
        device,
        peers,
        rendezvous,
        join,
        secret,
        gid_index,
    } = &config.fabric
    else {
        return Err(Error::Config("fabric is not verbs".into()));
    };
    let retransmission = RcTimeouts::within(config.landing_bound()).ok_or_else(|| {
        Error::Config("the landing bound is too short for RDMA retransmissions".into())
    })?;
    // Node 0 serves the exchange: at the rendezvous address, or at its own
    // entry of a static peer list.
    let address = rendezvous
        .clone()
        .or_else(|| peers.first().cloned())
        .ok_or_else(|| Error::Config("fabric = verbs needs peers or a rendezvous".into()))?;
    let serve = membership.node == 0;
    // With replicas every node answers a replacement's reconnection
    // (docs/replication.md#joining-after-start-up); a replacement asks the
    // join service at the rendezvous address, then at each of `join`.
    let joins = match (config.replicas > 1, replace) {
        (false, _) => Joins::Off,
        (true, false) => Joins::Serve,
        (true, true) => Joins::Replace { also: join.clone() },
    };
    Ok(Arc::new(VerbsFabric::open(&VerbsOptions {
        device: device.clone(),
        gid_index: *gid_index,
        rendezvous: RendezvousOptions {
            membership,
            secret: secret.clone(),
            address,
            serve,
            timeout: config.attach_timeout,
        },
        lanes: DEFAULT_LANES,
        retransmission,
        joins,
    })?))
}

#[cfg(not(feature = "verbs"))]
fn open_verbs(
    _config: &Config,
    _membership: Membership,
    _replace: bool,
) -> Result<Arc<dyn Fabric>, Error> {
    Err(Error::Config(
        "fabric = verbs needs nessie built with the `verbs` cargo feature".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::RcTimeouts;

    #[test]
    fn the_default_rdma_retransmissions_fit_the_landing_bound() {
        let config = Config::default();
        let t = RcTimeouts::within(config.landing_bound()).unwrap();
        assert_eq!(t, RcTimeouts::default());
        assert!(t.worst_case() <= config.landing_bound());
        assert!(t.worst_case() + config.op_timeout + config.max_clock_skew < config.expiry);
        let old = RcTimeouts {
            ack_timeout: 16,
            retry_count: 7,
        };
        assert!(old.ack_timeout() > Duration::from_millis(268));
        assert!(old.worst_case() > config.expiry.checked_sub(config.op_timeout).unwrap());
    }

    #[test]
    fn a_node_outside_the_cluster_is_refused() {
        let config = Config::default();
        assert!(
            matches!(check_node(&config, 3), Err(Error::Config(m)) if m.contains("out of range"))
        );
        check_node(&config, 2).unwrap();
        assert!(matches!(
            Hosting::node(config, 0, Vec::new()),
            Err(Error::Config(m)) if m.contains("fabric = shm, tcp or verbs")
        ));
    }

    #[test]
    fn a_local_cluster_hosts_every_node() {
        let config = Config {
            index_slots_per_node: 64,
            data_bytes_per_node: 16 << 20,
            ..Config::default()
        };
        let regions = crate::store_regions(&config);
        let h = Hosting::local(config, &regions, LocalStart::default()).unwrap();
        assert_eq!(h.data().len(), 3);
        assert_eq!(h.clocks().len(), 3);
        assert!(h.background());
        let bad = LocalStart {
            clocks: Some(wall_clocks(2)),
            ..LocalStart::default()
        };
        assert!(Hosting::local(h.config().clone(), &regions, bad).is_err());
    }
}
