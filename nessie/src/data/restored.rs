//! A restored node's allocator: rebuilt from the images its restorer
//! copied, before the node is primary of its share again
//! (docs/replication.md#restore).

use super::{NodeData, NOT_IN_USE};
use crate::fabric::{Fabric, FabricError};
use crate::layout::dte::DteState;

impl NodeData {
    /// Rebuilds every table from the node's own memory `local`: a slot
    /// whose state word names an entry is in use at that entry's
    /// generation (the recycler frees it once it is staged and expired),
    /// every other slot is free. Called while the node serves nothing.
    ///
    /// # Errors
    /// A failed READ of the node's memory.
    pub(crate) fn adopt_restored(&self, local: &dyn Fabric) -> Result<u64, FabricError> {
        let mut in_use = 0u64;
        for class in 0..self.classes() as u8 {
            let states = (0..self.geometry.slots(class))
                .map(|slot| {
                    let mut w = [0u8; 8];
                    local.read(self.slot_addr(class, slot as u32), &mut w)?;
                    Ok(DteState(u64::from_le_bytes(w)))
                })
                .collect::<Result<Vec<DteState>, FabricError>>()?;
            let Some(mut table) = self.table(class) else {
                continue;
            };
            table.free.clear();
            table.in_use.clear();
            table.in_doubt.clear();
            table.cursor = 0;
            table.next_fresh = table.slots;
            for (slot, state) in states.iter().enumerate() {
                table.in_use_at[slot] = NOT_IN_USE;
                if state.0 == 0 || *state == DteState::UNSET {
                    table.generations[slot] = 1;
                    table.free.push(slot as u32);
                } else {
                    table.generations[slot] = state.generation();
                    table.enter(slot as u32);
                    in_use += 1;
                }
            }
            // Fresh slots are handed out lowest first, as before the loss.
            table.free.reverse();
        }
        Ok(in_use)
    }
}
