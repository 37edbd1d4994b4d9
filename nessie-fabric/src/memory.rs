//! Word-atomic access to registered memory, shared by every backend (the
//! `tcp` fabric's service executes peers' verbs through the same
//! [`MemoryMap`]). This file, with `memory/copy.rs`, and the backends'
//! allocation and mapping code are the only places of the crate that use
//! `unsafe`.
//!
//! Every access loads or stores each 8-byte aligned word whole: READ copies
//! with relaxed loads (aligned vector loads on x86-64, `memory/copy.rs`)
//! then an acquire fence, WRITE with a release fence then relaxed stores,
//! CAS is `compare_exchange` (sequentially consistent). Peers may touch
//! the same words at any time, even from other processes, so plain
//! (non-atomic) accesses would be data races.
#![expect(
    unsafe_code,
    reason = "native atomic words over registered memory (mappings, raw pointers)"
)]

use super::{check_bounds, FabricError, NodeId, RegionId, RegionSpec, RemoteAddr, Verb};
use crate::wire::WORD;
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// Verbs of a batch a memory map resolves, and whose READs it asks for,
/// before it runs them (see [`MemoryMap::post`]): more than a key has
/// candidates.
const ASKED_AHEAD: usize = 8;

/// The fewest bytes [`RegionMemory::write_streaming`] writes past the
/// cache (docs/design.md#small-values-cached).
#[cfg(target_arch = "x86_64")]
const STREAM_MIN_BYTES: usize = 4096;

/// How many of `parts` a streaming WRITE stores through the cache: the
/// first `cached` (at most all), or all of them when fewer than
/// [`STREAM_MIN_BYTES`] would be left to stream.
#[cfg(target_arch = "x86_64")]
fn parts_to_cache(parts: &[&[u8]], cached: usize) -> usize {
    let cached = cached.min(parts.len());
    let streamed: usize = parts[cached..].iter().map(|p| p.len()).sum();
    if streamed < STREAM_MIN_BYTES {
        parts.len()
    } else {
        cached
    }
}

/// Words in the smallest page a region's memory may have.
const PAGE_WORDS: usize = 4096 / WORD;

#[cfg(target_arch = "x86_64")]
mod copy;
#[cfg(target_arch = "x86_64")]
use copy::{load_scatter, load_words, prefetch, stream_words};

/// A span of memory registered as one region: word aligned, valid for the
/// lifetime of the backend that owns it, and accessed only atomically.
#[derive(Debug)]
pub(crate) struct RegionMemory {
    base: *mut u64,
    words: usize,
    /// A word that says the node's host is lost (a region file's header on
    /// `shm`, where a lost host is emulated): nonzero refuses every verb.
    lost: Option<*mut u64>,
}

// SAFETY: the memory is only ever accessed through 64-bit atomics, so sharing
// the pointer between threads cannot create data races; the owning backend
// keeps the memory alive at least as long as this value.
unsafe impl Send for RegionMemory {}
// SAFETY: as above; every method takes `&self` and uses atomic accesses only.
unsafe impl Sync for RegionMemory {}

impl RegionMemory {
    /// Wraps `words` words at `base`.
    ///
    /// # Safety
    /// `base` must be 8-byte aligned and valid for reads and writes of
    /// `words * 8` bytes for as long as the returned value lives, and all
    /// other accesses to that memory must be atomic too.
    pub(crate) unsafe fn new(base: *mut u64, words: usize) -> RegionMemory {
        debug_assert!(base as usize % WORD == 0);
        RegionMemory {
            base,
            words,
            lost: None,
        }
    }

    /// The same memory, refused while the word at `lost` is nonzero.
    ///
    /// # Safety
    /// `lost` must be 8-byte aligned, valid for as long as the returned
    /// value lives, and accessed only atomically.
    pub(crate) unsafe fn with_lost_word(self, lost: *mut u64) -> RegionMemory {
        debug_assert!(lost as usize % WORD == 0);
        RegionMemory {
            lost: Some(lost),
            ..self
        }
    }

    /// Whether the node's host is lost (emulated; `shm` only).
    fn is_lost(&self) -> bool {
        self.lost.is_some_and(|w| {
            // SAFETY: aligned, alive and atomic only (`with_lost_word`).
            unsafe { AtomicU64::from_ptr(w) }.load(Ordering::Acquire) != 0
        })
    }

