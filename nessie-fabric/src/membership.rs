//! Who a node is in its cluster, and the one check every backend makes of a
//! peer before any verb reaches it: a `tcp` or `verbs` handshake checks the
//! peer's hello, `shm` checks the header of each region file it maps.

use crate::wire::WORD;
use crate::{FabricError, HandshakeFailure, NodeId, RegionId, RegionSpec};

/// A node's place in its cluster: what it tells its peers and what it
/// requires of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    /// Cluster identity; nodes of other clusters are refused.
    pub cluster_id: u64,
    /// Version of the layouts the nodes keep in their regions (the caller's
    /// and this crate's, see [`crate::wire`]); peers of another version are
    /// refused, since they would read each other's bytes differently.
    pub format_version: u32,
    /// This node.
    pub node: NodeId,
    /// Number of nodes.
    pub nodes: usize,
    /// Regions every node registers: the same ids and sizes on every node.
    pub regions: Vec<RegionSpec>,
}

/// What a peer says of itself: in a handshake hello, or in the header of a
/// region file.
#[derive(Debug)]
pub(crate) struct PeerClaim<'a> {
    pub(crate) format_version: u32,
    pub(crate) cluster_id: u64,
    /// The node the peer says it is.
    pub(crate) from: u64,
    /// The node the peer believes it talks to, and the cluster size it
    /// believes in (handshakes only).
    pub(crate) to_of: Option<(u64, u64)>,
    /// Regions and their sizes in bytes.
    pub(crate) regions: &'a [(RegionId, u64)],
}

/// A region list as the wire carries it (`(id, length)`), as a claim lists
/// it.
pub(crate) fn claimed_regions(wire: &[(u16, u64)]) -> Vec<(RegionId, u64)> {
    wire.iter().map(|&(id, len)| (RegionId(id), len)).collect()
}

