//! The copies between registered memory and a caller's bytes that run at
//! vector speed on x86-64 (docs/design.md#word-copies): READ's loads, and
//! the non-temporal stores of a streamed WRITE. Both keep the guarantee the
//! protocol needs, that every aligned word is loaded or stored whole.

use super::WORD;
use std::sync::atomic::{AtomicU64, Ordering};

/// Copies `dst.len() / 8` words from `src` to `dst`.
///
/// After at most one leading word, so that `src` is 16-byte aligned, the
/// words go in aligned 16-byte SSE2 loads, four per turn of the loop. An
/// aligned 16-byte load never splits an aligned word: the architecture
/// loads each aligned quadword whole, and processors with AVX load the
/// aligned 16 bytes whole. Inside `asm!` the loads are outside the
/// language's data-race rules, as the hardware's own atomicity is what
/// holds. The few words after the last whole block are relaxed atomic
/// loads. The caller orders the copy (an acquire fence after it).
///
/// # Safety
/// `src` must be 8-byte aligned and valid for `dst.len() / 8` words of a
/// [`super::RegionMemory`] (whose every other access is atomic too).
pub(super) unsafe fn load_words(src: *const u64, dst: &mut [u8]) {
    let mut words = dst.len() / WORD;
    let mut s = src;
    let mut d = dst.as_mut_ptr();
    let one = |s: *const u64, d: *mut u8| {
        // SAFETY: one word of `src` and `dst`, in bounds (caller contract
        // and the counts below); `src` aligned; `dst` takes any alignment.
        unsafe {
            let w = AtomicU64::from_ptr(s.cast_mut()).load(Ordering::Relaxed);
            d.cast::<u64>().write_unaligned(w);
        }
    };
    if words > 0 && s as usize % 16 != 0 {
        one(s, d);
        // SAFETY: one word in, still within the `words` counted.
        unsafe {
            s = s.add(1);
            d = d.add(WORD);
        }
        words -= 1;
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
    }
    for i in 0..words % 8 {
        // SAFETY: the words left after the blocks, in bounds.
        one(unsafe { s.add(i) }, unsafe { d.add(i * WORD) });
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

    /// Every length from none to a few blocks, from a 16-byte aligned and
    /// an only 8-byte aligned source, into a destination at every byte
    /// offset: the copy is exact and touches nothing past its words.
    #[test]
    fn loads_copy_every_length_and_alignment_exactly() {
        let memory: Vec<u64> = (0..64u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        for skip in 0..2 {
            for words in 0..40 {
                for offset in 0..WORD {
                    let mut out = vec![0xeeu8; offset + words * WORD + 3];
                    let src = memory[skip..].as_ptr();
                    // SAFETY: `words + skip` ≤ 41 < 64 words of `memory`,
                    // aligned; no one else touches it.
                    unsafe { load_words(src, &mut out[offset..offset + words * WORD]) };
                    // x86-64 is little-endian: native bytes are these.
                    let want: Vec<u8> = memory[skip..skip + words]
                        .iter()
                        .flat_map(|w| w.to_le_bytes())
                        .collect();
                    assert_eq!(&out[offset..offset + words * WORD], &want[..]);
                    assert!(out[..offset].iter().all(|&b| b == 0xee));
                    assert!(out[offset + words * WORD..].iter().all(|&b| b == 0xee));
                }
            }
        }
    }
}
