//! A node's card: what its peers need to reach it through their NICs,
//! published through the authenticated rendezvous (never over a channel
//! of its own), so only holders of the cluster secret learn queue-pair
//! numbers and rkeys.
//!
//! Every node opens, for every peer and lane, one *initiator* queue pair
//! (its own verbs to that peer) and one *responder* queue pair (the end of
//! that peer's initiator). Once every card is known, a node connects its
//! initiator `(lane, peer)` to the peer's responder `(lane, node)` and its
//! responder `(lane, peer)` to the peer's initiator `(lane, node)`; the
//! rendezvous's barrier then holds every node until all have connected.
//!
//! Layout, all integers little-endian: `magic[8] = "NESSIEvc"`, `lid: u16`,
//! `global: u8`, `mtu: u8`, `rd_atomic: u8`, `gid[16]`, `lanes: u32`,
//! `nodes: u32`, initiators then responders, each `lanes × nodes ×
//! (qpn: u32, psn: u32)` (lane-major), `regions: u32`, then `regions ×
//! (id: u16, len: u64, addr: u64, rkey: u32)`, `rejoin_len: u16`, then
//! `rejoin_len` bytes: the `host:port` where the node answers a
//! replacement's reconnection (empty when it answers none; see the
//! `rejoin` module).

use super::device::{PortAddress, QpInfo};
use super::RemoteRegion;
use crate::{HandshakeFailure, Membership, NodeId, RegionId};

const MAGIC: [u8; 8] = *b"NESSIEvc";
/// Most queue-pair lanes a node may open.
pub const MAX_LANES: usize = 64;
/// Bytes of one region entry.
const REGION_BYTES: usize = 22;
/// Longest reconnection address a card carries.
pub(super) const MAX_REJOIN_BYTES: usize = 256;

/// What one node publishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Card {
    pub(super) address: PortAddress,
    /// Per lane, per node: this node's initiator towards that node (its
    /// own entry is the loopback queue pair, which no peer uses).
    pub(super) initiators: Vec<Vec<QpInfo>>,
    /// Per lane, per node: this node's responder for that node's initiator
    /// (its own entry is unused).
    pub(super) responders: Vec<Vec<QpInfo>>,
    pub(super) regions: Vec<(RegionId, RemoteRegion)>,
    /// `host:port` where the node answers reconnections (empty: nowhere).
    pub(super) rejoin: Vec<u8>,
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    /// `lanes × nodes` queue-pair infos, refusing counts the rest cannot hold.
    fn qps(&mut self, lanes: usize, nodes: usize) -> Option<Vec<Vec<QpInfo>>> {
        if lanes.checked_mul(nodes)?.checked_mul(8)? > self.0.len() {
            return None;
        }
        (0..lanes)
            .map(|_| {
                (0..nodes)
                    .map(|_| {
                        Some(QpInfo {
                            qpn: self.u32()?,
                            psn: self.u32()?,
                        })
                    })
                    .collect()
            })
            .collect()
    }
}

impl Card {
    /// Lanes the card's node opened.
    pub(super) fn lanes(&self) -> usize {
        self.initiators.len()
    }

