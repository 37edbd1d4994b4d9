//! Every byte layout the store keeps in remote memory: index table entries
//! (ITEs), data table entries (DTEs), the META region's clock words, the
//! MEMBERSHIP region of a replicated store, and the ids of the regions that hold them. The fabric's own layouts (region file headers, wire frames)
//! are in [`crate::fabric::wire`]; the baselines' ring frames live with
//! the baselines, in `nessie-sd`.
//!
//! All multi-byte fields are little-endian. Field widths are named constants,
//! checked at compile time, so that processes of one build agree on every bit;
//! [`FORMAT_VERSION`] is what every node's fabric membership carries, so that
//! processes of different builds refuse to talk to each other.

pub mod dte;
pub mod ite;
pub mod membership;
pub mod meta;
pub mod region;

pub use dte::{DteHeader, DteState, DteStatus, DTE_HEADER_BYTES};
pub use ite::{Ite, IteKind, SlotRef};
pub use region::RegionId;

pub use nessie_fabric::wire::{read_word, round_up_words, WORD};

/// Version of the store's layouts (this module) together with the fabric's
/// ([`nessie_fabric::wire::VERSION`]): bump the first on any change of
/// bits here.
pub const FORMAT_VERSION: u32 = 3 << 16 | nessie_fabric::wire::VERSION;
