//! Data tables: fixed-size DTE slots per size class, their allocation and
//! their reuse.
//!
//! Every node owns one data table per size class (see [`Geometry::new`] for
//! the classes and the policy that sizes them).
//! Clients write new DTEs only into their own node's tables, so allocation is
//! node-local state ([`NodeData`]), shared by the node's clients.
//!
//! # When a slot may be reused (docs/design.md#reuse-of-a-slot)
//!
//! * A slot that was never published (its owner's ITE CAS failed or was
//!   refused) is free again at once, **with the same generation**: its
//!   (slot, generation) never reached any ITE.
//! * A published slot is reused only once whoever unlinked it has *staged*
//!   it (written `expires_at = now + expiry`, exactly once per incarnation)
//!   and `now > expires_at + max_clock_skew`, and, on a node whose clock is
//!   watched, a check of its clock made after that time has been vouched
//!   for (`clock_gate.rs`). Its generation is bumped then,
//!   so two incarnations that were both published are at least `expiry`
//!   apart and an 11-bit generation recurs only after more than 2047 ×
//!   `expiry`.
//! * Before the slot of a staged MIGRATE copy is reused, the copy's source
//!   slot is resolved: a `MOVED(copy)` still there (its migrator crashed
//!   before clearing it, or landed it late as a zombie) is cleared if the
//!   copy committed, and the copy's predecessor is staged by whoever wins
//!   that clear; it is restored to the copy's `prev` if the copy aborted.
//!   The slot is freed only once that CAS has a definite outcome
//!   (see `reclaim.rs`). No marker can appear later: only the copy's owner
//!   installs it, once, and it lands within `expiry` of the copy's creation.
//! * A slot whose publishing CAS ended with a transport error (outcome
//!   unknown) is kept until `expiry` after its creation, when that CAS can no
//!   longer land; it is freed then if it never did.

//!
//! # How reusable slots are found
//!
//! * A slot of this node that a client of this node staged is queued by
//!   that client ([`Stagings`]) with its stamp; the client's next
//!   allocation of its class takes the oldest one once it expired, in
//!   O(1), before a free or fresh slot (a fresh slot's first write costs
//!   the page faults of touching new memory).
//! * Slots staged by other nodes' clients are found by scans of the class's
//!   in-use slots, a slice of [`SCAN_SLICE`] at a time from where the last
//!   scan stopped (stamps read without the lock, verdicts under it): by the
//!   background [`Recycler`], paced so that a pass ends about `expiry / 2`
//!   after it began (a whole pass at once when a class runs low), and by an
//!   allocation that finds nothing free (which stops after the first slice
//!   that freed a slot).
//!
//! Either way the slot's own stamp and header decide, with the same rules.

mod clock_gate;
mod figures;
mod geometry;
mod prefault;
mod reclaim;
mod recycler;
mod restored;
mod scan;
mod stagings;

pub use figures::DataTableFigures;
pub use geometry::{dte_addr, Geometry, TOMBSTONE_CLASS};
pub use recycler::Recycler;
pub use scan::SCAN_SLICE;
pub use stagings::Stagings;

use crate::clock::Clock;
use crate::fabric::{Fabric, FabricError, NodeId, RegionSpec, RemoteAddr};
use crate::layout::dte::EXPIRES_AT_OFFSET;
use crate::layout::ite::next_generation;
use crate::layout::SlotRef;
use crate::{Config, Error};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The data-table regions a node registers for `config`.
#[must_use]
pub fn data_regions(config: &Config) -> Vec<RegionSpec> {
    Geometry::new(config).data_regions()
}

/// What a slot is allocated for: only tombstones may take a class's
/// reserve (docs/design.md#the-tombstone-reserve).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotUse {
    /// A PUT's entry or a MIGRATE copy: only while more slots than the
    /// class's reserve are free.
    Entry,
    /// A DELETE's tombstone: any free slot, the reserve's included.
    Tombstone,
}