    pub(crate) fn len(&self) -> u64 {
        (self.words * WORD) as u64
    }

    fn word(&self, index: usize) -> &AtomicU64 {
        assert!(index < self.words, "word index checked by MemoryMap");
        // SAFETY: `index < words`, so the pointer is in bounds and aligned
        // (constructor contract); the memory outlives `&self` and is only
        // accessed atomically.
        unsafe { AtomicU64::from_ptr(self.base.add(index)) }
    }

    /// The words `first..first + n`, checked once.
    fn words(&self, first: usize, n: usize) -> *mut u64 {
        assert!(
            first.checked_add(n).is_some_and(|end| end <= self.words),
            "word range checked by MemoryMap"
        );
        // SAFETY: `first <= words` (asserted), so the offset stays within
        // (or one past) the allocation.
        unsafe { self.base.add(first) }
    }

    fn read(&self, first_word: usize, buf: &mut [u8]) {
        self.read_scatter(first_word, buf, &mut []);
    }

    /// [`RegionMemory::read`] into two buffers, `head` first.
    fn read_scatter(&self, first_word: usize, head: &mut [u8], tail: &mut [u8]) {
        let base = self.words(first_word, (head.len() + tail.len()) / WORD);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the words `base..` of both parts were checked by `words`;
        // aligned and live per the constructor contract.
        unsafe {
            // A plain READ asks for its lines ahead only from 1 KiB on; a
            // scatter READ asks for both parts' first lines at once.
            if tail.is_empty() {
                load_words(base, head);
            } else {
                load_scatter(base, head, tail);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        for (i, chunk) in head
            .chunks_exact_mut(WORD)
            .chain(tail.chunks_exact_mut(WORD))
            .enumerate()
        {
            // SAFETY: `i` is within the words checked by `words`; aligned
            // and live per the constructor contract; accessed atomically.
            let w = unsafe { AtomicU64::from_ptr(base.add(i)) }.load(Ordering::Relaxed);
            // A byte-for-byte copy: native order in, native order out.
            #[allow(clippy::disallowed_methods, reason = "memory is native words")]
            chunk.copy_from_slice(&w.to_ne_bytes());
        }
        // One fence orders the whole copy like acquire loads would, word by
        // word, at the cost of one.
        fence(Ordering::Acquire);
    }

    /// Asks for the cache line of word `word` (a hint; see
    /// [`MemoryMap::post`]).
    fn ask_for(&self, word: usize) {
        let at = self.words(word, 0);
        #[cfg(target_arch = "x86_64")]
        prefetch(at.cast(), WORD);
        #[cfg(not(target_arch = "x86_64"))]
        let _ = at;
    }

    fn write(&self, first_word: usize, data: &[u8]) {
        let base = self.words(first_word, data.len() / WORD);
        // Release before the stores: a peer that reads any of them with
        // acquire ordering sees everything written before this WRITE.
        fence(Ordering::Release);
        for (i, chunk) in data.chunks_exact(WORD).enumerate() {
            let mut b = [0u8; WORD];
            b.copy_from_slice(chunk);
            #[allow(clippy::disallowed_methods, reason = "memory is native words")]
            let w = u64::from_ne_bytes(b);
            // SAFETY: as in `read`.
            unsafe { AtomicU64::from_ptr(base.add(i)) }.store(w, Ordering::Relaxed);
        }
    }

    /// Like [`Self::write`] for the parts one after the other, with
    /// non-temporal 64-bit stores on x86-64 for all but the first `cached`
    /// parts. Those (an entry's header and key) take ordinary stores,
    /// because the writer touches them again at once (its state CAS, later
    /// its stamp): streamed, each of those would be a miss to memory. Each non-temporal
    /// store is an aligned 8-byte store, single-copy atomic like the relaxed
    /// stores of `write`; they are weakly ordered, so a store fence before
    /// them keeps the release ordering of `write`, and one after them makes
    /// the whole image visible before any later verb of this thread (the
    /// CAS that links it). Elsewhere it is `write`. Fewer than
    /// [`STREAM_MIN_BYTES`] past the cached parts take ordinary stores too.
    fn write_streaming(&self, first_word: usize, parts: &[&[u8]], cached: usize) {
        let words: usize = parts.iter().map(|p| p.len() / WORD).sum();
        let base = self.words(first_word, words);
        let mut at = 0;
        #[cfg(target_arch = "x86_64")]
        {
            // The cached parts with ordinary stores (see above).
            let (head, rest) = parts.split_at(parts_to_cache(parts, cached));
            for part in head {
                self.write(first_word + at, part);
                at += part.len() / WORD;
            }
            if rest.is_empty() {
                debug_assert_eq!(at, words);
                return;
            }
            // SAFETY: `sfence` only orders stores.
            unsafe { std::arch::asm!("sfence", options(nostack, preserves_flags)) };
            for part in rest {
                // SAFETY: the parts' words add up to `words`, checked by
                // `self.words`, so `at + part.len() / WORD <= words`.
                unsafe { stream_words(base.add(at), part) };
                at += part.len() / WORD;
            }
            // SAFETY: as above.
            unsafe { std::arch::asm!("sfence", options(nostack, preserves_flags)) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = cached;
        #[cfg(not(target_arch = "x86_64"))]
        for part in parts {
            self.write(first_word + at, part);
            at += part.len() / WORD;
        }
        debug_assert_eq!(at, words);
        let _ = base;
    }

    /// Faults in every page of the words `first..first + n` for writing,
    /// changing none: one word of each page is swapped for itself by a
    /// successful CAS, a write to the page as far as the kernel is
    /// concerned and a no-op to any peer writing the same word at the same
    /// time (its value wins, and the CAS tries again). Not an atomic add of
    /// zero: LLVM lowers an idempotent read-modify-write to a fenced load,
    /// which faults a page in for reading only, and the first real write
    /// would fault again.
    fn prefault(&self, first: usize, n: usize) {
        if n == 0 {
            return;
        }
        let base = self.words(first, n);
        let rewrite = |i: usize| {
            // SAFETY: `i < n`, within the range checked by `words`; aligned
            // and live per the constructor contract; accessed atomically.
            let word = unsafe { AtomicU64::from_ptr(base.add(i)) };
            let mut seen = word.load(Ordering::Relaxed);
            while let Err(now) =
                word.compare_exchange_weak(seen, seen, Ordering::Relaxed, Ordering::Relaxed)
            {
                seen = now;
            }
        };
        // Words a page apart, and the last one: every page the range
        // touches gets one.
        (0..n).step_by(PAGE_WORDS).for_each(rewrite);
        rewrite(n - 1);
    }

    fn cas(&self, word: usize, expected: u64, new: u64) -> u64 {
        // Layout words are little-endian in memory.
        match self.word(word).compare_exchange(
            expected.to_le(),
            new.to_le(),
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            Ok(old) | Err(old) => u64::from_le(old),
        }
    }
}

/// The regions of every node, indexed by node and region id, with the bounds
/// and alignment checks every verb goes through.
#[derive(Debug, Default)]
pub(crate) struct MemoryMap {
    nodes: Vec<Vec<Option<RegionMemory>>>,
}

impl MemoryMap {
    pub(crate) fn new(nodes: usize) -> MemoryMap {
        MemoryMap {
            nodes: (0..nodes).map(|_| Vec::new()).collect(),
        }
    }

    pub(crate) fn insert(&mut self, node: NodeId, region: RegionId, memory: RegionMemory) {
        let slots = &mut self.nodes[node];
        let i = usize::from(region.0);
        if slots.len() <= i {
            slots.resize_with(i + 1, || None);
        }
        slots[i] = Some(memory);
    }

    pub(crate) fn node_count(&self) -> usize {
        self.nodes.len()
    }

    fn region(&self, node: NodeId, region: RegionId) -> Result<&RegionMemory, FabricError> {
        // `ok_or_else`: no error is built on the path every verb takes.
        let slots = self
            .nodes
            .get(node)
            .ok_or_else(|| FabricError::UnknownNode {
                node,
                nodes: self.nodes.len(),
            })?;
        slots
            .get(usize::from(region.0))
            .and_then(Option::as_ref)
            .ok_or_else(|| FabricError::UnknownRegion { node, region })
    }

    pub(crate) fn region_len(&self, node: NodeId, region: RegionId) -> Option<u64> {
        self.region(node, region).ok().map(RegionMemory::len)
    }

    /// Checks a verb of `len` bytes at `addr`; returns the region and the
    /// index of its first word.
    fn resolve(&self, addr: RemoteAddr, len: u64) -> Result<(&RegionMemory, usize), FabricError> {
        let mem = self.region(addr.node, addr.region)?;
        if mem.is_lost() {
            return Err(FabricError::Lost { node: addr.node });
        }
        check_bounds(addr, len, mem.len())?;
        Ok((mem, (addr.offset / WORD as u64) as usize))
    }

    /// Checks a verb of `len` bytes at `addr` without executing it.
    pub(crate) fn check(&self, addr: RemoteAddr, len: u64) -> Result<(), FabricError> {
        self.resolve(addr, len).map(|_| ())
    }

    pub(crate) fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
        let (mem, word) = self.resolve(addr, buf.len() as u64)?;
        mem.read(word, buf);
        Ok(())
    }

    pub(crate) fn read_scatter(
        &self,
        addr: RemoteAddr,
        head: &mut [u8],
        tail: &mut [u8],
    ) -> Result<(), FabricError> {
        let (mem, word) = self.resolve(addr, (head.len() + tail.len()) as u64)?;
        mem.read_scatter(word, head, tail);
        Ok(())
    }

    /// Runs a batch in order (see [`super::Fabric::post`]), a few verbs at
    /// a time: resolves them, asks for the first cache line of each READ,
    /// then runs them. A NIC issues a batch's READs together; loaded one
    /// after another, each READ's first miss (a key's candidates lie on
    /// unrelated lines) would wait for the one before. A verb that does
    /// not resolve fails the batch when its turn comes, after the verbs
    /// before it ran, as one by one.
    pub(crate) fn post(&self, batch: &mut [Verb<'_>]) -> Result<(), FabricError> {
        for chunk in batch.chunks_mut(ASKED_AHEAD) {
            let targets: [Option<(&RegionMemory, usize)>; ASKED_AHEAD] = std::array::from_fn(|i| {
                let verb = chunk.get(i)?;
                self.resolve(verb.addr(), verb.bytes_moved() as u64).ok()
            });
            for (verb, target) in chunk.iter().zip(&targets) {
                if let (Verb::Read { .. } | Verb::ReadScatter { .. }, Some((mem, word))) =
                    (verb, target)
                {
                    mem.ask_for(*word);
                }
            }
            for (verb, target) in chunk.iter_mut().zip(targets) {
                let Some((mem, word)) = target else {
                    // Resolves again for its error (the rare path).
                    return self
                        .resolve(verb.addr(), verb.bytes_moved() as u64)
                        .map(|_| ());
                };
                match verb {
                    Verb::Read { buf, .. } => mem.read(word, buf),
                    Verb::ReadScatter { head, tail, .. } => mem.read_scatter(word, head, tail),
                    Verb::Write { data, .. } => mem.write(word, data),
                    Verb::Cas {
                        expected, new, old, ..
                    } => *old = mem.cas(word, *expected, *new),
                }
            }
        }
        Ok(())
    }

    pub(crate) fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
        let (mem, word) = self.resolve(addr, data.len() as u64)?;
        mem.write(word, data);
        Ok(())
    }

    /// A gathered WRITE with stores that bypass the cache where the CPU
    /// has them (see [`super::Fabric::write_streaming`]).
    pub(crate) fn write_streaming(
        &self,
        addr: RemoteAddr,
        parts: &[&[u8]],
        cached: usize,
    ) -> Result<(), FabricError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let (mem, word) = self.resolve(addr, len as u64)?;
        if let Some(odd) = parts.iter().find(|p| p.len() % WORD != 0) {
            return Err(FabricError::Misaligned {
                node: addr.node,
                region: addr.region,
                offset: addr.offset,
                len: odd.len() as u64,
            });
        }
        mem.write_streaming(word, parts, cached);
        Ok(())
    }

    /// Faults in the pages of `len` bytes at `addr` (see
    /// [`super::Fabric::prefault`]).
    pub(crate) fn prefault(&self, addr: RemoteAddr, len: u64) -> Result<(), FabricError> {
        let (mem, word) = self.resolve(addr, len)?;
        mem.prefault(word, (len / WORD as u64) as usize);
        Ok(())
    }

    pub(crate) fn cas(
        &self,
        addr: RemoteAddr,
        expected: u64,
        new: u64,
    ) -> Result<u64, FabricError> {
        let (mem, word) = self.resolve(addr, WORD as u64)?;
        Ok(mem.cas(word, expected, new))
    }
}

/// Zeroed heap memory for the regions of some nodes, reached through a
/// [`MemoryMap`] (the `local` backend hosts every node, `tcp` its own).
#[derive(Debug)]
pub(crate) struct HeapRegions {
    map: MemoryMap,
    // Owned allocations; `map` points into them.
    allocations: Vec<*mut [u64]>,
    /// Nonzero while the memory refuses every verb (see
    /// [`HeapRegions::new_gated`]); its regions point at it.
    gate: Option<Box<AtomicU64>>,
}

// SAFETY: the raw allocations are only freed in `Drop` and otherwise accessed
// through `map`, whose accesses are atomic.
unsafe impl Send for HeapRegions {}
// SAFETY: as above.
unsafe impl Sync for HeapRegions {}

impl HeapRegions {
    /// Registers every region of `regions` for each node of `hosted`, in a
    /// map of `nodes` nodes, as zeroed memory (allocated lazily by the OS).
    ///
    /// # Errors
    /// [`FabricError::OutOfMemory`] when a region cannot be allocated.
    ///
    /// # Panics
    /// If a region length is not a multiple of 8 (a caller bug).
    pub(crate) fn new(
        nodes: usize,
        hosted: &[NodeId],
        regions: &[RegionSpec],
    ) -> Result<HeapRegions, FabricError> {
        // Built in place so that `Drop` frees what was allocated before a
        // failure.
        HeapRegions::build(nodes, hosted, regions, None)
    }

    /// As [`HeapRegions::new`], with a gate: while closed, every verb to
    /// this memory is refused ([`FabricError::Lost`]); `closed` is its
    /// first state ([`HeapRegions::set_closed`]).
    ///
    /// # Errors
    /// As [`HeapRegions::new`].
    pub(crate) fn new_gated(
        nodes: usize,
        hosted: &[NodeId],
        regions: &[RegionSpec],
        closed: bool,
    ) -> Result<HeapRegions, FabricError> {
        HeapRegions::build(
            nodes,
            hosted,
            regions,
            Some(Box::new(AtomicU64::new(u64::from(closed)))),
        )
    }

    /// Opens or closes the gate of memory made by
    /// [`HeapRegions::new_gated`] (nothing for other memory).
    pub(crate) fn set_closed(&self, closed: bool) {
        if let Some(gate) = &self.gate {
            gate.store(u64::from(closed), Ordering::Release);
        }
    }

    fn build(
        nodes: usize,
        hosted: &[NodeId],
        regions: &[RegionSpec],
        gate: Option<Box<AtomicU64>>,
    ) -> Result<HeapRegions, FabricError> {
        let mut heap = HeapRegions {
            map: MemoryMap::new(nodes),
            allocations: Vec::new(),
            gate,
        };
        for &node in hosted {
            for spec in regions {
                assert_eq!(
                    spec.len % WORD as u64,
                    0,
                    "region length must be whole words"
                );
                let out_of_memory = || FabricError::OutOfMemory {
                    node,
                    region: spec.id,
                    bytes: spec.len,
                };
                let words = usize::try_from(spec.len / WORD as u64).map_err(|_| out_of_memory())?;
                let raw = zeroed_words(words).ok_or_else(out_of_memory)?;
                heap.allocations.push(raw);
                // SAFETY: `raw` is a live, u64-aligned allocation of `words`
                // words, freed only in `Drop` after `map` is gone, and only
                // accessed through `map`'s atomics.
                let mut memory = unsafe { RegionMemory::new(raw.cast::<u64>(), words) };
                if let Some(gate) = &heap.gate {
                    // SAFETY: the gate is a boxed atomic word owned by
                    // `heap`, which outlives `map` (dropped first), and is
                    // only accessed atomically.
                    memory = unsafe { memory.with_lost_word(gate.as_ptr()) };
                }
                heap.map.insert(node, spec.id, memory);
            }
        }
        Ok(heap)
    }

    pub(crate) fn memory_map(&self) -> &MemoryMap {
        &self.map
    }
}

impl Drop for HeapRegions {
    fn drop(&mut self) {
        self.map = MemoryMap::default();
        for raw in self.allocations.drain(..) {
            // SAFETY: `raw` came from `zeroed_words`: the global allocator's
            // memory for exactly this slice layout (or an empty boxed
            // slice), so a `Box` may own and free it, exactly once; no
            // RegionMemory points at it any more.
            drop(unsafe { Box::from_raw(raw) });
        }
    }
}

/// `words` zeroed words on the heap, as a boxed slice's raw pointer, or
/// `None` when the allocator refuses (too large for a layout, or no memory).
/// Zeroed allocation leaves the pages to the OS until first touched, where
/// `vec![0; n]` would abort the process on failure.
fn zeroed_words(words: usize) -> Option<*mut [u64]> {
    if words == 0 {
        return Some(Box::into_raw(Box::<[u64]>::default()));
    }
    let layout = std::alloc::Layout::array::<u64>(words).ok()?;
    #[allow(
        clippy::cast_ptr_alignment,
        reason = "allocated with the alignment of u64"
    )]
    // SAFETY: the layout has a non-zero size (`words > 0`).
    let base = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<u64>();
    (!base.is_null()).then(|| std::ptr::slice_from_raw_parts_mut(base, words))
}

