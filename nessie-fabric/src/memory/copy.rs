//! The copies between registered memory and a caller's bytes that run at
//! vector speed on x86-64 (docs/design.md#word-copies): READ's loads, and
//! the non-temporal stores of a streamed WRITE. Both keep the guarantee the
//! protocol needs, that every aligned word is loaded or stored whole.

use super::WORD;
use std::sync::atomic::{AtomicU64, Ordering};

/// How far ahead of its loads a long copy asks for the source's cache
/// lines (docs/design.md#word-copies). Out of the cache, 4 KiB ahead
/// copies 16 KiB about a fifth faster than the hardware's prefetcher alone,
/// which starts over at each page.
const PREFETCH_AHEAD: usize = 4096;

/// Copies shorter than this ask for no lines ahead: the first loads miss
/// anyway and the hints would only add work.
const PREFETCH_FROM: usize = 1024;

/// Copies `dst.len() / 8` words from `src` to `dst`.
///
/// The bulk goes in aligned vector loads: 32-byte AVX loads, four per turn
/// of the loop, where the processor has AVX (about a third faster than
/// 16-byte loads from memory not in the cache, and as fast as `memcpy`);
/// then, or elsewhere, aligned 16-byte SSE2 loads, four per turn. A few
/// single words before bring `src` to the alignment, and the words after
/// the last whole block are single too; each single word is a relaxed
/// atomic load.
///
/// No load splits an aligned word, which is all the protocol needs: the
/// architecture loads an aligned quadword whole, processors with AVX load
/// an aligned 16-byte operand whole, and an aligned 32-byte load is carried
/// out whole or as its two aligned 16-byte halves. Inside `asm!` the loads
/// are outside the language's data-race rules, as the hardware's own
/// atomicity is what holds. The caller orders the copy (an acquire fence
/// after it).
///
/// # Safety
/// `src` must be 8-byte aligned and valid for `dst.len() / 8` words of a
/// [`super::RegionMemory`] (whose every other access is atomic too).
pub(super) unsafe fn load_words(src: *const u64, dst: &mut [u8]) {
    let avx = std::arch::is_x86_feature_detected!("avx");
    // SAFETY: the caller's contract.
    unsafe { load_words_with(src, dst, avx, 0) }
}

/// [`load_words`] into two buffers: the first `head.len() / 8` words into
/// `head`, the next `tail.len() / 8` into `tail` (a scatter READ).
///
/// Before any load it asks for the lines of both parts, up to
/// [`PREFETCH_AHEAD`] bytes: out of the cache, the head's first load would
/// otherwise miss alone, and the tail's lines be asked for only once it
/// returned (docs/design.md#word-copies).
///
/// # Safety
/// As [`load_words`], for `(head.len() + tail.len()) / 8` words.
pub(super) unsafe fn load_scatter(src: *const u64, head: &mut [u8], tail: &mut [u8]) {
    let avx = std::arch::is_x86_feature_detected!("avx");
    let asked = (head.len() + tail.len()).min(PREFETCH_AHEAD);
    prefetch(src.cast(), asked);
    // SAFETY: the caller's contract, split at `head.len() / 8` words
    // (`head.len()` is whole words: the fabric checked it).
    unsafe {
        load_words_with(src, head, avx, asked);
        let rest = src.add(head.len() / WORD);
        load_words_with(rest, tail, avx, asked.saturating_sub(head.len()));
    }
}

