//! Starting a cluster: every node in one process ([`Cluster`]) or one
//! process per node on shared memory ([`Node`]).

use crate::client::{Client, ClientContext, SlotPool};
use crate::messaging::RpcClient;
use crate::ring::{RingGeometry, HEAD_MIRRORS, REQUEST_RINGS, RESPONSE_RINGS};
use crate::server::{Server, ServerConfig};
use crate::table::Table;
use nessie::data::NodeData;
use nessie::fabric::{Endpoint, Fabric, NodeId, RegionSpec, VerbCounts};
use nessie::runtime::{Hosting, LocalStart};
use nessie::{Clock, Config, Error};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Client slots per node: how many clients a node can have at once. Every
/// slot has a request ring on every node and a response ring on its own,
/// whether used or not (rings are registered memory and cannot be added
/// later); memory of unused rings is never touched, so it costs address
/// space only.
pub const CLIENT_SLOTS: usize = 32;

/// The ring layout of a configuration.
fn geometry(config: &Config) -> Result<RingGeometry, Error> {
    RingGeometry::new(
        config.nodes,
        CLIENT_SLOTS,
        config.key_size_max,
        config.value_size_max,
    )
    .ok_or_else(|| {
        Error::Config(format!(
            "the request rings for {} nodes, {CLIENT_SLOTS} client slots and value_size_max = {} do not fit in memory",
            config.nodes, config.value_size_max
        ))
    })
}

/// Every region a node registers: tables and rings.
fn regions(config: &Config, g: &RingGeometry) -> Vec<RegionSpec> {
    let mut regions = Table::regions(config);
    for (id, len) in [
        (REQUEST_RINGS, g.request_region_bytes()),
        (RESPONSE_RINGS, g.response_region_bytes()),
        (HEAD_MIRRORS, g.head_region_bytes()),
    ] {
        // `RingGeometry::new` checked that every length is representable.
        regions.push(RegionSpec {
            id,
            len: len.unwrap_or(0),
        });
    }
    regions
}

fn unknown_node(node: NodeId, nodes: usize) -> Error {
    Error::Config(format!("node id {node} is out of range for {nodes} nodes"))
}

fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// One node's server and client slots. Dropping it stops the server.
#[derive(Debug)]
struct ServerNode {
    server: Server,
    node: NodeId,
    fabric: Arc<dyn Fabric>,
    geometry: RingGeometry,
    ctx: ClientContext,
    running: Arc<AtomicBool>,
}

impl ServerNode {
    fn start(
        hosting: &Hosting,
        node: NodeId,
        table: &Arc<Table>,
        data: Arc<NodeData>,
    ) -> Result<ServerNode, Error> {
        let config = hosting.config();
        let fabric = Arc::clone(hosting.fabric());
        let clock: &Arc<dyn Clock> = &hosting.clocks()[node];
        let geometry = geometry(config)?;
        let server = Server::start(ServerConfig {
            node,
            fabric: Arc::clone(&fabric),
            table: Arc::clone(table),
            geometry,
            data,
            clock: Arc::clone(clock),
            workers: config.server_workers,
            op_timeout_us: micros(config.op_timeout),
            max_migrate_depth: config.max_migrate_depth,
        })?;
        Ok(ServerNode {
            server,
            node,
            fabric,
            geometry,
            ctx: ClientContext {
                table: Arc::clone(table),
                clock: Arc::clone(clock),
                pool: Arc::new(SlotPool::new(node, CLIENT_SLOTS, config.nodes)),
                op_timeout_us: micros(config.op_timeout),
                give_up_us: micros(config.op_timeout + config.expiry),
            },
            running: Arc::new(AtomicBool::new(true)),
        })
    }

    fn client(&self) -> Result<Client, Error> {
        let rings = self.ctx.pool.take()?;
        let ep = Endpoint::new(Arc::clone(&self.fabric), self.node);
        let rpc = RpcClient::new(ep, self.geometry, rings, Arc::clone(&self.running));
        Ok(Client::new(rpc, self.ctx.clone()))
    }
}

impl Drop for ServerNode {
    fn drop(&mut self) {
        // Clients still waiting on this node's servers give up at once.
        // (The server itself stops when its field drops, right after.)
        self.running.store(false, Ordering::Relaxed);
    }
}

/// An in-process cluster on the local fabric: every node's tables, rings
/// and server workers live in this process. Dropping it stops every server
/// (clients that outlive it get [`Error::Timeout`] from requests to their
/// own node and time out on others).
#[derive(Debug)]
pub struct Cluster {
    nodes: Vec<ServerNode>,
    hosting: Hosting,
}

