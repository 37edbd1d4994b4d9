//! Per-client counters of what operations cost and why they retried.

use crate::fabric::VerbCounts;
use serde::{Deserialize, Serialize};
use std::ops::AddAssign;

/// `AddAssign` adding counters field by field. The destructuring pattern
/// names every field, so a counter added to the struct but not here fails
/// to compile instead of silently staying out of sums.
macro_rules! add_fields {
    ($ty:ident { $($field:ident),* $(,)? }) => {
        impl AddAssign for $ty {
            fn add_assign(&mut self, o: $ty) {
                let $ty { $($field),* } = o;
                $(self.$field += $field;)*
            }
        }
    };
    // Counters of plain `u64` fields also get their difference.
    ($ty:ident { $($field:ident),* $(,)? } with since) => {
        add_fields!($ty { $($field),* });

        impl $ty {
            /// The counts since `earlier`, field by field (counters only
            /// grow; saturating against a reset).
            #[must_use]
            pub fn since(&self, earlier: &$ty) -> $ty {
                $ty { $($field: self.$field.saturating_sub(earlier.$field)),* }
            }
        }
    };
}

/// Declares the retry taxonomy once: [`RetryCause`] (with `ALL` and
/// `name()`) and [`RetryCounts`], a counter per cause under the cause's
/// name, indexed by the cause. A new cause is one line here.
macro_rules! retry_causes {
    ($($(#[$doc:meta])* $cause:ident => $field:ident,)*) => {
        /// Why an operation went around its loop again.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum RetryCause {
            $($(#[$doc])* $cause,)*
        }

        impl RetryCause {
            /// Every cause, in declaration order.
            pub const ALL: [RetryCause; [$(RetryCause::$cause),*].len()] =
                [$(RetryCause::$cause),*];

            /// The cause's name in reports (its counter's).
            #[must_use]
            pub fn name(self) -> &'static str {
                match self {
                    $(RetryCause::$cause => stringify!($field),)*
                }
            }
        }

        /// Retries by cause (see [`RetryCause`]).
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct RetryCounts {
            $($(#[$doc])* pub $field: u64,)*
        }

        impl RetryCounts {
            /// The counter of `cause`.
            #[must_use]
            pub fn get(&self, cause: RetryCause) -> u64 {
                match cause {
                    $(RetryCause::$cause => self.$field,)*
                }
            }

            /// The counter of `cause`, to change.
            pub fn get_mut(&mut self, cause: RetryCause) -> &mut u64 {
                match cause {
                    $(RetryCause::$cause => &mut self.$field,)*
                }
            }
        }

        add_fields!(RetryCounts { $($field),* } with since);
    };
}

retry_causes! {
    /// An ITE CAS lost a race.
    CasFailed => cas_failed,
    /// The key had a live in-progress entry (back-off).
    Busy => busy,
    /// The reverse pass saw a change (GET: re-read; PUT/DELETE: abort).
    Changed => changed,
    /// The operation helped someone else's entry first.
    Helped => helped,
    /// A read was torn (checksum, generation or length mismatch).
    Torn => torn,
    /// A helper aborted this operation's entry.
    AbortedByHelper => aborted_by_helper,
    /// The data table had no free slot yet.
    NoFreeSlot => no_free_slot,
}

impl RetryCounts {
    /// Number of causes.
    pub const CAUSES: usize = RetryCause::ALL.len();

    /// Each cause's count with its name, in declaration order.
    #[must_use]
    pub fn by_cause(&self) -> [(&'static str, u64); Self::CAUSES] {
        RetryCause::ALL.map(|c| (c.name(), self.get(c)))
    }

    /// All retries together.
    #[must_use]
    pub fn total(&self) -> u64 {
        RetryCause::ALL.iter().map(|&c| self.get(c)).sum()
    }
}

/// Counters of one kind of operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpStats {
    /// Operations completed (successfully or with an error).
    pub ops: u64,
    /// Operations that returned an error.
    pub errors: u64,
    /// Verbs they issued.
    pub verbs: VerbCounts,
    /// Retries by cause.
    pub retries: RetryCounts,
    /// DTEs served from the cache.
    pub cache_hits: u64,
    /// GETs whose value a scatter READ put straight into the caller's
    /// buffer, with no copy after the READ (docs/design.md#one-copy-gets).
    #[serde(default)]
    pub values_landed: u64,
    /// Operations whose first pass used the entry their location hint
    /// named, read with the index: a GET answered from it, a write took
    /// it for its read of that entry (docs/design.md#location-hints).
    #[serde(default)]
    pub hint_hits: u64,
    /// Operations whose hinted entry was read and not used: the hint was
    /// stale.
    #[serde(default)]
    pub hint_misses: u64,
    /// MIGRATEs performed to make room.
    pub migrations: u64,
    /// Entries of dead or aborted owners this client recovered.
    pub recoveries: u64,
    /// `MOVED(copy)` markers of aborted copies this client put back to the
    /// copy's `prev` (a zombie migrator's late marker, Z1).
    pub marker_restores: u64,
    /// MIGRATEs whose copy a helper aborted before the commit, so the
    /// migrator left its marker to the helpers (CV).
    pub markers_left: u64,
    /// CASes that returned later than the landing bound after their
    /// deadline check (each also logged as an error): the time assumption
    /// behind slot recycling may have been broken.
    pub late_cas: u64,
    /// Stage WRITEs that failed (the unlinked slot leaks).
    pub stage_failures: u64,
    /// Index CASes this client won whose mirrors it could not bring up to
    /// date before its deadline (docs/replication.md#rp2): the mirror lags
    /// until the slot's next change, and what the CAS unlinked is not
    /// staged (its slot leaks, docs/replication.md#rp5).
    pub mirrors_behind: u64,
    /// Time slept backing off between retries, µs.
    pub backoff_us: u64,
    /// Time spent scanning the data table for a reusable slot because none
    /// was free when a slot was needed, ns.
    pub scan_ns: u64,
}

add_fields!(OpStats {
    ops,
    errors,
    verbs,
    retries,
    cache_hits,
    values_landed,
    hint_hits,
    hint_misses,
    migrations,
    recoveries,
    marker_restores,
    markers_left,
    late_cas,
    stage_failures,
    mirrors_behind,
    backoff_us,
    scan_ns,
});

/// Which operation a counter belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OpKind {
    /// GET.
    Get,
    /// PUT.
    Put,
    /// DELETE.
    Delete,
}

/// A client's counters, per operation kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// GETs.
    pub get: OpStats,
    /// PUTs.
    pub put: OpStats,
    /// DELETEs.
    pub delete: OpStats,
}

impl Stats {
    /// The counters of one kind.
    #[must_use]
    pub fn of(&self, kind: OpKind) -> &OpStats {
        match kind {
            OpKind::Get => &self.get,
            OpKind::Put => &self.put,
            OpKind::Delete => &self.delete,
        }
    }

    /// The counters of one kind, mutable.
    pub fn of_mut(&mut self, kind: OpKind) -> &mut OpStats {
        match kind {
            OpKind::Get => &mut self.get,
            OpKind::Put => &mut self.put,
            OpKind::Delete => &mut self.delete,
        }
    }

    /// All kinds together.
    #[must_use]
    pub fn total(&self) -> OpStats {
        let mut t = self.get;
        t += self.put;
        t += self.delete;
        t
    }
}

add_fields!(Stats { get, put, delete });

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_by_cause_add_up_and_subtract() {
        let later = RetryCounts {
            cas_failed: 1,
            busy: 2,
            changed: 3,
            helped: 4,
            torn: 5,
            aborted_by_helper: 6,
            no_free_slot: 7,
        };
        let names: Vec<&str> = later.by_cause().iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "cas_failed",
                "busy",
                "changed",
                "helped",
                "torn",
                "aborted_by_helper",
                "no_free_slot"
            ]
        );
        let counts: Vec<u64> = later.by_cause().iter().map(|(_, c)| *c).collect();
        assert_eq!(counts, [1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(later.total(), 28);
        let earlier = RetryCounts {
            busy: 1,
            no_free_slot: 9,
            ..RetryCounts::default()
        };
        let d = later.since(&earlier);
        for (i, c) in RetryCause::ALL.into_iter().enumerate() {
            assert_eq!(later.get(c), i as u64 + 1, "{}", c.name());
        }
        let mut bumped = earlier;
        *bumped.get_mut(RetryCause::Torn) += 2;
        assert_eq!((bumped.torn, bumped.total()), (2, 12));
        assert_eq!(
            d.by_cause().map(|(_, c)| c),
            [1, 1, 3, 4, 5, 6, 0],
            "saturating where a counter went back"
        );
    }
}
