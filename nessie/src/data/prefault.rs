//! Faulting in, in the background, the fresh slots each class hands out
//! next, so that a write into a slot never used before does not pay the
//! page faults of a first touch in the operation that writes it
//! (docs/design.md#allocation).
//!
//! The window ahead of a class's next fresh slot is twice the fresh slots
//! the class handed out since the last period, and at least
//! [`WINDOW_MIN_BYTES`]: it follows the rate of allocation and leaves the
//! tables sparse (an idle class faults in one small window only).
//!
//! One call always keeps pace, faulting in as many slots past the next
//! fresh one as the class handed out since the last call; the margin
//! beyond them it faults in, a chunk at a time, only while the call has
//! taken less than one recycler period. Unbounded, a large window made the
//! period longer, the longer period let more fresh slots go out, and those
//! made the next window larger still, while the scans that return other
//! nodes' stagings waited behind it.

use super::{ClassTable, NodeData};
use crate::fabric::{Fabric, FabricError};
use std::time::Instant;

/// The smallest window of a class, in bytes.
pub(super) const WINDOW_MIN_BYTES: usize = 256 << 10;

/// Bytes faulted in between two looks at the time spent.
const CHUNK_BYTES: usize = 1 << 20;

impl NodeData {
    /// Fresh slots `class` handed out since the last prefault (0 for a
    /// class the node does not have).
    pub(super) fn fresh_since_prefault(&self, class: u8) -> usize {
        self.table(class)
            .map_or(0, |t| t.fresh_since_prefault() as usize)
    }

    /// Faults in the window of fresh slots each class hands out next
    /// (see the module's documentation) through `local`, the node's own
    /// memory, the margin only within its time budget; returns how many
    /// slots it faulted in. Slots already faulted in, or handed out
    /// meanwhile, are not touched again.
    ///
    /// # Errors
    /// The first failed prefault (the other classes are still done).
    pub fn prefault_ahead(&self, local: &dyn Fabric) -> Result<u64, FabricError> {
        let started = Instant::now();
        let mut faulted = 0;
        let mut first_error = None;
        for class in 0..self.classes() as u8 {
            let slot_bytes = self.slot_bytes(class);
            let Some((from, paced, to)) = self.table(class).map(|mut t| {
                let taken = t.fresh_since_prefault();
                t.fresh_seen = t.next_fresh;
                let least = (WINDOW_MIN_BYTES / slot_bytes).max(1) as u32;
                let ahead = |n: u32| t.next_fresh.saturating_add(n).min(t.slots);
                let to = ahead(least.max(taken.saturating_mul(2)));
                (t.prefaulted.max(t.next_fresh), ahead(least.max(taken)), to)
            }) else {
                continue;
            };
            let chunk = (CHUNK_BYTES / slot_bytes).max(1) as u32;
            let mut at = from;
            loop {
                let until = if started.elapsed() < self.prefault_budget {
                    to
                } else {
                    paced
                };
                if at >= until {
                    break;
                }
                let end = until.min(at.saturating_add(chunk));
                let len = u64::from(end - at) * slot_bytes as u64;
                if let Err(e) = local.prefault(self.slot_addr(class, at), len) {
                    first_error.get_or_insert(e);
                    break;
                }
                faulted += u64::from(end - at);
                if let Some(mut t) = self.table(class) {
                    t.prefaulted = t.prefaulted.max(end);
                }
                at = end;
            }
            debug_assert!(
                at >= paced || first_error.is_some(),
                "a prefault keeps pace with the allocations, out of time or not"
            );
        }
        first_error.map_or(Ok(faulted), Err)
    }

    /// Sets how long one prefault call may take (the tests' way to run
    /// out of time at once).
    #[cfg(test)]
    pub(super) fn set_prefault_budget(&mut self, budget: std::time::Duration) {
        self.prefault_budget = budget;
    }
}

