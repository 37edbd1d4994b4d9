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
}
