//! Errors of the fabric layer.

use super::{NodeId, RegionId};
use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Why a verb or an attach failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FabricError {
    /// The node is not part of the cluster.
    #[error("node {node} is not in the cluster of {nodes} nodes")]
    UnknownNode {
        /// Requested node.
        node: NodeId,
        /// Nodes in the cluster.
        nodes: usize,
    },
    /// The node has no such region.
    #[error("node {node} has no region {region}")]
    UnknownRegion {
        /// Node.
        node: NodeId,
        /// Region.
        region: RegionId,
    },
    /// The verb reaches past the end of the region.
    #[error("verb of {len} bytes at node {node} {region} +{offset:#x} is outside the region of {region_len} bytes")]
    OutOfBounds {
        /// Node.
        node: NodeId,
        /// Region.
        region: RegionId,
        /// Offset of the verb.
        offset: u64,
        /// Bytes the verb moves.
        len: u64,
        /// Bytes of the region.
        region_len: u64,
    },
    /// Offset or length is not a multiple of 8.
    #[error("verb of {len} bytes at node {node} {region} +{offset:#x} is not word aligned")]
    Misaligned {
        /// Node.
        node: NodeId,
        /// Region.
        region: RegionId,
        /// Offset of the verb.
        offset: u64,
        /// Bytes the verb moves.
        len: u64,
    },
    /// A region file does not start with the region magic.
    #[error("{path}: not a nessie region file (bad magic)")]
    WrongMagic {
        /// File.
        path: PathBuf,
    },
    /// A region file was written by a build with another layout version.
    #[error("{path}: region format version {found}, this build speaks {expected}")]
    WrongVersion {
        /// File.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// Version of this build.
        expected: u32,
    },
    /// A region file belongs to another cluster.
    #[error(
        "{path}: region of cluster {found:#x}, expected cluster {expected:#x} \
         (another cluster, or the same name configured to place keys differently)"
    )]
    WrongCluster {
        /// File.
        path: PathBuf,
        /// Cluster id in the file.
        found: u64,
        /// Cluster id expected.
        expected: u64,
    },
    /// A region file names another node or region than its file name says.
    #[error("{path}: holds node {found_node} {found_region}, expected node {node} {region}")]
    WrongRegion {
        /// File.
        path: PathBuf,
        /// Node in the header.
        found_node: NodeId,
        /// Region in the header.
        found_region: RegionId,
        /// Node expected.
        node: NodeId,
        /// Region expected.
        region: RegionId,
    },
    /// A region file has another size than the configuration implies.
    #[error("{path}: region of {found} bytes, expected {expected} (peers disagree on the configuration)")]
    WrongSize {
        /// File.
        path: PathBuf,
        /// Size found (region memory, or the whole file if it is too short).
        found: u64,
        /// Size expected.
        expected: u64,
    },
    /// A region file is owned by another user.
    #[error(
        "{path}: owned by uid {found}, not by this process's uid {expected}; refusing to map it"
    )]
    WrongOwner {
        /// File.
        path: PathBuf,
        /// Owner of the file.
        found: u32,
        /// Our uid.
        expected: u32,
    },
    /// A region's memory could not be allocated: more than this process
    /// can map, or more than the host's memory accounting grants.
    #[error(
        "cannot allocate {bytes} bytes for node {node} {region}: more memory than this host grants"
    )]
    OutOfMemory {
        /// Node whose region it is.
        node: NodeId,
        /// The region.
        region: RegionId,
        /// Bytes requested.
        bytes: u64,
    },
    /// A peer's region did not appear before the attach deadline.
    #[error("{path}: peer region did not appear within {waited:?}")]
    Missing {
        /// File waited for.
        path: PathBuf,
        /// How long we waited.
        waited: Duration,
    },
    /// No RDMA device to open (`verbs` backend): none is present, the one
    /// named in the configuration is not, or libibverbs cannot be loaded.
    #[error("no RDMA device{}: devices present: {found:?}", wanted.as_ref().map(|w| format!(" named {w:?}")).unwrap_or_default())]
    NoDevice {
        /// The device the configuration asked for (`None`: any).
        wanted: Option<String>,
        /// Names of the devices that are present.
        found: Vec<String>,
    },
    /// An RDMA verbs call or work request failed (`verbs` backend).
    #[error("verbs: {op} for node {node} failed: {reason}")]
    Verbs {
        /// The node the operation concerned (this node for setup steps).
        node: NodeId,
        /// What was being done (`"READ"`, `"register region"`, ...).
        op: &'static str,
        /// Why it failed.
        #[source]
        reason: VerbsFailure,
    },
    /// An I/O error on a region file.
    #[error("{path}: {source}")]
    Io {
        /// File.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// No connection to a peer could be opened (or the last attempt failed
    /// and the back-off period has not passed yet).
    #[error("node {node} at {addr} is unreachable: {source}")]
    Unreachable {
        /// Peer.
        node: NodeId,
        /// Its address.
        addr: String,
        /// Why the last attempt failed.
        #[source]
        source: io::Error,
    },
    /// A peer failed the handshake: other secret, cluster, version, node or
    /// region sizes, or not a nessie peer at all (`tcp` and `verbs`).
    #[error("handshake with node {node} at {addr} failed: {reason}")]
    Handshake {
        /// Peer.
        node: NodeId,
        /// Its address.
        addr: String,
        /// What did not match.
        #[source]
        reason: HandshakeFailure,
    },
    /// The connection to a peer broke during the verb. A READ changed
    /// nothing; a WRITE or CAS may or may not have executed.
    #[error("connection to node {node} broke: {source}")]
    Disconnected {
        /// Peer.
        node: NodeId,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The node's host is lost (emulated on `shm`: its regions were wiped
    /// and every verb to it is refused until a replacement takes them; on
    /// `verbs`: this process fenced it, [`crate::Fabric::fence_node`]).
    /// The verb did not execute.
    #[error("node {node} is lost: its memory is gone, or this node fenced it")]
    Lost {
        /// The lost node.
        node: NodeId,
    },
    /// A CAS reached its target after its land-by time (its deadline check
    /// plus the landing bound, on the target's clock): the target refused
    /// it, so it did not execute. The protocol reports this as a timeout.
    #[error("node {node} refused a CAS that arrived {late_us} µs after its land-by time")]
    LateCas {
        /// The target node.
        node: NodeId,
        /// How late it arrived, by the target's clock (µs).
        late_us: u64,
    },
    /// A peer refused the verb for a reason other than bounds or alignment,
    /// or the verb cannot be sent at all; nothing executed.
    #[error("node {node} refused the verb: {reason}")]
    Refused {
        /// Peer.
        node: NodeId,
        /// Why.
        reason: &'static str,
    },
    /// A peer answered with bytes that do not follow the wire protocol; the
    /// connection was dropped, and the verb's outcome is unknown.
    #[error("node {node} broke the wire protocol: {reason}")]
    Protocol {
        /// Peer.
        node: NodeId,
        /// What was wrong.
        reason: &'static str,
    },
    /// Options of a fabric contradict each other.
    #[error("invalid fabric options: {reason}")]
    Options {
        /// What is wrong.
        reason: &'static str,
    },
    /// The rendezvous failed: on a registering node, the server was not
    /// reached, refused the registration or sent a reply that does not
    /// verify; on the serving node, a connection it refused (see
    /// [`crate::RendezvousOutcome::refused`]) or the wait for every node
    /// ran out.
    #[error("rendezvous with {addr}: {reason}")]
    Rendezvous {
        /// The server's address (a registering node, or the server's own
        /// failures), or the address a refused registration came from.
        addr: String,
        /// What went wrong.
        #[source]
        reason: RendezvousFailure,
    },
    /// The node's own listening address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// Address from the configuration.
        addr: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
}

impl FabricError {
    /// The peer whose failure or loss the error reports, for the errors
    /// that name one (a lost, unreachable or disconnected node, a failed
    /// handshake or verbs work request).
    #[must_use]
    pub fn peer(&self) -> Option<NodeId> {
        match self {
            FabricError::Lost { node }
            | FabricError::Unreachable { node, .. }
            | FabricError::Disconnected { node, .. }
            | FabricError::Handshake { node, .. }
            | FabricError::Verbs { node, .. } => Some(*node),
            _ => None,
        }
    }

    /// Whether the failed verb may still have executed at its target: the
    /// connection broke after it was sent, the answer was unreadable, or the
    /// NIC gave up waiting for it. A CAS that failed this way has an unknown
    /// outcome. Every other error means the verb did not execute.
    #[must_use]
    pub fn may_have_executed(&self) -> bool {
        matches!(
            self,
            FabricError::Disconnected { .. }
                | FabricError::Protocol { .. }
                | FabricError::Verbs { .. }
        )
    }
}

/// Why a handshake with a peer failed (`tcp` connections, `verbs`
/// queue-pair exchanges). Both sides check the same things, so each learns
/// the same reason.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeFailure {
    /// The connection broke or timed out during the handshake.
    #[error("{0}")]
    Io(#[source] io::Error),
    /// The peer does not speak the nessie tcp protocol.
    #[error("the peer is not a nessie node of this fabric (bad magic)")]
    BadMagic,
    /// The peer's hello does not parse.
    #[error("malformed hello")]
    Malformed,
    /// The peer was built with another layout version.
    #[error("peer speaks format version {found}, this build speaks {expected}")]
    Version {
        /// The peer's version.
        found: u32,
        /// Ours.
        expected: u32,
    },
    /// The peer belongs to another cluster.
    #[error(
        "peer is in cluster {found:#x}, expected cluster {expected:#x} \
         (another cluster, or the same name configured to place keys differently)"
    )]
    Cluster {
        /// The peer's cluster id.
        found: u64,
        /// Ours.
        expected: u64,
    },
    /// The peer is another node than the configuration says, or thinks we are.
    #[error("peer says it is node {found}, expected node {expected}")]
    Node {
        /// Node id the peer claims (or believes we are).
        found: u32,
        /// Node id expected.
        expected: u32,
    },
    /// The peer's cluster has another number of nodes.
    #[error("peer's cluster has {found} nodes, ours {expected}")]
    Nodes {
        /// The peer's count.
        found: u32,
        /// Ours.
        expected: u32,
    },
    /// The peer registers a region of another size, or another set of
    /// regions (`None`: the region is missing on that side).
    #[error("peer's {region} has {found:?} bytes, ours {expected:?} (peers disagree on the configuration)")]
    RegionSize {
        /// First region that differs.
        region: RegionId,
        /// Its size at the peer.
        found: Option<u64>,
        /// Its size here.
        expected: Option<u64>,
    },
    /// The peer opened another number of queue-pair lanes (`verbs`: every
    /// node must open as many).
    #[error("peer opened {found} queue-pair lanes, this node {expected}")]
    Lanes {
        /// The peer's lanes.
        found: u32,
        /// Ours.
        expected: u32,
    },
    /// The peer's proof did not verify, or it rejected ours: the cluster
    /// secrets differ.
    #[error("authentication failed: the cluster secrets differ")]
    Authentication,
    /// The peer did not connect to this node before the attach deadline
    /// (`verbs`: every node connects to every other).
    #[error("the peer did not connect within {0:?}")]
    NotConnected(Duration),
    /// The peer refused this node's hello for the reason given (as the peer
    /// saw it).
    #[error("refused by the peer: {0}")]
    Refused(#[source] Box<HandshakeFailure>),
}

