//! One run of one system: everything the harness hands its node processes
//! (as `spec.json` beside the cluster's `config.toml`), and the sizing rules
//! that turn a workload into a store configuration that does not fill up.

use crate::error::{HarnessError, Result};
use crate::launcher::{self, Fabric};
use crate::lmdb::LmdbTarget;
use crate::peers::PeerTarget;
use crate::workload::WorkloadSpec;
use nessie::{Config, Optimizations, Placement, MIN_CLASS_BYTES};
use nessie_examples::StoreKind;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Index load factor of every experiment of the paper (§6: "All experiments
/// use an index table load factor of 0.4").
pub const PAPER_LOAD_FACTOR: f64 = 0.4;

/// Cache capacity as a share of all keys, per node (§6: "a cache size that
/// is able to accommodate data for 0.5% of the total number keys on each
/// node").
pub const PAPER_CACHE_SHARE: f64 = 0.005;

/// Expiry-gated slot reuse: a replaced DTE slot comes back only `expiry`
/// (+ skew, + the recycler's period) after it was unlinked, so the data
/// tables need room for every PUT of that window; this many times `expiry`.
const PUT_WINDOW_EXPIRIES: f64 = 1.5;
/// Upper bound of the operation rate a node of one host can sustain, used
/// only to size the data tables (times the workload's PUT share). CD on shm
/// reaches about 220,000 operations/s per node with one worker, 16 KiB
/// values (2 nodes × 1 thread on 2 cores); a bound below what a node
/// reaches makes PUTs wait for slots, and the run measures that wait.
const MAX_OPS_PER_SEC_PER_NODE: f64 = 1_000_000.0;
/// Upper bound of the bytes a node can write per second (same purpose; CD
/// writes about 0.36 GB/s per node at 16 KiB with one worker, 10 % PUTs,
/// and the bound sets the address space of large-value tables).
const MAX_PUT_BYTES_PER_SEC_PER_NODE: f64 = 5e8;

/// Closed loop (each worker issues its next operation when the last one
/// completes) or open loop (Poisson arrivals at a fixed rate).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Load {
    /// As fast as the workers can go.
    Closed,
    /// Poisson arrivals at `ops_per_sec` over the whole cluster, split evenly
    /// among all workers.
    Open {
        /// Offered operations per second, all nodes.
        ops_per_sec: f64,
    },
}

/// Everything a node process needs to know about its run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunSpec {
    /// Short name of the run (file names, tables).
    pub label: String,
    /// The store.
    pub system: StoreKind,
    /// What the workers do.
    pub workload: WorkloadSpec,
    /// Node processes.
    pub nodes: usize,
    /// Worker threads per node that issue operations.
    pub clients_per_node: usize,
    /// Server worker threads per node (SD and HY only).
    pub server_workers: usize,
    /// Closed or open loop.
    pub load: Load,
    /// Unmeasured time at the start of the run phase, ms.
    pub warmup_ms: u64,
    /// Measured time, ms.
    pub duration_ms: u64,
    /// Background CPU hogs the harness runs beside the cluster during the
    /// run phase.
    pub hogs: usize,
    /// Optimisation switches of the client-driven store.
    pub optimizations: Optimizations,
    /// Where the client-driven store places a key's candidate slots
    /// ([`Config::placement`]). The harness's default is one node per key
    /// (`--placement`); the store's own default is the paper's spread.
    #[serde(default)]
    pub placement: Placement,
    /// Index load factor the index tables are sized for.
    pub load_factor: f64,
    /// Where a peer server listens (Redis, memcached); set by the harness.
    pub peer: Option<PeerTarget>,
    /// The run's LMDB environment (LMDB); set by the harness.
    #[serde(default)]
    pub lmdb: Option<LmdbTarget>,
    /// Sample the host's power (RAPL, IPMI) over the measured phase.
    #[serde(default)]
    pub measure_power: bool,
    /// What carries the verbs between the nodes.
    #[serde(default)]
    pub fabric: Fabric,
    /// Copies of every entry and index slot of the client-driven store
    /// ([`Config::replicas`]), when the experiment was asked for them
    /// (`--replicas`); `None` leaves the store's default, 1. The other
    /// systems are unreplicated and ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<usize>,
    /// A run measured as a time series instead of one measured phase
    /// (`failover`): the nodes record what ended in each time bucket and
    /// run until the harness says `stop`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<TimelineSpec>,
}

