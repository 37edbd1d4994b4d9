//! Index table entry (ITE): one 64-bit word, modified only by CAS.
//!
//! ```text
//!  63  62  61 ........ 52  51 .. 47  46 ............ 19  18 ...... 11  10 ...... 0
//! live mark  node (10)    class (5)  slot (28)           filter (8)    generation (11)
//! ```
//!
//! * `live = 0` — **empty**. `0` is a fresh entry; any other empty value is
//!   `EMPTY(x)`, the last occupant `x` with the live bit cleared, so that
//!   empty values of one slot never repeat (the reverse pass of GET relies on
//!   seeing every change; a repeated `0` was the V3 ABA counterexample).
//! * `live = 1, mark = 0` — **occupied**: points at the DTE `(node, class,
//!   slot)` of reuse `generation`, with the key's `filter` bits.
//! * `live = 1, mark = 1` — **moved**: a MIGRATE marker `MOVED(c)` in the
//!   source slot whose fields point at the copy `c`. It matches no key.
//!
//! The 11-bit generation is bumped each time a DTE slot whose incarnation
//! was published is reused (a slot given back unpublished keeps it: no ITE
//! ever named it; docs/design.md#f6-rule-v-generations-count-published-reuses)
//! and is never 0 (it runs 1..=2047), so an occupied value always has a bit
//! set below the tags and `EMPTY(x)` is never the fresh `0`. A published
//! incarnation is reused at most once per `expiry` (it must be unlinked, then
//! expire), so an ITE value can only repeat after 2047 published reuses of
//! one slot, that is no sooner than 2047 × `expiry` (34 minutes at the
//! default 1 s). A CAS delayed less than that fails instead of matching a
//! recycled slot's value.

/// Bits of the node field.
pub const NODE_BITS: u32 = 10;
/// Bits of the size-class field.
pub const CLASS_BITS: u32 = 5;
/// Bits of the DTE slot index field.
pub const SLOT_BITS: u32 = 28;
/// Bits of the filter field (the most `filter_bits` may be).
pub const FILTER_BITS: u32 = 8;
/// Bits of the per-slot reuse generation.
pub const GENERATION_BITS: u32 = 11;

const GEN_SHIFT: u32 = 0;
const FILTER_SHIFT: u32 = GEN_SHIFT + GENERATION_BITS;
const SLOT_SHIFT: u32 = FILTER_SHIFT + FILTER_BITS;
const CLASS_SHIFT: u32 = SLOT_SHIFT + SLOT_BITS;
const NODE_SHIFT: u32 = CLASS_SHIFT + CLASS_BITS;
const MARK_SHIFT: u32 = NODE_SHIFT + NODE_BITS;
const LIVE_SHIFT: u32 = MARK_SHIFT + 1;

// Every field fits and the tags are the top two bits.
const _: () = assert!(LIVE_SHIFT == 63);
const _: () = assert!(MARK_SHIFT == 62);

/// The most nodes an ITE can address.
pub const MAX_NODES: usize = 1 << NODE_BITS;
/// The most size classes an ITE can address.
pub const MAX_CLASSES: usize = 1 << CLASS_BITS;
/// The most DTE slots per size class and node an ITE can address.
pub const MAX_SLOTS: u64 = 1 << SLOT_BITS;
/// Generations run from 1 to `GENERATIONS - 1`, then wrap to 1.
pub const GENERATIONS: u32 = 1 << GENERATION_BITS;

/// The generation that follows `g` (skipping 0, which no DTE ever has).
#[must_use]
pub fn next_generation(g: u16) -> u16 {
    let n = (u32::from(g) + 1) % GENERATIONS;
    if n == 0 {
        1
    } else {
        n as u16
    }
}

const LIVE: u64 = 1 << LIVE_SHIFT;
const MARK: u64 = 1 << MARK_SHIFT;

const fn mask(bits: u32) -> u64 {
    (1u64 << bits) - 1
}

