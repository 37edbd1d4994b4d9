//! The regions the store registers on every node, and how their ids are
//! chosen: the index table, one data table per size class, the metadata
//! page, and ids from [`FIRST_EXTERNAL`] on for other stores sharing the
//! fabric (the baselines' rings).

pub use nessie_fabric::RegionId;

/// The node's index table.
pub const INDEX: RegionId = RegionId(0);
/// First id free for regions of other stores.
pub const FIRST_EXTERNAL: u16 = 64;
/// The node's metadata page (its clock heartbeat, see
/// [`crate::clock::SkewVerdict`]).
pub const META: RegionId = RegionId(FIRST_EXTERNAL - 1);

/// The data table of size class `class`.
#[must_use]
pub const fn data(class: u8) -> RegionId {
    RegionId(1 + class as u16)
}

/// Most replicas of a share ([`crate::Config::replicas`]).
pub const MAX_REPLICAS: usize = 4;

/// Region ids one replica's regions take: replica `j` of a share holds its
/// index and data tables under `REPLICA_STRIDE × j` plus their ids at r = 1
/// (docs/replication.md#placement). The META page is not replicated.
pub const REPLICA_STRIDE: u16 = 256;

/// The id under which replica `j` of a share holds the region `of` has at
/// replica 0 (`j` below [`MAX_REPLICAS`]).
#[must_use]
pub const fn replica(j: usize, of: RegionId) -> RegionId {
    RegionId(REPLICA_STRIDE * j as u16 + of.0)
}

/// First id of the aliases of replica 0's regions: a verb to
/// `aliased(x)` reaches region `x` of its node as addressed, where a verb to
/// `x` itself goes to the share's primary (a restoring node's own tables
/// are a mirror of its share, docs/replication.md#restore).
const ALIAS_BASE: u16 = REPLICA_STRIDE * MAX_REPLICAS as u16;

/// The alias of replica 0's region `of`.
#[must_use]
pub const fn aliased(of: RegionId) -> RegionId {
    RegionId(ALIAS_BASE + of.0)
}

/// The region an alias names, if `id` is one.
#[must_use]
pub fn unaliased(id: RegionId) -> Option<RegionId> {
    (id.0 >= ALIAS_BASE && id.0 < ALIAS_BASE + REPLICA_STRIDE).then(|| RegionId(id.0 - ALIAS_BASE))
}

/// The size class whose data table `region` is, if it is one.
#[must_use]
pub fn data_class(region: RegionId) -> Option<u8> {
    (1..META.0)
        .contains(&region.0)
        .then(|| (region.0 - 1) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_regions_name_their_class() {
        assert_eq!(data_class(data(5)), Some(5));
        assert_eq!(data_class(INDEX), None);
        assert_eq!(data_class(RegionId(FIRST_EXTERNAL)), None);
        assert_eq!(data_class(META), None);
        assert!(usize::from(META.0) > crate::layout::ite::MAX_CLASSES);
    }

    #[test]
    fn a_mirror_region_is_its_replica_zero_id_plus_a_stride() {
        assert_eq!(replica(0, data(3)), data(3));
        assert_eq!(replica(1, INDEX), RegionId(256));
        assert_eq!(replica(2, data(0)), RegionId(513));
        assert_eq!(
            data_class(replica(1, data(0))),
            None,
            "a mirror is no primary table"
        );
        assert!(u16::try_from(usize::from(REPLICA_STRIDE) * (MAX_REPLICAS + 1)).is_ok());
        assert_eq!(unaliased(aliased(data(2))), Some(data(2)));
        assert_eq!(unaliased(data(2)), None);
        assert_eq!(unaliased(replica(3, data(2))), None);
    }
}
