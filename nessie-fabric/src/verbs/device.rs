//! The RDMA device of one node: opening it, choosing the port address,
//! registering memory and building reliable-connected (RC) queue pairs.
//!
//! Everything here runs once, while the fabric opens. Only port 1 of the
//! device is used.
#![expect(unsafe_code, reason = "registering memory with the RDMA device")]

use super::{call, RemoteRegion};
use crate::{FabricError, NodeId, RcTimeouts, VerbsFailure};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid, GidEntry, GidType};
use sideway::ibverbs::completion::ExtendedCompletionQueue;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, Mtu};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    ExtendedQueuePair, QueuePair, QueuePairAttribute, QueuePairState, SendOperationFlags,
};
use sideway::ibverbs::AccessFlags;
use std::net::Ipv6Addr;
use std::sync::Arc;

/// The port every queue pair uses.
const PORT: u8 = 1;
/// Work requests one initiating queue pair holds at once (a batch posts at
/// most this many per peer before it waits).
pub(super) const SEND_DEPTH: u32 = 32;
/// Outstanding READs and atomics per queue pair, at most.
const MAX_RD_ATOMIC: u8 = 16;
/// `libibverbs` values of `ibv_port_attr::link_layer`.
const LINK_LAYER_INFINIBAND: u8 = 1;

/// Access a peer gets to our regions and our queue pairs to memory.
fn remote_access() -> AccessFlags {
    AccessFlags::LocalWrite
        | AccessFlags::RemoteRead
        | AccessFlags::RemoteWrite
        | AccessFlags::RemoteAtomic
}

/// How peers address this node's port: what goes into the address vector of
/// their queue pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PortAddress {
    /// Local identifier (InfiniBand; 0 on RoCE).
    pub(super) lid: u16,
    /// Global identifier (RoCE: the IP address).
    pub(super) gid: [u8; 16],
    /// Whether packets need a global route header (always on RoCE).
    pub(super) global: bool,
    /// Path MTU code of the port (`ibv_mtu`, 1 = 256 B … 5 = 4096 B).
    pub(super) mtu: u8,
    /// READs and atomics this port accepts and issues per queue pair.
    pub(super) rd_atomic: u8,
}

/// What a peer needs to connect to one queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct QpInfo {
    /// Queue pair number.
    pub(super) qpn: u32,
    /// First packet sequence number it sends.
    pub(super) psn: u32,
}

/// An open device with its protection domain.
pub(super) struct Device {
    pub(super) name: String,
    pub(super) node: NodeId,
    /// ACK timeout and retries of every queue pair (within the landing
    /// bound: see [`RcTimeouts`]).
    retransmission: RcTimeouts,
    gid_index: u32,
    pub(super) address: PortAddress,
    pub(super) max_cqe: u32,
    pd: Arc<ProtectionDomain>,
    ctx: Arc<DeviceContext>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name)
            .field("gid_index", &self.gid_index)
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

fn mtu_code(mtu: Mtu) -> u8 {
    match mtu {
        Mtu::Mtu256 => 1,
        Mtu::Mtu512 => 2,
        Mtu::Mtu1024 => 3,
        Mtu::Mtu2048 => 4,
        Mtu::Mtu4096 => 5,
    }
}

fn mtu_from_code(code: u8) -> Mtu {
    match code {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        4 => Mtu::Mtu2048,
        5 => Mtu::Mtu4096,
        _ => Mtu::Mtu1024,
    }
}