/// How allocation and recycling reach memory and time.
#[derive(Clone, Copy)]
pub struct TableAccess<'a> {
    /// The node's own memory, without any wrapper: read while the
    /// allocator's lock is held, so it must neither block on other nodes nor
    /// yield to a scheduler.
    pub local: &'a dyn Fabric,
    /// The cluster's fabric: the verbs that resolve a MIGRATE copy's source
    /// slot (on any node) and stage the copy's predecessor before the copy's
    /// slot is reused. Used without the allocator's lock.
    pub cluster: &'a dyn Fabric,
    /// The node's wall clock (`expires_at` stamps are compared across
    /// nodes).
    pub clock: &'a dyn Clock,
    /// The views of a replicated store, for the mirrors of a slot the
    /// recycler changes (`None`: one replica, or a store whose views never
    /// change).
    pub views: Option<&'a crate::replica::Views>,
    /// A reading of `clock`'s wall time taken before the call (an
    /// operation's `created_at`), by which a client's stagings queue judges
    /// expiry instead of reading the clock again; `None` reads it. Any
    /// reading taken before the decision will do
    /// (docs/design.md#reuse-of-a-slot).
    pub wall_read_us: Option<u64>,
}

impl TableAccess<'_> {
    /// Whether the recycler may act now: always with one replica; with
    /// views, only under the node's lease, which no operation outlives
    /// either (docs/replication.md#rp0). A node cut off from the majority,
    /// or a zombie of a lost one, stops changing other nodes' memory once
    /// its lease is over, before the drain ends and a new view starts.
    #[must_use]
    pub fn serving(&self) -> bool {
        self.views
            .is_none_or(|v| self.clock.mono_us() < v.lease_until())
    }
}

#[cfg(test)]
impl<'a> TableAccess<'a> {
    /// One node's tables on its own `memory` at `clock`, with no views
    /// (one replica): the unit tests' access.
    pub(crate) fn alone(memory: &'a dyn Fabric, clock: &'a dyn Clock) -> TableAccess<'a> {
        TableAccess {
            local: memory,
            cluster: memory,
            clock,
            views: None,
            wall_read_us: None,
        }
    }
}

impl fmt::Debug for TableAccess<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableAccess").finish_non_exhaustive()
    }
}

/// Declares [`RecycleCounts`] and the atomic counters behind it from one
/// list of fields, so that the two cannot drift apart.
macro_rules! recycle_counts {
    ($($(#[$doc:meta])* $field:ident,)*) => {
        /// What one node's recycling did so far.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct RecycleCounts {
            $($(#[$doc])* pub $field: u64,)*
        }

        impl RecycleCounts {
            /// Each counter with its field name, in declaration order.
            #[must_use]
            pub fn by_name(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($field), self.$field)),*]
            }
        }

        #[derive(Debug, Default)]
        struct Counters {
            $($field: AtomicU64,)*
        }

        impl Counters {
            fn snapshot(&self) -> RecycleCounts {
                RecycleCounts {
                    $($field: self.$field.load(Ordering::Relaxed),)*
                }
            }
        }
    };
}

