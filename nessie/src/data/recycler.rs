//! The background thread that returns expired DTE slots to the free lists
//! before allocation runs dry.

use super::{NodeData, TableAccess};
use crate::clock::Clock;
use crate::fabric::Fabric;
use crate::runtime::periodic::Periodic;
use std::sync::Arc;
use std::time::Duration;

/// A running recycler; stops and joins its thread when dropped.
#[derive(Debug)]
pub struct Recycler {
    _thread: Periodic,
}

/// A paced scan looks at this share of a class's in-use slots (less those
/// its clients' queues hold) per period, so that a whole pass takes about
/// this many periods.
const PERIODS_PER_PASS: usize = 5;

/// A class that handed out fresh slots since the last period gets a scan of
/// at least this many in-use slots per fresh slot: a fresh slot's first
/// write costs page faults of microseconds each (and, in the background,
/// the prefault of its window), a stamp read tens of nanoseconds.
const STAMPS_PER_FRESH_SLOT: usize = 8;

impl NodeData {
    /// One period of background recycling of every class of this node (see
    /// [`Recycler::start`]), then faulting in the fresh slots each class
    /// hands out next ([`NodeData::prefault_ahead`]); returns how many
    /// slots it freed. The scans come first: what they free is handed out
    /// before fresh slots, and a long prefault does not delay them. A
    /// failed scan is logged and leaves its slots for a later one. No scan
    /// while the node does not serve ([`TableAccess::serving`]).
    pub fn recycle_period(&self, access: TableAccess<'_>) -> usize {
        let freed = if access.serving() {
            (0..self.classes() as u8)
                .map(|class| self.recycle_class_period(class, access))
                .sum()
        } else {
            0
        };
        // The node's own memory only, changing nothing: done whether the
        // node serves or not.
        if let Err(e) = self.prefault_ahead(access.local) {
            tracing::warn!("faulting in the next fresh slots failed: {e}");
        }
        freed
    }

    /// One period's scan of `class` (see [`Recycler::start`]); returns how
    /// many slots it freed.
    fn recycle_class_period(&self, class: u8, access: TableAccess<'_>) -> usize {
        let queued = self.queued(class);
        // Low for entries: the tombstone reserve is not theirs.
        let reserve = self.reserve(class);
        let free = self.available(class).saturating_sub(reserve) + queued;
        let scanned = if free * 4 < self.capacity(class) - reserve {
            self.recycle(class, access)
        } else {
            // Slots the clients' queues will return need no scan: a node
            // whose own clients staged everything scans little.
            let paced = self
                .in_use(class)
                .saturating_sub(queued)
                .div_ceil(PERIODS_PER_PASS);
            let for_fresh = self
                .fresh_since_prefault(class)
                .saturating_mul(STAMPS_PER_FRESH_SLOT);
            match paced.max(for_fresh) {
                0 => Ok(0),
                slots => self.recycle_some(class, access, slots),
            }
        };
        scanned.unwrap_or_else(|e| {
            tracing::warn!("recycler scan failed: {e}");
            0
        })
    }
}

impl Recycler {
    /// Starts a thread that, every `period`, scans each size class of each
    /// node in `nodes`: slots other nodes' clients staged come back only
    /// through scans. A class whose free slots, with the slots its clients'
    /// queues will return ([`NodeData::queued`]), have fallen below a
    /// quarter of its capacity gets a whole pass; every other class in use
    /// gets a paced slice of a fifth of its in-use slots not queued, so
    /// that expired slots come back about five periods after they expire
    /// and allocations reuse them instead of touching fresh memory (a first
    /// touch costs page faults). A class that handed out fresh slots since
    /// the last period gets a longer slice, in proportion to them: the
    /// allocations reached for fresh memory because the scans lagged.
    /// `local` reaches the nodes' own memory without any wrapper, `cluster`
    /// every node (see [`TableAccess`]).
    ///
    /// # Errors
    /// If the thread cannot be spawned.
    pub fn start(
        nodes: Vec<Arc<NodeData>>,
        local: Arc<dyn Fabric>,
        cluster: Arc<dyn Fabric>,
        clock: Arc<dyn Clock>,
        views: Arc<crate::replica::Views>,
        period: Duration,
    ) -> std::io::Result<Recycler> {
        let thread = Periodic::start("nessie-recycler", period, move || {
            let access = TableAccess {
                local: local.as_ref(),
                cluster: cluster.as_ref(),
                clock: clock.as_ref(),
                views: Some(&views),
                wall_read_us: None,
            };
            for data in &nodes {
                data.recycle_period(access);
            }
        })?;
        Ok(Recycler { _thread: thread })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, WallClock};
    use crate::data::SlotUse;
    use crate::fabric::{FabricError, LocalFabric, RemoteAddr};
    use crate::layout::dte::EXPIRES_AT_OFFSET;
    use crate::layout::SlotRef;
    use std::time::Duration;

