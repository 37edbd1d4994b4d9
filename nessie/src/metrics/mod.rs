//! Each node's opt-in Prometheus endpoint ([`crate::MetricsConfig`]).
//!
//! When a node's configuration has `metrics`, every client of the node
//! keeps its figures in a cell the node can read ([`ClientMetrics`]):
//! after each operation it adds the operation's counters ([`crate::Stats`]),
//! its latency (one clock read before and after) and the verbs it sent to
//! each peer, under a lock only a scrape contends for. Without `metrics`
//! a client has no cell and does none of this.
//!
//! A scrape (`export.rs`) sums the cells of the live clients and of the
//! dropped ones, and reads what the node counts anyway: its data tables'
//! occupancy and recycling, the clock watch's alarms and the `tcp`
//! fabric's refusals and connections. `http.rs` serves it in the
//! Prometheus text format from one thread per node.

mod export;
mod http;

pub(crate) use http::MetricsServer;

use crate::fabric::{Endpoint, VerbCounts};
use crate::stats::{OpKind, OpStats, Stats};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Upper bounds of the latency histogram's buckets, seconds: 1 µs to 1 s
/// (an operation's deadline is `op_timeout`, 500 ms by default).
pub(crate) const LATENCY_BUCKETS: [f64; 17] = [
    1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5,
    1.0,
];

/// Operation kinds in the order of [`Figures::latency`].
pub(crate) const KINDS: [OpKind; 3] = [OpKind::Get, OpKind::Put, OpKind::Delete];

/// A latency histogram: counts per bucket of [`LATENCY_BUCKETS`] (not
/// cumulative; slower operations count only in `count`), their sum.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Latency {
    pub(crate) buckets: [u64; LATENCY_BUCKETS.len()],
    pub(crate) count: u64,
    pub(crate) sum_ns: u64,
}

impl Latency {
    fn record(&mut self, took: Duration) {
        let secs = took.as_secs_f64();
        let i = LATENCY_BUCKETS.partition_point(|&b| b < secs);
        if let Some(b) = self.buckets.get_mut(i) {
            *b += 1;
        }
        self.count += 1;
        self.sum_ns = self
            .sum_ns
            .saturating_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
    }

    fn add(&mut self, o: &Latency) {
        for (a, b) in self.buckets.iter_mut().zip(o.buckets) {
            *a += b;
        }
        self.count += o.count;
        self.sum_ns = self.sum_ns.saturating_add(o.sum_ns);
    }
}

/// What the clients of a node did: their counters, latencies (by
/// [`KINDS`]) and verbs by target node.
#[derive(Clone, Debug, Default)]
pub(crate) struct Figures {
    pub(crate) stats: Stats,
    pub(crate) latency: [Latency; 3],
    pub(crate) peers: Vec<VerbCounts>,
}

impl Figures {
    fn add(&mut self, o: &Figures) {
        self.stats += o.stats;
        for (a, b) in self.latency.iter_mut().zip(&o.latency) {
            a.add(b);
        }
        if self.peers.len() < o.peers.len() {
            self.peers.resize(o.peers.len(), VerbCounts::default());
        }
        for (a, b) in self.peers.iter_mut().zip(&o.peers) {
            *a += *b;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The figures of one node's clients: a cell per live client, and the sum
/// of the dropped ones.
#[derive(Debug, Default)]
pub(crate) struct NodeMetrics {
    cells: Mutex<Vec<Arc<Mutex<Figures>>>>,
    retired: Mutex<Figures>,
}

impl NodeMetrics {
    /// A cell for a new client of this node, whose endpoint `ep` then
    /// counts verbs per peer of a cluster of `nodes`.
    pub(crate) fn register(self: &Arc<Self>, ep: &mut Endpoint, nodes: usize) -> ClientMetrics {
        ep.count_per_peer(nodes);
        let cell = Arc::new(Mutex::new(Figures::default()));
        lock(&self.cells).push(Arc::clone(&cell));
        ClientMetrics {
            cell,
            node: Arc::clone(self),
        }
    }

    /// Everything this node's clients did so far.
    pub(crate) fn total(&self) -> Figures {
        let mut total = lock(&self.retired).clone();
        for cell in lock(&self.cells).iter() {
            total.add(&lock(cell));
        }
        total
    }
}

/// One client's cell in its node's metrics.
#[derive(Debug)]
pub(crate) struct ClientMetrics {
    cell: Arc<Mutex<Figures>>,
    node: Arc<NodeMetrics>,
}

impl ClientMetrics {
    /// Adds one operation of `kind`: its counters, how long it took, and
    /// the verbs `ep` counted per peer since the last operation.
    pub(crate) fn record(
        &self,
        kind: OpKind,
        counters: &OpStats,
        took: Duration,
        ep: &mut Endpoint,
    ) {
        let mut f = lock(&self.cell);
        *f.stats.of_mut(kind) += *counters;
        let i = KINDS.iter().position(|&k| k == kind).unwrap_or(0);
        f.latency[i].record(took);
        ep.drain_per_peer(&mut f.peers);
    }
}

impl Drop for ClientMetrics {
    fn drop(&mut self) {
        lock(&self.node.cells).retain(|c| !Arc::ptr_eq(c, &self.cell));
        let mine = lock(&self.cell).clone();
        lock(&self.node.retired).add(&mine);
    }
}

#[cfg(test)]
mod tests;