recycle_counts! {
    /// Scans of a class for reusable slots.
    scans,
    /// Published slots returned to a free list after their expiry.
    reclaimed,
    /// Of those, slots staged by this node's own clients and reused from
    /// the queue of local stagings, without a scan.
    reclaimed_from_queue,
    /// `MOVED(copy)` markers of committed copies cleared before the copy's
    /// slot was reused (the copy's predecessor was staged by the clear).
    markers_cleared,
    /// `MOVED(copy)` markers of aborted copies put back to the copy's `prev`
    /// before the copy's slot was reused.
    markers_restored,
    /// Slots whose publishing CAS had an unknown outcome, freed once it was
    /// certain the CAS never landed.
    in_doubt_freed,
    /// Slots kept for a later scan because a verb resolving them failed.
    kept_after_error,
    /// Time spent scanning (all slices, resolving verbs included), ns.
    scan_ns,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A slot whose publishing CAS ended with a transport error.
#[derive(Debug, Clone, Copy)]
struct InDoubt {
    slot: u32,
    /// The ITE the CAS targeted.
    ite: RemoteAddr,
    /// The value it tried to install.
    value: u64,
}

/// Marks a slot that is not in `in_use`.
const NOT_IN_USE: u32 = u32::MAX;

/// Bytes of bookkeeping per data slot written when the tables are created
/// (`in_use_at` and `generations` of [`ClassTable`]).
pub(crate) const SLOT_BOOKKEEPING_BYTES: u64 =
    (std::mem::size_of::<u32>() + std::mem::size_of::<u16>()) as u64;

/// `len` copies of `value`, or [`Error::OutOfMemory`] naming `what` when
/// the allocator refuses (where `vec![value; len]` would abort).
fn filled<T: Clone>(what: &str, len: usize, value: T) -> Result<Vec<T>, Error> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::OutOfMemory {
        what: what.to_owned(),
        bytes: (len as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        available: None,
    })?;
    v.resize(len, value);
    Ok(v)
}

#[derive(Debug)]
struct ClassTable {
    slots: u32,
    /// Free slots only tombstones may take.
    reserve: u32,
    next_fresh: u32,
    /// Fresh slots below this one are faulted in ([`prefault`]).
    prefaulted: u32,
    /// `next_fresh` at the last prefault, to size the next window.
    fresh_seen: u32,
    /// Slots ready for allocation, each at the generation its next
    /// incarnation gets.
    free: Vec<u32>,
    /// Allocated slots, published or not, until reclaimed (or while a scan
    /// resolves them).
    in_use: Vec<u32>,
    /// Where each slot sits in `in_use`, or [`NOT_IN_USE`].
    in_use_at: Vec<u32>,
    generations: Vec<u16>,
    in_doubt: Vec<InDoubt>,
    /// Where the next scan slice starts in `in_use`.
    cursor: usize,
    /// The most slots `in_use` ever held.
    peak_in_use: usize,
}

impl ClassTable {
    fn enter(&mut self, slot: u32) {
        self.in_use_at[slot as usize] = self.in_use.len() as u32;
        self.in_use.push(slot);
        self.peak_in_use = self.peak_in_use.max(self.in_use.len());
    }

    /// Takes the slot at index `i` of `in_use` out of it. The slots a scan
    /// pass has not looked at yet stay at and after the cursor: a slot
    /// leaving from before the cursor first trades places with the last
    /// one looked at, and the cursor steps back over the gap.
    fn leave_at(&mut self, mut i: usize) -> u32 {
        if i < self.cursor {
            self.cursor -= 1;
            self.swap_places(i, self.cursor);
            i = self.cursor;
        }
        let slot = self.in_use.swap_remove(i);
        self.in_use_at[slot as usize] = NOT_IN_USE;
        if let Some(&moved) = self.in_use.get(i) {
            self.in_use_at[moved as usize] = i as u32;
        }
        slot
    }

    fn swap_places(&mut self, i: usize, j: usize) {
        self.in_use.swap(i, j);
        self.in_use_at[self.in_use[i] as usize] = i as u32;
        self.in_use_at[self.in_use[j] as usize] = j as u32;
    }

    /// Takes `slot` out of `in_use`; false if it was not there.
    fn leave(&mut self, slot: u32) -> bool {
        match self.in_use_at.get(slot as usize) {
            Some(&i) if i != NOT_IN_USE => {
                self.leave_at(i as usize);
                true
            }
            _ => false,
        }
    }

    fn is_in_use(&self, slot: u32) -> bool {
        matches!(self.in_use_at.get(slot as usize), Some(&i) if i != NOT_IN_USE)
    }

