//! The copy a restoring node makes of every replica it holds, while the
//! cluster serves (docs/replication.md#restore): index slots by the mirror
//! sync from a value no primary holds, entries by copy-then-verify with
//! state words moved forward only; once the node is primary of its share
//! again, the share's other replicas catch up with the commits it took
//! first as a mirror (docs/replication.md#rp3c).

use super::{sync_mirror, SyncVerbs};
use crate::clock::Clock;
use crate::data::Geometry;
use crate::fabric::{Fabric, FabricError, NodeId, RegionId, RemoteAddr};
use crate::layout::dte::{DteState, DteStatus, EXPIRES_AT_OFFSET};
use crate::layout::{read_word, region, Ite, WORD};
use crate::Error;

/// The clock a restorer checks before it writes a slot, and the landing
/// bound its writes are assumed to land within (RS3,
/// docs/replication.md#rs3).
#[derive(Clone, Copy)]
pub(crate) struct CopyTime<'a> {
    /// The restoring node's clock.
    pub(crate) clock: &'a dyn Clock,
    /// The landing bound, µs.
    pub(crate) landing_us: u64,
}

/// Bytes a restorer reads from a primary in one READ.
const CHUNK_BYTES: usize = 64 << 10;
/// Passes over one chunk before the restorer gives up on a slot that keeps
/// changing under it.
const MAX_PASSES: usize = 64;

/// What a restore copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestoreFigures {
    /// Index slots copied.
    pub index_slots: u64,
    /// Data slots copied (every slot of every table, used or not).
    pub data_slots: u64,
    /// Bytes read from the primaries.
    pub bytes_read: u64,
    /// Chunks copied again because a slot changed between the copy and
    /// its verification.
    pub recopies: u64,
    /// Data slots the node's allocator took back as in use after the copy.
    pub entries_adopted: u64,
    /// State words of the node's own share moved from INVALID to VALID on
    /// its other replicas once the node was primary again
    /// (docs/replication.md#rp3c).
    pub caught_up: u64,
}

/// The regions node `me` holds a replica in, with the share each
/// replicates and the replica's index: (share, j).
fn held(geometry: &Geometry, me: NodeId) -> impl Iterator<Item = (NodeId, usize)> + '_ {
    let n = geometry.nodes();
    (0..geometry.replicas()).map(move |j| ((me + n - j) % n, j))
}

/// Fills `me`'s index tables with [`Ite::UNCOPIED`] and its data tables'
/// state words with [`DteState::UNSET`], on its own memory `local`, before
/// any view names it restoring.
///
/// # Errors
/// A failed local WRITE.
pub(crate) fn prepare(
    local: &dyn Fabric,
    geometry: &Geometry,
    me: NodeId,
) -> Result<(), FabricError> {
    let unset = DteState::UNSET.0.to_le_bytes();
    for (_, j) in held(geometry, me) {
        let index = region::replica(j, region::INDEX);
        let slots = geometry.index_slots() as usize;
        let words: Vec<u8> = (0..slots)
            .flat_map(|_| Ite::UNCOPIED.0.to_le_bytes())
            .collect();
        local.write(RemoteAddr::new(me, index, 0), &words)?;
        for class in 0..geometry.classes() as u8 {
            let table = region::replica(j, region::data(class));
            let bytes = geometry.slot_bytes(class) as u64;
            for slot in 0..geometry.slots(class) as u64 {
                local.write(RemoteAddr::new(me, table, slot * bytes), &unset)?;
            }
        }
    }
    Ok(())
}

/// A restorer's sync of one index slot: the primary through the routed
/// fabric, the copy on its own memory.
struct Slot<'a> {
    cluster: &'a dyn Fabric,
    local: &'a dyn Fabric,
    primary: RemoteAddr,
    mine: RemoteAddr,
}

impl SyncVerbs for Slot<'_> {
    type Error = FabricError;

    fn read_primary(&mut self) -> Result<u64, FabricError> {
        word_at(self.cluster, self.primary)
    }

    fn cas_mirror(&mut self, expected: u64, new: u64) -> Result<u64, FabricError> {
        self.local.cas(self.mine, expected, new)
    }
}

fn word_at(fabric: &dyn Fabric, at: RemoteAddr) -> Result<u64, FabricError> {
    let mut w = [0u8; WORD];
    fabric.read(at, &mut w)?;
    Ok(u64::from_le_bytes(w))
}

