//! Every byte layout that lives in remote memory or crosses the network:
//! index table entries (ITEs), data table entries (DTEs), region file
//! headers and the `tcp` fabric's wire frames. (The baselines' ring frames
//! live with the baselines, in `nessie-sd`.)
//!
//! All multi-byte fields are little-endian. Field widths are named constants,
//! checked at compile time, so that processes of one build agree on every bit;
//! [`FORMAT_VERSION`] is written into every region header so that processes
//! of different builds refuse to talk to each other.

pub mod dte;
pub mod frame;
pub mod ite;
pub mod region;

pub use dte::{DteHeader, DteState, DteStatus, DTE_HEADER_BYTES};
pub use ite::{Ite, IteKind, SlotRef};
pub use region::{RegionHeader, RegionId, REGION_HEADER_BYTES};

/// Version of every layout in this module. Bump on any change of bits.
pub const FORMAT_VERSION: u32 = 2;

/// Size of the machine word that verbs move and CAS operates on.
pub const WORD: usize = 8;

/// Rounds `n` up to a whole number of words.
#[must_use]
pub const fn round_up_words(n: usize) -> usize {
    n.div_ceil(WORD) * WORD
}
