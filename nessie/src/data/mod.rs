//! Data tables: fixed-size DTE slots per size class, and their allocation.
//!
//! Every node owns one data table per size class (see
//! [`Config::size_classes`] for the classes and the policy that sizes them).
//! Clients write new DTEs only into their own node's tables, so allocation is
//! node-local state ([`NodeData`]), shared by the node's clients.
//!
//! A slot is reused only when it is safe: immediately if it was never
//! published (its owner's ITE CAS failed), otherwise once whoever unlinked it
//! has *staged* it (written `expires_at = now + expiry`) and
//! `now > expires_at + max_clock_skew`. Each reuse bumps the slot's
//! generation, which is part of every ITE pointing at it.

mod recycler;

pub use recycler::Recycler;

use crate::clock::Clock;
use crate::fabric::{Fabric, NodeId, RegionId, RegionSpec, RemoteAddr};
use crate::layout::dte::EXPIRES_AT_OFFSET;
use crate::layout::ite::next_generation;
use crate::layout::SlotRef;
use crate::Config;
use std::sync::Mutex;

/// Where the DTE `r` lives, given the slot size of its class.
#[must_use]
pub fn dte_addr(r: SlotRef, slot_bytes: usize) -> RemoteAddr {
    RemoteAddr::new(
        usize::from(r.node),
        RegionId::data(r.class),
        u64::from(r.slot) * slot_bytes as u64,
    )
}

/// The data-table regions a node registers for `config`.
#[must_use]
pub fn data_regions(config: &Config) -> Vec<RegionSpec> {
    (0..config.size_classes().len())
        .map(|class| RegionSpec {
            id: RegionId::data(class as u8),
            len: (config.class_slots(class) * config.class_slot_bytes(class)) as u64,
        })
        .collect()
}

#[derive(Debug)]
struct ClassTable {
    slots: u32,
    next_fresh: u32,
    free: Vec<u32>,
    in_use: Vec<u32>,
    generations: Vec<u16>,
}

impl ClassTable {
    fn take(&mut self) -> Option<u32> {
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
}

/// Allocation state of one node's data tables.
#[derive(Debug)]
pub struct NodeData {
    node: NodeId,
    slot_bytes: Vec<usize>,
    expiry_us: u64,
    skew_us: u64,
    classes: Vec<Mutex<ClassTable>>,
}

impl NodeData {
    /// Empty tables of `node` for `config`.
    #[must_use]
    pub fn new(config: &Config, node: NodeId) -> NodeData {
        let n = config.size_classes().len();
        NodeData {
            node,
            slot_bytes: (0..n).map(|c| config.class_slot_bytes(c)).collect(),
            expiry_us: config.expiry.as_micros() as u64,
            skew_us: config.max_clock_skew.as_micros() as u64,
            classes: (0..n)
                .map(|c| {
                    let slots = config.class_slots(c) as u32;
                    Mutex::new(ClassTable {
                        slots,
                        next_fresh: 0,
                        free: Vec::new(),
                        in_use: Vec::new(),
                        generations: vec![0; slots as usize],
                    })
                })
                .collect(),
        }
    }

    /// Slot bytes of `class`.
    #[must_use]
    pub fn slot_bytes(&self, class: u8) -> usize {
        self.slot_bytes[usize::from(class)]
    }

    fn table(&self, class: u8) -> std::sync::MutexGuard<'_, ClassTable> {
        // A panic while holding the lock leaves the table consistent (every
        // mutation is a single push/pop), so a poisoned lock is still usable.
        self.classes[usize::from(class)]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes a free slot of `class`, scanning for expired slots if none is
    /// free. The slot's generation is bumped. `None` if every slot is in use
    /// and none has expired.
    ///
    /// # Errors
    /// A fabric error while scanning.
    pub fn allocate(
        &self,
        class: u8,
        fabric: &dyn Fabric,
        clock: &dyn Clock,
    ) -> Result<Option<SlotRef>, crate::fabric::FabricError> {
        let mut table = self.table(class);
        let slot = match table.take() {
            Some(s) => s,
            None => {
                self.scan(class, &mut table, fabric, clock.now_us())?;
                match table.take() {
                    Some(s) => s,
                    None => return Ok(None),
                }
            }
        };
        // Clear the previous occupant's `expires_at` before anyone can scan
        // this slot again: until the new entry is written, a stale expired
        // stamp would let a scan hand the slot out a second time.
        let at = RemoteAddr::new(
            self.node,
            RegionId::data(class),
            u64::from(slot) * self.slot_bytes(class) as u64 + EXPIRES_AT_OFFSET as u64,
        );
        if let Err(e) = fabric.write(at, &0u64.to_le_bytes()) {
            table.free.push(slot);
            return Err(e);
        }
        let generation = next_generation(table.generations[slot as usize]);
        table.generations[slot as usize] = generation;
        table.in_use.push(slot);
        Ok(Some(SlotRef {
            node: self.node as u16,
            class,
            slot,
            generation,
        }))
    }

    /// Returns a slot that was never published (no ITE ever pointed at it)
    /// for immediate reuse.
    pub fn release_unpublished(&self, r: SlotRef) {
        debug_assert_eq!(usize::from(r.node), self.node);
        let mut table = self.table(r.class);
        if let Some(i) = table.in_use.iter().rposition(|&s| s == r.slot) {
            table.in_use.swap_remove(i);
            table.free.push(r.slot);
        }
    }

    /// Free (or never used) slots of `class`.
    #[must_use]
    pub fn available(&self, class: u8) -> usize {
        self.table(class).available()
    }

    /// Slots of `class` in all.
    #[must_use]
    pub fn capacity(&self, class: u8) -> usize {
        self.table(class).slots as usize
    }

    /// Number of size classes.
    #[must_use]
    pub fn classes(&self) -> usize {
        self.classes.len()
    }

    /// Scans `class` for expired slots and frees them. Returns how many.
    ///
    /// # Errors
    /// A fabric error reading an `expires_at` word.
    pub fn recycle(
        &self,
        class: u8,
        fabric: &dyn Fabric,
        now_us: u64,
    ) -> Result<usize, crate::fabric::FabricError> {
        let mut table = self.table(class);
        self.scan(class, &mut table, fabric, now_us)
    }

    fn scan(
        &self,
        class: u8,
        table: &mut ClassTable,
        fabric: &dyn Fabric,
        now_us: u64,
    ) -> Result<usize, crate::fabric::FabricError> {
        let slot_bytes = self.slot_bytes(class);
        let before = table.free.len();
        let mut i = 0;
        while i < table.in_use.len() {
            let slot = table.in_use[i];
            let at = RemoteAddr::new(
                self.node,
                RegionId::data(class),
                u64::from(slot) * slot_bytes as u64 + EXPIRES_AT_OFFSET as u64,
            );
            let mut word = [0u8; 8];
            fabric.read(at, &mut word)?;
            let expires_at = u64::from_le_bytes(word);
            if expires_at != 0 && now_us > expires_at.saturating_add(self.skew_us) {
                table.in_use.swap_remove(i);
                table.free.push(slot);
            } else {
                i += 1;
            }
        }
        Ok(table.free.len() - before)
    }

    /// The `expires_at` value for a DTE staged now.
    #[must_use]
    pub fn expires_at(&self, now_us: u64) -> u64 {
        now_us + self.expiry_us
    }
}