/// Implements [`super::Fabric`] for a backend whose `memory_map()` method
/// returns a [`MemoryMap`] holding every node's memory in this address space
/// (after `@`, the backend's own versions of other methods).
macro_rules! impl_fabric_for_memory_map {
    ($backend:ty) => {
        $crate::memory::impl_fabric_for_memory_map!($backend, @);
    };
    ($backend:ty, @ $($extra:item)*) => {
        impl $crate::Fabric for $backend {
            $($extra)*

            fn nodes(&self) -> usize {
                self.memory_map().node_count()
            }

            fn region_len(&self, node: $crate::NodeId, region: $crate::RegionId) -> Option<u64> {
                self.memory_map().region_len(node, region)
            }

            fn read(
                &self,
                addr: $crate::RemoteAddr,
                buf: &mut [u8],
            ) -> Result<(), $crate::FabricError> {
                self.memory_map().read(addr, buf)
            }

            fn read_scatter(
                &self,
                addr: $crate::RemoteAddr,
                head: &mut [u8],
                tail: &mut [u8],
            ) -> Result<(), $crate::FabricError> {
                self.memory_map().read_scatter(addr, head, tail)
            }

            fn post(&self, batch: &mut [$crate::Verb<'_>]) -> Result<(), $crate::FabricError> {
                self.memory_map().post(batch)
            }

            fn keeps_batch_order(&self) -> bool {
                // `MemoryMap::post` runs a batch's verbs one after another.
                true
            }

            fn write(
                &self,
                addr: $crate::RemoteAddr,
                data: &[u8],
            ) -> Result<(), $crate::FabricError> {
                self.memory_map().write(addr, data)
            }

            fn write_streaming(
                &self,
                addr: $crate::RemoteAddr,
                parts: &[&[u8]],
                cached: usize,
            ) -> Result<(), $crate::FabricError> {
                self.memory_map().write_streaming(addr, parts, cached)
            }

            fn prefault(
                &self,
                addr: $crate::RemoteAddr,
                len: u64,
            ) -> Result<(), $crate::FabricError> {
                self.memory_map().prefault(addr, len)
            }

            fn cas(
                &self,
                addr: $crate::RemoteAddr,
                expected: u64,
                new: u64,
            ) -> Result<u64, $crate::FabricError> {
                self.memory_map().cas(addr, expected, new)
            }
        }
    };
}
pub(crate) use impl_fabric_for_memory_map;

impl MemoryMap {
    fn memory_map(&self) -> &MemoryMap {
        self
    }
}

// A node's own memory is a fabric of its own: the `tcp` backend executes
// verbs on it without the network.
impl_fabric_for_memory_map!(MemoryMap);

#[cfg(test)]
mod tests;