/// Picks the GID a RoCE port is reached by when the configuration names
/// none: a RoCE v2 entry holding an IPv4 address first (routable, and what
/// Soft-RoCE on `lo` offers), then any RoCE v2 entry that is not link-local,
/// then any non-zero entry.
fn pick_gid(ctx: &DeviceContext, node: NodeId) -> Result<(u32, Gid), FabricError> {
    let table = ctx
        .query_gid_table()
        .map_err(call(node, "query GID table"))?;
    let port: Vec<&GidEntry> = table
        .iter()
        .filter(|e| e.port_num() == u32::from(PORT) && !e.gid().is_zero())
        .collect();
    let roce2 = |e: &GidEntry| e.gid_type() == GidType::RoceV2;
    let ipv4 = |e: &GidEntry| Ipv6Addr::from(e.gid()).to_ipv4_mapped().is_some();
    let chosen = port
        .iter()
        .copied()
        .find(|e| roce2(e) && ipv4(e))
        .or_else(|| {
            port.iter()
                .copied()
                .find(|e| roce2(e) && !e.gid().is_unicast_link_local())
        })
        .or_else(|| port.first().copied())
        .ok_or(FabricError::Verbs {
            node,
            op: "choose a GID",
            reason: VerbsFailure::Unsupported("port 1 has no GID"),
        })?;
    Ok((chosen.gid_index(), chosen.gid()))
}

impl Device {
    /// Opens `wanted` (or the first device) and prepares port 1.
    pub(super) fn open(
        wanted: Option<&str>,
        gid_index: Option<u32>,
        node: NodeId,
        retransmission: RcTimeouts,
    ) -> Result<Device, FabricError> {
        let no_device = |found: Vec<String>| FabricError::NoDevice {
            wanted: wanted.map(str::to_owned),
            found,
        };
        let list = DeviceList::new().map_err(|_| no_device(Vec::new()))?;
        let names: Vec<String> = list.iter().map(|d| d.name()).collect();
        let device = list
            .iter()
            .find(|d| wanted.is_none_or(|w| d.name() == w))
            .ok_or_else(|| no_device(names.clone()))?;
        let name = device.name();
        let ctx = device.open().map_err(call(node, "open the device"))?;
        let attr = ctx.query_device().map_err(call(node, "query the device"))?;
        let orig = &attr.attr.orig_attr;
        if orig.atomic_cap == 0 {
            return Err(FabricError::Verbs {
                node,
                op: "open the device",
                reason: VerbsFailure::Unsupported("the device has no atomic operations"),
            });
        }
        let rd_atomic = orig
            .max_qp_rd_atom
            .min(orig.max_qp_init_rd_atom)
            .clamp(1, i32::from(MAX_RD_ATOMIC)) as u8;
        let max_cqe = u32::try_from(orig.max_cqe).unwrap_or(0).max(1);
        let port = ctx.query_port(PORT).map_err(call(node, "query port 1"))?;
        let infiniband = port.attr.link_layer == LINK_LAYER_INFINIBAND;
        let (gid_index, gid) = match gid_index {
            Some(i) => {
                let entry = ctx
                    .query_gid_ex(PORT, i)
                    .map_err(call(node, "query the configured GID"))?;
                (i, entry.gid())
            }
            None if infiniband => (0, Gid::default()),
            None => pick_gid(&ctx, node)?,
        };
        let mtu = match port.attr.active_mtu {
            code @ 1..=5 => code as u8,
            _ => mtu_code(Mtu::Mtu1024),
        };
        let pd = ctx
            .alloc_pd()
            .map_err(call(node, "allocate a protection domain"))?;
        Ok(Device {
            name,
            node,
            retransmission,
            gid_index,
            address: PortAddress {
                lid: port.attr.lid,
                gid: gid.raw,
                global: !infiniband || gid_index != 0 || !gid.is_zero(),
                mtu,
                rd_atomic,
            },
            max_cqe,
            pd,
            ctx,
        })
    }