/// A node id or count as an error reports it (saturating).
fn narrow(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl Membership {
    /// Checks that the membership is one a backend can open: this node is
    /// one of the cluster's, and every region is a whole number of words.
    ///
    /// # Errors
    /// [`FabricError::UnknownNode`] or [`FabricError::Options`].
    pub fn validate(&self) -> Result<(), FabricError> {
        if self.node >= self.nodes {
            return Err(FabricError::UnknownNode {
                node: self.node,
                nodes: self.nodes,
            });
        }
        if self.regions.iter().any(|r| r.len % WORD as u64 != 0) {
            return Err(FabricError::Options {
                reason: "region lengths must be whole words",
            });
        }
        Ok(())
    }

    /// Checks `claim` against this node's expectations: `peer` is the node
    /// it must come from (`None`: any other node), `regions` the regions it
    /// must list, each with its size, and no others.
    ///
    /// # Errors
    /// The first mismatch, in the order version, cluster, size of cluster,
    /// receiver, sender, regions.
    pub(crate) fn check(
        &self,
        claim: &PeerClaim<'_>,
        peer: Option<NodeId>,
        regions: &[RegionSpec],
    ) -> Result<(), HandshakeFailure> {
        use HandshakeFailure as F;
        if claim.format_version != self.format_version {
            return Err(F::Version {
                found: claim.format_version,
                expected: self.format_version,
            });
        }
        if claim.cluster_id != self.cluster_id {
            return Err(F::Cluster {
                found: claim.cluster_id,
                expected: self.cluster_id,
            });
        }
        if let Some((to, nodes)) = claim.to_of {
            if nodes != self.nodes as u64 {
                return Err(F::Nodes {
                    found: narrow(nodes),
                    expected: narrow(self.nodes as u64),
                });
            }
            if to != self.node as u64 {
                return Err(F::Node {
                    found: narrow(to),
                    expected: narrow(self.node as u64),
                });
            }
        }
        let from_ok = match peer {
            Some(p) => claim.from == p as u64,
            None => claim.from < self.nodes as u64 && claim.from != self.node as u64,
        };
        if !from_ok {
            return Err(F::Node {
                found: narrow(claim.from),
                expected: narrow(peer.unwrap_or(self.node) as u64),
            });
        }
        let size = |id: RegionId| {
            claim
                .regions
                .iter()
                .find(|(r, _)| *r == id)
                .map(|&(_, len)| len)
        };
        if let Some(spec) = regions.iter().find(|s| size(s.id) != Some(s.len)) {
            return Err(F::RegionSize {
                region: spec.id,
                found: size(spec.id),
                expected: Some(spec.len),
            });
        }
        if let Some(&(id, len)) = claim
            .regions
            .iter()
            .find(|(id, _)| !regions.iter().any(|s| s.id == *id))
        {
            return Err(F::RegionSize {
                region: id,
                found: Some(len),
                expected: None,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Membership {
        Membership {
            cluster_id: 7,
            format_version: 3,
            node: 1,
            nodes: 3,
            regions: vec![
                RegionSpec {
                    id: RegionId(0),
                    len: 64,
                },
                RegionSpec {
                    id: RegionId(1),
                    len: 128,
                },
            ],
        }
    }

    const REGIONS: [(RegionId, u64); 2] = [(RegionId(0), 64), (RegionId(1), 128)];

    fn claim(regions: &[(RegionId, u64)]) -> PeerClaim<'_> {
        PeerClaim {
            format_version: 3,
            cluster_id: 7,
            from: 2,
            to_of: Some((1, 3)),
            regions,
        }
    }

    fn check(c: &PeerClaim<'_>, peer: Option<NodeId>) -> Result<(), HandshakeFailure> {
        let me = me();
        me.check(c, peer, &me.regions)
    }

    #[test]
    fn a_matching_peer_passes() {
        check(&claim(&REGIONS), Some(2)).unwrap();
        check(&claim(&REGIONS), None).unwrap();
    }

    #[test]
    fn each_mismatch_is_named() {
        let base = || claim(&REGIONS);
        let cases = [
            (
                PeerClaim {
                    format_version: 4,
                    ..base()
                },
                None,
                "Version { found: 4, expected: 3 }",
            ),
            (
                PeerClaim {
                    cluster_id: 8,
                    ..base()
                },
                None,
                "Cluster { found: 8, expected: 7 }",
            ),
            (
                PeerClaim {
                    to_of: Some((1, 4)),
                    ..base()
                },
                None,
                "Nodes { found: 4, expected: 3 }",
            ),
            (
                PeerClaim {
                    to_of: Some((0, 3)),
                    ..base()
                },
                None,
                "Node { found: 0, expected: 1 }",
            ),
            (base(), Some(0), "Node { found: 2, expected: 0 }"),
            (
                PeerClaim { from: 1, ..base() },
                None,
                "Node { found: 1, expected: 1 }",
            ),
            (
                PeerClaim { from: 3, ..base() },
                None,
                "Node { found: 3, expected: 1 }",
            ),
        ];
        for (c, peer, want) in cases {
            let got = format!("{:?}", check(&c, peer).unwrap_err());
            assert_eq!(got, want, "{c:?}");
        }
    }

    #[test]
    fn regions_must_match_in_ids_and_sizes() {
        use HandshakeFailure as F;
        let short = [(RegionId(0), 64), (RegionId(1), 120)];
        assert!(matches!(
            check(&claim(&short), None),
            Err(F::RegionSize {
                region: RegionId(1),
                found: Some(120),
                expected: Some(128)
            })
        ));
        let missing = [(RegionId(0), 64)];
        assert!(matches!(
            check(&claim(&missing), None),
            Err(F::RegionSize {
                region: RegionId(1),
                found: None,
                ..
            })
        ));
        let extra = [(RegionId(0), 64), (RegionId(1), 128), (RegionId(9), 8)];
        assert!(matches!(
            check(&claim(&extra), None),
            Err(F::RegionSize {
                region: RegionId(9),
                found: Some(8),
                expected: None
            })
        ));
        // The same regions in another order are the same regions.
        let swapped = [(RegionId(1), 128), (RegionId(0), 64)];
        check(&claim(&swapped), None).unwrap();
    }
}
