//! Node clocks on virtual time.

use super::Scheduler;
use nessie::fabric::NodeId;
use nessie::Clock;
use std::sync::Arc;
use std::time::Duration;

/// A node's clocks in the simulation: virtual time plus the node's current
/// wall-clock offset, and virtual time itself as the monotonic clock.
#[derive(Debug)]
pub struct SimClock {
    sched: Arc<Scheduler>,
    node: NodeId,
}

impl SimClock {
    /// Node `node`'s clock.
    #[must_use]
    pub fn new(sched: Arc<Scheduler>, node: NodeId) -> SimClock {
        SimClock { sched, node }
    }
}

impl Clock for SimClock {
    fn now_us(&self) -> u64 {
        self.sched.wall(self.node)
    }

    fn mono_us(&self) -> u64 {
        self.sched.now()
    }

    fn sleep(&self, d: Duration) {
        self.sched.sleep(d);
    }
}