/// Copies every replica `me` holds from its primary: `cluster` routes
/// verbs to replica 0 of a share to its primary in the current view (one
/// that names `me` restoring), `local` reaches `me`'s own memory.
///
/// # Errors
/// A failed verb, or a slot that kept changing for [`MAX_PASSES`] passes
/// ([`Error::RejoinRefused`]).
fn copy_all(
    cluster: &dyn Fabric,
    local: &dyn Fabric,
    geometry: &Geometry,
    me: NodeId,
    time: CopyTime<'_>,
) -> Result<RestoreFigures, Error> {
    let mut figures = RestoreFigures::default();
    for (share, j) in held(geometry, me) {
        copy_index(cluster, local, geometry, (share, j), me, &mut figures)?;
        for class in 0..geometry.classes() as u8 {
            copy_table(
                Table::endpoints(cluster, local, time),
                geometry,
                (share, j, class),
                me,
                &mut figures,
            )?;
        }
    }
    Ok(figures)
}

/// [`copy_all`], then the node's allocator rebuilt from the copies
/// (`data`, the node's tables): the whole of a restore between the view
/// that names `me` restoring and the one that names it active.
///
/// # Errors
/// As [`copy_all`], and a failed READ of the node's own memory.
pub(crate) fn restore(
    cluster: &dyn Fabric,
    local: &dyn Fabric,
    geometry: &Geometry,
    data: &crate::data::NodeData,
    me: NodeId,
    time: CopyTime<'_>,
) -> Result<RestoreFigures, Error> {
    let mut figures = copy_all(cluster, local, geometry, me, time)?;
    figures.entries_adopted = data.adopt_restored(local)?;
    Ok(figures)
}

fn copy_index(
    cluster: &dyn Fabric,
    local: &dyn Fabric,
    geometry: &Geometry,
    (share, j): (NodeId, usize),
    me: NodeId,
    figures: &mut RestoreFigures,
) -> Result<(), FabricError> {
    let slots = geometry.index_slots();
    let per_chunk = (CHUNK_BYTES / WORD) as u64;
    let mine_region = region::replica(j, region::INDEX);
    let mut start = 0;
    while start < slots {
        let count = per_chunk.min(slots - start);
        let mut chunk = vec![0u8; count as usize * WORD];
        cluster.read(
            RemoteAddr::new(share, region::INDEX, start * WORD as u64),
            &mut chunk,
        )?;
        figures.bytes_read += chunk.len() as u64;
        // Others may run between the READ and the copy's CASes: a fabric
        // that schedules its threads interleaves them here.
        cluster.yield_point();
        for i in 0..count {
            let offset = (start + i) * WORD as u64;
            let seen = read_word(&chunk, i as usize * WORD);
            let mut slot = Slot {
                cluster,
                local,
                primary: RemoteAddr::new(share, region::INDEX, offset),
                mine: RemoteAddr::new(me, mine_region, offset),
            };
            let was = slot.cas_mirror(Ite::UNCOPIED.0, seen)?;
            sync_mirror(Ite::UNCOPIED.0, seen, was, &mut slot)?;
        }
        figures.index_slots += count;
        start += count;
    }
    Ok(())
}

fn copy_table(
    endpoints: Table<'_>,
    geometry: &Geometry,
    (share, j, class): (NodeId, usize, u8),
    me: NodeId,
    figures: &mut RestoreFigures,
) -> Result<(), Error> {
    let bytes = geometry.slot_bytes(class);
    let slots = geometry.slots(class);
    if bytes == 0 {
        return Ok(());
    }
    let per_chunk = (CHUNK_BYTES / bytes).max(1);
    let table = Table {
        primary: (share, region::data(class)),
        mine: (me, region::replica(j, region::data(class))),
        bytes,
        ..endpoints
    };
    let mut start = 0;
    while start < slots {
        let count = per_chunk.min(slots - start);
        table.copy_chunk(start, count, figures)?;
        figures.data_slots += count as u64;
        start += count;
    }
    Ok(())
}

/// One data table's primary and the restorer's copy of it.
struct Table<'a> {
    cluster: &'a dyn Fabric,
    local: &'a dyn Fabric,
    time: CopyTime<'a>,
    primary: (NodeId, RegionId),
    mine: (NodeId, RegionId),
    bytes: usize,
}

