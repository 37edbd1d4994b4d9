//! A lane: one completion queue, one initiating RC queue pair to every node
//! (a loopback one to this node) and a registered staging buffer. A verb or
//! batch runs on one lane, holding it for the whole round trip.
//!
//! A batch is posted with one doorbell per target node (`ibv_wr_start`,
//! one `ibv_wr_*` per verb, one `ibv_wr_complete`), every work request
//! signaled, and then the lane's completion queue is polled until every
//! posted request completed. Polling takes **one completion per
//! `ibv_start_poll` and ends the poll right away**: the rxe provider of
//! rdma-core before v55 moves its consumer index twice when a poll is
//! drained to empty (`ibv_next_poll` until `ENOENT`), after which the queue
//! returns stale entries.
//!
//! Callers' buffers are not registered memory, so data moves through the
//! staging buffer: WRITE data is copied in before posting, READ data and CAS
//! results are copied out after the completions. The staging buffer grows
//! (re-registered) when a batch needs more room.
#![expect(unsafe_code, reason = "posting work requests on registered buffers")]

use super::device::{Device, SEND_DEPTH};
use super::{call, Target};
use crate::{FabricError, NodeId, Verb, VerbsFailure};
use memmap2::{MmapMut, MmapRaw};
use sideway::ibverbs::completion::{
    ExtendedCompletionQueue, PollCompletionQueueError, WorkCompletionStatus,
};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::queue_pair::{
    ExtendedQueuePair, PostSendGuard, QueuePair, SetScatterGatherEntry, WorkRequestFlags,
};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long posted work requests may take before the lane gives up on them
/// (well past the NIC's own retry budget: see `RcTimeouts`).
const COMPLETION_TIMEOUT: Duration = Duration::from_secs(10);
/// How long flushed work requests may take to report after a timeout.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Smallest staging buffer.
const MIN_STAGING: usize = 64 * 1024;
/// Polls of an empty completion queue before the poller starts yielding
/// the CPU between polls.
const SPIN_POLLS: u32 = 256;

/// Verbs one batch chunk carries at most (every queue pair and the
/// completion queue have room for a whole chunk).
pub(super) const CHUNK: usize = SEND_DEPTH as usize;

/// Registered memory the device reads WRITE data from and writes READ data
/// and CAS results into.
struct Staging {
    // Field order is drop order: deregister before unmapping.
    mr: Arc<MemoryRegion>,
    map: MmapRaw,
    len: usize,
}

impl Staging {
    fn new(device: &Device, len: usize) -> Result<Staging, FabricError> {
        let len = len.max(MIN_STAGING).next_power_of_two();
        let map: MmapRaw = MmapMut::map_anon(len)
            .map_err(call(device.node, "allocate a staging buffer"))?
            .into();
        // SAFETY: `map` is a live anonymous mapping of `len` bytes owned by
        // the returned `Staging`, which drops the registration before the
        // mapping; the lane keeps a staging buffer that a work request may
        // still reach until its queue pairs are destroyed (`Lane::retired`).
        let mr = unsafe { device.register(map.as_mut_ptr(), len, "register a staging buffer") }?;
        Ok(Staging { mr, map, len })
    }

    fn base(&self) -> u64 {
        self.map.as_mut_ptr() as u64
    }

    /// Copies `data` to byte `off`.
    fn put(&mut self, off: usize, data: &[u8]) {
        assert!(
            off + data.len() <= self.len,
            "staging layout checked by `run`"
        );
        // SAFETY: `off + len <= self.len` (asserted), so the destination is
        // inside the mapping; no work request is in flight on this lane (the
        // caller holds it and every earlier request completed), so the
        // device does not touch these bytes now; `data` is a distinct
        // Rust slice.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.map.as_mut_ptr().add(off),
                data.len(),
            );
        }
    }

    /// Copies bytes from `off` into `out`.
    fn get(&self, off: usize, out: &mut [u8]) {
        assert!(
            off + out.len() <= self.len,
            "staging layout checked by `run`"
        );
        // SAFETY: in bounds as asserted; the requests that wrote these bytes
        // have completed (their completions were polled, then an acquire
        // fence), and none is in flight, so nothing writes them concurrently.
        unsafe {
            std::ptr::copy_nonoverlapping(self.map.as_ptr().add(off), out.as_mut_ptr(), out.len());
        }
    }
}