    /// The next `budget` in-use slots from the cursor on (wrapping, each at
    /// most once), each with whether its publishing CAS is in doubt; the
    /// cursor moves past them.
    fn next_slice(&mut self, budget: usize) -> scan::Slice<(u32, bool)> {
        let n = budget.min(self.in_use.len());
        let mut picked = scan::Slice::new();
        for _ in 0..n {
            if self.cursor >= self.in_use.len() {
                self.cursor = 0;
            }
            let slot = self.in_use[self.cursor];
            picked.push((slot, self.doubt(slot).is_some()));
            self.cursor += 1;
        }
        picked
    }

    /// A free slot for `purpose`: an entry leaves the last `reserve` free
    /// slots to tombstones.
    fn take(&mut self, purpose: SlotUse) -> Option<u32> {
        let floor = match purpose {
            SlotUse::Entry => self.reserve as usize,
            SlotUse::Tombstone => 0,
        };
        if self.available() <= floor {
            return None;
        }
        if let Some(s) = self.free.pop() {
            return Some(s);
        }
        (self.next_fresh < self.slots).then(|| {
            self.next_fresh += 1;
            self.next_fresh - 1
        })
    }

    fn available(&self) -> usize {
        self.free.len() + (self.slots - self.next_fresh) as usize
    }

    /// Returns a slot whose published incarnation is over to the free list,
    /// under a new generation.
    fn reclaim(&mut self, slot: u32) {
        let g = &mut self.generations[slot as usize];
        *g = next_generation(*g);
        self.in_doubt.retain(|d| d.slot != slot);
        self.free.push(slot);
    }

    fn doubt(&self, slot: u32) -> Option<InDoubt> {
        self.in_doubt.iter().copied().find(|d| d.slot == slot)
    }
}

/// Allocation state of one node's data tables.
pub struct NodeData {
    node: NodeId,
    geometry: Geometry,
    expiry_us: u64,
    skew_us: u64,
    /// How long one call of [`NodeData::prefault_ahead`] may fault in:
    /// one recycler period.
    prefault_budget: std::time::Duration,
    classes: Vec<Mutex<ClassTable>>,
    counters: Counters,
    /// Per class, the slots clients' [`Stagings`] hold.
    queued: std::sync::Arc<[std::sync::atomic::AtomicUsize]>,
    /// Whether the node's clock may be trusted to reuse staged slots.
    clock_gate: clock_gate::ClockGate,
}

impl fmt::Debug for NodeData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeData")
            .field("node", &self.node)
            .field("counts", &self.recycle_counts())
            .finish_non_exhaustive()
    }
}

impl NodeData {
    /// Empty tables of `node` for a (validated) `config`.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the per-slot bookkeeping cannot be
    /// allocated.
    pub fn new(config: &Config, node: NodeId) -> Result<NodeData, Error> {
        let geometry = Geometry::new(config);
        let classes = (0..geometry.classes())
            .map(|c| {
                let slots = geometry.slots(c as u8) as u32;
                let what = |table| format!("node {node} size class {c}: {table} of {slots} slots");
                Ok(Mutex::new(ClassTable {
                    slots,
                    reserve: geometry.reserve(c as u8) as u32,
                    next_fresh: 0,
                    prefaulted: 0,
                    fresh_seen: 0,
                    free: Vec::new(),
                    in_use: Vec::new(),
                    in_use_at: filled(&what("in-use positions"), slots as usize, NOT_IN_USE)?,
                    // A fresh slot's first incarnation is generation 1
                    // (0 is never used, so that `EMPTY(x)` is never 0).
                    generations: filled(&what("generations"), slots as usize, 1)?,
                    in_doubt: Vec::new(),
                    cursor: 0,
                    peak_in_use: 0,
                }))
            })
            .collect::<Result<Vec<Mutex<ClassTable>>, Error>>()?;
        Ok(NodeData {
            node,
            geometry,
            expiry_us: crate::config::micros(config.expiry),
            skew_us: crate::config::micros(config.max_clock_skew),
            prefault_budget: config.recycler_period(),
            queued: (0..classes.len())
                .map(|_| std::sync::atomic::AtomicUsize::default())
                .collect(),
            classes,
            counters: Counters::default(),
            clock_gate: clock_gate::ClockGate::new(crate::config::micros(
                crate::clock::detection_lag(config.max_clock_skew),
            )),
        })
    }