    /// The card as the rendezvous blob.
    pub(super) fn encode(&self) -> Vec<u8> {
        let nodes = self.initiators.first().map_or(0, Vec::len);
        let mut out = Vec::with_capacity(64 + 16 * self.lanes() * nodes);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&self.address.lid.to_le_bytes());
        out.push(u8::from(self.address.global));
        out.push(self.address.mtu);
        out.push(self.address.rd_atomic);
        out.extend_from_slice(&self.address.gid);
        out.extend_from_slice(&(self.lanes() as u32).to_le_bytes());
        out.extend_from_slice(&(nodes as u32).to_le_bytes());
        for qp in self.initiators.iter().chain(&self.responders).flatten() {
            out.extend_from_slice(&qp.qpn.to_le_bytes());
            out.extend_from_slice(&qp.psn.to_le_bytes());
        }
        out.extend_from_slice(&(self.regions.len() as u32).to_le_bytes());
        for (id, r) in &self.regions {
            out.extend_from_slice(&id.0.to_le_bytes());
            out.extend_from_slice(&r.len.to_le_bytes());
            out.extend_from_slice(&r.addr.to_le_bytes());
            out.extend_from_slice(&r.rkey.to_le_bytes());
        }
        let rejoin = &self.rejoin[..self.rejoin.len().min(MAX_REJOIN_BYTES)];
        out.extend_from_slice(&(rejoin.len() as u16).to_le_bytes());
        out.extend_from_slice(rejoin);
        out
    }

    /// Parses a blob; `None` if it is not a whole, well-formed card.
    pub(super) fn decode(blob: &[u8]) -> Option<Card> {
        let mut r = Reader(blob);
        if r.take::<8>()? != MAGIC {
            return None;
        }
        let lid = r.u16()?;
        let global = r.u8()? != 0;
        let mtu = r.u8()?;
        let rd_atomic = r.u8()?;
        let gid = r.take::<16>()?;
        let lanes = r.u32()? as usize;
        let nodes = r.u32()? as usize;
        if lanes == 0 || lanes > MAX_LANES {
            return None;
        }
        let initiators = r.qps(lanes, nodes)?;
        let responders = r.qps(lanes, nodes)?;
        let count = r.u32()? as usize;
        if count > r.0.len() / REGION_BYTES {
            return None;
        }
        let regions = (0..count)
            .map(|_| {
                Some((
                    RegionId(r.u16()?),
                    RemoteRegion {
                        len: r.u64()?,
                        addr: r.u64()?,
                        rkey: r.u32()?,
                    },
                ))
            })
            .collect::<Option<Vec<_>>>()?;
        let rejoin_len = usize::from(r.u16()?);
        if rejoin_len > MAX_REJOIN_BYTES || rejoin_len != r.0.len() {
            return None;
        }
        let rejoin = r.0.to_vec();
        Some(Card {
            address: PortAddress {
                lid,
                gid,
                global,
                mtu,
                rd_atomic,
            },
            initiators,
            responders,
            regions,
            rejoin,
        })
    }

    /// Checks a peer's card against this node's membership and lane count:
    /// a queue pair for every (lane, node), and exactly the regions of the
    /// membership with their lengths. (The rendezvous already checked the
    /// peer's membership; this checks that its card agrees with it.)
    pub(super) fn check(&self, me: &Membership, lanes: usize) -> Result<(), HandshakeFailure> {
        if self.lanes() != lanes {
            return Err(HandshakeFailure::Lanes {
                found: self.lanes() as u32,
                expected: lanes as u32,
            });
        }
        for table in [&self.initiators, &self.responders] {
            if let Some(short) = table.iter().find(|lane| lane.len() != me.nodes) {
                return Err(HandshakeFailure::Nodes {
                    found: short.len() as u32,
                    expected: me.nodes as u32,
                });
            }
        }
        let found = |id: RegionId| {
            self.regions
                .iter()
                .find(|(r, _)| *r == id)
                .map(|(_, r)| r.len)
        };
        for spec in &me.regions {
            if found(spec.id) != Some(spec.len) {
                return Err(HandshakeFailure::RegionSize {
                    region: spec.id,
                    found: found(spec.id),
                    expected: Some(spec.len),
                });
            }
        }
        if let Some((extra, r)) = self
            .regions
            .iter()
            .find(|(id, _)| !me.regions.iter().any(|s| s.id == *id))
        {
            return Err(HandshakeFailure::RegionSize {
                region: *extra,
                found: Some(r.len),
                expected: None,
            });
        }
        Ok(())
    }

    /// The initiator of `lane` that `node`'s responder connects to.
    pub(super) fn initiator(&self, lane: usize, node: NodeId) -> QpInfo {
        self.initiators[lane][node]
    }

    /// The responder of `lane` that `node`'s initiator connects to.
    pub(super) fn responder(&self, lane: usize, node: NodeId) -> QpInfo {
        self.responders[lane][node]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RegionSpec;

    fn qps(lanes: usize, nodes: usize, base: u32) -> Vec<Vec<QpInfo>> {
        (0..lanes)
            .map(|l| {
                (0..nodes)
                    .map(|n| QpInfo {
                        qpn: base + (l * nodes + n) as u32,
                        psn: 0x00ab_cdef ^ n as u32,
                    })
                    .collect()
            })
            .collect()
    }

    fn card() -> Card {
        Card {
            address: PortAddress {
                lid: 7,
                gid: [9; 16],
                global: true,
                mtu: 5,
                rd_atomic: 16,
            },
            initiators: qps(2, 3, 100),
            responders: qps(2, 3, 200),
            regions: vec![
                (
                    RegionId(0),
                    RemoteRegion {
                        len: 4096,
                        addr: 0x7f00_0000_0000,
                        rkey: 0x1234,
                    },
                ),
                (
                    RegionId(1),
                    RemoteRegion {
                        len: 65536,
                        addr: 0x7f00_1000_0000,
                        rkey: 0x5678,
                    },
                ),
            ],
            rejoin: b"10.0.0.7:41000".to_vec(),
        }
    }

    fn membership() -> Membership {
        Membership {
            node: 0,
            nodes: 3,
            cluster_id: 0xc1,
            format_version: 1,
            regions: vec![
                RegionSpec {
                    id: RegionId(0),
                    len: 4096,
                },
                RegionSpec {
                    id: RegionId(1),
                    len: 65536,
                },
            ],
        }
    }

    #[test]
    fn a_card_round_trips_and_names_its_queue_pairs() {
        let c = card();
        let back = Card::decode(&c.encode()).unwrap();
        assert_eq!(back, c);
        assert_eq!(
            back.initiator(1, 2),
            QpInfo {
                qpn: 105,
                psn: 0x00ab_cdef ^ 2
            }
        );
        assert_eq!(
            back.responder(0, 1),
            QpInfo {
                qpn: 201,
                psn: 0x00ab_cdef ^ 1
            }
        );
        back.check(&membership(), 2).unwrap();
    }

    #[test]
    fn damaged_cards_do_not_parse() {
        let blob = card().encode();
        for cut in 0..blob.len() {
            assert!(Card::decode(&blob[..cut]).is_none(), "cut at {cut}");
        }
        let mut trailing = blob.clone();
        trailing.push(0);
        assert!(Card::decode(&trailing).is_none());
        let mut magic = blob.clone();
        magic[0] ^= 1;
        assert!(Card::decode(&magic).is_none());
        // Counts that the blob cannot hold are refused before allocating.
        let mut nodes = blob.clone();
        nodes[33..37].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Card::decode(&nodes).is_none());
        let mut lanes = blob;
        lanes[29..33].copy_from_slice(&(MAX_LANES as u32 + 1).to_le_bytes());
        assert!(Card::decode(&lanes).is_none());
    }

    #[test]
    fn cards_that_disagree_with_the_membership_are_named() {
        use HandshakeFailure as F;
        let m = membership();
        assert!(matches!(
            card().check(&m, 4),
            Err(F::Lanes {
                found: 2,
                expected: 4
            })
        ));
        let mut short = card();
        short.responders[1].pop();
        assert!(matches!(
            short.check(&m, 2),
            Err(F::Nodes {
                found: 2,
                expected: 3
            })
        ));
        let mut smaller = card();
        smaller.regions[1].1.len = 8;
        assert!(matches!(
            smaller.check(&m, 2),
            Err(F::RegionSize {
                found: Some(8),
                expected: Some(65536),
                ..
            })
        ));
        let mut missing = card();
        missing.regions.pop();
        assert!(matches!(
            missing.check(&m, 2),
            Err(F::RegionSize { found: None, .. })
        ));
        let mut extra = card();
        extra.regions.push((RegionId(6), extra.regions[0].1));
        assert!(matches!(
            extra.check(&m, 2),
            Err(F::RegionSize { expected: None, .. })
        ));
    }
}