/// [`load_words`], with or without the AVX loop (the tests run both);
/// the first `asked` bytes of `src` were asked for already.
///
/// # Safety
/// As [`load_words`]; `avx` only where the processor has AVX.
unsafe fn load_words_with(src: *const u64, dst: &mut [u8], avx: bool, asked: usize) {
    let mut words = dst.len() / WORD;
    let ahead = dst.len() >= PREFETCH_FROM;
    let window = dst.len().min(PREFETCH_AHEAD);
    if ahead && asked < window {
        prefetch(src.cast::<u8>().wrapping_add(asked), window - asked);
    }
    let mut s = src;
    let mut d = dst.as_mut_ptr();
    // One word, then past it: `words` counts what is left of both.
    let single = |s: &mut *const u64, d: &mut *mut u8, words: &mut usize| {
        // SAFETY: one word of `src` and `dst`, in bounds while `words > 0`
        // (caller contract); `src` aligned; `dst` takes any alignment.
        unsafe {
            let w = AtomicU64::from_ptr(s.cast_mut()).load(Ordering::Relaxed);
            d.cast::<u64>().write_unaligned(w);
            *s = s.add(1);
            *d = d.add(WORD);
        }
        *words -= 1;
    };
    if avx {
        while words > 0 && s as usize % 32 != 0 {
            single(&mut s, &mut d, &mut words);
        }
        let blocks = words / 16;
        if blocks > 0 {
            // SAFETY: `blocks × 128` bytes at `s` (32-byte aligned) and at
            // `d`, within the words left; AVX is there (caller).
            unsafe { load_blocks_avx(&mut s, &mut d, blocks, ahead) };
            words -= blocks * 16;
        }
    }
    while words > 0 && s as usize % 16 != 0 {
        single(&mut s, &mut d, &mut words);
    }
    let blocks = words / 8;
    if blocks > 0 {
        // SAFETY: reads `64 × blocks` bytes at `s` (16-byte aligned, in
        // bounds) and writes as many at `d` (in bounds, unaligned stores
        // allowed); advances both past them.
        unsafe {
            std::arch::asm!(
                "2:",
                "movdqa {a}, xmmword ptr [{s}]",
                "movdqa {b}, xmmword ptr [{s} + 16]",
                "movdqa {c}, xmmword ptr [{s} + 32]",
                "movdqa {e}, xmmword ptr [{s} + 48]",
                "movdqu xmmword ptr [{d}], {a}",
                "movdqu xmmword ptr [{d} + 16], {b}",
                "movdqu xmmword ptr [{d} + 32], {c}",
                "movdqu xmmword ptr [{d} + 48], {e}",
                "add {s}, 64",
                "add {d}, 64",
                "dec {n}",
                "jnz 2b",
                s = inout(reg) s,
                d = inout(reg) d,
                n = inout(reg) blocks => _,
                a = out(xmm_reg) _,
                b = out(xmm_reg) _,
                c = out(xmm_reg) _,
                e = out(xmm_reg) _,
                options(nostack),
            );
        }
        words -= blocks * 8;
    }
    while words > 0 {
        single(&mut s, &mut d, &mut words);
    }
}

/// Asks for the cache lines of `bytes` bytes from `src` (a hint: no
/// memory is read or written, and no address faults).
pub(super) fn prefetch(src: *const u8, bytes: usize) {
    for off in (0..bytes).step_by(64) {
        // SAFETY: `prefetcht0` changes no memory, register or flag and
        // never faults, whatever the address.
        unsafe {
            std::arch::asm!(
                "prefetcht0 [{p}]",
                p = in(reg) src.wrapping_add(off),
                options(nostack, readonly, preserves_flags),
            );
        }
    }
}

/// Copies `blocks` blocks of 128 bytes from `*s` (32-byte aligned) to
/// `*d` in aligned 32-byte loads, and advances both past them. With
/// `ahead`, each turn but the last few also asks for the lines
/// [`PREFETCH_AHEAD`] bytes on, which are still part of the copy (the
/// caller asked for the first ones).
///
/// # Safety
/// Both ranges in bounds, `*s` in a [`super::RegionMemory`]; the processor
/// has AVX.
#[target_feature(enable = "avx")]
unsafe fn load_blocks_avx(s: &mut *const u64, d: &mut *mut u8, blocks: usize, ahead: bool) {
    let prefetching = if ahead {
        blocks.saturating_sub(PREFETCH_AHEAD / 128)
    } else {
        0
    };
    // SAFETY: the caller's contract, split in two runs of blocks; the
    // last run's hints name the lines it loads next, which costs a few
    // instructions and spares a second loop.
    unsafe {
        avx_turns(s, d, prefetching, PREFETCH_AHEAD);
        avx_turns(s, d, blocks - prefetching, 0);
    }
}

