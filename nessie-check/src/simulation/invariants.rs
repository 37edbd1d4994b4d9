//! Invariants of the index the simulation checks while a run goes on, not
//! only in the audit after it.

use nessie::data::Geometry;
use nessie::fabric::Fabric;
use nessie::index::Candidate;
use nessie::layout::dte::{self, DteHeader, DteStatus, DTE_HEADER_BYTES};
use nessie::layout::{Ite, IteKind, SlotRef};
use nessie::Config;
use std::collections::HashMap;

/// A committed entry an ITE links: where, and what it says.
struct Linked {
    node: usize,
    slot: u64,
    at: SlotRef,
    tombstone: bool,
    value: Vec<u8>,
}

/// The committed entry the ITE `ite` links, with its key: `None` for an
/// empty ITE, a marker, an entry not committed, or a slot reused since
/// (another generation).
fn committed(
    fabric: &dyn Fabric,
    geometry: &Geometry,
    ite: Ite,
) -> Option<(Vec<u8>, SlotRef, DteHeader, Vec<u8>)> {
    let IteKind::Occupied { dte: at, .. } = ite.kind() else {
        return None;
    };
    let addr = geometry.dte_addr(at)?;
    let mut head = [0u8; DTE_HEADER_BYTES];
    fabric.read(addr, &mut head).ok()?;
    let h = DteHeader::decode(&head);
    if h.state.generation() != at.generation || h.state.status() != DteStatus::Valid {
        return None;
    }
    let (key_len, value_len) = (h.state.key_len(), h.state.value_len());
    let end = dte::value_offset(key_len) + value_len;
    // The whole slot: fabrics read whole words only.
    let mut bytes = vec![0u8; geometry.slot_bytes(at.class)];
    if key_len == 0 || end > bytes.len() {
        return None;
    }
    fabric.read(addr, &mut bytes).ok()?;
    let key = bytes[dte::KEY_OFFSET..dte::KEY_OFFSET + key_len].to_vec();
    let value = bytes[dte::value_offset(key_len)..end].to_vec();
    Some((key, at, h, value))
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
    let mut by_key: HashMap<Vec<u8>, Linked> = HashMap::new();
    for node in 0..config.nodes {
        for slot in 0..config.index_slots_per_node as u64 {
            let mut w = [0u8; 8];
            if fabric
                .read(Candidate { node, slot }.addr(), &mut w)
                .is_err()
            {
                continue;
            }
            let ite = Ite(u64::from_le_bytes(w));
            let Some((key, at, h, value)) = committed(fabric, geometry, ite) else {
                continue;
            };
            let here = Linked {
                node,
                slot,
                at,
                tombstone: h.state.is_tombstone(),
                value,
            };
            match by_key.get(&key) {
                Some(first) if first.tombstone != here.tombstone || first.value != here.value => {
                    let show = |l: &Linked| {
                        format!(
                            "node {} slot {} -> {:?} {}",
                            l.node,
                            l.slot,
                            l.at,
                            if l.tombstone {
                                "tombstone".to_string()
                            } else {
                                format!("value {:?}", String::from_utf8_lossy(&l.value))
                            }
                        )
                    };
                    return Some(format!(
                        "DIVERGENT: two linked committed entries of key {:?} differ: {} and {}",
                        String::from_utf8_lossy(&key),
                        show(first),
                        show(&here)
                    ));
                }
                Some(_) => {}
                None => {
                    by_key.insert(key, here);
                }
            }
        }
    }
    None
}