    /// One node's tables of 100 slots for entries in one class (and 4 more
    /// for tombstones), with its memory.
    fn table() -> (NodeData, LocalFabric) {
        let mut config = crate::data::small_config(1, 256, 0);
        config.data_bytes_per_node = 100 * config.class_slot_bytes(0);
        config.tombstone_reserve = 4;
        let data = NodeData::new(&config, 0).unwrap();
        let fabric = LocalFabric::new(1, &crate::store_regions(&config)).unwrap();
        (data, fabric)
    }

    fn stamp(fabric: &LocalFabric, data: &NodeData, r: SlotRef, expires_at: u64) {
        let at: RemoteAddr = data
            .slot_addr(r.class, r.slot)
            .add(EXPIRES_AT_OFFSET as u64);
        fabric.write(at, &expires_at.to_le_bytes()).unwrap();
    }

    /// Slots another node's client staged come back a fifth of the in-use
    /// slots per period while the class has room, so that allocations reuse
    /// them instead of fresh memory; a class running low gets a whole pass.
    /// Slots not expired, or never staged, stay in use either way.
    #[test]
    fn a_period_scans_a_fifth_while_there_is_room_and_everything_when_low() {
        let (data, fabric) = table();
        let clock = WallClock::default();
        let access = TableAccess::alone(&fabric, &clock);
        let capacity = data.capacity(0) - data.reserve(0);
        let taken: Vec<SlotRef> = (0..50)
            .map(|_| data.allocate(0, access).unwrap().unwrap())
            .collect();
        // A period while nothing is staged yet: it frees nothing, and the
        // fresh slots it saw handed out no longer lengthen the next scan.
        assert_eq!(data.recycle_period(access), 0);
        let long_ago = clock.now_us() - 60_000_000;
        for (i, &r) in taken.iter().enumerate() {
            match i % 5 {
                // Staged an hour's worth of expiries ago, or not staged yet,
                // or staged but not expired.
                0..=2 => stamp(&fabric, &data, r, long_ago),
                3 => {}
                _ => stamp(&fabric, &data, r, clock.now_us() + 60_000_000),
            }
        }
        // 50 in use out of 100: room. One period looks at 10 slots (a
        // fifth), frees the six expired among them.
        assert_eq!(data.recycle_period(access), 6);
        assert_eq!(data.in_use(0), 44);
        // The pass goes on from where it stopped, at most a fifth of what
        // is in use each period, and looks at every slot once: it ends
        // within seven periods with every expired slot freed.
        let mut freed = 6;
        for _ in 0..6 {
            let before = data.in_use(0);
            let now = data.recycle_period(access);
            assert!(
                now <= before.div_ceil(PERIODS_PER_PASS),
                "{now} of {before}"
            );
            freed += now;
        }
        assert_eq!(freed, 30, "every expired slot, once each");
        assert_eq!(data.in_use(0), 20, "the unstaged and unexpired stay");
        // Running low: the rest taken, the unexpired ones expire, one
        // period frees every expired slot at once.
        while data.allocate(0, access).unwrap().is_some() {}
        assert_eq!(data.in_use(0), capacity);
        for (i, &r) in taken.iter().enumerate() {
            if i % 5 == 4 {
                stamp(&fabric, &data, r, long_ago);
            }
        }
        assert_eq!(data.recycle_period(access), 10);
        assert_eq!(data.recycle_counts().reclaimed, 40);
    }