impl<'a> Table<'a> {
    /// Where a table's copy reads and writes, before its regions are set.
    fn endpoints(cluster: &'a dyn Fabric, local: &'a dyn Fabric, time: CopyTime<'a>) -> Self {
        Table {
            cluster,
            local,
            time,
            primary: (0, region::INDEX),
            mine: (0, region::INDEX),
            bytes: 0,
        }
    }

    fn at(&self, (node, region): (NodeId, RegionId), slot: usize) -> RemoteAddr {
        RemoteAddr::new(node, region, (slot * self.bytes) as u64)
    }

    /// Copy-then-verify of `count` slots from `start`: READ them from the
    /// primary, WRITE each slot but its state word, move the state word
    /// forward, READ the primary again; copy again while a state word or
    /// `expires_at` changed between the two READs.
    fn copy_chunk(
        &self,
        start: usize,
        count: usize,
        figures: &mut RestoreFigures,
    ) -> Result<(), Error> {
        let len = count * self.bytes;
        let mut copied = vec![0u8; len];
        self.cluster
            .read(self.at(self.primary, start), &mut copied)?;
        figures.bytes_read += len as u64;
        for pass in 0.. {
            // The window copy-then-verify exists for: the primary may change
            // between the READ and the copy's WRITEs (a scheduling fabric
            // runs other threads here).
            self.cluster.yield_point();
            for i in 0..count {
                let slot = &copied[i * self.bytes..(i + 1) * self.bytes];
                self.copy_slot(self.at(self.mine, start + i), slot)?;
            }
            let mut again = vec![0u8; len];
            self.cluster
                .read(self.at(self.primary, start), &mut again)?;
            figures.bytes_read += len as u64;
            let moved = (0..count).any(|i| {
                let (a, b) = (i * self.bytes, i * self.bytes + EXPIRES_AT_OFFSET);
                read_word(&copied, a) != read_word(&again, a)
                    || read_word(&copied, b) != read_word(&again, b)
            });
            if !moved {
                return Ok(());
            }
            if pass == MAX_PASSES {
                return Err(Error::RejoinRefused {
                    reason: format!(
                        "a slot of node {}'s table {} kept changing while it was copied",
                        self.primary.0, self.primary.1
                    ),
                });
            }
            figures.recopies += 1;
            copied = again;
        }
        Ok(())
    }
}

impl Table<'_> {
    /// Copies one slot read from the primary (`slot`) to the restorer's
    /// copy at `mine`, moving nothing back (docs/replication.md#restore):
    /// a copy whose state word already names another incarnation than
    /// `slot` holds a newer image, written there by its owner (RP1) after
    /// the primary was read, and is left to the verification; otherwise
    /// the created time, the links, the key and the value are written,
    /// `expires_at` only over 0 (a stager's stamp, which reaches the
    /// mirrors before the primary (RP5), is never undone), then the state
    /// word moves forward. A slot its owner may take for a new entry before
    /// the copy's writes land is not written at all (RS3): its WRITEs are
    /// not conditional, and would land over the owner's image.
    fn copy_slot(&self, mine: RemoteAddr, slot: &[u8]) -> Result<(), FabricError> {
        let local = self.local;
        let target = DteState(read_word(slot, 0));
        loop {
            let cur = DteState(word_at(local, mine)?);
            if cur != DteState::UNSET && cur.generation() != target.generation() {
                return Ok(());
            }
            let checked = self.time.clock.now_us();
            let stamp = read_word(slot, EXPIRES_AT_OFFSET)
                .max(word_at(local, mine.add(EXPIRES_AT_OFFSET as u64))?);
            if !may_write(target, stamp, checked, self.time.landing_us) {
                return Ok(());
            }
            // The writes below land within the landing bound of the check
            // (docs/replication.md#rs3); a scheduling fabric runs other
            // threads here, and a restorer resumed later checks again.
            self.cluster.yield_point();
            let landed_by = checked.saturating_add(self.time.landing_us);
            if self.time.clock.now_us() <= landed_by {
                break;
            }
        }
        local.write(mine.add(WORD as u64), &slot[WORD..EXPIRES_AT_OFFSET])?;
        let after = EXPIRES_AT_OFFSET + WORD;
        local.write(mine.add(after as u64), &slot[after..])?;
        let stamp = read_word(slot, EXPIRES_AT_OFFSET);
        if stamp != 0 {
            local.cas(mine.add(EXPIRES_AT_OFFSET as u64), 0, stamp)?;
        }
        forward_state(local, mine, target)
    }
}

