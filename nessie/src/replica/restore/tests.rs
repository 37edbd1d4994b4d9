//! Unit tests of the restorer: the state word's forward moves, the
//! switch back, one slot's copy, copy-then-verify, and RS3.

use super::*;
use crate::fabric::LocalFabric;

fn state_at(f: &dyn Fabric, at: RemoteAddr) -> DteState {
    DteState(word_at(f, at).unwrap())
}

/// A copy of class 0's table from node `primary` to node `mine` on `f`,
/// with a landing bound of 1 ms.
fn table<'a>(
    f: &'a dyn Fabric,
    clock: &'a dyn Clock,
    bytes: usize,
    (primary, mine): (NodeId, NodeId),
) -> Table<'a> {
    Table {
        primary: (primary, region::data(0)),
        mine: (mine, region::data(0)),
        bytes,
        ..Table::endpoints(
            f,
            f,
            CopyTime {
                clock,
                landing_us: 1000,
            },
        )
    }
}

#[test]
fn a_state_word_moves_forward_only() {
    let f = LocalFabric::new(
        1,
        &[crate::fabric::RegionSpec {
            id: region::data(0),
            len: 64,
        }],
    )
    .unwrap();
    let at = RemoteAddr::new(0, region::data(0), 0);
    let invalid = DteState::new(3, 4, 10, false, false);
    let valid = invalid.with_status(DteStatus::Valid);
    f.write(at, &DteState::UNSET.0.to_le_bytes()).unwrap();
    forward_state(&f, at, invalid).unwrap();
    assert_eq!(state_at(&f, at), invalid, "from UNSET to anything");
    forward_state(&f, at, valid).unwrap();
    assert_eq!(
        state_at(&f, at),
        valid,
        "INVALID to VALID of the same entry"
    );
    forward_state(&f, at, invalid).unwrap();
    assert_eq!(state_at(&f, at), valid, "never back (the checker's flaw 5)");
    let next = DteState::new(4, 4, 10, false, false);
    forward_state(&f, at, next).unwrap();
    assert_eq!(
        state_at(&f, at),
        valid,
        "another entry's state is the copy's to bring, by a new image"
    );
    // A helper's abort on the copy stands: the primary's VALID of the
    // same entry does not move it (only INVALID moves on).
    let aborted = invalid.with_status(DteStatus::Aborted);
    f.write(at, &aborted.0.to_le_bytes()).unwrap();
    forward_state(&f, at, valid).unwrap();
    assert_eq!(state_at(&f, at), aborted, "ABORTED is final");
}

/// The switch back (docs/replication.md#rp3c) moves a mirror's state
/// word forward only where it is the INVALID of the very entry VALID
/// on the restored primary, in every chunk of a table, and counts what
/// it moved.
#[test]
fn the_switch_back_moves_only_the_lagging_state_words() {
    let config = crate::Config {
        nodes: 3,
        replicas: 2,
        index_slots_per_node: 64,
        data_bytes_per_node: 4 << 20,
        value_size_max: 2048,
        ..crate::Config::default()
    };
    let geometry = Geometry::new(&config);
    let f = LocalFabric::new(3, &crate::store_regions(&config)).unwrap();
    let (me, class) = (1, 0u8);
    let bytes = geometry.slot_bytes(class);
    let slots = geometry.slots(class);
    assert!(slots > CHUNK_BYTES / bytes, "more than one chunk");
    let mine = |slot: usize| RemoteAddr::new(me, region::data(class), (slot * bytes) as u64);
    let theirs = |slot: usize| geometry.replica_addr(mine(slot), 1);
    let put = |at: RemoteAddr, s: DteState| f.write(at, &s.0.to_le_bytes()).unwrap();
    let invalid = |g: u16| DteState::new(g, 4, 10, false, false);
    let valid = |g: u16| invalid(g).with_status(DteStatus::Valid);
    // (slot, restored primary, mirror, mirror afterwards)
    let last = slots - 1;
    let cases = [
        (0, valid(5), invalid(5), valid(5)),
        (1, valid(5), valid(5), valid(5)),
        (2, invalid(5), invalid(5), invalid(5)),
        (3, valid(5), invalid(6), invalid(6)),
        (last, valid(7), invalid(7), valid(7)),
    ];
    for &(slot, primary, mirror, _) in &cases {
        put(mine(slot), primary);
        put(theirs(slot), mirror);
    }
    assert_eq!(catch_up(&f, &f, &geometry, me).unwrap(), 2);
    for &(slot, _, _, after) in &cases {
        assert_eq!(state_at(&f, theirs(slot)), after, "slot {slot}");
    }
    assert_eq!(catch_up(&f, &f, &geometry, me).unwrap(), 0, "once only");
}