    /// A class that handed out fresh slots since the last period gets eight
    /// stamps scanned per fresh slot, more than its paced fifth: here more
    /// than all of its in-use slots, so every expired one comes back in one
    /// period.
    #[test]
    fn fresh_slots_handed_out_lengthen_the_next_scan() {
        let (data, fabric) = table();
        let clock = WallClock::default();
        let access = TableAccess::alone(&fabric, &clock);
        let long_ago = clock.now_us() - 60_000_000;
        let staged: Vec<SlotRef> = (0..40)
            .map(|_| data.allocate(0, access).unwrap().unwrap())
            .collect();
        assert_eq!(data.recycle_period(access), 0, "nothing staged yet");
        for &r in &staged {
            stamp(&fabric, &data, r, long_ago);
        }
        // Ten fresh slots: 80 stamps, more than the 50 in use (a paced
        // slice would be 10).
        for _ in 0..10 {
            data.allocate(0, access).unwrap().unwrap();
        }
        assert_eq!(data.recycle_period(access), 40);
        assert_eq!(data.in_use(0), 10);
    }

    /// A node whose lease is over recycles nothing: its scans can reach
    /// other nodes' memory (docs/replication.md#rp0). Once it holds a lease
    /// again, the same period frees the expired slots.
    #[test]
    fn a_node_out_of_its_lease_recycles_nothing() {
        let (data, fabric) = table();
        let clock = WallClock::default();
        let mut config = crate::data::small_config(1, 256, 0);
        config.data_bytes_per_node = 100 * config.class_slot_bytes(0);
        config.tombstone_reserve = 4;
        let views = crate::replica::Views::new(crate::data::Geometry::new(&config));
        let access = TableAccess {
            views: Some(&views),
            ..TableAccess::alone(&fabric, &clock)
        };
        let long_ago = clock.now_us() - 60_000_000;
        for _ in 0..90 {
            let r = data.allocate(0, access).unwrap().unwrap();
            stamp(&fabric, &data, r, long_ago);
        }
        views.set_lease_until(clock.mono_us().saturating_sub(1));
        assert_eq!(data.recycle_period(access), 0, "out of its lease");
        views.set_lease_until(u64::MAX);
        assert_eq!(data.recycle_period(access), 90, "serving again");
    }

    /// The boundary of a whole pass: free plus queued slots at a quarter of
    /// the class still get a paced slice (a fifth of the in-use slots not
    /// queued); one fewer gets the whole class at once.
    #[test]
    fn a_whole_pass_starts_below_a_quarter_free_or_queued() {
        let clock = WallClock::default();
        let long_ago = clock.now_us() - 60_000_000;
        // (slots taken, own stagings queued, freed by one period)
        for (taken, queued, freed) in [(75, 0, 15), (76, 0, 76), (76, 1, 15), (76, 6, 14)] {
            let (data, fabric) = table();
            let access = TableAccess::alone(&fabric, &clock);
            assert_eq!(data.capacity(0) - data.reserve(0), 100);
            let mut stagings = data.stagings();
            for i in 0..taken {
                let r = data.allocate(0, access).unwrap().unwrap();
                stamp(&fabric, &data, r, long_ago);
                if i < queued {
                    stagings.note(r, long_ago);
                }
            }
            // Seen by a prefault: the fresh slots lengthen no scan.
            data.prefault_ahead(&fabric).unwrap();
            assert_eq!(
                data.recycle_period(access),
                freed,
                "{taken} taken, {queued} queued"
            );
        }
    }

    /// An allocation that finds nothing free scans until a slice frees a
    /// slot, past slices that free nothing, and no further.
    #[test]
    fn an_allocation_scans_past_slices_that_free_nothing() {
        let (data, fabric) = table();
        let clock = WallClock::default();
        let access = TableAccess::alone(&fabric, &clock);
        let slice = crate::data::SCAN_SLICE;
        let entries = data.capacity(0) - data.reserve(0);
        let taken: Vec<SlotRef> = (0..entries)
            .map(|_| data.allocate(0, access).unwrap().unwrap())
            .collect();
        for (i, &r) in taken.iter().enumerate() {
            // The first slice holds nothing expired, every later one does.
            let at = if i < slice {
                clock.now_us() + 60_000_000
            } else {
                clock.now_us() - 60_000_000
            };
            stamp(&fabric, &data, r, at);
        }
        assert!(data.allocate(0, access).unwrap().is_some());
        assert_eq!(
            data.in_use(0),
            entries - slice + 1,
            "the second slice freed {slice}, one taken, the rest not scanned"
        );
    }

    /// A wall clock stopped at one reading.
    #[derive(Debug)]
    struct Stopped(u64);