/// Where a DTE lives: node, size class, slot index within the class's table,
/// and the slot's reuse generation at the time the DTE was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlotRef {
    /// Node that owns the data table.
    pub node: u16,
    /// Size class (index into the node's data tables).
    pub class: u8,
    /// Slot index within the size class's table.
    pub slot: u32,
    /// Reuse generation of the slot (wraps at [`GENERATIONS`]).
    pub generation: u16,
}

impl std::fmt::Display for SlotRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "node {} class {} slot {} (generation {})",
            self.node, self.class, self.slot, self.generation
        )
    }
}

/// What an ITE value means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IteKind {
    /// Fresh or cleared entry.
    Empty,
    /// Points at a DTE and carries the key's filter bits.
    Occupied {
        /// The DTE.
        dte: SlotRef,
        /// Filter bits of the key stored there.
        filter: u8,
    },
    /// MIGRATE marker pointing at the copy.
    Moved {
        /// The copy's DTE.
        copy: SlotRef,
    },
}

/// An index table entry: a raw 64-bit value with typed accessors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Ite(pub u64);

impl Ite {
    /// The fresh empty entry of a zeroed table.
    pub const ZERO: Ite = Ite(0);

    /// What a restoring mirror's index slot holds until it is copied: an
    /// occupied value of generation 0, which no primary ever holds, so
    /// that no late mirror CAS from a value a primary did hold can match
    /// it (docs/replication.md#restore).
    pub const UNCOPIED: Ite = Ite(LIVE);

    fn fields(dte: SlotRef, filter: u8) -> u64 {
        debug_assert!((dte.node as usize) < MAX_NODES);
        debug_assert!((dte.class as usize) < MAX_CLASSES);
        debug_assert!(u64::from(dte.slot) < MAX_SLOTS);
        (u64::from(dte.node) & mask(NODE_BITS)) << NODE_SHIFT
            | (u64::from(dte.class) & mask(CLASS_BITS)) << CLASS_SHIFT
            | (u64::from(dte.slot) & mask(SLOT_BITS)) << SLOT_SHIFT
            | (u64::from(filter) & mask(FILTER_BITS)) << FILTER_SHIFT
            | (u64::from(dte.generation) & mask(GENERATION_BITS)) << GEN_SHIFT
    }

    /// An occupied entry pointing at `dte` with the key's `filter` bits.
    #[must_use]
    pub fn occupied(dte: SlotRef, filter: u8) -> Ite {
        Ite(LIVE | Self::fields(dte, filter))
    }

    /// The marker `MOVED(copy)`.
    #[must_use]
    pub fn moved(copy: SlotRef) -> Ite {
        Ite(LIVE | MARK | Self::fields(copy, 0))
    }

    /// `EMPTY(self)`: the value that clears this entry without repeating an
    /// earlier empty value.
    #[must_use]
    pub fn emptied(self) -> Ite {
        Ite(self.0 & !LIVE)
    }

    /// Whether the entry is empty (fresh or cleared).
    #[must_use]
    pub fn is_empty(self) -> bool {
        self.0 & LIVE == 0
    }

    /// Whether the entry points at a DTE.
    #[must_use]
    pub fn is_occupied(self) -> bool {
        self.0 & (LIVE | MARK) == LIVE
    }

    /// Whether the entry is a MIGRATE marker.
    #[must_use]
    pub fn is_moved(self) -> bool {
        self.0 & (LIVE | MARK) == LIVE | MARK
    }

    fn slot_ref(self) -> SlotRef {
        let v = self.0;
        SlotRef {
            node: ((v >> NODE_SHIFT) & mask(NODE_BITS)) as u16,
            class: ((v >> CLASS_SHIFT) & mask(CLASS_BITS)) as u8,
            slot: ((v >> SLOT_SHIFT) & mask(SLOT_BITS)) as u32,
            generation: ((v >> GEN_SHIFT) & mask(GENERATION_BITS)) as u16,
        }
    }

    /// The DTE an occupied entry points at, or the copy a marker points at.
    #[must_use]
    pub fn target(self) -> Option<SlotRef> {
        (self.0 & LIVE != 0).then(|| self.slot_ref())
    }

