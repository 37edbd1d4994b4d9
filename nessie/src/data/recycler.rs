//! The background thread that returns expired DTE slots to the free lists
//! before allocation runs dry.

use super::{NodeData, TableAccess};
use crate::clock::Clock;
use crate::fabric::Fabric;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A running recycler; stops and joins its thread when dropped.
#[derive(Debug)]
pub struct Recycler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Recycler {
    /// Starts a thread that, every `period`, scans each size class of each
    /// node in `nodes` whose free slots have fallen below a quarter of its
    /// capacity. `local` reaches the nodes' own memory without any wrapper,
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
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("nessie-recycler".into())
            .spawn(move || {
                let access = TableAccess {
                    local: local.as_ref(),
                    cluster: cluster.as_ref(),
                    clock: clock.as_ref(),
                };
                while !flag.load(Ordering::Relaxed) {
                    for data in &nodes {
                        for class in 0..data.classes() as u8 {
                            if data.available(class) * 4 < data.capacity(class) {
                                if let Err(e) = data.recycle(class, access) {
                                    tracing::warn!("recycler scan failed: {e}");
                                }
                            }
                        }
                    }
                    std::thread::park_timeout(period);
                }
            })?;
        Ok(Recycler {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Recycler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}