    /// Registers `len` bytes at `addr` for local writes and remote READ,
    /// WRITE and atomics.
    ///
    /// # Safety
    /// `addr..addr + len` must stay valid, mapped memory for as long as the
    /// returned region (and any queue pair that may still access it) lives.
    pub(super) unsafe fn register(
        &self,
        addr: *mut u8,
        len: usize,
        op: &'static str,
    ) -> Result<Arc<MemoryRegion>, FabricError> {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.pd.reg_mr(addr as usize, len, remote_access()) }.map_err(call(self.node, op))
    }

    /// The address and key a peer uses for `mr`, which covers `len` bytes.
    pub(super) fn remote(mr: &MemoryRegion, len: u64) -> RemoteRegion {
        RemoteRegion {
            len,
            addr: mr.get_ptr() as u64,
            rkey: mr.rkey(),
        }
    }

    /// A completion queue of `depth` entries (capped by the device).
    pub(super) fn cq(&self, depth: u32) -> Result<Arc<ExtendedCompletionQueue>, FabricError> {
        let mut builder = self.ctx.create_cq_builder();
        builder.setup_cqe(depth.clamp(1, self.max_cqe));
        builder
            .build_ex()
            .map_err(call(self.node, "create a completion queue"))
    }

    /// A fresh RC queue pair whose work completions go to `cq`; `depth`
    /// work requests fit in its send queue.
    pub(super) fn qp(
        &self,
        cq: &Arc<ExtendedCompletionQueue>,
        depth: u32,
    ) -> Result<(ExtendedQueuePair, QpInfo), FabricError> {
        let mut builder = self.pd.create_qp_builder();
        builder
            .setup_max_send_wr(depth)
            .setup_max_recv_wr(1)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .setup_max_inline_data(0)
            // The defaults lack atomics, and setting flags replaces them.
            .setup_send_ops_flags(
                SendOperationFlags::Write
                    | SendOperationFlags::Read
                    | SendOperationFlags::AtomicCompareAndSwap,
            )
            .setup_send_cq(Arc::clone(cq))
            .setup_recv_cq(Arc::clone(cq));
        let qp = builder
            .build_ex()
            .map_err(call(self.node, "create a queue pair"))?;
        let info = QpInfo {
            qpn: qp.qp_number(),
            psn: rand::random::<u32>() & 0x00ff_ffff,
        };
        Ok((qp, info))
    }

    /// Moves `qp` (whose own sequence number is `local.psn`) through INIT,
    /// RTR and RTS, connected to the queue pair `remote` at `peer`'s port.
    pub(super) fn connect(
        &self,
        qp: &mut ExtendedQueuePair,
        local: QpInfo,
        remote: QpInfo,
        peer: &PortAddress,
        peer_node: NodeId,
    ) -> Result<(), FabricError> {
        let step = |op| call(peer_node, op);
        let rd_atomic = self.address.rd_atomic.min(peer.rd_atomic).max(1);
        let mut init = QueuePairAttribute::new();
        init.setup_state(QueuePairState::Init)
            .setup_pkey_index(0)
            .setup_port(PORT)
            .setup_access_flags(remote_access());
        qp.modify(&init)
            .map_err(step("move a queue pair to INIT"))?;

        let mut av = AddressHandleAttribute::new();
        av.setup_port(PORT)
            .setup_dest_lid(peer.lid)
            .setup_service_level(0);
        if peer.global || self.address.global {
            let gid_index = u8::try_from(self.gid_index).map_err(|_| FabricError::Verbs {
                node: self.node,
                op: "choose a GID",
                reason: VerbsFailure::Unsupported("GID index above 255"),
            })?;
            av.setup_grh(&Gid { raw: peer.gid }, 0, gid_index, 64, 0);
        }
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(mtu_from_code(self.address.mtu.min(peer.mtu)))
            .setup_dest_qp_num(remote.qpn)
            .setup_rq_psn(remote.psn)
            .setup_max_dest_read_atomic(rd_atomic)
            .setup_min_rnr_timer(12)
            .setup_address_vector(&av);
        qp.modify(&rtr).map_err(step("move a queue pair to RTR"))?;

        let mut rts = QueuePairAttribute::new();
        rts.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(local.psn)
            .setup_timeout(self.retransmission.ack_timeout)
            .setup_retry_cnt(self.retransmission.retry_count)
            .setup_rnr_retry(7)
            .setup_max_read_atomic(rd_atomic);
        qp.modify(&rts).map_err(step("move a queue pair to RTS"))?;
        Ok(())
    }

    /// Moves `qp` to the error state, so that the device flushes its
    /// outstanding work requests with error completions.
    pub(super) fn fail(qp: &mut ExtendedQueuePair) -> bool {
        let mut err = QueuePairAttribute::new();
        err.setup_state(QueuePairState::Error);
        qp.modify(&err).is_ok()
    }
}