    /// Filter bits of an occupied entry.
    #[must_use]
    pub fn filter(self) -> u8 {
        ((self.0 >> FILTER_SHIFT) & mask(FILTER_BITS)) as u8
    }

    /// Decodes the entry.
    #[must_use]
    pub fn kind(self) -> IteKind {
        if self.is_empty() {
            IteKind::Empty
        } else if self.is_moved() {
            IteKind::Moved {
                copy: self.slot_ref(),
            }
        } else {
            IteKind::Occupied {
                dte: self.slot_ref(),
                filter: self.filter(),
            }
        }
    }

    /// Whether an occupied entry's filter bits admit a key with `filter`
    /// (only the low `bits` bits are compared; `bits == 0` admits all).
    #[must_use]
    pub fn filter_matches(self, filter: u8, bits: u32) -> bool {
        let m = mask(bits.min(FILTER_BITS)) as u8;
        self.is_occupied() && (self.filter() & m) == (filter & m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn slot_ref() -> impl Strategy<Value = SlotRef> {
        (
            0..MAX_NODES as u16,
            0..MAX_CLASSES as u8,
            0..MAX_SLOTS as u32,
            1..GENERATIONS as u16,
        )
            .prop_map(|(node, class, slot, generation)| SlotRef {
                node,
                class,
                slot,
                generation,
            })
    }

    #[test]
    fn zero_is_empty() {
        assert!(Ite::ZERO.is_empty());
        assert_eq!(Ite::ZERO.kind(), IteKind::Empty);
        assert_eq!(Ite::default(), Ite::ZERO);
    }

    #[test]
    fn generation_skips_zero() {
        assert_eq!(next_generation(0), 1);
        assert_eq!(next_generation(1), 2);
        assert_eq!(next_generation((GENERATIONS - 1) as u16), 1);
    }

    #[test]
    fn fields_do_not_overlap() {
        let fields = [
            (GEN_SHIFT, GENERATION_BITS),
            (FILTER_SHIFT, FILTER_BITS),
            (SLOT_SHIFT, SLOT_BITS),
            (CLASS_SHIFT, CLASS_BITS),
            (NODE_SHIFT, NODE_BITS),
            (MARK_SHIFT, 1),
            (LIVE_SHIFT, 1),
        ];
        let mut seen = 0u64;
        for (shift, bits) in fields {
            let m = mask(bits) << shift;
            assert_eq!(seen & m, 0, "field at bit {shift} overlaps");
            seen |= m;
        }
        assert_eq!(seen, u64::MAX, "every bit belongs to one field");
    }

    proptest! {
        #[test]
        fn occupied_round_trips(r in slot_ref(), filter in any::<u8>()) {
            let ite = Ite::occupied(r, filter);
            prop_assert_eq!(ite.kind(), IteKind::Occupied { dte: r, filter });
            prop_assert!(ite.is_occupied() && !ite.is_moved() && !ite.is_empty());
            prop_assert!(ite.filter_matches(filter, 8));
        }

        #[test]
        fn moved_round_trips(r in slot_ref()) {
            let ite = Ite::moved(r);
            prop_assert_eq!(ite.kind(), IteKind::Moved { copy: r });
            prop_assert!(!ite.filter_matches(0, 8));
            prop_assert!(!ite.filter_matches(0, 0));
        }

        #[test]
        fn emptied_is_empty_and_distinct(r in slot_ref(), filter in any::<u8>(), r2 in slot_ref()) {
            let a = Ite::occupied(r, filter);
            let e = a.emptied();
            prop_assert!(e.is_empty());
            prop_assert_ne!(e, Ite::ZERO);
            prop_assert_ne!(e, a);
            // Emptying a marker gives a value different from emptying an entry.
            prop_assert_ne!(Ite::moved(r2).emptied(), Ite::occupied(r2, 0).emptied());
            prop_assert_eq!(e.emptied(), e);
        }
    }
}