/// How a node process measures a run as a time series
/// ([`RunSpec::timeline`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineSpec {
    /// Width of a time bucket, ms.
    pub bucket_ms: u64,
    /// The phase ends by itself this long after it began if no `stop`
    /// came (a harness that went silent), ms.
    pub limit_ms: u64,
}

impl RunSpec {
    /// A closed-loop run of `system` with the harness's defaults.
    #[must_use]
    pub fn new(label: impl Into<String>, system: StoreKind, workload: WorkloadSpec) -> Self {
        RunSpec {
            label: label.into(),
            system,
            workload,
            nodes: 3,
            clients_per_node: 2,
            server_workers: 1,
            load: Load::Closed,
            warmup_ms: 500,
            duration_ms: 5_000,
            hogs: 0,
            optimizations: Optimizations::default(),
            placement: Placement::OneNode,
            load_factor: PAPER_LOAD_FACTOR,
            peer: None,
            lmdb: None,
            measure_power: false,
            fabric: Fabric::Shm,
            replicas: None,
            timeline: None,
        }
    }

    /// Sets the worker split for a node of `threads` threads: the
    /// client-driven store and the peers use them all as clients; SD and HY
    /// give `server_workers` of them to servers (at least one client stays),
    /// as the paper divides one worker per core between the two roles.
    #[must_use]
    pub fn with_threads(mut self, threads: usize, server_workers: usize) -> Self {
        self.server_workers = server_workers.max(1);
        self.clients_per_node = if self.system.has_server_workers() {
            threads.saturating_sub(self.server_workers).max(1)
        } else {
            threads.max(1)
        };
        self
    }

    /// Checks the spec.
    ///
    /// # Errors
    /// [`HarnessError::Usage`] naming the problem;
    /// [`HarnessError::Replicas`] for a replication the nodes cannot hold.
    pub fn validate(&self) -> Result<()> {
        self.workload.validate()?;
        if let Some(r) = self.replicas {
            check_replicas(r, self.nodes)?;
        }
        let bad = |m: String| Err(HarnessError::Usage(m));
        if self.nodes == 0 || self.nodes > 64 {
            return bad(format!("{} nodes: use 1 to 64", self.nodes));
        }
        if self.clients_per_node == 0 || self.clients_per_node > 256 {
            return bad(format!(
                "{} client workers per node: use 1 to 256",
                self.clients_per_node
            ));
        }
        if self.duration_ms == 0 {
            return bad("the measured duration must be at least 1 ms".into());
        }
        if !(self.load_factor > 0.0 && self.load_factor <= 1.0) {
            return bad(format!(
                "load factor {} is not within (0, 1]",
                self.load_factor
            ));
        }
        if self.system.has_server_workers() && self.clients_per_node > nessie_sd::CLIENT_SLOTS {
            return bad(format!(
                "{} client workers per node: {} allows at most {}",
                self.clients_per_node,
                self.system,
                nessie_sd::CLIENT_SLOTS
            ));
        }
        if let Load::Open { ops_per_sec } = self.load {
            if !(ops_per_sec.is_finite() && ops_per_sec > 0.0) {
                return bad(format!("open-loop rate {ops_per_sec}/s is not positive"));
            }
        }
        if let Some(t) = self.timeline {
            if t.bucket_ms == 0 || t.limit_ms == 0 {
                return bad("a timeline needs buckets and a limit of at least 1 ms".into());
            }
        }
        Ok(())
    }

    /// Warm-up plus measured time.
    #[must_use]
    pub fn run_time(&self) -> Duration {
        Duration::from_millis(self.warmup_ms + self.duration_ms)
    }

