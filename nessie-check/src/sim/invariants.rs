//! Invariants of the index the simulation checks while a run goes on, not
//! only in the audit after it.

use nessie::data::Geometry;
use nessie::fabric::{Fabric, RemoteAddr};
use nessie::index::Candidate;
use nessie::layout::dte::{self, DteHeader, DteStatus, DTE_HEADER_BYTES};
use nessie::layout::{round_up_words, Ite, IteKind, SlotRef};
use nessie::{Config, View};

/// Where `at`, an address in replica 0 of a share, is served in `view`:
/// on the share's primary replica.
fn served(view: &View, geometry: &Geometry, at: RemoteAddr) -> RemoteAddr {
    match view.primary_replica(at.node, geometry) {
        Some(j) if j > 0 => geometry.replica_addr(at, j),
        _ => at,
    }
}

/// A committed entry an ITE links: where, its header and its key.
struct Linked {
    node: usize,
    slot: u64,
    at: SlotRef,
    addr: RemoteAddr,
    header: DteHeader,
    key: Vec<u8>,
}

/// The committed entry the ITE `ite` links (header and key; values are read
/// only for keys linked twice): `None` for an empty ITE, a marker, an entry
/// not committed, or a slot reused since (another generation).
fn committed(
    fabric: &dyn Fabric,
    (geometry, view): (&Geometry, &View),
    (node, slot): (usize, u64),
    ite: Ite,
) -> Option<Linked> {
    let IteKind::Occupied { dte: at, .. } = ite.kind() else {
        return None;
    };
    let addr = served(view, geometry, geometry.dte_addr(at)?);
    let mut head = [0u8; DTE_HEADER_BYTES];
    fabric.read(addr, &mut head).ok()?;
    let header = DteHeader::decode(&head);
    let s = header.state;
    let end = dte::value_offset(s.key_len()) + s.value_len();
    if s.generation() != at.generation
        || s.status() != DteStatus::Valid
        || s.key_len() == 0
        || end > geometry.slot_bytes(at.class)
    {
        return None;
    }
    // Whole words: fabrics read nothing else.
    let mut key = vec![0u8; round_up_words(s.key_len())];
    fabric
        .read(addr.add(dte::KEY_OFFSET as u64), &mut key)
        .ok()?;
    key.truncate(s.key_len());
    Some(Linked {
        node,
        slot,
        at,
        addr,
        header,
        key,
    })
}

/// The value of a committed entry (`None` for a tombstone, or a failed
/// read).
fn value(fabric: &dyn Fabric, l: &Linked) -> Option<Vec<u8>> {
    let s = l.header.state;
    if s.is_tombstone() {
        return None;
    }
    let mut v = vec![0u8; round_up_words(s.value_len())];
    let at = l.addr.add(dte::value_offset(s.key_len()) as u64);
    fabric.read(at, &mut v).ok()?;
    v.truncate(s.value_len());
    Some(v)
}

fn show(l: &Linked, value: Option<&[u8]>) -> String {
    let what = match value {
        Some(v) => format!("value {:?}", String::from_utf8_lossy(v)),
        None => "tombstone".to_string(),
    };
    format!("node {} slot {} -> {:?} {what}", l.node, l.slot, l.at)
}

/// The invariant GET and the cache rely on, and PUT's reverse pass keeps:
/// **no two linked committed entries of one key differ**. Two ITEs of the
/// index that are both occupied (not empty, not a `MOVED` marker) and point
/// at `VALID` DTEs (of the generation the ITE names) holding the same key
/// must agree on the tombstone flag and the value. Returns a description of
/// the first pair that does not, reading memory through `fabric` (which must
/// not yield: call it between verbs, or on the unwrapped fabric).
///
/// A MIGRATE copy is committed only after its source holds the marker, and
/// a write commits only after its reverse pass saw every other candidate as
/// it expected (duplicates cleared): so not even two equal committed entries
/// of a key are linked at once in a correct run. Equal ones are tolerated
/// here all the same: no reader can tell them apart.
#[must_use]
pub fn divergent_duplicates(
    fabric: &dyn Fabric,
    config: &Config,
    geometry: &Geometry,
) -> Option<String> {
    divergent_duplicates_in(fabric, config, geometry, &View::first(config.nodes))
}

/// [`divergent_duplicates`] of the index as `view` serves it: each share's
/// slots and entries read on its primary replica, where `fabric` does not
/// route by the view itself (the simulator's, under the store's routing).
#[must_use]
pub fn divergent_duplicates_in(
    fabric: &dyn Fabric,
    config: &Config,
    geometry: &Geometry,
    view: &View,
) -> Option<String> {
    let mut seen: Vec<Linked> = Vec::new();
    for node in 0..config.nodes {
        for slot in 0..config.index_slots_per_node as u64 {
            let mut w = [0u8; 8];
            let at = served(view, geometry, Candidate { node, slot }.addr());
            if fabric.read(at, &mut w).is_err() {
                continue;
            }
            let ite = Ite(u64::from_le_bytes(w));
            let Some(here) = committed(fabric, (geometry, view), (node, slot), ite) else {
                continue;
            };
            let Some(first) = seen.iter().find(|l| l.key == here.key) else {
                seen.push(here);
                continue;
            };
            let (a, b) = (value(fabric, first), value(fabric, &here));
            if a != b {
                return Some(format!(
                    "DIVERGENT: two linked committed entries of key {:?} differ: {} and {}",
                    String::from_utf8_lossy(&here.key),
                    show(first, a.as_deref()),
                    show(&here, b.as_deref())
                ));
            }
        }
    }
    None
}
