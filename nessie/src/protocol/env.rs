//! What every operation of a client borrows from its node: configuration,
//! hashing, the node's data tables and clock, and the time bounds of the
//! configuration.

use crate::clock::Clock;
use crate::config::micros;
use crate::data::{Geometry, NodeData};
use crate::index::KeyHasher;
use crate::replica::Views;
use crate::Config;

/// The time bounds of a configuration in microseconds, computed once, and
/// whether they fence answers read alone.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    pub(super) op_timeout_us: u64,
    pub(super) expiry_us: u64,
    /// An owner is dead once `created_at + dead_after_us < now`
    /// (`op_timeout + 2·max_clock_skew`, and Δ₀ more with replicas:
    /// docs/replication.md#rp2b).
    dead_after_us: u64,
    /// Δ₀, see [`Config::landing_bound`].
    pub(super) landing_us: u64,
    /// Whether the cluster keeps replicas, so that views change under its
    /// operations (docs/replication.md#rp0b).
    pub(super) replicated: bool,
}

impl Timing {
    pub(crate) fn new(config: &Config) -> Timing {
        let mirrors_land = if config.replicas > 1 {
            config.landing_bound()
        } else {
            std::time::Duration::ZERO
        };
        Timing {
            op_timeout_us: micros(config.op_timeout),
            expiry_us: micros(config.expiry),
            dead_after_us: micros(config.op_timeout + config.max_clock_skew * 2 + mirrors_land),
            landing_us: micros(config.landing_bound()),
            replicated: config.replicas > 1,
        }
    }
}

/// The node's resources an operation reads but does not own.
#[derive(Clone, Copy)]
pub(crate) struct Env<'a> {
    pub(crate) config: &'a Config,
    pub(crate) timing: Timing,
    pub(crate) hasher: &'a KeyHasher,
    pub(crate) clock: &'a dyn Clock,
    /// The node's data tables (allocation and release of its slots).
    pub(crate) data: &'a NodeData,
    /// The views the node serves in (which replicas are mirrors).
    pub(crate) views: &'a Views,
}

impl<'a> Env<'a> {
    /// The resources of a client on the node whose tables are `data`.
    pub(crate) fn new(
        config: &'a Config,
        timing: Timing,
        hasher: &'a KeyHasher,
        clock: &'a dyn Clock,
        data: &'a NodeData,
        views: &'a Views,
    ) -> Env<'a> {
        Env {
            config,
            timing,
            hasher,
            clock,
            data,
            views,
        }
    }

    /// The shape of the cluster's tables (the node's data tables').
    pub(crate) fn geometry(&self) -> &'a Geometry {
        self.data.geometry()
    }

    /// Dead owner: `created_at + op_timeout + 2·max_clock_skew < now`
    /// (wall clocks: `created_at` comes from the owner's node).
    pub(crate) fn is_dead(&self, created_at: u64) -> bool {
        created_at.saturating_add(self.timing.dead_after_us) < self.clock.now_us()
    }
}