/// One slot's copy: the image and the state from the primary's slot; a
/// stager's stamp already on the copy kept (RP5: never undone); the
/// primary's stamp brought over 0; a copy that names another entry
/// than the primary's left to the verification.
#[test]
fn a_slot_copy_keeps_a_stamp_and_leaves_another_entry_alone() {
    use crate::clock::WallClock;
    let bytes = 128;
    let f = LocalFabric::new(
        1,
        &[crate::fabric::RegionSpec {
            id: region::data(0),
            len: 4 * bytes as u64,
        }],
    )
    .unwrap();
    let clock = WallClock::default();
    let table = table(&f, &clock, bytes, (0, 0));
    let at = |slot: usize| RemoteAddr::new(0, region::data(0), (slot * bytes) as u64);
    let stamp_of = |slot: usize| word_at(&f, at(slot).add(EXPIRES_AT_OFFSET as u64)).unwrap();
    let later = clock.now_us() + 3_600_000_000;
    let state = DteState::new(3, 4, 10, false, false).with_status(DteStatus::Valid);
    // The primary's image: state, a filled body, and a stamp or none.
    let image = |stamp: u64| {
        let mut slot = vec![0xabu8; bytes];
        slot[..WORD].copy_from_slice(&state.0.to_le_bytes());
        slot[EXPIRES_AT_OFFSET..EXPIRES_AT_OFFSET + WORD].copy_from_slice(&stamp.to_le_bytes());
        slot
    };
    let unset = |slot: usize| f.write(at(slot), &DteState::UNSET.0.to_le_bytes()).unwrap();
    // Slot 0: a stager stamped the copy first; the primary has none yet.
    unset(0);
    f.write(at(0).add(EXPIRES_AT_OFFSET as u64), &later.to_le_bytes())
        .unwrap();
    table.copy_slot(at(0), &image(0)).unwrap();
    assert_eq!(stamp_of(0), later, "a stamp on the copy stays");
    assert_eq!(state_at(&f, at(0)), state);
    // Slot 1: the primary's stamp comes over the copy's 0.
    unset(1);
    table.copy_slot(at(1), &image(later)).unwrap();
    assert_eq!(stamp_of(1), later, "the primary's stamp");
    let mut body = vec![0u8; bytes];
    f.read(at(1), &mut body).unwrap();
    assert_eq!(body, image(later), "the whole image");
    // Slot 2: the copy names a newer entry (its owner wrote it there):
    // nothing is written.
    let newer = DteState::new(4, 4, 10, false, false);
    f.write(at(2), &newer.0.to_le_bytes()).unwrap();
    table.copy_slot(at(2), &image(0)).unwrap();
    assert_eq!(state_at(&f, at(2)), newer);
    let mut word = [0u8; WORD];
    f.read(at(2).add(WORD as u64), &mut word).unwrap();
    assert_eq!(word, [0u8; WORD], "no byte of the image");
}

/// A fabric that, at its first yield point (between a copy's READ of
/// the primary and its WRITEs), writes `word` at `at`: a change the
/// verification must see; and that, at its first CAS, first writes
/// `word` at the CAS's own address: a race the CAS must lose.
#[derive(Debug)]
struct Meddler {
    inner: LocalFabric,
    at: RemoteAddr,
    word: u64,
    on_yield: std::sync::atomic::AtomicBool,
    on_cas: std::sync::atomic::AtomicBool,
}

