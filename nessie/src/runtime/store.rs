//! State shared by every client of one process: configuration, fabric,
//! hashing, clocks and the data tables of the nodes this process hosts.

use crate::client::Client;
use crate::clock::{Clock, SkewVerdict};
use crate::data::{Geometry, NodeData};
use crate::fabric::{Fabric, NodeId, RegionSpec};
use crate::index::KeyHasher;
use crate::layout::region;
use crate::metrics::NodeMetrics;
use crate::protocol::Timing;
use crate::replica::Views;
use crate::runtime::Hosting;
use crate::{Config, Error};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The regions every node of the client-driven store registers: its index
/// table and one data table per size class.
#[must_use]
pub fn store_regions(config: &Config) -> Vec<RegionSpec> {
    let geometry = Geometry::new(config);
    let mut regions = vec![
        geometry.index_region(),
        RegionSpec {
            id: region::META,
            len: crate::clock::META_BYTES,
        },
    ];
    regions.extend(geometry.data_regions());
    regions.extend(geometry.mirror_regions());
    if config.replicas > 1 {
        regions.push(RegionSpec {
            id: crate::layout::membership::MEMBERSHIP,
            len: crate::layout::membership::region_bytes(config.nodes),
        });
    }
    regions
}

#[derive(Debug)]
pub(crate) struct Shared {
    config: Config,
    hasher: KeyHasher,
    fabric: Arc<dyn Fabric>,
    /// The fabric the allocator scans its own node's memory through:
    /// the unwrapped backend, since a scan is local bookkeeping, not a verb
    /// of an operation (and must not yield to a simulator while the
    /// allocator's lock is held).
    scan_fabric: Arc<dyn Fabric>,
    data: Vec<Option<Arc<NodeData>>>,
    clocks: Vec<Arc<dyn Clock>>,
    timing: Timing,
    seed: u64,
    clients: AtomicU64,
    /// Per node: 0 while clocks agree, else the skew verdict packed as
    /// `peer << 48 | skew_us` (see [`Shared::skew`]).
    skew: Vec<AtomicU64>,
    /// Per node: clock checks that found a peer's clock too far off.
    skew_alarms: Vec<AtomicU64>,
    /// Per hosted node, with `Config::metrics`: its clients' figures.
    metrics: Vec<Option<Arc<NodeMetrics>>>,
    /// The view the hosted nodes serve in.
    views: Arc<Views>,
}

impl Shared {
    /// The state of the nodes `hosting` hosts; `seed` seeds the clients'
    /// back-off jitter.
    pub(crate) fn new(hosting: &Hosting, seed: u64) -> Shared {
        let config = hosting.config().clone();
        let mut data = vec![None; config.nodes];
        let mut metrics = vec![None; config.nodes];
        for (&n, d) in hosting.hosted().iter().zip(hosting.data()) {
            data[n] = Some(Arc::clone(d));
            if config.metrics.is_some() {
                metrics[n] = Some(Arc::new(NodeMetrics::default()));
            }
        }
        Shared {
            hasher: KeyHasher::new(&config),
            timing: Timing::new(&config),
            fabric: Arc::clone(hosting.fabric()),
            scan_fabric: Arc::clone(hosting.local_fabric()),
            data,
            clocks: hosting.clocks().to_vec(),
            seed,
            clients: AtomicU64::new(0),
            skew: (0..config.nodes).map(|_| AtomicU64::new(0)).collect(),
            skew_alarms: (0..config.nodes).map(|_| AtomicU64::new(0)).collect(),
            metrics,
            views: Arc::clone(hosting.views()),
            config,
        }
    }

    pub(crate) fn views(&self) -> &Arc<Views> {
        &self.views
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn hasher(&self) -> &KeyHasher {
        &self.hasher
    }

    pub(crate) fn fabric(&self) -> &Arc<dyn Fabric> {
        &self.fabric
    }

    pub(crate) fn scan_fabric(&self) -> &Arc<dyn Fabric> {
        &self.scan_fabric
    }

    pub(crate) fn clock(&self, node: NodeId) -> &Arc<dyn Clock> {
        &self.clocks[node]
    }

    pub(crate) fn timing(&self) -> Timing {
        self.timing
    }

    /// Records a clock check of `node` (see `watch.rs`): its verdict stops
    /// or lets the node's clients go, and, with the heartbeat it judged
    /// (`beat_us`, read at monotonic `mono_us`), gates the reuse of the
    /// node's staged slots.
    pub(crate) fn note_clock_check(
        &self,
        node: NodeId,
        verdict: SkewVerdict,
        beat_us: u64,
        mono_us: u64,
    ) {
        self.set_skew(node, verdict);
        if let Some(data) = self.data(node) {
            data.note_clock_check(verdict == SkewVerdict::Agreed, beat_us, mono_us);
        }
    }

    /// Records the clock watch's verdict for `node`.
    fn set_skew(&self, node: NodeId, verdict: SkewVerdict) {
        let packed = match verdict {
            SkewVerdict::Agreed => 0,
            SkewVerdict::Skewed {
                node: peer,
                skew_us,
            } => {
                self.skew_alarms[node].fetch_add(1, Ordering::Relaxed);
                (peer as u64) << 48 | skew_us.min((1 << 48) - 1) | 1
            }
        };
        self.skew[node].store(packed, Ordering::Relaxed);
    }

    /// [`Error::ClockSkew`] if `node` currently refuses operations.
    pub(crate) fn skew(&self, node: NodeId) -> Result<(), Error> {
        match self.skew[node].load(Ordering::Relaxed) {
            0 => Ok(()),
            packed => Err(Error::ClockSkew {
                node: (packed >> 48) as usize,
                skew_us: packed & ((1 << 48) - 1),
            }),
        }
    }

    /// Clock checks of `node` that found a peer's clock too far off.
    pub(crate) fn skew_alarms(&self, node: NodeId) -> u64 {
        self.skew_alarms
            .get(node)
            .map_or(0, |a| a.load(Ordering::Relaxed))
    }

    /// Node `node`'s client figures, when metrics are on and this process
    /// hosts it.
    pub(crate) fn metrics(&self, node: NodeId) -> Option<&Arc<NodeMetrics>> {
        self.metrics.get(node).and_then(Option::as_ref)
    }

    /// Node `node`'s data tables, if this process hosts them.
    pub(crate) fn data(&self, node: NodeId) -> Option<&Arc<NodeData>> {
        self.data.get(node).and_then(Option::as_ref)
    }

    /// A client on `node`, which this process must host.
    pub(crate) fn client(self: &Arc<Self>, node: NodeId) -> Result<Client, Error> {
        let data = self.data(node).ok_or_else(|| {
            Error::Config(format!(
                "node {node} is not hosted here (cluster of {} nodes)",
                self.config.nodes
            ))
        })?;
        // Each client gets its own reproducible stream of back-off jitter.
        let n = self.clients.fetch_add(1, Ordering::Relaxed);
        let rng = StdRng::seed_from_u64(self.seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        Ok(Client::new(Arc::clone(self), node, Arc::clone(data), rng))
    }
}