    /// The store configuration of this run for cluster `cluster`: the
    /// run's fabric (shm under `/dev/shm/nessie-<cluster>`; on tcp one
    /// connection per peer for each of a node's threads), tables sized so
    /// the run cannot fill them (see [`size_tables`]), and the paper's
    /// cache size (0.5 % of the keys per node, split among the node's
    /// clients). What each node's launch fills in (rendezvous, secret) is
    /// left empty and the rest checked ([`launcher::checkable`]).
    ///
    /// # Errors
    /// [`HarnessError::Store`] if the sized configuration is invalid (e.g.
    /// more slots than an index entry can address).
    pub fn config(&self, cluster: &str) -> Result<Config> {
        let threads = (self.clients_per_node + self.server_workers).clamp(1, 64);
        let mut c = Config {
            cluster: cluster.to_owned(),
            nodes: self.nodes,
            key_size_max: self.workload.key_size,
            value_size_max: self.workload.value_size.max(MIN_CLASS_BYTES),
            optimizations: self.optimizations,
            placement: self.placement,
            server_workers: self.server_workers,
            fabric: self.fabric.config(cluster, threads),
            ..Config::default()
        };
        if let (StoreKind::Cd, Some(r)) = (self.system, self.replicas) {
            c.replicas = r;
        }
        size_tables(&mut c, &self.workload, self.nodes, self.load_factor);
        // The store's cache is per client; the paper's is per node.
        let per_node = (self.workload.keys as f64 * PAPER_CACHE_SHARE).ceil();
        c.cache_entries = ((per_node / self.clients_per_node as f64).ceil() as usize).max(1);
        launcher::checkable(&c).validate()?;
        Ok(c)
    }
}

/// Checks that `nodes` node processes can hold `replicas` copies of the
/// client-driven store's shares: r = 1 always, r > 1 with at least three
/// nodes, no more copies than nodes, and at most the store's
/// [`nessie::layout::region::MAX_REPLICAS`].
///
/// # Errors
/// [`HarnessError::Replicas`] saying what the store needs.
pub fn check_replicas(replicas: usize, nodes: usize) -> Result<()> {
    let fits = replicas == 1
        || (replicas > 1
            && nodes >= 3
            && replicas <= nodes
            && replicas <= nessie::layout::region::MAX_REPLICAS);
    if fits {
        Ok(())
    } else {
        Err(HarnessError::Replicas { replicas, nodes })
    }
}

/// Sizes index and data tables for a workload.
///
/// * Index: `keys / (load_factor × nodes)` entries per node, so the cluster's
///   index is filled to the paper's load factor (0.4).
/// * Data, in the value's size class: room for twice the node's share of
///   live keys (a CD PUT moves the key's entry to the writer's node, and SD
///   homes keys by hash, so shares vary), plus every PUT of
///   `PUT_WINDOW_EXPIRIES` × `expiry` at the highest rate a node could
///   reach, since replaced slots return only after `expiry`; then a third
///   more, because the recycler's paced scans find other nodes' expired
///   slots up to half an `expiry` late. A roomier table costs address
///   space, not memory: the store reuses expired slots before it touches a
///   fresh one. The data
///   tables split their bytes equally among size classes, so the total is
///   that times the number of classes; only touched slots take memory
///   (region files are sparse).
pub fn size_tables(c: &mut Config, w: &WorkloadSpec, nodes: usize, load_factor: f64) {
    let per_node = (w.keys as f64 / (load_factor * nodes as f64)).ceil() as usize;
    c.index_slots_per_node = per_node.max(1024);
    let put_share = 1.0 - w.get_ratio;
    let put_rate = (MAX_OPS_PER_SEC_PER_NODE * put_share)
        .min(MAX_PUT_BYTES_PER_SEC_PER_NODE / w.value_size.max(1) as f64);
    size_data_tables(c, w, nodes, put_rate);
}

/// [`size_tables`] for a run whose load is known: Poisson arrivals at
/// `ops_per_sec` over the cluster. The data tables have room for twice
/// each node's share of those PUTs (bursts, and a worker that catches up
/// after a stall) instead of the highest rate a node could reach, so they
/// are far smaller: that matters where something reads or writes every
/// slot, as a replacement's restore does (`failover`).
pub fn size_tables_for_rate(
    c: &mut Config,
    w: &WorkloadSpec,
    nodes: usize,
    load_factor: f64,
    ops_per_sec: f64,
) {
    size_tables(c, w, nodes, load_factor);
    let put_rate = 2.0 * ops_per_sec.max(0.0) * (1.0 - w.get_ratio) / nodes.max(1) as f64;
    size_data_tables(c, w, nodes, put_rate);
}

