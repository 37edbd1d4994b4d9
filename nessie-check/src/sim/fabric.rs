//! The fabric of the simulation: yields before every verb, tears verbs,
//! injects transport errors, and watches stage WRITEs.

use super::{Injected, Point, PointInfo, Scheduler};
use nessie::data::Geometry;
use nessie::fabric::{Fabric, FabricError, NodeId, RegionId, RegionSpec, RemoteAddr, Verb};
use nessie::layout::dte::EXPIRES_AT_OFFSET;
use nessie::layout::region;
use nessie::layout::Ite;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// An invariant of memory, checked on the unwrapped fabric: `Some` describes
/// how it is broken.
pub type MemoryCheck = Box<dyn Fn(&dyn Fabric) -> Option<String> + Send + Sync>;

/// A [`MemoryCheck`] and whether it failed already (one report per run).
struct AfterCas {
    check: MemoryCheck,
    failed: AtomicBool,
}

impl std::fmt::Debug for AfterCas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfterCas").finish_non_exhaustive()
    }
}

/// A READ in progress in pieces.
#[derive(Debug)]
struct Inflight {
    id: u64,
    addr: RemoteAddr,
    len: u64,
    torn: bool,
}

/// A fabric that yields to the scheduler before every verb, every piece of a
/// torn verb and every [`Fabric::yield_point`], and injects transport errors.
/// Given the tables' geometry, it also watches every stage WRITE: an
/// `expires_at` written over a non-zero one stages an incarnation twice, which
/// the recycling rules forbid (a second stage can land after the slot's reuse
/// and stamp its next occupant,
/// docs/design.md#f4-rule-i-one-stager-per-incarnation). Given a
/// [`MemoryCheck`], it runs it after every CAS that changed memory, so a
/// broken invariant is reported at the step that broke it. A node whose
/// host is lost ([`SimFabric::lose`]) has its memory wiped and every verb
/// to it refused from then on, as a broken connection.
#[derive(Debug)]
pub struct SimFabric {
    inner: Arc<dyn Fabric>,
    sched: Arc<Scheduler>,
    land_by: bool,
    geometry: Option<Geometry>,
    after_cas: Option<AfterCas>,
    inflight: Mutex<(u64, Vec<Inflight>)>,
    /// The node whose host is lost ([`NO_NODE`]: none).
    lost: AtomicUsize,
}

/// No node lost.
const NO_NODE: usize = usize::MAX;

/// Takes a torn READ out of the in-flight list when it ends, however.
struct InflightGuard<'a> {
    fabric: &'a SimFabric,
    id: u64,
}

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        let torn = {
            let mut list = self.fabric.inflight();
            let i = list.1.iter().position(|r| r.id == self.id);
            i.is_some_and(|i| list.1.swap_remove(i).torn)
        };
        if torn {
            self.fabric.sched.count(|c| c.torn_reads += 1);
        }
    }
}

fn overlaps(a: RemoteAddr, a_len: u64, b: RemoteAddr, b_len: u64) -> bool {
    a.node == b.node
        && a.region == b.region
        && a.offset < b.offset + b_len
        && b.offset < a.offset + a_len
}

fn injected(node: NodeId) -> FabricError {
    FabricError::Disconnected {
        node,
        source: std::io::Error::other("simulated transport error"),
    }
}

fn refused(node: NodeId) -> FabricError {
    FabricError::Disconnected {
        node,
        source: std::io::Error::other("the host is lost"),
    }
}

impl SimFabric {
    /// Wraps `inner`. With `land_by`, CASes carry a land-by time that the
    /// target checks on its wall clock, as the `tcp` fabric does.
    #[must_use]
    pub fn new(inner: Arc<dyn Fabric>, sched: Arc<Scheduler>, land_by: bool) -> SimFabric {
        SimFabric {
            inner,
            sched,
            land_by,
            geometry: None,
            after_cas: None,
            inflight: Mutex::new((0, Vec::new())),
            lost: AtomicUsize::new(NO_NODE),
        }
    }

    /// Loses node `node`'s host: every verb to it is refused from now on,
    /// and its `regions` are wiped (zeros, as memory that is gone).
    pub fn lose(&self, node: NodeId, regions: &[RegionSpec]) {
        self.lost.store(node, Ordering::SeqCst);
        for spec in regions {
            let zeros = vec![0u8; spec.len as usize];
            let _ = self.inner.write(RemoteAddr::new(node, spec.id, 0), &zeros);
        }
    }