/// RS3 (docs/replication.md#rs3): whether a restorer that checked at wall
/// time `checked` may write a copy of the entry `target`, whose stamp is
/// `stamp` (0: not staged) on the primary or on the copy: an entry, not
/// a slot never used (an owner may take that at any time), and either not
/// staged (a stamp from now on expires an expiry later, far beyond the
/// landing bound) or staged with a stamp that no clock can read as
/// expired before the copy's writes land (a slot is reused only once its
/// stamp has passed on the reusing node's clock, plus the skew).
fn may_write(target: DteState, stamp: u64, checked: u64, landing_us: u64) -> bool {
    let entry = target.0 != 0 && target != DteState::UNSET;
    entry && (stamp == 0 || stamp > checked.saturating_add(landing_us))
}

fn forward_state(
    local: &dyn Fabric,
    mine: RemoteAddr,
    target: DteState,
) -> Result<(), FabricError> {
    let mut cur = DteState(word_at(local, mine)?);
    loop {
        let forward = cur == DteState::UNSET
            || (cur.status() == DteStatus::Invalid
                && target.status() != DteStatus::Invalid
                && cur.with_status(DteStatus::Invalid) == target.with_status(DteStatus::Invalid));
        if cur == target || !forward {
            return Ok(());
        }
        let was = DteState(local.cas(mine, cur.0, target.0)?);
        if was == cur {
            return Ok(());
        }
        cur = was;
    }
}

/// The switch back (docs/replication.md#rp3c): once the view naming `me`
/// active is active, `me` is primary of its own share again and the
/// replica that was primary while it restored is a mirror. A commit that
/// reached `me` as a mirror (RP3: mirrors first) and was cut short before
/// that primary left the entry VALID on `me` and INVALID there: a VALID
/// primary over an INVALID mirror, which RP3 forbids. Every such state word
/// of every other replica of the share is moved forward to `me`'s (a CAS
/// from that very INVALID word, so a slot reused meanwhile is left alone).
/// `cluster` reaches the other replicas, `local` `me`'s own memory.
/// Returns the state words moved.
///
/// # Errors
/// A failed verb; the pass may run again (it only moves words forward).
pub(crate) fn catch_up(
    cluster: &dyn Fabric,
    local: &dyn Fabric,
    geometry: &Geometry,
    me: NodeId,
) -> Result<u64, FabricError> {
    let mut moved = 0;
    for class in 0..geometry.classes() as u8 {
        let bytes = geometry.slot_bytes(class);
        if bytes == 0 {
            continue;
        }
        let slots = geometry.slots(class);
        let per_chunk = (CHUNK_BYTES / bytes).max(1);
        let mine = |slot: usize| RemoteAddr::new(me, region::data(class), (slot * bytes) as u64);
        for j in 1..geometry.replicas() {
            let mut start = 0;
            while start < slots {
                let count = per_chunk.min(slots - start);
                let mut theirs = vec![0u8; count * bytes];
                cluster.read(geometry.replica_addr(mine(start), j), &mut theirs)?;
                for i in 0..count {
                    let committed = DteState(word_at(local, mine(start + i))?);
                    if committed.status() != DteStatus::Valid {
                        continue;
                    }
                    let seen = DteState(read_word(&theirs, i * bytes));
                    // Share `me`'s owners were lost with its host: while it
                    // restored, only helpers changed its entries' states, and
                    // a helper's mirror commit is a roll-forward (V2), which
                    // no helper aborts.
                    debug_assert_ne!(
                        seen,
                        committed.with_status(DteStatus::Aborted),
                        "an entry VALID on its restored primary is ABORTED on replica {j} \
                         (docs/replication.md#rp3c)"
                    );
                    let lagging = committed.with_status(DteStatus::Invalid);
                    if seen != lagging {
                        continue;
                    }
                    let at = geometry.replica_addr(mine(start + i), j);
                    if cluster.cas(at, lagging.0, committed.0)? == lagging.0 {
                        moved += 1;
                    }
                }
                start += count;
            }
        }
    }
    Ok(moved)
}

#[cfg(test)]
mod tests;