    /// The node these tables belong to.
    #[must_use]
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The tables' shape.
    #[must_use]
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// Slot bytes of `class`.
    #[must_use]
    pub fn slot_bytes(&self, class: u8) -> usize {
        self.geometry.slot_bytes(class)
    }

    /// The table of `class` (`None` for a class that does not exist: the
    /// public methods answer "nothing" for it rather than panic).
    fn table(&self, class: u8) -> Option<std::sync::MutexGuard<'_, ClassTable>> {
        // A panic while holding the lock leaves the table consistent (every
        // mutation is a single push/pop), so a poisoned lock is still usable.
        self.classes
            .get(usize::from(class))
            .map(|t| t.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    fn slot_addr(&self, class: u8, slot: u32) -> RemoteAddr {
        self.geometry.slot_addr(self.node, class, slot)
    }

    /// Takes a free slot of `class` for an entry, recycling expired slots
    /// if none is free. `None` if no slot outside the class's tombstone
    /// reserve is free and none may be reused yet.
    ///
    /// # Errors
    /// A fabric error on the node's own memory.
    pub fn allocate(
        &self,
        class: u8,
        access: TableAccess<'_>,
    ) -> Result<Option<SlotRef>, FabricError> {
        self.allocate_for(
            class,
            SlotUse::Entry,
            access,
            &mut Stagings::default(),
            &mut 0,
        )
    }

    /// As [`NodeData::allocate`] for a client and a `purpose`: first the
    /// oldest of its `stagings` of `class` once expired; adds the ns spent
    /// scanning (only when nothing was free: the common path reads no
    /// clock) to `scan_ns`.
    ///
    /// # Errors
    /// A fabric error on the node's own memory.
    pub fn allocate_for(
        &self,
        class: u8,
        purpose: SlotUse,
        access: TableAccess<'_>,
        stagings: &mut Stagings,
        scan_ns: &mut u64,
    ) -> Result<Option<SlotRef>, FabricError> {
        if let Some(r) = self.take(class, purpose, access, stagings)? {
            return Ok(Some(r));
        }
        let started = std::time::Instant::now();
        let swept = self.sweep(class, access, true);
        *scan_ns += u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        swept?;
        self.take(class, purpose, access, stagings)
    }

    /// Takes the oldest expired local staging if it may be reused, else a
    /// free slot, else a fresh one: a reused slot's memory is already
    /// touched, while a fresh one costs the page faults of its first write.
    fn take(
        &self,
        class: u8,
        purpose: SlotUse,
        access: TableAccess<'_>,
        stagings: &mut Stagings,
    ) -> Result<Option<SlotRef>, FabricError> {
        let local = access.local;
        let Some(mut table) = self.table(class) else {
            return Ok(None);
        };
        self.reuse_staged(class, &mut table, access, stagings)?;
        let Some(slot) = table.take(purpose) else {
            return Ok(None);
        };
        // Clear the previous occupant's `expires_at` before anyone can scan
        // this slot again: until the new entry is written, a stale expired
        // stamp would let a scan hand the slot out a second time.
        let at = self.slot_addr(class, slot).add(EXPIRES_AT_OFFSET as u64);
        if let Err(e) = local.write(at, &0u64.to_le_bytes()) {
            table.free.push(slot);
            return Err(e);
        }
        table.enter(slot);
        debug_assert!(
            purpose == SlotUse::Tombstone || table.available() >= table.reserve as usize,
            "an entry took a slot of the tombstone reserve"
        );
        Ok(Some(SlotRef {
            node: self.node as u16,
            class,
            slot,
            generation: table.generations[slot as usize],
        }))
    }

    /// Returns a slot that was never published (no ITE ever pointed at it)
    /// for immediate reuse, keeping its generation.
    pub fn release_unpublished(&self, r: SlotRef) {
        debug_assert_eq!(usize::from(r.node), self.node);
        let Some(mut table) = self.table(r.class) else {
            return;
        };
        if table.leave(r.slot) {
            table.in_doubt.retain(|d| d.slot != r.slot);
            table.free.push(r.slot);
        }
    }

    /// Records that the CAS publishing `r` into the ITE at `ite` (installing
    /// `value`) ended with an unknown outcome: the slot is kept until that
    /// CAS can no longer land, then freed if it never did.
    pub fn note_in_doubt(&self, r: SlotRef, ite: RemoteAddr, value: u64) {
        let Some(mut table) = self.table(r.class) else {
            return;
        };
        table.in_doubt.push(InDoubt {
            slot: r.slot,
            ite,
            value,
        });
    }

    /// Whether `r` is allocated now, at its generation (an entry being
    /// written, published, or waiting for reuse).
    #[must_use]
    pub fn holds(&self, r: SlotRef) -> bool {
        usize::from(r.node) == self.node
            && self.table(r.class).is_some_and(|t| {
                t.is_in_use(r.slot) && t.generations.get(r.slot as usize) == Some(&r.generation)
            })
    }

    /// Slots of `class` only tombstones may take (see [`SlotUse`]).
    #[must_use]
    pub fn reserve(&self, class: u8) -> usize {
        self.geometry.reserve(class)
    }

    /// Free (or never used) slots of `class`.
    #[must_use]
    pub fn available(&self, class: u8) -> usize {
        self.table(class).map_or(0, |t| t.available())
    }

    /// Allocated slots of `class` not yet reclaimed (published, staged,
    /// being resolved, or leaked).
    #[must_use]
    pub fn in_use(&self, class: u8) -> usize {
        self.table(class)
            .map_or(0, |t| t.slots as usize - t.available())
    }

    /// The most slots of `class` ever in use at once.
    #[must_use]
    pub fn peak_in_use(&self, class: u8) -> usize {
        self.table(class).map_or(0, |t| t.peak_in_use)
    }

    /// The allocated slots of `class` not yet reclaimed, each at its current
    /// generation (for audits that look for leaks).
    #[must_use]
    pub fn in_use_slots(&self, class: u8) -> Vec<SlotRef> {
        let Some(t) = self.table(class) else {
            return Vec::new();
        };
        t.in_use
            .iter()
            .map(|&slot| SlotRef {
                node: self.node as u16,
                class,
                slot,
                generation: t.generations[slot as usize],
            })
            .collect()
    }

    /// Slots of `class` in all.
    #[must_use]
    pub fn capacity(&self, class: u8) -> usize {
        self.table(class).map_or(0, |t| t.slots as usize)
    }

    /// Number of size classes.
    #[must_use]
    pub fn classes(&self) -> usize {
        self.classes.len()
    }

    /// What recycling did so far.
    #[must_use]
    pub fn recycle_counts(&self) -> RecycleCounts {
        self.counters.snapshot()
    }

    /// The `expires_at` value for a DTE staged at wall time `now_us`
    /// (saturating: validated expiries keep it far from overflow).
    #[must_use]
    pub fn expires_at(&self, now_us: u64) -> u64 {
        now_us.saturating_add(self.expiry_us)
    }
}

/// A configuration of `nodes` nodes with 8 index slots each, for the tests
/// of this module's tables.
#[cfg(test)]
fn small_config(nodes: usize, value_size_max: usize, data_bytes_per_node: usize) -> Config {
    Config {
        nodes,
        index_slots_per_node: 8,
        value_size_max,
        data_bytes_per_node,
        ..Config::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::WallClock;
    use crate::fabric::LocalFabric;

    /// Node 0's tables of `config`, and the memory they live in.
    fn tables(config: &Config) -> (NodeData, LocalFabric) {
        let data = NodeData::new(config, 0).unwrap();
        let fabric = LocalFabric::new(1, &crate::store_regions(config)).unwrap();
        (data, fabric)
    }

    #[test]
    fn a_class_that_does_not_exist_has_nothing_and_panics_nothing() {
        let (data, fabric) = tables(&small_config(1, 256, 1 << 16));
        let clock = WallClock::default();
        let access = TableAccess::alone(&fabric, &clock);
        let none = 9;
        assert_eq!(data.classes(), 1);
        assert_eq!(data.available(none), 0);
        assert_eq!(data.capacity(none), 0);
        assert_eq!(data.in_use(none), 0);
        assert_eq!(data.peak_in_use(none), 0);
        assert!(data.in_use_slots(none).is_empty());
        assert_eq!(data.allocate(none, access).unwrap(), None);
        assert_eq!(data.recycle(none, access).unwrap(), 0);
        let stray = SlotRef {
            node: 0,
            class: none,
            slot: 3,
            generation: 1,
        };
        data.release_unpublished(stray);
        data.note_in_doubt(
            stray,
            RemoteAddr::new(0, crate::layout::region::INDEX, 0),
            1,
        );
        // The real class works, and an unpublished release keeps the
        // generation.
        let r = data.allocate(0, access).unwrap().unwrap();
        assert_eq!(data.in_use(0), 1);
        data.release_unpublished(r);
        assert_eq!(data.in_use(0), 0);
        // A second release of a slot no longer in use changes nothing (it
        // must not put the slot on the free list twice).
        data.release_unpublished(r);
        assert_eq!(data.available(0), data.capacity(0));
        assert_eq!(data.allocate(0, access).unwrap(), Some(r));
        assert_ne!(
            data.allocate(0, access).unwrap().map(|s| s.slot),
            Some(r.slot)
        );
        // Two in use now, after one earlier: the peak is two, and stays.
        assert_eq!(data.peak_in_use(0), 2);
        data.release_unpublished(r);
        assert_eq!((data.in_use(0), data.peak_in_use(0)), (1, 2));
        let f = data.figures(0);
        assert_eq!(
            (f.in_use, f.peak_in_use, f.free),
            (1, 2, data.capacity(0) - 1)
        );
        assert_eq!(f.peak_in_use_bytes(), 2 * data.slot_bytes(0));
    }

    /// Entries leave the tombstone reserve free; tombstones take it, and
    /// a slot a tombstone gives back serves entries again.
    #[test]
    fn entries_leave_the_reserve_to_tombstones() {
        let mut config = small_config(1, 256, 0);
        config.data_bytes_per_node = 4 * config.class_slot_bytes(0);
        config.tombstone_reserve = 2;
        let (data, fabric) = tables(&config);
        let clock = WallClock::default();
        let access = TableAccess::alone(&fabric, &clock);
        let tombstone = |data: &NodeData| {
            data.allocate_for(
                0,
                SlotUse::Tombstone,
                access,
                &mut Stagings::default(),
                &mut 0,
            )
            .unwrap()
        };
        assert_eq!((data.capacity(0), data.reserve(0)), (6, 2));
        let entries: Vec<SlotRef> =
            std::iter::from_fn(|| data.allocate(0, access).unwrap()).collect();
        assert_eq!(entries.len(), 4, "the reserve is not for entries");
        assert_eq!(data.available(0), 2);
        let t1 = tombstone(&data).expect("a tombstone takes the reserve");
        let t2 = tombstone(&data).expect("all of it");
        assert_eq!(tombstone(&data), None, "then the class is full for all");
        assert_eq!(data.figures(0).reserve, 2);
        // An unpublished entry's slot comes back: entries still leave the
        // reserve (now one slot short of it) alone.
        data.release_unpublished(entries[0]);
        assert_eq!(data.allocate(0, access).unwrap(), None);
        data.release_unpublished(t1);
        data.release_unpublished(t2);
        assert!(data.allocate(0, access).unwrap().is_some());
        assert_eq!(data.allocate(0, access).unwrap(), None);
        assert!(tombstone(&data).is_some());
    }
}
