//! What the store's tests share: waiting out a view change, keys whose
//! candidates avoid a node, and a fabric that lets a test see each READ
//! and CAS before it runs.
#![allow(dead_code, reason = "each test binary uses a part")]

use nessie::fabric::{Fabric, FabricError, NodeId, RegionId, RemoteAddr};
use nessie::index::KeyHasher;
use nessie::{Client, Config, Error};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Retries `op` while the cluster changes its view (typed refusals,
/// timeouts and fabric errors of verbs to a lost node); panics on any other
/// error or once `limit` has passed.
pub(crate) fn until_served<T>(limit: Instant, mut op: impl FnMut() -> Result<T, Error>) -> T {
    loop {
        match op() {
            Ok(v) => return v,
            Err(
                e @ (Error::ViewChanging { .. }
                | Error::NoQuorum { .. }
                | Error::Timeout
                | Error::Fabric(_)),
            ) => {
                assert!(Instant::now() < limit, "not served again in time: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// Waits until every client of `clients` reads every key of `model` with
/// its value.
pub(crate) fn all_served(clients: &mut [Client], model: &HashMap<String, Vec<u8>>, limit: Instant) {
    for (key, value) in model {
        for c in clients.iter_mut() {
            let got = until_served(limit, || c.get(key.as_bytes()));
            assert_eq!(got.as_deref(), Some(&value[..]), "{key}");
        }
    }
}

/// The first key `key-{i}` with three candidates, none on node `not_on`.
pub(crate) fn key_away_from(config: &Config, not_on: usize) -> Vec<u8> {
    let h = KeyHasher::new(config);
    (0..)
        .map(|i| format!("key-{i}").into_bytes())
        .find(|k| {
            let c = h.candidates(k);
            c.len() == 3 && c.iter().all(|c| c.node != not_on)
        })
        .expect("some key avoids the node")
}

/// What a [`Hooked`] fabric calls before a verb runs: the verb's address.
pub(crate) type Hook = Box<dyn Fn(RemoteAddr) + Send + Sync>;

/// A fabric that calls `before_read` before every READ and `before_cas`
/// before every CAS, then passes the verb to `inner` (batches run verb by
/// verb through the trait's default).
pub(crate) struct Hooked {
    pub(crate) inner: Arc<dyn Fabric>,
    pub(crate) before_read: Hook,
    pub(crate) before_cas: Hook,
}

impl Hooked {
    /// A hook that does nothing.
    pub(crate) fn none() -> Hook {
        Box::new(|_| {})
    }
}

impl std::fmt::Debug for Hooked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooked")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Fabric for Hooked {
    fn keeps_batch_order(&self) -> bool {
        // The default `post` runs a batch's verbs one by one, in order.
        true
    }

    fn nodes(&self) -> usize {
        self.inner.nodes()
    }
    fn fence_node(&self, node: usize) {
        self.inner.fence_node(node);
    }
    fn readmit_node(&self, node: usize) {
        self.inner.readmit_node(node);
    }
    fn region_len(&self, node: NodeId, region: RegionId) -> Option<u64> {
        self.inner.region_len(node, region)
    }
    fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
        (self.before_read)(addr);
        self.inner.read(addr, buf)
    }
    fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
        self.inner.write(addr, data)
    }
    fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
        (self.before_cas)(addr);
        self.inner.cas(addr, expected, new)
    }
}
