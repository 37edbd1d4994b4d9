//! The mirror audit of a replicated run in which every sync finished
//! (docs/replication.md#replicated-writes): each mirror holds what its
//! primary holds.

use nessie::data::Geometry;
use nessie::fabric::{Fabric, RemoteAddr};
use nessie::layout::dte::{entry_bytes, DteState};
use nessie::layout::{Ite, IteKind};
use nessie::Cluster;

fn word(fabric: &dyn Fabric, at: RemoteAddr) -> Result<u64, String> {
    let mut w = [0u8; 8];
    fabric
        .read(at, &mut w)
        .map_err(|e| format!("mirror audit: READ at {at}: {e}"))?;
    Ok(u64::from_le_bytes(w))
}

fn slot_bytes(fabric: &dyn Fabric, at: RemoteAddr, len: usize) -> Result<Vec<u8>, String> {
    let mut buf = vec![0u8; len];
    fabric
        .read(at, &mut buf)
        .map_err(|e| format!("mirror audit: READ at {at}: {e}"))?;
    Ok(buf)
}

/// Compares every mirror with its primary: every index slot's value
/// exactly, and for every slot that links an entry (or names a MIGRATE
/// copy in a marker), the entry's bytes (header, key, value). Call it
/// with no verb in flight and every node alive. Returns how many entries
/// were compared.
///
/// # Errors
/// The first difference.
pub(super) fn audit_mirrors(cluster: &Cluster) -> Result<u64, String> {
    let config = cluster.config();
    let geometry = Geometry::new(config);
    let fabric = cluster.fabric();
    let fabric = fabric.as_ref();
    let mut entries = 0;
    for node in 0..config.nodes {
        for slot in 0..geometry.index_slots() {
            let Some(primary) = geometry.index_slot(node as u16, slot) else {
                continue;
            };
            let ite = Ite(word(fabric, primary)?);
            for mirror in geometry.mirrors(primary) {
                let m = Ite(word(fabric, mirror)?);
                if m != ite {
                    return Err(format!(
                        "MIRROR: index slot {slot} of share {node} holds {:?}, its mirror at \
                         {mirror} {:?}",
                        ite.kind(),
                        m.kind()
                    ));
                }
            }
            let dte = match ite.kind() {
                IteKind::Occupied { dte, .. } | IteKind::Moved { copy: dte } => dte,
                IteKind::Empty => continue,
            };
            let Some(at) = geometry.dte_addr(dte) else {
                continue;
            };
            // The entry's own bytes: what lies beyond it in the slot is an
            // older entry's leftover, which no copy needs.
            let state = DteState(word(fabric, at)?);
            let len =
                entry_bytes(state.key_len(), state.value_len()).min(geometry.slot_bytes(dte.class));
            let image = slot_bytes(fabric, at, len)?;
            for mirror in geometry.mirrors(at) {
                let copy = slot_bytes(fabric, mirror, len)?;
                if let Some(i) = (0..len).find(|&i| copy[i] != image[i]) {
                    return Err(format!(
                        "MIRROR: entry {dte:?} (linked by slot {slot} of share {node}) differs on \
                         its mirror at {mirror} from byte {i} on"
                    ));
                }
            }
            entries += 1;
        }
    }
    Ok(entries)
}