impl Cluster {
    /// Starts a cluster of `config.nodes` nodes in this process, with
    /// `config.server_workers` server threads per node.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration;
    /// [`Error::OutOfMemory`] when this host cannot back the nodes' index
    /// and tables; [`Error::Io`] if a thread cannot be started.
    pub fn local(config: Config) -> Result<Cluster, Error> {
        config.validate()?;
        let regions = regions(&config, &geometry(&config)?);
        let hosting = Hosting::local(config, &regions, LocalStart::default())?;
        let table = Arc::new(Table::new(hosting.config()));
        let nodes = hosting
            .data()
            .iter()
            .enumerate()
            .map(|(n, d)| ServerNode::start(&hosting, n, &table, Arc::clone(d)))
            .collect::<Result<_, _>>()?;
        Ok(Cluster { nodes, hosting })
    }

    /// A new client on `node`.
    ///
    /// # Errors
    /// [`Error::Config`] for a node outside the cluster, or when all
    /// [`CLIENT_SLOTS`] slots of the node are taken.
    pub fn client(&self, node: NodeId) -> Result<Client, Error> {
        self.nodes
            .get(node)
            .ok_or_else(|| unknown_node(node, self.nodes.len()))?
            .client()
    }

    /// The fabric every node and client uses (e.g. to inspect memory in
    /// tests).
    #[must_use]
    pub fn fabric(&self) -> Arc<dyn Fabric> {
        Arc::clone(self.hosting.fabric())
    }

    /// The configuration the cluster runs with.
    #[must_use]
    pub fn config(&self) -> &Config {
        self.hosting.config()
    }

    /// Verbs the server workers of every node issued: table operations on
    /// their own memory (local), replies and request-ring head updates.
    #[must_use]
    pub fn server_verbs(&self) -> VerbCounts {
        self.nodes
            .iter()
            .fold(VerbCounts::default(), |acc, n| acc + n.server.verbs())
    }
}

/// One node of a cluster whose nodes are processes: on one host sharing
/// memory through files (`fabric = shm`: [`nessie::fabric::ShmFabric`],
/// directory `config.shm_dir()`, cluster identity `config.cluster_id()`),
/// or on several hosts over the software NIC (`fabric = tcp`:
/// [`nessie::fabric::TcpFabric`]). Dropping it stops its server (and, on
/// shm, removes its region files).
#[derive(Debug)]
pub struct Node {
    server: ServerNode,
    hosting: Hosting,
}

impl Node {
    /// Registers this node's regions, waits (up to `config.attach_timeout`)
    /// for every peer's, and starts the node's server workers.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration, a `node_id` outside
    /// the cluster, or the `local` fabric; [`Error::Fabric`] for a peer that
    /// did not appear or does not match; [`Error::OutOfMemory`] when this
    /// host cannot back the node's index and tables; [`Error::Io`] if a
    /// thread cannot be started.
    pub fn start(config: Config, node_id: NodeId) -> Result<Node, Error> {
        config.validate()?;
        let regions = Node::regions(&config)?;
        Node::on(Hosting::node(config, node_id, regions)?)
    }

    /// Runs node `node_id` on a fabric opened by the caller, which must
    /// register [`Node::regions`] on every node.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration or a `node_id`
    /// outside the cluster; [`Error::OutOfMemory`] when this host cannot
    /// back the node's tables; [`Error::Io`] if a thread cannot be started.
    pub fn with_fabric(
        config: Config,
        node_id: NodeId,
        fabric: Arc<dyn Fabric>,
    ) -> Result<Node, Error> {
        Node::on(Hosting::node_on(config, node_id, fabric)?)
    }

    /// Starts the node's server workers on the one node `hosting` hosts.
    fn on(hosting: Hosting) -> Result<Node, Error> {
        let table = Arc::new(Table::new(hosting.config()));
        let server = ServerNode::start(
            &hosting,
            hosting.hosted()[0],
            &table,
            Arc::clone(&hosting.data()[0]),
        )?;
        Ok(Node { server, hosting })
    }

    /// The regions every node of a cluster with this configuration
    /// registers: index and data tables, request rings, response rings and
    /// head mirrors.
    ///
    /// # Errors
    /// [`Error::Config`] if the rings would not fit in memory.
    pub fn regions(config: &Config) -> Result<Vec<RegionSpec>, Error> {
        Ok(regions(config, &geometry(config)?))
    }

    /// A new client on this node.
    ///
    /// # Errors
    /// [`Error::Config`] when all [`CLIENT_SLOTS`] slots are taken.
    pub fn client(&self) -> Result<Client, Error> {
        self.server.client()
    }

    /// This node's id.
    #[must_use]
    pub fn id(&self) -> NodeId {
        self.server.node
    }

    /// The configuration the node runs with.
    #[must_use]
    pub fn config(&self) -> &Config {
        self.hosting.config()
    }

    /// Verbs this node's server workers issued (see
    /// [`Cluster::server_verbs`]).
    #[must_use]
    pub fn server_verbs(&self) -> VerbCounts {
        self.server.server.verbs()
    }
}