/// One lane of a fabric.
pub(super) struct Lane {
    // Field order is drop order: queue pairs go before the memory their
    // work requests reference.
    qps: Vec<(ExtendedQueuePair, bool)>,
    /// Queue pairs a reconnection replaced, in the error state for good.
    replaced: Vec<ExtendedQueuePair>,
    cq: Arc<ExtendedCompletionQueue>,
    staging: Option<Staging>,
    /// Staging buffers that requests which never completed may still
    /// write; freed only after the queue pairs are destroyed.
    retired: Vec<Staging>,
    seq: u64,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("qps", &self.qps.len())
            .field(
                "broken",
                &self.qps.iter().filter(|(_, broken)| *broken).count(),
            )
            .finish_non_exhaustive()
    }
}

fn op_name(verb: &Verb<'_>) -> &'static str {
    match verb {
        Verb::Read { .. } | Verb::ReadScatter { .. } => "READ",
        Verb::Write { .. } => "WRITE",
        Verb::Cas { .. } => "CAS",
    }
}

/// The libibverbs name of a completion status.
fn status_name(status: u32) -> &'static str {
    use WorkCompletionStatus as S;
    let known = [
        (S::LocalLengthError, "IBV_WC_LOC_LEN_ERR"),
        (S::LocalQueuePairOperationError, "IBV_WC_LOC_QP_OP_ERR"),
        (S::LocalProtectionError, "IBV_WC_LOC_PROT_ERR"),
        (S::WorkRequestFlushedError, "IBV_WC_WR_FLUSH_ERR"),
        (S::BadResponseError, "IBV_WC_BAD_RESP_ERR"),
        (S::LocalAccessError, "IBV_WC_LOC_ACCESS_ERR"),
        (S::RemoteInvalidRequestError, "IBV_WC_REM_INV_REQ_ERR"),
        (S::RemoteAccessError, "IBV_WC_REM_ACCESS_ERR"),
        (S::RemoteOperationError, "IBV_WC_REM_OP_ERR"),
        (S::RetryCounterExceededError, "IBV_WC_RETRY_EXC_ERR"),
        (
            S::ResponderNotReadyRetryCounterExceededError,
            "IBV_WC_RNR_RETRY_EXC_ERR",
        ),
        (S::RemoteAbortedError, "IBV_WC_REM_ABORT_ERR"),
        (S::FatalError, "IBV_WC_FATAL_ERR"),
        (S::ResponseTimeoutError, "IBV_WC_RESP_TIMEOUT_ERR"),
        (S::GeneralError, "IBV_WC_GENERAL_ERR"),
    ];
    known
        .iter()
        .find(|(s, _)| *s as u32 == status)
        .map_or("unknown status", |(_, name)| name)
}

impl Lane {
    /// A lane whose queue pairs (one per node, in node order) report to `cq`.
    pub(super) fn new(cq: Arc<ExtendedCompletionQueue>, qps: Vec<ExtendedQueuePair>) -> Lane {
        Lane {
            qps: qps.into_iter().map(|qp| (qp, false)).collect(),
            replaced: Vec::new(),
            cq,
            staging: None,
            retired: Vec::new(),
            seq: 0,
        }
    }

    /// The lane's queue pair to `node`.
    pub(super) fn qp_mut(&mut self, node: NodeId) -> &mut ExtendedQueuePair {
        &mut self.qps[node].0
    }

    /// Fences the queue pair to `node`: marks it broken, so that no verb
    /// is posted on it again, and moves it to the error state. Call with
    /// nothing in flight (the caller holds the lane). Returns whether the
    /// device accepted the state change.
    pub(super) fn fence(&mut self, node: NodeId) -> bool {
        let (qp, broken) = &mut self.qps[node];
        *broken = true;
        Device::fail(qp)
    }

    /// The completion queue of the lane's queue pairs.
    pub(super) fn cq(&self) -> &Arc<ExtendedCompletionQueue> {
        &self.cq
    }