/// The AVX loop of [`load_blocks_avx`]: `blocks` turns of four 32-byte
/// loads, each asking for the two lines `ahead` bytes on.
///
/// # Safety
/// As [`load_blocks_avx`].
#[target_feature(enable = "avx")]
unsafe fn avx_turns(s: &mut *const u64, d: &mut *mut u8, blocks: usize, ahead: usize) {
    if blocks == 0 {
        return;
    }
    // SAFETY: the caller's contract; `prefetcht0` changes nothing and never
    // faults; every ymm register is clobbered (`clobber_abi`), so
    // `vzeroupper` at the end, which spares later SSE code the transition
    // penalty, disturbs nothing.
    unsafe {
        std::arch::asm!(
            "2:",
            "prefetcht0 [rsi + {ahead}]",
            "prefetcht0 [rsi + {ahead} + 64]",
            "vmovdqa ymm0, ymmword ptr [rsi]",
            "vmovdqa ymm1, ymmword ptr [rsi + 32]",
            "vmovdqa ymm2, ymmword ptr [rsi + 64]",
            "vmovdqa ymm3, ymmword ptr [rsi + 96]",
            "vmovdqu ymmword ptr [rdi], ymm0",
            "vmovdqu ymmword ptr [rdi + 32], ymm1",
            "vmovdqu ymmword ptr [rdi + 64], ymm2",
            "vmovdqu ymmword ptr [rdi + 96], ymm3",
            "add rsi, 128",
            "add rdi, 128",
            "dec rcx",
            "jnz 2b",
            "vzeroupper",
            ahead = in(reg) ahead,
            inout("rsi") *s,
            inout("rdi") *d,
            inout("rcx") blocks => _,
            clobber_abi("C"),
            options(nostack),
        );
    }
}