    /// A replacement for node `node`'s lost host is up: verbs to it are
    /// served again (its memory stays as the loss left it until the
    /// replacement fills it).
    pub fn replace(&self, node: NodeId) {
        let _ = self
            .lost
            .compare_exchange(node, NO_NODE, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Refuses a verb to a lost host.
    fn check_lost(&self, node: NodeId) -> Result<(), FabricError> {
        if self.lost.load(Ordering::SeqCst) == node {
            self.sched.count(|c| c.refused_lost += 1);
            return Err(refused(node));
        }
        Ok(())
    }

    /// Watches stage WRITEs on tables of this geometry (see the type's
    /// docs).
    #[must_use]
    pub fn watching_stages(mut self, geometry: Geometry) -> SimFabric {
        self.geometry = Some(geometry);
        self
    }

    /// Runs `check` after every CAS that changed memory (every change of an
    /// ITE or of a DTE's state); its first failure is a violation of the
    /// run, named with the step it happened at.
    #[must_use]
    pub fn checking_after_cas(mut self, check: MemoryCheck) -> SimFabric {
        self.after_cas = Some(AfterCas {
            check,
            failed: AtomicBool::new(false),
        });
        self
    }

    /// Runs the check of [`SimFabric::checking_after_cas`], if any.
    fn check_after_cas(&self, addr: RemoteAddr) {
        let Some(a) = &self.after_cas else { return };
        if a.failed.load(Ordering::Relaxed) {
            return;
        }
        if let Some(broken) = (a.check)(self.inner.as_ref()) {
            a.failed.store(true, Ordering::Relaxed);
            self.sched.violation(format!(
                "{broken} (after the CAS at {addr}, step {})",
                self.sched.steps()
            ));
        }
    }

    /// Tells the scheduler when a READ of the index returned a MIGRATE
    /// marker.
    fn note_critical(&self, addr: RemoteAddr, buf: &[u8]) {
        let word = |w: &[u8]| u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
        if addr.region == region::INDEX && buf.chunks_exact(8).any(|w| Ite(word(w)).is_moved()) {
            self.sched.saw_critical();
        }
    }

    /// Reports a WRITE that stages an already staged DTE.
    fn check_stage(&self, addr: RemoteAddr, data: &[u8]) {
        let Some(g) = &self.geometry else { return };
        // Replica j keeps class c's table under a stride above its id.
        let of = RegionId(addr.region.0 % region::REPLICA_STRIDE);
        let Some(class) = region::data_class(of) else {
            return;
        };
        let slot_bytes = g.slot_bytes(class) as u64;
        if data.len() != 8
            || slot_bytes == 0
            || addr.offset % slot_bytes != EXPIRES_AT_OFFSET as u64
        {
            return;
        }
        // The same stamp again is the same stage reaching one word twice
        // (a stager whose WRITE to a mirror and later WRITE to the primary
        // both reach the promoted mirror across a view change): harmless.
        let mut w = [0u8; 8];
        if self.inner.read(addr, &mut w).is_err() {
            return;
        }
        let was = u64::from_le_bytes(w);
        if was != 0 && w != data {
            self.sched.violation(format!(
                "DOUBLE-STAGE: the DTE at {addr} (slot {}) is staged again (expires_at was {was})",
                addr.offset / slot_bytes,
            ));
        }
    }

    /// A batch, verb by verb (each a yield point), its CASes all posted in
    /// the view current when the batch was. A batch holding a CAS runs its
    /// verbs to different nodes in an order drawn by the scheduler
    /// ([`Scheduler::batch_order`]): a verb that relies on another node's
    /// CAS of its batch is caught.
    fn post_in(&self, batch: &mut [Verb<'_>], land_by: Option<u64>) -> Result<(), FabricError> {
        let posted_in = self.sched.view_epoch();
        let is_cas = |v: &Verb<'_>| matches!(v, Verb::Cas { .. });
        let order: Vec<usize> = if batch.iter().any(is_cas) {
            let nodes: Vec<NodeId> = batch.iter().map(|v| v.addr().node).collect();
            self.sched.batch_order(&nodes)
        } else {
            (0..batch.len()).collect()
        };
        let last_cas = order.iter().rposition(|&i| is_cas(&batch[i]));
        let result = order.iter().enumerate().try_for_each(|(k, &i)| {
            self.sched.set_cas_window(last_cas.is_some_and(|l| k <= l));
            batch[i].execute_with_cas(self, |addr, expected, new| {
                self.do_cas(addr, expected, new, land_by, posted_in)
            })
        });
        self.sched.set_cas_window(false);
        result
    }

    fn inflight(&self) -> MutexGuard<'_, (u64, Vec<Inflight>)> {
        self.inflight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks every READ in progress over `addr..addr+len` as torn.
    fn wrote(&self, addr: RemoteAddr, len: u64) {
        for r in &mut self.inflight().1 {
            if overlaps(r.addr, r.len, addr, len) {
                r.torn = true;
            }
        }
    }

    /// A CAS posted in view `posted_in` ([`Scheduler::view_epoch`]).
    fn do_cas(
        &self,
        addr: RemoteAddr,
        expected: u64,
        new: u64,
        land_by: Option<u64>,
        posted_in: u64,
    ) -> Result<u64, FabricError> {
        self.sched.point(PointInfo {
            kind: Point::Cas,
            addr: Some(addr),
            expected,
            new,
        });
        self.check_lost(addr.node)?;
        let fault = self.sched.transport_fault(Point::Cas);
        if fault == Some(Injected::Before) {
            return Err(injected(addr.node));
        }
        if let Some(by) = land_by {
            let now = self.sched.wall(addr.node);
            if now > by {
                self.sched.count(|c| c.late_cas_refused += 1);
                return Err(FabricError::LateCas {
                    node: addr.node,
                    late_us: now - by,
                });
            }
        }
        self.sched.cas_landed(posted_in, addr);
        let old = self.inner.cas(addr, expected, new)?;
        if old == expected {
            self.wrote(addr, 8);
            if old != new {
                self.check_after_cas(addr);
            }
        }
        if fault == Some(Injected::After) {
            return Err(injected(addr.node));
        }
        Ok(old)
    }
}

impl Fabric for SimFabric {
    fn nodes(&self) -> usize {
        self.inner.nodes()
    }

    fn fence_node(&self, node: usize) {
        self.inner.fence_node(node);
    }

    fn readmit_node(&self, node: usize) {
        self.inner.readmit_node(node);
    }

    fn region_len(&self, node: NodeId, region: RegionId) -> Option<u64> {
        self.inner.region_len(node, region)
    }

    fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
        self.sched.point(PointInfo::verb(Point::Read, addr));
        self.check_lost(addr.node)?;
        if self.sched.transport_fault(Point::Read).is_some() {
            return Err(injected(addr.node));
        }
        let cuts = self.sched.cuts(buf.len() / 8);
        if cuts.is_empty() {
            self.inner.read(addr, buf)?;
            self.note_critical(addr, buf);
            return Ok(());
        }
        let id = {
            let mut list = self.inflight();
            list.0 += 1;
            let id = list.0;
            list.1.push(Inflight {
                id,
                addr,
                len: buf.len() as u64,
                torn: false,
            });
            id
        };
        let _guard = InflightGuard { fabric: self, id };
        let mut from = 0;
        for end in cuts.into_iter().map(|w| w * 8).chain([buf.len()]) {
            if from > 0 {
                self.sched
                    .point(PointInfo::verb(Point::Read, addr.add(from as u64)));
                self.check_lost(addr.node)?;
            }
            self.inner
                .read(addr.add(from as u64), &mut buf[from..end])?;
            from = end;
        }
        self.note_critical(addr, buf);
        Ok(())
    }

    fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
        self.sched.point(PointInfo::verb(Point::Write, addr));
        self.check_lost(addr.node)?;
        let fault = self.sched.transport_fault(Point::Write);
        if fault == Some(Injected::Before) {
            return Err(injected(addr.node));
        }
        self.check_stage(addr, data);
        let cuts = self.sched.cuts(data.len() / 8);
        let mut from = 0;
        for end in cuts.into_iter().map(|w| w * 8).chain([data.len()]) {
            if from > 0 {
                self.sched
                    .point(PointInfo::verb(Point::Write, addr.add(from as u64)));
                self.check_lost(addr.node)?;
            }
            self.inner.write(addr.add(from as u64), &data[from..end])?;
            self.wrote(addr.add(from as u64), (end - from) as u64);
            from = end;
        }
        if fault == Some(Injected::After) {
            return Err(injected(addr.node));
        }
        Ok(())
    }

    fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
        let posted_in = self.sched.view_epoch();
        self.do_cas(addr, expected, new, None, posted_in)
    }

    fn cas_by(
        &self,
        addr: RemoteAddr,
        expected: u64,
        new: u64,
        land_by_us: u64,
    ) -> Result<u64, FabricError> {
        let posted_in = self.sched.view_epoch();
        let land_by = self.land_by.then_some(land_by_us);
        self.do_cas(addr, expected, new, land_by, posted_in)
    }

    fn post(&self, batch: &mut [Verb<'_>]) -> Result<(), FabricError> {
        self.post_in(batch, None)
    }

    fn post_by(&self, batch: &mut [Verb<'_>], land_by_us: u64) -> Result<(), FabricError> {
        self.post_in(batch, self.land_by.then_some(land_by_us))
    }

    fn enforces_land_by(&self) -> bool {
        self.land_by
    }

    fn keeps_batch_order(&self) -> bool {
        // `post_in` runs a batch's verbs one by one, each a scheduling
        // point: other threads' steps interleave, the order holds.
        true
    }

    fn yield_point(&self) {
        self.sched.point(PointInfo::pause());
    }
}