/// The data tables of [`size_tables`] for `put_rate` PUTs per second and
/// node.
fn size_data_tables(c: &mut Config, w: &WorkloadSpec, nodes: usize, put_rate: f64) {
    let live = 2 * (w.keys as usize).div_ceil(nodes.max(1));
    let pending = put_rate * PUT_WINDOW_EXPIRIES * c.expiry.as_secs_f64();
    let slots = ((live as f64 + pending) * 4.0 / 3.0).ceil() as usize + 1024;
    let class = c.class_for(w.value_size).unwrap_or(0);
    let classes = c.size_classes().len();
    c.data_bytes_per_node = slots * c.class_slot_bytes(class) * classes;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sized_configs_are_valid_and_roomy() {
        for value_size in [256, 2048, 16 << 10, 128 << 10] {
            let w = WorkloadSpec {
                value_size,
                keys: 5000,
                get_ratio: 0.5,
                ..WorkloadSpec::default()
            };
            let spec = RunSpec::new("t", StoreKind::Cd, w.clone());
            let c = spec.config("bench-test").unwrap();
            let class = c.class_for(value_size).unwrap();
            assert!(c.class_slots(class) >= 2 * 5000 / 3, "{value_size}");
            assert!(c.index_slots_per_node * 3 >= (5000.0 / 0.4) as usize);
            assert_eq!(
                c.shm_dir(),
                std::path::PathBuf::from("/dev/shm/nessie-bench-test")
            );
            assert_eq!(c.cache_entries, 13, "0.5 % of 5000 keys over 2 clients");
        }
    }

    #[test]
    fn replicas_reach_only_the_client_driven_config() {
        let w = WorkloadSpec {
            keys: 1000,
            ..WorkloadSpec::default()
        };
        for system in [StoreKind::Cd, StoreKind::Sd, StoreKind::Hy] {
            let mut spec = RunSpec::new("r", system, w.clone());
            assert_eq!(spec.config("bench-r").unwrap().replicas, 1);
            spec.replicas = Some(2);
            spec.validate().unwrap();
            let want = if system == StoreKind::Cd { 2 } else { 1 };
            assert_eq!(spec.config("bench-r").unwrap().replicas, want, "{system}");
        }
        // Without the flag, spec.json and results.json do not name it.
        let plain = serde_json::to_value(RunSpec::new("p", StoreKind::Cd, w)).unwrap();
        assert!(plain.get("replicas").is_none());
    }

    #[test]
    fn replication_needs_three_nodes_and_no_more_copies_than_nodes() {
        for (r, nodes) in [(1, 1), (1, 2), (2, 3), (3, 3), (4, 5)] {
            check_replicas(r, nodes).unwrap();
        }
        for (r, nodes) in [(2, 2), (2, 1), (4, 3), (5, 8), (0, 3)] {
            let e = check_replicas(r, nodes).unwrap_err();
            assert!(matches!(e, HarnessError::Replicas { .. }), "{e}");
            assert!(e.to_string().contains("at least 3 nodes"), "{e}");
        }
        let mut spec = RunSpec::new("r", StoreKind::Cd, WorkloadSpec::default());
        spec.nodes = 2;
        spec.replicas = Some(2);
        assert!(matches!(
            spec.validate(),
            Err(HarnessError::Replicas {
                replicas: 2,
                nodes: 2
            })
        ));
    }

    #[test]
    fn tables_sized_for_a_rate_are_smaller_and_hold_the_keys() {
        let w = WorkloadSpec {
            keys: 4096,
            ..WorkloadSpec::default()
        };
        let mut roomy = Config::default();
        size_tables(&mut roomy, &w, 3, PAPER_LOAD_FACTOR);
        let mut paced = Config::default();
        size_tables_for_rate(&mut paced, &w, 3, PAPER_LOAD_FACTOR, 10_000.0);
        assert_eq!(paced.index_slots_per_node, roomy.index_slots_per_node);
        assert!(paced.data_bytes_per_node * 4 < roomy.data_bytes_per_node);
        let class = paced.class_for(w.value_size).unwrap();
        assert!(paced.class_slots(class) >= 2 * 4096 / 3);
        let mut spec = RunSpec::new("t", StoreKind::Cd, w);
        spec.timeline = Some(TimelineSpec {
            bucket_ms: 0,
            limit_ms: 1,
        });
        assert!(spec.validate().is_err(), "a bucket of 0 ms");
    }

    #[test]
    fn server_driven_systems_split_their_threads() {
        let w = WorkloadSpec::default();
        let cd = RunSpec::new("a", StoreKind::Cd, w.clone()).with_threads(4, 1);
        let sd = RunSpec::new("b", StoreKind::Sd, w).with_threads(4, 1);
        assert_eq!((cd.clients_per_node, sd.clients_per_node), (4, 3));
        assert_eq!(
            RunSpec::new("c", StoreKind::Hy, WorkloadSpec::default())
                .with_threads(1, 1)
                .clients_per_node,
            1
        );
    }
}