impl Fabric for Meddler {
    fn nodes(&self) -> usize {
        self.inner.nodes()
    }
    fn region_len(&self, node: NodeId, region: RegionId) -> Option<u64> {
        self.inner.region_len(node, region)
    }
    fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
        self.inner.read(addr, buf)
    }
    fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
        self.inner.write(addr, data)
    }
    fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
        if self.on_cas.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.inner.write(addr, &self.word.to_le_bytes())?;
        }
        self.inner.cas(addr, expected, new)
    }
    fn yield_point(&self) {
        if self
            .on_yield
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            self.inner.write(self.at, &self.word.to_le_bytes()).unwrap();
        }
    }
}

fn meddler(at: RemoteAddr, word: u64, on_yield: bool, on_cas: bool) -> Meddler {
    Meddler {
        inner: LocalFabric::new(
            2,
            &[crate::fabric::RegionSpec {
                id: region::data(0),
                len: 4 * 128,
            }],
        )
        .unwrap(),
        at,
        word,
        on_yield: on_yield.into(),
        on_cas: on_cas.into(),
    }
}

/// Copy-then-verify: a state word (a commit) or a stamp of the third
/// slot of a chunk that changes on the primary after the copy's READ is
/// seen by
/// the verification, copied again (one recopy), and the copy ends with
/// the new word.
#[test]
fn a_chunk_whose_primary_changes_under_the_copy_is_copied_again() {
    use crate::clock::WallClock;
    let bytes = 128;
    let clock = WallClock::default();
    // Entries being committed: INVALID on the primary when first read.
    let state = DteState::new(3, 4, 10, false, false);
    let committed = state.with_status(DteStatus::Valid);
    let later = clock.now_us() + 3_600_000_000;
    let slot2 = RemoteAddr::new(0, region::data(0), 2 * bytes as u64);
    for (offset, word) in [(0, committed.0), (EXPIRES_AT_OFFSET, later)] {
        let f = meddler(slot2.add(offset as u64), word, true, false);
        for slot in 0..4u64 {
            let primary = RemoteAddr::new(0, region::data(0), slot * bytes as u64);
            f.inner.write(primary, &state.0.to_le_bytes()).unwrap();
            let mine = RemoteAddr::new(1, region::data(0), slot * bytes as u64);
            f.inner
                .write(mine, &DteState::UNSET.0.to_le_bytes())
                .unwrap();
        }
        let table = table(&f, &clock, bytes, (0, 1));
        let mut figures = RestoreFigures::default();
        table.copy_chunk(0, 4, &mut figures).unwrap();
        assert_eq!(figures.recopies, 1, "offset {offset}");
        assert_eq!(figures.bytes_read, 3 * 4 * bytes as u64);
        let copied = word_at(
            &f,
            RemoteAddr::new(1, region::data(0), 2 * bytes as u64 + offset as u64),
        );
        assert_eq!(copied.unwrap(), word, "offset {offset}: the new word");
    }
}

/// A CAS that loses a race tries again from what it found: an UNSET
/// word written under it is still moved forward.
#[test]
fn a_state_word_moves_forward_past_a_lost_race() {
    let at = RemoteAddr::new(0, region::data(0), 0);
    let f = meddler(at, DteState::UNSET.0, false, true);
    let invalid = DteState::new(3, 4, 10, false, false);
    f.write(at, &invalid.0.to_le_bytes()).unwrap();
    let valid = invalid.with_status(DteStatus::Valid);
    forward_state(&f, at, valid).unwrap();
    assert_eq!(state_at(&f, at), valid);
}

/// RS3 at its boundaries: an entry not staged, or staged with a stamp
/// past the check plus the landing bound; never a slot never used,
/// nor one whose stamp may pass before the writes land.
#[test]
fn the_restorer_writes_only_entries_no_owner_can_take_first() {
    let entry = DteState::new(3, 4, 10, false, false);
    let (checked, landing) = (1_000_000, 500);
    assert!(may_write(entry, 0, checked, landing), "not staged");
    assert!(may_write(entry, checked + landing + 1, checked, landing));
    assert!(!may_write(entry, checked + landing, checked, landing));
    assert!(!may_write(entry, checked, checked, landing));
    assert!(!may_write(entry, 1, checked, landing), "expired long ago");
    for unused in [DteState(0), DteState::UNSET] {
        assert!(!may_write(unused, 0, checked, landing), "{unused:?}");
        assert!(!may_write(unused, u64::MAX, checked, landing));
    }
}
