//! The CAS gate: an operation's only access to remote memory.
//!
//! [`Gate`] owns the client's [`Endpoint`] for the length of one operation,
//! together with the operation's deadline. It passes READs, WRITEs and batches
//! of READs through, but its one CAS entry point, [`Gate::cas`], checks the
//! deadline right before the CAS
//! (docs/design.md#the-deadline-check-before-every-cas) and refuses late. The
//! endpoint and the fabrics behind it never leave this module, so a protocol
//! step cannot issue a CAS that skips the check.

use super::{Env, Timing};
use crate::clock::Clock;
use crate::data::{SlotUse, Stagings, TableAccess};
use crate::fabric::{Endpoint, Fabric, FabricError, NodeId, RemoteAddr, Verb, WaitBound};
use crate::index::PerCandidate;
use crate::layout::SlotRef;
use crate::Error;
use std::time::Duration;

/// Verbs of one operation, with its deadline.
pub(crate) struct Gate<'a> {
    ep: &'a mut Endpoint,
    /// The node's own memory without wrappers (allocation scans).
    local: &'a dyn Fabric,
    clock: &'a dyn Clock,
    /// Monotonic µs at which the operation gives up.
    deadline: u64,
    /// Δ₀ in µs, see [`crate::Config::landing_bound`].
    landing_us: u64,
    /// CASes that returned later than the landing bound after their check.
    pub(super) late_cas: u64,
    /// The deadline check and target of the last CAS whose landing is not
    /// measured yet: the operation's next clock reading measures it
    /// (docs/design.md#the-landing-bound).
    unsettled: Option<(u64, RemoteAddr)>,
    /// The operation's wall reading at its start and the monotonic reading
    /// just before it, for the stage's `expires_at` (docs/design.md#f7-two-clocks);
    /// `None` for an operation that does not read the wall clock at start.
    wall_anchor: Option<(u64, u64)>,
    /// Whether views may change under the operation (it runs under a
    /// lease, or the cluster keeps replicas), so that an answer decided by
    /// reads alone is checked against the deadline
    /// (docs/replication.md#rp0b).
    fenced: bool,
    /// No verb of the operation waits for a silent peer past its deadline
    /// and the landing bound (docs/replication.md#failure-detection).
    _wait: WaitBound,
}

