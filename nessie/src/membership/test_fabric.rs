//! The membership tests' fabric: one node's view of memory every node
//! shares, with nodes cut off or silent, and the fences, readmissions and
//! batches it saw recorded.

use crate::fabric::{
    Fabric, FabricError, LocalFabric, NodeId, RegionId, RemoteAddr, Verb, WaitBound,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One node's fabric over memory shared by every node.
#[derive(Debug)]
pub(super) struct Fences {
    inner: Arc<LocalFabric>,
    /// Nodes this node fenced, in order.
    pub(super) fenced: Mutex<Vec<NodeId>>,
    /// Nodes this node readmitted, in order.
    pub(super) readmitted: Mutex<Vec<NodeId>>,
    /// Nodes this one cannot reach (a partition): their verbs fail at once.
    pub(super) cut: Mutex<Vec<NodeId>>,
    /// Nodes whose verbs wait out the thread's wait bound and fail (a host
    /// cut off without a reset, on `tcp`).
    pub(super) silent: Mutex<Vec<NodeId>>,
    /// Batches posted.
    pub(super) posts: AtomicUsize,
}

impl Fences {
    /// A node's view of `memory`, every node reachable.
    pub(super) fn over(memory: &Arc<LocalFabric>) -> Fences {
        Fences {
            inner: Arc::clone(memory),
            fenced: Mutex::new(Vec::new()),
            readmitted: Mutex::new(Vec::new()),
            cut: Mutex::new(Vec::new()),
            silent: Mutex::new(Vec::new()),
            posts: AtomicUsize::new(0),
        }
    }

    fn reach(&self, node: NodeId) -> Result<(), FabricError> {
        let left = WaitBound::left();
        let timed_out = || FabricError::Disconnected {
            node,
            source: std::io::Error::new(std::io::ErrorKind::TimedOut, "silent"),
        };
        if self.cut.lock().unwrap().contains(&node) {
            Err(FabricError::Lost { node })
        } else if self.silent.lock().unwrap().contains(&node) {
            std::thread::sleep(left.unwrap_or(Duration::from_secs(5)));
            Err(timed_out())
        } else if left.is_some_and(|l| l.is_zero()) {
            // Past the bound a verb may fail at once.
            Err(timed_out())
        } else {
            Ok(())
        }
    }
}

impl Fabric for Fences {
    fn nodes(&self) -> usize {
        self.inner.nodes()
    }
    fn region_len(&self, node: NodeId, region: RegionId) -> Option<u64> {
        self.inner.region_len(node, region)
    }
    fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
        self.reach(addr.node)?;
        self.inner.read(addr, buf)
    }
    fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
        self.reach(addr.node)?;
        self.inner.write(addr, data)
    }
    fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
        self.reach(addr.node)?;
        self.inner.cas(addr, expected, new)
    }
    fn post(&self, batch: &mut [Verb<'_>]) -> Result<(), FabricError> {
        // Every verb runs and the batch waits for its slowest peer, as on
        // `tcp`; the first failure is the batch's.
        self.posts.fetch_add(1, Ordering::Relaxed);
        let mut first = None;
        for verb in batch.iter_mut() {
            if let Err(e) = verb.execute_on(self) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
    fn fence_node(&self, node: NodeId) {
        self.fenced.lock().unwrap().push(node);
    }
    fn readmit_node(&self, node: NodeId) {
        self.readmitted.lock().unwrap().push(node);
    }
}