    impl Clock for Stopped {
        fn now_us(&self) -> u64 {
            self.0
        }
        fn mono_us(&self) -> u64 {
            self.0
        }
        fn sleep(&self, _: Duration) {}
    }

    /// A slot is reusable strictly more than `max_clock_skew` after its
    /// stamp: at exactly that time it stays, a microsecond later it goes,
    /// by a scan and from its stager's queue alike.
    #[test]
    fn a_stamp_expires_strictly_after_the_skew() {
        let skew = crate::config::micros(crate::Config::default().max_clock_skew);
        let stamp_at = 1_000_000_000;
        for (late_by, freed) in [(0, 0), (1, 1)] {
            let (data, fabric) = table();
            let clock = Stopped(stamp_at + skew + late_by);
            let access = TableAccess::alone(&fabric, &clock);
            let r = data.allocate(0, access).unwrap().unwrap();
            stamp(&fabric, &data, r, stamp_at);
            assert_eq!(data.recycle(0, access).unwrap(), freed, "{late_by} µs late");
            let mut queue = data.stagings();
            let q = data.allocate(0, access).unwrap().unwrap();
            stamp(&fabric, &data, q, stamp_at);
            queue.note(q, stamp_at);
            let before = data.recycle_counts().reclaimed_from_queue;
            let _ = data
                .allocate_for(0, SlotUse::Entry, access, &mut queue, &mut 0)
                .unwrap();
            assert_eq!(
                data.recycle_counts().reclaimed_from_queue - before,
                freed as u64,
                "{late_by} µs late, from the queue"
            );
        }
    }

    /// A client's queue judges its stagings by the wall reading the caller
    /// hands in (an operation's `created_at`), not by the clock: a reading
    /// at the reuse time keeps the slot even on a clock long past it, and
    /// one a microsecond later frees it on a clock still before it.
    #[test]
    fn the_queue_judges_by_the_callers_reading() {
        let skew = crate::config::micros(crate::Config::default().max_clock_skew);
        let stamp_at = 1_000_000_000;
        let reuse_at = stamp_at + skew;
        for (read, clock_at, freed) in [(reuse_at, reuse_at + 60_000_000, 0), (reuse_at + 1, 0, 1)]
        {
            let (data, fabric) = table();
            let clock = Stopped(clock_at);
            let access = TableAccess::alone(&fabric, &clock);
            let mut queue = data.stagings();
            let q = data.allocate(0, access).unwrap().unwrap();
            stamp(&fabric, &data, q, stamp_at);
            queue.note(q, stamp_at);
            let judged = TableAccess {
                wall_read_us: Some(read),
                ..access
            };
            let _ = data
                .allocate_for(0, SlotUse::Entry, judged, &mut queue, &mut 0)
                .unwrap();
            assert_eq!(
                data.recycle_counts().reclaimed_from_queue,
                freed,
                "read at {read}, clock at {clock_at}"
            );
        }
    }