    /// Replaces the queue pair to `node` with `qp`, connected to the
    /// node's replacement: the old one is moved to the error state (it
    /// may still be connected to a zombie of the node) and kept until the
    /// lane is dropped. Call with nothing in flight (the caller holds the
    /// lane); late completions of the old one are told apart by their
    /// sequence numbers.
    pub(super) fn replace(&mut self, node: NodeId, qp: ExtendedQueuePair) {
        let (mut old, _) = std::mem::replace(&mut self.qps[node], (qp, false));
        Device::fail(&mut old);
        self.replaced.push(old);
    }

    fn staging(&mut self, device: &Device, bytes: usize) -> Result<&mut Staging, FabricError> {
        if self.staging.as_ref().is_none_or(|s| s.len < bytes) {
            let fresh = Staging::new(device, bytes)?;
            // Every request that used the old buffer has completed.
            self.staging = Some(fresh);
        }
        Ok(self.staging.as_mut().expect("set above"))
    }

    /// Executes up to [`CHUNK`] checked verbs; `targets[i]` is where
    /// `chunk[i]` goes. Results are written back into the verbs.
    pub(super) fn run(
        &mut self,
        device: &Device,
        chunk: &mut [Verb<'_>],
        targets: &[Target],
    ) -> Result<(), FabricError> {
        debug_assert!(chunk.len() <= CHUNK && chunk.len() == targets.len());
        let mut offsets = Vec::with_capacity(chunk.len());
        let mut total = 0usize;
        for verb in chunk.iter() {
            offsets.push(total);
            total += verb.bytes_moved();
        }
        let staging = self.staging(device, total)?;
        for (verb, &off) in chunk.iter().zip(&offsets) {
            if let Verb::Write { data, .. } = verb {
                staging.put(off, data);
            }
        }
        let (base, lkey) = (staging.base(), staging.mr.lkey());
        // The device reads the staged WRITE data only after this point.
        fence(Ordering::Release);
        self.seq += 1;
        let seq = self.seq;

        // Zero-length verbs move nothing; they are done already.
        let mut order: Vec<usize> = (0..chunk.len())
            .filter(|&i| chunk[i].bytes_moved() > 0)
            .collect();
        order.sort_by_key(|&i| targets[i].node);
        let mut pending = vec![false; chunk.len()];
        let mut error: Option<FabricError> = None;
        for group in order.chunk_by(|&a, &b| targets[a].node == targets[b].node) {
            let node = targets[group[0]].node;
            let op = op_name(&chunk[group[0]]);
            let (qp, broken) = &mut self.qps[node];
            if *broken {
                error.get_or_insert(FabricError::Verbs {
                    node,
                    op,
                    reason: VerbsFailure::Broken,
                });
                continue;
            }
            let mut guard = qp.start_post_send();
            for &i in group {
                let t = targets[i];
                let wr = guard.construct_wr(seq << 16 | i as u64, WorkRequestFlags::Signaled);
                let local = base + offsets[i] as u64;
                let len = chunk[i].bytes_moved() as u32;
                let sge = match &chunk[i] {
                    Verb::Read { .. } | Verb::ReadScatter { .. } => wr.setup_read(t.rkey, t.addr),
                    Verb::Write { .. } => wr.setup_write(t.rkey, t.addr),
                    Verb::Cas { expected, new, .. } => {
                        // Layout words are little-endian in memory; the
                        // device compares and swaps host-order values.
                        wr.setup_atomic_compare_swap(t.rkey, t.addr, expected.to_le(), new.to_le())
                    }
                };
                // SAFETY: `local..local + len` lies in the registered staging
                // buffer (`offsets` were laid out within `total`, which the
                // buffer holds), and it stays allocated and registered until
                // the request completes: this call waits for every completion
                // before returning, or retires the buffer for good.
                unsafe { sge.setup_sge(lkey, local, len) };
            }
            match guard.post() {
                Ok(()) => group.iter().for_each(|&i| pending[i] = true),
                Err(e) => {
                    error.get_or_insert(FabricError::Verbs {
                        node,
                        op,
                        reason: VerbsFailure::Call(Box::new(e)),
                    });
                }
            }
        }

        if let Err(e) = self.wait(seq, chunk, targets, &mut pending) {
            error.get_or_insert(e);
        }
        if let Some(e) = error {
            return Err(e);
        }
        // Everything the device wrote before its completions is visible.
        fence(Ordering::Acquire);
        let staging = self.staging.as_ref().expect("used above");
        for (verb, &off) in chunk.iter_mut().zip(&offsets) {
            match verb {
                Verb::Read { buf, .. } => staging.get(off, buf),
                Verb::ReadScatter { head, tail, .. } => {
                    staging.get(off, head);
                    staging.get(off + head.len(), tail);
                }
                Verb::Cas { old, .. } => {
                    let mut word = [0u8; 8];
                    staging.get(off, &mut word);
                    *old = u64::from_le_bytes(word);
                }
                Verb::Write { .. } => {}
            }
        }
        Ok(())
    }

    /// Polls until no request of `pending` is outstanding. On a timeout the
    /// queue pairs with outstanding requests are moved to the error state
    /// (which flushes them); if even that does not complete them, the
    /// staging buffer is retired.
    fn wait(
        &mut self,
        seq: u64,
        chunk: &[Verb<'_>],
        targets: &[Target],
        pending: &mut [bool],
    ) -> Result<(), FabricError> {
        let mut error = None;
        let deadline = Instant::now() + COMPLETION_TIMEOUT;
        if self.poll(seq, chunk, targets, pending, deadline, &mut error)? {
            return error.map_or(Ok(()), Err);
        }
        // Timed out: flush what is left, then wait for the flushes.
        let mut stuck = None;
        for i in (0..pending.len()).filter(|&i| pending[i]) {
            let node = targets[i].node;
            stuck.get_or_insert((node, op_name(&chunk[i])));
            let (qp, broken) = &mut self.qps[node];
            if !*broken {
                *broken = true;
                Device::fail(qp);
            }
        }
        let drained = self.poll(
            seq,
            chunk,
            targets,
            pending,
            Instant::now() + DRAIN_TIMEOUT,
            &mut error,
        )?;
        if !drained {
            // Requests may still write the buffer: never reuse it.
            if let Some(s) = self.staging.take() {
                self.retired.push(s);
            }
        }
        let (node, op) = stuck.unwrap_or((0, "poll"));
        Err(FabricError::Verbs {
            node,
            op,
            reason: VerbsFailure::Timeout(COMPLETION_TIMEOUT),
        })
    }

    /// Takes completions until none of `pending` is outstanding (`true`) or
    /// `deadline` passes (`false`). A failed completion marks its queue
    /// pair broken and lands in `error` (the first one).
    fn poll(
        &mut self,
        seq: u64,
        chunk: &[Verb<'_>],
        targets: &[Target],
        pending: &mut [bool],
        deadline: Instant,
        error: &mut Option<FabricError>,
    ) -> Result<bool, FabricError> {
        let mut outstanding = pending.iter().filter(|&&p| p).count();
        let mut idle = 0u32;
        while outstanding > 0 {
            // One completion per poll, then end the poll (see the module
            // documentation).
            let taken = match self.cq.start_poll() {
                Ok(mut poller) => poller
                    .next()
                    .map(|wc| (wc.wr_id(), wc.status(), wc.vendor_err())),
                Err(PollCompletionQueueError::CompletionQueueEmpty) => None,
                Err(e) => {
                    return Err(FabricError::Verbs {
                        node: targets.first().map_or(0, |t| t.node),
                        op: "poll completions",
                        reason: VerbsFailure::Call(Box::new(e)),
                    })
                }
            };
            let Some((wr_id, status, vendor_err)) = taken else {
                idle += 1;
                if idle > SPIN_POLLS {
                    if Instant::now() >= deadline {
                        return Ok(false);
                    }
                    std::thread::yield_now();
                }
                continue;
            };
            idle = 0;
            let i = (wr_id & 0xffff) as usize;
            if wr_id >> 16 != seq || i >= pending.len() || !pending[i] {
                // A late completion of a request given up on earlier.
                continue;
            }
            pending[i] = false;
            outstanding -= 1;
            if status != WorkCompletionStatus::Success as u32 {
                let node = targets[i].node;
                self.qps[node].1 = true;
                error.get_or_insert(FabricError::Verbs {
                    node,
                    op: op_name(&chunk[i]),
                    reason: VerbsFailure::Completion {
                        status,
                        name: status_name(status),
                        vendor_err,
                    },
                });
            }
        }
        Ok(true)
    }
}
