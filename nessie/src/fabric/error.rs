//! Errors of the fabric layer.

use super::{NodeId, RegionId};
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
    #[error("{path}: region of cluster {found:#x}, expected cluster {expected:#x}")]
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
    /// A peer's region did not appear before the attach deadline.
    #[error("{path}: peer region did not appear within {waited:?}")]
    Missing {
        /// File waited for.
        path: PathBuf,
        /// How long we waited.
        waited: Duration,
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
}