/// Copies the whole words of `src` to `dst` with `movnti`, four per turn
/// of the loop.
///
/// # Safety
/// `dst` must be 8-byte aligned and valid for `src.len() / 8` words of a
/// [`super::RegionMemory`] (whose every other access is atomic too).
pub(super) unsafe fn stream_words(dst: *mut u64, src: &[u8]) {
    let words = src.len() / WORD;
    let quads = words / 4;
    if quads > 0 {
        // SAFETY: reads `32 × quads` bytes of `src` and writes as many at
        // `dst`, both in bounds (caller contract); unaligned loads are
        // allowed on x86-64 and the stores are aligned.
        unsafe {
            std::arch::asm!(
                "2:",
                "mov {a}, qword ptr [{s}]",
                "mov {b}, qword ptr [{s} + 8]",
                "movnti qword ptr [{d}], {a}",
                "movnti qword ptr [{d} + 8], {b}",
                "mov {a}, qword ptr [{s} + 16]",
                "mov {b}, qword ptr [{s} + 24]",
                "movnti qword ptr [{d} + 16], {a}",
                "movnti qword ptr [{d} + 24], {b}",
                "add {s}, 32",
                "add {d}, 32",
                "dec {n}",
                "jnz 2b",
                s = inout(reg) src.as_ptr() => _,
                d = inout(reg) dst => _,
                n = inout(reg) quads => _,
                a = out(reg) _,
                b = out(reg) _,
                options(nostack),
            );
        }
    }
    for i in quads * 4..words {
        let mut b = [0u8; WORD];
        b.copy_from_slice(&src[i * WORD..(i + 1) * WORD]);
        #[allow(clippy::disallowed_methods, reason = "memory is native words")]
        let w = u64::from_ne_bytes(b);
        // SAFETY: `i < words`, in bounds and aligned (caller contract).
        unsafe {
            std::arch::asm!(
                "movnti qword ptr [{d}], {w}",
                d = in(reg) dst.add(i),
                w = in(reg) w,
                options(nostack, preserves_flags),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source of `words` distinct words.
    fn memory(words: u64) -> Vec<u64> {
        (0..words)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect()
    }

    /// The processors' paths to test: without the AVX loop, and with it
    /// where the processor has AVX.
    fn paths() -> impl Iterator<Item = bool> {
        let avx_too = std::arch::is_x86_feature_detected!("avx");
        [false, true].into_iter().filter(move |&a| !a || avx_too)
    }

    /// Copies `words` words from `memory[skip..]` to a destination at byte
    /// `offset`, and checks that the copy is exact and touches nothing
    /// past its words.
    fn copy_exactly(memory: &[u64], skip: usize, words: usize, offset: usize, avx: bool) {
        assert!(skip + words <= memory.len());
        let mut out = vec![0xeeu8; offset + words * WORD + 3];
        let dst = &mut out[offset..offset + words * WORD];
        // SAFETY: `skip + words` words of `memory` (checked above),
        // aligned; no one else touches it; AVX only where detected.
        unsafe { load_words_with(memory[skip..].as_ptr(), dst, avx, 0) };
        // x86-64 is little-endian: native bytes are these.
        let want: Vec<u8> = memory[skip..skip + words]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        assert_eq!(&out[offset..offset + words * WORD], &want[..]);
        assert!(out[..offset].iter().all(|&b| b == 0xee));
        assert!(out[offset + words * WORD..].iter().all(|&b| b == 0xee));
    }

    /// Every length from none to a few blocks of either loop, from a
    /// source at every word of a 32-byte line, into a destination at every
    /// byte offset, with and without the AVX loop.
    #[test]
    fn loads_copy_every_length_and_alignment_exactly() {
        let memory = memory(128);
        for avx in paths() {
            for skip in 0..4 {
                for words in 0..72 {
                    for offset in 0..WORD {
                        copy_exactly(&memory, skip, words, offset, avx);
                    }
                }
            }
        }
    }

    /// Copies long enough to ask for lines ahead: around the length that
    /// starts it, and around the lengths where the AVX loop's prefetching
    /// turns end (the prefetch distance in blocks, and beyond it).
    #[test]
    fn long_loads_that_prefetch_copy_exactly() {
        let memory = memory(4096);
        let from = PREFETCH_FROM / WORD;
        let ahead = PREFETCH_AHEAD / WORD;
        let lengths = [
            from - 1,
            from,
            from + 1,
            ahead - 1,
            ahead,
            ahead + 16,
            ahead + 17,
            ahead + 19,
            2 * ahead + 33,
            4000,
        ];
        for avx in paths() {
            for skip in 0..4 {
                for words in lengths {
                    for offset in [0, 3] {
                        copy_exactly(&memory, skip, words, offset, avx);
                    }
                }
            }
        }
    }

    /// Scatter loads split at every word of a short head, and at lengths
    /// around the prefetch window: the parts together are the source's
    /// words, each part exactly its own.
    #[test]
    fn scatter_loads_split_exactly() {
        let memory = memory(1200);
        let ahead = PREFETCH_AHEAD / WORD;
        for total in [0, 1, 40, PREFETCH_FROM / WORD + 3, ahead + 5, 1100] {
            let splits = (0..total.min(24)).chain([total / 2, total.saturating_sub(1), total]);
            for split in splits.filter(|&k| k <= total) {
                let mut out = vec![0xeeu8; total * WORD + 16];
                let (head, rest) = out.split_at_mut(split * WORD);
                let (tail, spare) = rest.split_at_mut((total - split) * WORD);
                // SAFETY: `total` words of `memory` (at most 1100 of 1200),
                // aligned; no one else touches it.
                unsafe { load_scatter(memory.as_ptr(), head, tail) };
                assert!(spare.iter().all(|&b| b == 0xee), "{total} at {split}");
                let want: Vec<u8> = memory[..total]
                    .iter()
                    .flat_map(|w| w.to_le_bytes())
                    .collect();
                assert_eq!(&out[..total * WORD], &want[..], "{total} split at {split}");
            }
        }
    }
}
