//! Replication's steps that do not depend on who takes them: the mirror
//! sync of an index slot (docs/replication.md#rp2), used by operations
//! through their CAS gate and by the recycler through the fabric.
//!
//! Where the replicas live is [`crate::data::Geometry::replica_addr`];
//! which of them serve is the current [`View`].

mod restore;
mod routed;
mod view;

pub use restore::RestoreFigures;
pub(crate) use restore::{catch_up, prepare, restore, CopyTime};
pub(crate) use routed::RoutedFabric;
pub(crate) use view::PerReplica;
pub use view::{View, Views};

/// The two verbs a mirror's sync issues, on one index slot.
pub(crate) trait SyncVerbs {
    /// What stops a sync.
    type Error;
    /// READ of the slot on the primary.
    fn read_primary(&mut self) -> Result<u64, Self::Error>;
    /// CAS of the slot on the mirror; returns what it held.
    fn cas_mirror(&mut self, expected: u64, new: u64) -> Result<u64, Self::Error>;
}

/// Brings one mirror of an index slot forward after a CAS `x → y` won on
/// the primary and the first mirror CAS `x → y` returned `old`
/// (docs/replication.md#rp2).
///
/// Every mirror CAS moves the mirror forward only: its expected value was on
/// the mirror when a CAS returned it, and its new value was read from the
/// primary afterwards, so it is that value or a later one of the same slot.
/// Returns once the mirror holds `y` or a value the primary held after `y`
/// (which a successful CAS of a value read from the primary after `y`
/// ensures).
///
/// # Errors
/// The first error of a verb (an operation's
/// deadline, a fabric error): the mirror lags until the slot's next change,
/// whose winner syncs it from whatever it holds.
pub(crate) fn sync_mirror<V: SyncVerbs>(
    x: u64,
    y: u64,
    old: u64,
    verbs: &mut V,
) -> Result<(), V::Error> {
    let mut found = if old == x { y } else { old };
    while found != y {
        let primary = verbs.read_primary()?;
        if primary == found {
            return Ok(());
        }
        let was = verbs.cas_mirror(found, primary)?;
        if was == found {
            // `primary` was read after our change took effect: it is `y`
            // or a later value.
            return Ok(());
        }
        found = was;
    }
    Ok(())
}

/// Brings a mirror that was seen holding `found` to a value its primary
/// held after that: the loop of [`sync_mirror`] without a change of one's
/// own, for a reader that found the mirror behind
/// (docs/replication.md#rp4b). Returns once the mirror held what the
/// primary held, or moved on to a value read from the primary after
/// `found`.
///
/// # Errors
/// The first error of a verb.
pub(crate) fn catch_up_mirror<V: SyncVerbs>(mut found: u64, verbs: &mut V) -> Result<(), V::Error> {
    loop {
        let primary = verbs.read_primary()?;
        if primary == found {
            return Ok(());
        }
        let was = verbs.cas_mirror(found, primary)?;
        if was == found {
            return Ok(());
        }
        found = was;
    }
}

#[cfg(test)]
mod tests {
    use super::{sync_mirror, SyncVerbs};
    use std::convert::Infallible;

    /// A mirror word and a primary that moves on by a script of values,
    /// one step per primary read; `racer` is a value another sync puts on
    /// the mirror just before our first CAS of the loop.
    struct Script<'a> {
        mirror: u64,
        primary: &'a [u64],
        reads: usize,
        cases: usize,
        racer: Option<u64>,
    }

    impl SyncVerbs for Script<'_> {
        type Error = Infallible;

        fn read_primary(&mut self) -> Result<u64, Infallible> {
            let i = self.reads.min(self.primary.len() - 1);
            self.reads += 1;
            Ok(self.primary[i])
        }

        fn cas_mirror(&mut self, expected: u64, new: u64) -> Result<u64, Infallible> {
            self.cases += 1;
            if self.cases == 2 {
                if let Some(v) = self.racer {
                    self.mirror = v;
                }
            }
            let was = self.mirror;
            if was == expected {
                self.mirror = new;
            }
            Ok(was)
        }
    }

    /// Final mirror value, primary reads, mirror CASes.
    fn run(
        x: u64,
        y: u64,
        mirror: u64,
        primary: &[u64],
        racer: Option<u64>,
    ) -> (u64, usize, usize) {
        let mut script = Script {
            mirror,
            primary,
            reads: 0,
            cases: 0,
            racer,
        };
        let first = script.cas_mirror(x, y).unwrap();
        sync_mirror(x, y, first, &mut script).unwrap();
        (script.mirror, script.reads, script.cases)
    }

    #[test]
    fn the_common_case_is_one_cas_and_no_read() {
        assert_eq!(run(1, 2, 1, &[2], None), (2, 0, 1));
    }

    #[test]
    fn a_lagging_mirror_is_brought_to_the_primarys_value() {
        // The mirror missed 1 → 2 (a sync that timed out); our change is
        // 2 → 3 and the primary has moved on to 4 since.
        assert_eq!(run(2, 3, 1, &[4], None), (4, 1, 2));
    }

    #[test]
    fn a_mirror_already_at_the_primarys_value_is_left_alone() {
        // Someone else's sync took the mirror to 5, the primary's value.
        assert_eq!(run(2, 3, 5, &[5], None), (5, 1, 1));
    }

    #[test]
    fn a_racing_sync_is_followed_to_the_primarys_newest_value() {
        // Between our read of 4 and our CAS from 1, another sync moved the
        // mirror to 4; our CAS fails, the primary has moved on to 6.
        assert_eq!(run(2, 3, 1, &[4, 6], Some(4)), (6, 2, 3));
    }
}