    /// A node whose clock watch found the clocks skewed reuses no staged
    /// slot, by a recycler period, by an allocation's scan or from its
    /// clients' queue, however old the stamps; a slot never published is
    /// still released, and allocation answers from free slots only, else
    /// nothing (`DataTableFull`). Agreeing checks again bring the slots
    /// back once one of them, the detection lag old, vouches for a reading
    /// past their reuse time; a slot whose reuse time came later waits.
    #[test]
    fn a_skewed_clock_reuses_no_staged_slot_until_checks_vouch_again() {
        let config = crate::Config::default();
        let lag = crate::config::micros(crate::clock::detection_lag(config.max_clock_skew));
        let skew = crate::config::micros(config.max_clock_skew);
        let now = 1_000_000_000;
        let (data, fabric) = table();
        let clock = Stopped(now);
        let access = TableAccess::alone(&fabric, &clock);
        let taken: Vec<SlotRef> = (0..data.capacity(0) - data.reserve(0))
            .map(|_| data.allocate(0, access).unwrap().unwrap())
            .collect();
        let mut queue = data.stagings();
        let long_ago = now - 60_000_000;
        // Stamped an hour's worth of expiries ago, but the last five just
        // expired: their reuse time is 5 ms before `now`.
        let just = now - skew - 5_000;
        for (i, &r) in taken.iter().enumerate().skip(1) {
            let at = if i >= 95 { just } else { long_ago };
            stamp(&fabric, &data, r, at);
            if i < 11 {
                queue.note(r, at);
            }
        }
        data.arm_clock_gate();
        data.note_clock_check(true, now - 3 * lag, 0);
        data.note_clock_check(false, now - lag, 2 * lag);
        let reused = |data: &NodeData| data.recycle_counts().reclaimed;
        assert_eq!(data.recycle_period(access), 0);
        assert_eq!(data.recycle(0, access).unwrap(), 0);
        assert_eq!(
            data.allocate_for(0, SlotUse::Entry, access, &mut queue, &mut 0)
                .unwrap(),
            None
        );
        assert_eq!(
            (reused(&data), data.queued(0)),
            (0, 10),
            "nothing staged came back"
        );
        // Slot 0 was never published: it goes back at once, and is the one
        // allocation finds.
        data.release_unpublished(taken[0]);
        assert_eq!(
            data.allocate_for(0, SlotUse::Entry, access, &mut queue, &mut 0)
                .unwrap(),
            Some(taken[0])
        );
        // Agreeing again: the first check vouches for nothing, the one a
        // lag later for the first one's reading, 10 ms before `now`.
        data.note_clock_check(true, now - 10_000, 3 * lag);
        assert_eq!(data.recycle(0, access).unwrap(), 0);
        data.note_clock_check(true, now, 4 * lag);
        let q = data
            .allocate_for(0, SlotUse::Entry, access, &mut queue, &mut 0)
            .unwrap();
        assert_eq!(q.map(|r| r.slot), Some(taken[1].slot), "the queue's oldest");
        assert_eq!(data.recycle_counts().reclaimed_from_queue, 1);
        assert_eq!(
            data.recycle(0, access).unwrap(),
            93,
            "all but the five just expired"
        );
        // A check a lag after one past their reuse time brings those too.
        data.note_clock_check(true, now, 5 * lag);
        assert_eq!(data.recycle(0, access).unwrap(), 5);
        assert_eq!(reused(&data), 99);
    }

    /// The node's memory, where the first read of one address is followed
    /// by a write to it: another thread's store landing between a scan's
    /// read of a stamp (without the lock) and its verdict (under it).
    #[derive(Debug)]
    struct WriteAfterFirstRead {
        memory: LocalFabric,
        at: RemoteAddr,
        then: u64,
        done: std::sync::atomic::AtomicBool,
    }

    impl Fabric for WriteAfterFirstRead {
        fn nodes(&self) -> usize {
            self.memory.nodes()
        }
        fn region_len(&self, node: usize, region: crate::fabric::RegionId) -> Option<u64> {
            self.memory.region_len(node, region)
        }
        fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
            self.memory.read(addr, buf)?;
            if addr == self.at && !self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
                self.memory.write(self.at, &self.then.to_le_bytes())?;
            }
            Ok(())
        }
        fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
            self.memory.write(addr, data)
        }
        fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
            self.memory.cas(addr, expected, new)
        }
    }

    /// A stamp read as expired without the lock but cleared before the
    /// verdict (as a new allocation of the slot clears it) keeps the slot,
    /// and one read as not expired that expires meanwhile waits for the
    /// next pass: the verdict under the lock decides, the read before it
    /// only chooses which slots get one.
    #[test]
    fn the_verdict_under_the_lock_decides_not_the_stamp_read_before() {
        let clock = WallClock::default();
        let long_ago = clock.now_us() - 60_000_000;
        let soon = clock.now_us() + 60_000_000;
        for (first, then, freed) in [
            (long_ago, 0, 0),
            (soon, long_ago, 0),
            (long_ago, long_ago, 1),
        ] {
            let (data, fabric) = table();
            let r = data
                .allocate(0, TableAccess::alone(&fabric, &clock))
                .unwrap()
                .unwrap();
            stamp(&fabric, &data, r, first);
            let at = data.slot_addr(0, r.slot).add(EXPIRES_AT_OFFSET as u64);
            let racing = WriteAfterFirstRead {
                memory: fabric,
                at,
                then,
                done: false.into(),
            };
            assert_eq!(
                data.recycle(0, TableAccess::alone(&racing, &clock))
                    .unwrap(),
                freed,
                "{first} then {then}"
            );
            assert_eq!(data.in_use(0), 1 - freed);
        }
    }
}
