//! Opening a fabric: this node's regions registered, its lanes opened,
//! and the peers' cards read from the rendezvous's table.
#![expect(unsafe_code, reason = "registering memory with the RDMA device")]

use super::card::Card;
use super::device::{Device, QpInfo};
use super::lane::{Lane, CHUNK};
use super::{call, RemoteRegion, MAX_LANES};
use crate::rendezvous::RendezvousOptions;
use crate::wire::WORD;
use crate::{FabricError, HandshakeFailure, Membership, NodeId, RegionId};
use memmap2::{MmapMut, MmapRaw};
use sideway::ibverbs::completion::ExtendedCompletionQueue;
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::queue_pair::ExtendedQueuePair;
use std::sync::{Arc, Mutex};

/// A registered region of this node.
pub(super) struct OwnRegion {
    // Field order is drop order: deregister before unmapping.
    _mr: Arc<MemoryRegion>,
    _map: MmapRaw,
}

/// Where each of a node's regions lives for the NIC, by id.
pub(super) type RegionTable = Vec<(RegionId, RemoteRegion)>;

/// Allocates and registers this node's regions with the NIC.
pub(super) fn register_regions(
    device: &Device,
    membership: &Membership,
) -> Result<(Vec<OwnRegion>, RegionTable), FabricError> {
    let me = membership.node;
    let mut own = Vec::new();
    let mut own_table = Vec::new();
    for spec in &membership.regions {
        let bytes = usize::try_from(spec.len)
            .ok()
            .filter(|&b| isize::try_from(b).is_ok())
            .ok_or(FabricError::OutOfBounds {
                node: me,
                region: spec.id,
                offset: 0,
                len: spec.len,
                region_len: isize::MAX as u64,
            })?
            .max(WORD);
        let map: MmapRaw = MmapMut::map_anon(bytes)
            .map_err(call(me, "allocate a region"))?
            .into();
        // SAFETY: `map` is a live anonymous mapping of `bytes` bytes
        // that the fabric owns (in `own`) and unmaps only after the
        // registration is dropped and every queue pair that could reach
        // it is destroyed (`VerbsFabric`'s field order).
        let mr = unsafe { device.register(map.as_mut_ptr(), bytes, "register a region") }?;
        own_table.push((spec.id, Device::remote(&mr, spec.len)));
        own.push(OwnRegion { _mr: mr, _map: map });
    }
    Ok((own, own_table))
}

/// A node's lanes before its peers are connected.
pub(super) struct OpenLanes {
    pub(super) lanes: Vec<Mutex<Lane>>,
    /// Each lane's queue pair info, one per node.
    pub(super) infos: Vec<Vec<QpInfo>>,
    /// The loopback responders (and later the peers' responders), each
    /// with the node whose requests it serves.
    pub(super) responders: Vec<(NodeId, ExtendedQueuePair)>,
    pub(super) idle_cq: Arc<ExtendedCompletionQueue>,
}

/// Opens `lanes` lanes (clamped to `1..=`[`MAX_LANES`]), each with one
/// queue pair per node, and connects each lane's own queue pair to a
/// loopback responder.
pub(super) fn open_lanes(
    device: &Device,
    me: NodeId,
    nodes: usize,
    lanes: usize,
) -> Result<OpenLanes, FabricError> {
    let lanes = lanes.clamp(1, MAX_LANES);
    let idle_cq = device.cq(1)?;
    let mut lane_list = Vec::with_capacity(lanes);
    let mut infos: Vec<Vec<QpInfo>> = Vec::with_capacity(lanes);
    let mut responders = Vec::new();
    for _ in 0..lanes {
        let cq = device.cq(4 * CHUNK as u32)?;
        let mut qps = Vec::with_capacity(nodes);
        let mut lane_infos = Vec::with_capacity(nodes);
        for _ in 0..nodes {
            let (qp, info) = device.qp(&cq, CHUNK as u32)?;
            qps.push(qp);
            lane_infos.push(info);
        }
        let (mut responder, back) = device.qp(&idle_cq, 1)?;
        device.connect(&mut qps[me], lane_infos[me], back, &device.address, me)?;
        device.connect(&mut responder, back, lane_infos[me], &device.address, me)?;
        responders.push((me, responder));
        lane_list.push(Mutex::new(Lane::new(cq, qps)));
        infos.push(lane_infos);
    }
    Ok(OpenLanes {
        lanes: lane_list,
        infos,
        responders,
        idle_cq,
    })
}

/// Every peer's card from the rendezvous's table, checked against this
/// node's membership and lane count (`None` at this node's own index).
pub(super) fn peer_cards(
    blobs: &[Vec<u8>],
    rv: &RendezvousOptions,
    lanes: usize,
) -> Result<Vec<Option<Card>>, FabricError> {
    let me = &rv.membership;
    blobs
        .iter()
        .enumerate()
        .map(|(peer, blob)| {
            if peer == me.node {
                return Ok(None);
            }
            let fail = |reason| FabricError::Handshake {
                node: peer,
                addr: rv.address.clone(),
                reason,
            };
            let card = Card::decode(blob).ok_or_else(|| fail(HandshakeFailure::Malformed))?;
            card.check(me, lanes).map_err(fail)?;
            Ok(Some(card))
        })
        .collect()
}

pub(super) fn region_table(regions: &[(RegionId, RemoteRegion)]) -> Vec<Option<RemoteRegion>> {
    let len = regions
        .iter()
        .map(|(id, _)| usize::from(id.0) + 1)
        .max()
        .unwrap_or(0);
    let mut table = vec![None; len];
    for (id, r) in regions {
        table[usize::from(id.0)] = Some(*r);
    }
    table
}
