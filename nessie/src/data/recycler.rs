//! The background thread that returns expired DTE slots to the free lists
//! before allocation runs dry.

use super::{NodeData, TableAccess};
use crate::clock::Clock;
use crate::fabric::Fabric;
use crate::periodic::Periodic;
use std::sync::Arc;
use std::time::Duration;

/// A running recycler; stops and joins its thread when dropped.
#[derive(Debug)]
pub struct Recycler {
    _thread: Periodic,
}

impl Recycler {
    /// Starts a thread that, every `period`, scans each size class of each
    /// node in `nodes` whose free slots, with the slots its clients' queues
    /// will return ([`NodeData::queued`]), have fallen below a quarter of
    /// its capacity: a scan is for slots other nodes' clients staged. `local` reaches the nodes' own memory without any wrapper,
    /// `cluster` every node (see [`TableAccess`]).
    ///
    /// # Errors
    /// If the thread cannot be spawned.
    pub fn start(
        nodes: Vec<Arc<NodeData>>,
        local: Arc<dyn Fabric>,
        cluster: Arc<dyn Fabric>,
        clock: Arc<dyn Clock>,
        period: Duration,
    ) -> std::io::Result<Recycler> {
        let thread = Periodic::start("nessie-recycler", period, move || {
            let access = TableAccess {
                local: local.as_ref(),
                cluster: cluster.as_ref(),
                clock: clock.as_ref(),
            };
            for data in &nodes {
                for class in 0..data.classes() as u8 {
                    let coming = data.available(class) + data.queued(class);
                    if coming * 4 < data.capacity(class) {
                        if let Err(e) = data.recycle(class, access) {
                            tracing::warn!("recycler scan failed: {e}");
                        }
                    }
                }
            }
        })?;
        Ok(Recycler { _thread: thread })
    }
}