/// Why a rendezvous failed (see [`FabricError::Rendezvous`]). Both sides
/// check the same things; a registering node learns the server's reason
/// as [`RendezvousFailure::Refused`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RendezvousFailure {
    /// The connection broke or a read timed out.
    #[error("{0}")]
    Io(#[source] io::Error),
    /// No connection to the server could be opened in time.
    #[error("the server was unreachable for {waited:?}: {source}")]
    Unreachable {
        /// How long the node kept trying.
        waited: Duration,
        /// Why the last attempt failed.
        #[source]
        source: io::Error,
    },
    /// The other side does not speak the rendezvous protocol.
    #[error("the other side is not a nessie rendezvous (bad magic)")]
    BadMagic,
    /// A message does not parse, or announces more bytes than allowed.
    #[error("malformed rendezvous message")]
    Malformed,
    /// A message's key proof did not verify: the cluster secrets differ.
    #[error("authentication failed: the cluster secrets differ")]
    Authentication,
    /// A message's key proof verified but its tag did not: it was altered
    /// on the way.
    #[error("a message was tampered with in transit (its tag does not verify)")]
    Tampered,
    /// A message verified but was made for another connection: someone
    /// recorded and replayed it.
    #[error("a replayed message: made for another connection")]
    Replayed,
    /// The registration's membership does not match the server's: other
    /// format version, cluster, node count, node id or regions.
    #[error("{0}")]
    Membership(#[source] HandshakeFailure),
    /// Another registration claimed this node id first.
    #[error("node {0} is already registered by another claimant")]
    Duplicate(NodeId),
    /// The server gave up waiting for nodes that never registered.
    #[error("node(s) {nodes:?} never registered within {waited:?}")]
    Missing {
        /// The node ids that never registered.
        nodes: Vec<NodeId>,
        /// How long the server waited.
        waited: Duration,
    },
    /// The barrier after the table: these nodes did not report that they
    /// connected (they failed, died or were too slow), so no node may
    /// rely on its connections.
    #[error("node(s) {nodes:?} did not connect to their peers within {waited:?}")]
    NotReady {
        /// The node ids that did not report ready.
        nodes: Vec<NodeId>,
        /// How long the server waited.
        waited: Duration,
    },
    /// This node's blob exceeds the bound of the wire layout.
    #[error("a blob of {len} bytes exceeds the limit of {limit}")]
    TooLarge {
        /// Bytes of the blob.
        len: usize,
        /// Most bytes allowed.
        limit: usize,
    },
    /// The server refused this node's registration for the reason given
    /// (as the server saw it).
    #[error("refused by the server: {0}")]
    Refused(#[source] Box<RendezvousFailure>),
}

/// Why an RDMA verbs call failed (see [`FabricError::Verbs`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerbsFailure {
    /// A libibverbs call returned an error.
    #[error("{0}")]
    Call(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A work request completed with an error status (`ibv_wc_status`).
    #[error("work completion status {status} ({name}), vendor error {vendor_err:#x}")]
    Completion {
        /// The status code.
        status: u32,
        /// Its libibverbs name.
        name: &'static str,
        /// Device-specific detail.
        vendor_err: u32,
    },
    /// Posted work requests did not complete in time.
    #[error("no completion within {0:?}")]
    Timeout(Duration),
    /// An earlier failure left the queue pair to this node in the error
    /// state; verbs to the node fail until the fabric is reopened.
    #[error("the queue pair is unusable after an earlier failure")]
    Broken,
    /// The device lacks something the backend needs.
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
}