impl ClassTable {
    /// Fresh slots handed out since the last prefault took its window.
    fn fresh_since_prefault(&self) -> u32 {
        self.next_fresh - self.fresh_seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::WallClock;
    use crate::data::Stagings;
    use crate::data::{small_config, SlotUse, TableAccess};
    use crate::fabric::{LocalFabric, RemoteAddr};
    use std::sync::Mutex;

    /// The node's own memory, recording each prefault.
    #[derive(Debug)]
    struct Recorded {
        memory: LocalFabric,
        prefaults: Mutex<Vec<(RemoteAddr, u64)>>,
    }

    impl Fabric for Recorded {
        fn nodes(&self) -> usize {
            self.memory.nodes()
        }
        fn region_len(&self, node: usize, region: crate::fabric::RegionId) -> Option<u64> {
            self.memory.region_len(node, region)
        }
        fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
            self.memory.read(addr, buf)
        }
        fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
            self.memory.write(addr, data)
        }
        fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
            self.memory.cas(addr, expected, new)
        }
        fn prefault(&self, addr: RemoteAddr, len: u64) -> Result<(), FabricError> {
            self.prefaults.lock().unwrap().push((addr, len));
            self.memory.prefault(addr, len)
        }
    }

    /// The window starts at the smallest size, moves ahead of the slots
    /// handed out, grows with the rate of allocation, never faults a slot
    /// in twice and stops at the table's end.
    #[test]
    fn the_window_follows_allocation_and_faults_each_slot_in_once() {
        let mut config = small_config(1, 256, 0);
        let slot_bytes = config.class_slot_bytes(0);
        let slots = 16 * WINDOW_MIN_BYTES / slot_bytes;
        config.data_bytes_per_node = slots * slot_bytes;
        let data = NodeData::new(&config, 0).unwrap();
        let fabric = Recorded {
            memory: LocalFabric::new(1, &crate::store_regions(&config)).unwrap(),
            prefaults: Mutex::new(Vec::new()),
        };
        let least = (WINDOW_MIN_BYTES / slot_bytes) as u64;
        // Class 0's prefaults since the last look, chunks that follow one
        // another joined.
        let class0 = |f: &Recorded| {
            let mut p = f.prefaults.lock().unwrap();
            let mut mine: Vec<(RemoteAddr, u64)> = Vec::new();
            for &(a, len) in p
                .iter()
                .filter(|(a, _)| a.region == crate::layout::region::data(0))
            {
                match mine.last_mut() {
                    Some((b, n)) if b.add(*n) == a => *n += len,
                    _ => mine.push((a, len)),
                }
            }
            p.clear();
            mine
        };
        data.prefault_ahead(&fabric).unwrap();
        assert_eq!(
            class0(&fabric),
            [(data.slot_addr(0, 0), least * slot_bytes as u64)],
            "the smallest window from the first slot"
        );
        assert_eq!(data.prefault_ahead(&fabric).unwrap(), 0);
        assert!(class0(&fabric).is_empty(), "nothing twice");
        // Hand out half a window more than the window: the next one covers
        // twice that from the next fresh slot, from where the last ended.
        let clock = WallClock::default();
        let access = TableAccess::alone(&fabric, &clock);
        let mut stagings = Stagings::default();
        let mut take = |n: u64| {
            for _ in 0..n {
                data.take(0, SlotUse::Entry, access, &mut stagings)
                    .unwrap()
                    .expect("a fresh slot");
            }
        };
        let window = |from: u64, to: u64| {
            let to = to.min(data.capacity(0) as u64);
            (
                data.slot_addr(0, from as u32),
                (to - from) * slot_bytes as u64,
            )
        };
        let first = least + least / 2;
        take(first);
        let faulted = data.prefault_ahead(&fabric).unwrap();
        assert_eq!(class0(&fabric), [window(first, first + 2 * first)]);
        assert_eq!(faulted, 2 * first, "the slots faulted in, every class");
        // Then twice what was handed out since, from where the last
        // window ended, up to the table's end.
        take(2 * first);
        let next_fresh = 3 * first;
        data.prefault_ahead(&fabric).unwrap();
        assert_eq!(
            class0(&fabric),
            [window(next_fresh, next_fresh + 2 * (2 * first))]
        );
        // Every slot an entry may take: the last window is the tombstone
        // reserve, up to the table's end, and then there is nothing left.
        let end = data.capacity(0) as u64;
        let entries = end - data.reserve(0) as u64;
        take(entries - next_fresh);
        data.prefault_ahead(&fabric).unwrap();
        assert_eq!(class0(&fabric), [window(entries, end)]);
        data.prefault_ahead(&fabric).unwrap();
        assert!(class0(&fabric).is_empty(), "nothing past the end");
    }

    /// A call out of time still keeps pace: it faults in as many slots
    /// past the next fresh one as the class handed out since the last call,
    /// and the margin beyond them (as many again) only with time left.
    #[test]
    fn a_prefault_out_of_time_keeps_pace_without_its_margin() {
        let config = small_config(1, 256, 16 << 20);
        for (budget, window) in [
            (std::time::Duration::ZERO, 1),
            (std::time::Duration::from_secs(60), 2),
        ] {
            let mut data = NodeData::new(&config, 0).unwrap();
            let fabric = Recorded {
                memory: LocalFabric::new(1, &crate::store_regions(&config)).unwrap(),
                prefaults: Mutex::new(Vec::new()),
            };
            data.set_prefault_budget(budget);
            let taken = 3 * (WINDOW_MIN_BYTES / data.slot_bytes(0)) as u64;
            let clock = WallClock::default();
            let access = TableAccess::alone(&fabric.memory, &clock);
            for _ in 0..taken {
                data.take(0, SlotUse::Entry, access, &mut Stagings::default())
                    .unwrap()
                    .expect("a fresh slot");
            }
            data.prefault_ahead(&fabric).unwrap();
            let class0: u64 = fabric
                .prefaults
                .lock()
                .unwrap()
                .iter()
                .filter(|(a, _)| a.region == crate::layout::region::data(0))
                .map(|(_, len)| len / data.slot_bytes(0) as u64)
                .sum();
            assert_eq!(class0, window * taken, "budget {budget:?}");
            // 0.75 MiB a call out of time, 1.5 MiB with time: a chunk is
            // 1 MiB, so that the time is looked at every MiB.
            let calls = fabric
                .prefaults
                .lock()
                .unwrap()
                .iter()
                .filter(|(a, _)| a.region == crate::layout::region::data(0))
                .count();
            assert_eq!(calls, window as usize, "budget {budget:?}");
        }
    }
}