impl<'a> Gate<'a> {
    /// The gate of an operation that started at monotonic time `started_us`
    /// and, if it writes, read the wall clock right after: `created_at`.
    pub(super) fn new(
        ep: &'a mut Endpoint,
        (local, clock): (&'a dyn Fabric, &'a dyn Clock),
        timing: &Timing,
        (started_us, created_at): (u64, Option<u64>),
        lease_until: u64,
    ) -> Gate<'a> {
        Gate {
            ep,
            local,
            clock,
            deadline: started_us
                .saturating_add(timing.op_timeout_us)
                .min(lease_until),
            landing_us: timing.landing_us,
            late_cas: 0,
            unsettled: None,
            wall_anchor: created_at.map(|wall| (wall, started_us)),
            fenced: lease_until != u64::MAX || timing.replicated,
            // Counted from the first verb that waits (so never read on a
            // fabric whose verbs do not): at most the local work before it
            // later than from `started_us`.
            _wait: WaitBound::within(Duration::from_micros(
                timing.op_timeout_us.saturating_add(timing.landing_us),
            )),
        }
    }

    /// The node the client runs on.
    pub(crate) fn node(&self) -> NodeId {
        self.ep.node()
    }

    /// Whether a READ of another node costs more than one of the client's
    /// own (see [`crate::fabric::Fabric::remote_reads_cost_more`]).
    pub(crate) fn remote_reads_cost_more(&self) -> bool {
        self.ep.fabric().remote_reads_cost_more()
    }

    /// Whether a node's verbs of one batch take effect in batch order (see
    /// [`crate::fabric::Fabric::keeps_batch_order`]).
    pub(crate) fn keeps_batch_order(&self) -> bool {
        self.ep.keeps_batch_order()
    }

    /// Whether the DTE cache keeps entries of `node` (docs/design.md#cache):
    /// with the cache on, those of other nodes, where reading them costs
    /// more than reading one's own.
    pub(crate) fn caches(&self, on: bool, node: NodeId) -> bool {
        on && node != self.node() && self.remote_reads_cost_more()
    }

    /// Whether the deadline has passed at monotonic time `at`: the deadline
    /// itself is the last instant at which the operation may issue a CAS.
    fn past_deadline_at(&self, at: u64) -> bool {
        at > self.deadline
    }

    /// Whether the operation's deadline has passed now.
    pub(crate) fn past_deadline(&self) -> bool {
        self.past_deadline_at(self.clock.mono_us())
    }

    /// Fails with [`Error::Timeout`] once the deadline passed.
    pub(crate) fn check_deadline(&self) -> Result<(), Error> {
        if self.past_deadline() {
            Err(Error::Timeout)
        } else {
            Ok(())
        }
    }

    /// Before an answer decided by reads alone (a GET's, a DELETE's of an
    /// absent key): where views may change, fails with [`Error::Timeout`]
    /// once the deadline (capped by the lease, if any) has passed, since
    /// the reads behind the answer may postdate the next view's activation
    /// (docs/replication.md#rp0b).
    pub(crate) fn check_answer(&self) -> Result<(), Error> {
        if self.fenced {
            self.check_deadline()
        } else {
            Ok(())
        }
    }

    /// Microseconds left before the deadline (0 once it passed).
    pub(crate) fn left_us(&self) -> u64 {
        self.deadline.saturating_sub(self.clock.mono_us())
    }

    /// READ.
    pub(crate) fn read(&mut self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
        self.ep.read(addr, buf)
    }

    /// READ of one little-endian word.
    pub(crate) fn read_word(&mut self, addr: RemoteAddr) -> Result<u64, FabricError> {
        self.ep.read_word(addr)
    }

    /// WRITE (never of a CAS'd word: see the module docs of `protocol`).
    pub(crate) fn write(&mut self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
        self.ep.write(addr, data)
    }

    /// WRITE of a new DTE image into a recycled slot, gathered from its
    /// parts and bypassing the cache where the fabric can (see
    /// [`crate::fabric::Fabric::write_streaming`]).
    pub(crate) fn write_streaming(
        &mut self,
        addr: RemoteAddr,
        parts: &[&[u8]],
        cached: usize,
    ) -> Result<(), FabricError> {
        self.ep.write_streaming(addr, parts, cached)
    }

    /// READs posted as one batch, at most one per candidate of a key
    /// (READs only: a CAS goes through [`Gate::cas`]).
    pub(crate) fn read_batch<'b>(
        &mut self,
        reads: impl IntoIterator<Item = (RemoteAddr, &'b mut [u8])>,
    ) -> Result<(), FabricError> {
        // Pushed in place: `collect` into the small vector went through
        // its generic extend and a move of the whole inline array, about
        // 5 % of a PUT on `shm` (two of these per PUT).
        let mut batch = PerCandidate::<Verb<'b>>::new();
        for (addr, buf) in reads {
            batch.push(Verb::Read { addr, buf });
        }
        self.post_reads(&mut batch)
    }

    /// READs, plain or scatter, posted as one batch.
    pub(crate) fn post_reads(&mut self, batch: &mut [Verb<'_>]) -> Result<(), FabricError> {
        debug_assert!(
            batch
                .iter()
                .all(|v| matches!(v, Verb::Read { .. } | Verb::ReadScatter { .. })),
            "READs only: a CAS goes through Gate::cas"
        );
        self.ep.post(batch)
    }

    /// Takes a local DTE slot of `class` from the node's tables, recycling
    /// if needed; the client's `stagings` are judged by the operation's
    /// `created_at` (docs/design.md#reuse-of-a-slot). The recycler's own
    /// verbs are bookkeeping of the node, not steps of this operation, so
    /// they are not gated.
    pub(crate) fn allocate(
        &self,
        env: &Env<'_>,
        class: u8,
        purpose: SlotUse,
        created_at: u64,
        stagings: &mut Stagings,
        scan_ns: &mut u64,
    ) -> Result<Option<SlotRef>, FabricError> {
        let access = TableAccess {
            local: self.local,
            cluster: self.ep.fabric().as_ref(),
            clock: self.clock,
            views: Some(env.views),
            wall_read_us: Some(created_at),
        };
        env.data
            .allocate_for(class, purpose, access, stagings, scan_ns)
    }

    /// The only way the protocol issues a CAS: checks the deadline right
    /// before it (a failed check issues nothing and returns
    /// [`Error::Timeout`]), hands fabrics that can refuse a late CAS its
    /// land-by time (a refused CAS also returns `Timeout`: it did not
    /// execute), and leaves its landing to be measured by the operation's
    /// next clock reading: a CAS that may have landed later than the
    /// landing bound after its check breaks the time assumption every
    /// recycling rule rests on, so it is counted and logged loudly.
    pub(crate) fn cas(&mut self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, Error> {
        let checked = self.mono_now();
        if self.past_deadline_at(checked) {
            return Err(Error::Timeout);
        }
        let result = if self.ep.enforces_land_by() {
            let land_by = self.clock.now_us().saturating_add(self.landing_us);
            self.ep.cas_by(addr, expected, new, land_by)
        } else {
            self.ep.cas(addr, expected, new)
        };
        self.unsettled = Some((checked, addr));
        match result {
            Ok(old) => Ok(old),
            Err(e) => Err(cas_error(e)),
        }
    }

    /// CASes posted as one batch (a mirror's share of a step: one CAS per
    /// mirror, or a link with the READs of its reverse pass), with READs
    /// that do not depend on them, or that follow them on their node where
    /// [`Gate::keeps_batch_order`], under the same deadline check and
    /// land-by time as [`Gate::cas`]; each CAS's `old` holds what its word
    /// held.
    pub(crate) fn cas_batch(&mut self, batch: &mut [Verb<'_>]) -> Result<(), Error> {
        debug_assert!(
            batch.iter().all(|v| !matches!(v, Verb::Write { .. })),
            "a CAS batch holds CASes and READs only"
        );
        let Some(first) = batch
            .iter()
            .find(|v| matches!(v, Verb::Cas { .. }))
            .map(Verb::addr)
        else {
            return Ok(self.ep.post(batch)?);
        };
        let checked = self.mono_now();
        if self.past_deadline_at(checked) {
            return Err(Error::Timeout);
        }
        let result = if self.ep.enforces_land_by() {
            let land_by = self.clock.now_us().saturating_add(self.landing_us);
            self.ep.post_by(batch, land_by)
        } else {
            self.ep.post(batch)
        };
        self.unsettled = Some((checked, first));
        result.map_err(cas_error)
    }

    /// WRITEs posted as one batch (an entry's image to its mirrors, a
    /// stage to every replica), never of a CAS'd word.
    pub(crate) fn write_batch(&mut self, batch: &mut [Verb<'_>]) -> Result<(), FabricError> {
        debug_assert!(
            batch.iter().all(|v| matches!(v, Verb::Write { .. })),
            "a WRITE batch holds WRITEs only"
        );
        self.ep.post(batch)
    }

    /// The monotonic clock now; measures the landing of the last CAS, if
    /// not measured yet.
    fn mono_now(&mut self) -> u64 {
        let now = self.clock.mono_us();
        if let Some((checked, addr)) = self.unsettled.take() {
            self.note_landing(checked, now, addr);
        }
        now
    }

    /// The wall clock now, for a stamp other nodes read: for an operation
    /// that read it at its start, that reading plus the monotonic time
    /// since (one wall reading per operation, docs/design.md#f7-two-clocks).
    /// Like [`Gate::mono_now`], measures the last CAS's landing.
    pub(crate) fn wall_now(&mut self) -> u64 {
        let mono = self.mono_now();
        match self.wall_anchor {
            Some((wall, at)) => {
                debug_assert!(mono >= at, "the monotonic clock went back");
                wall.saturating_add(mono.saturating_sub(at))
            }
            None => self.clock.now_us(),
        }
    }

    /// Measures the landing of the last CAS, if not measured yet: at the
    /// operation's end.
    pub(super) fn settle(&mut self) {
        if self.unsettled.is_some() {
            self.mono_now();
        }
    }

    /// Counts and logs a CAS whose landing, measured at monotonic time
    /// `now`, came later than the landing bound after its deadline check
    /// at `checked` (a later `now` can only overstate it): if it landed
    /// that late, the time assumption every recycling rule rests on is
    /// broken.
    fn note_landing(&mut self, checked: u64, now: u64, addr: RemoteAddr) {
        let took = now.saturating_sub(checked);
        if took > self.landing_us {
            self.late_cas += 1;
            tracing::error!(
                target: "nessie::landing_bound",
                %addr,
                took_us = took,
                bound_us = self.landing_us,
                "a CAS returned later than the landing bound after its deadline check; \
                 if it landed that late, slot recycling is unsafe (raise expiry or fix the stall)"
            );
        }
    }
}

/// A refused late CAS did not execute: the operation ran out of time.
fn cas_error(e: FabricError) -> Error {
    match e {
        FabricError::LateCas { .. } => Error::Timeout,
        e => e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::region;
    use crate::{Cluster, Config};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    /// Clocks set by the test; counts the wall readings.
    #[derive(Debug, Default)]
    struct SetClocks {
        mono: AtomicU64,
        wall: AtomicU64,
        wall_reads: AtomicU64,
    }

    impl Clock for SetClocks {
        fn now_us(&self) -> u64 {
            self.wall_reads.fetch_add(1, Ordering::SeqCst);
            self.wall.load(Ordering::SeqCst)
        }
        fn mono_us(&self) -> u64 {
            self.mono.load(Ordering::SeqCst)
        }
        fn sleep(&self, d: Duration) {
            self.mono
                .fetch_add(crate::config::micros(d), Ordering::SeqCst);
        }
    }

    const LANDING_US: u64 = 100;

    /// Runs `steps` on a gate of node 0 of a local cluster, started at
    /// monotonic time 0 with `created_at` as its wall reading, landing
    /// bound [`LANDING_US`]; returns the late CASes it counted once settled.
    fn late_cases(
        clocks: &SetClocks,
        created_at: Option<u64>,
        steps: impl FnOnce(&mut Gate<'_>),
    ) -> u64 {
        let config = Config {
            index_slots_per_node: 64,
            data_bytes_per_node: 4 << 20,
            value_size_max: 1 << 10,
            cas_landing_bound: Some(Duration::from_micros(LANDING_US)),
            ..Config::default()
        };
        let timing = Timing::new(&config);
        let cluster = Cluster::local(config).unwrap();
        let fabric = cluster.fabric();
        let mut ep = Endpoint::new(Arc::clone(&fabric), 0);
        let mut gate = Gate::new(
            &mut ep,
            (fabric.as_ref(), clocks),
            &timing,
            (0, created_at),
            u64::MAX,
        );
        steps(&mut gate);
        gate.settle();
        gate.late_cas
    }

    fn word() -> RemoteAddr {
        RemoteAddr::new(0, region::INDEX, 0)
    }

    /// A CAS's landing is measured at the next reading (here the next
    /// CAS's check), or when the gate settles at the operation's end.
    #[test]
    fn a_cas_landing_is_measured_at_the_next_reading_or_the_end() {
        // (monotonic time after the first CAS, whether a second CAS
        // follows, late CASes)
        let cases = [
            (LANDING_US, true, 0),
            (LANDING_US + 1, true, 1),
            (LANDING_US + 1, false, 1),
            (LANDING_US, false, 0),
        ];
        for (after, second, late) in cases {
            let clocks = SetClocks::default();
            let counted = late_cases(&clocks, None, |g| {
                g.cas(word(), 0, 0).unwrap();
                clocks.mono.store(after, Ordering::SeqCst);
                if second {
                    g.cas(word(), 0, 0).unwrap();
                }
            });
            assert_eq!(counted, late, "at {after} µs, second CAS: {second}");
        }
    }

    /// A writing operation's wall time is its start's wall reading plus
    /// the monotonic time since, read without the wall clock; one that did
    /// not read the wall clock at its start reads it.
    #[test]
    fn wall_time_derives_from_the_start_reading() {
        let clocks = SetClocks::default();
        clocks.wall.store(5_000, Ordering::SeqCst);
        late_cases(&clocks, Some(1_000), |g| {
            clocks.mono.store(30, Ordering::SeqCst);
            assert_eq!(g.wall_now(), 1_030);
        });
        assert_eq!(clocks.wall_reads.load(Ordering::SeqCst), 0);
        late_cases(&clocks, None, |g| assert_eq!(g.wall_now(), 5_000));
        assert_eq!(clocks.wall_reads.load(Ordering::SeqCst), 1);
    }
}
