//! The stores a job runs on, sized for it, in one process or one process
//! per node, and a runner with one thread per task.
//!
//! ## Sizing, and the value-size limit
//!
//! [`job_config`] fits a [`Config`] to a job:
//!
//! * `value_size_max` = the job's `max_value` (default 1 MiB, at most
//!   [`crate::job::MAX_VALUE`] = 64 MiB). Partitions larger than that are
//!   chunked, so any partition size works; the limit is on one value.
//! * **Data tables.** The nessie stores give every size class (powers of
//!   two from 256 B to `value_size_max`) an equal share of
//!   `data_bytes_per_node`, so the top class, which holds full chunks, gets
//!   `1/classes` of it. The job's values are counted — full chunks of the
//!   shuffled bytes (and of the output if it is kept in the store) plus
//!   one partial value per partition — and the top class gets room for
//!   twice a node's even share of them plus 16, capped at all of them
//!   (CD writes each map's partitions on its own node; SD and HY place
//!   them by key hash, which is uneven but rarely by 2×). Every smaller
//!   class then has at least as many bytes. This reserves address space
//!   (`classes × top slots × slot size` per node; about 1 GiB per node for
//!   64 MiB of input with 1 MiB values), of which only what is written is
//!   touched: heap pages on the `local` fabric, sparse `/dev/shm` files on
//!   `shm`. A job larger than the tables fails with
//!   [`nessie::Error::DataTableFull`] on a PUT.
//! * SD and HY reserve four `value_size_max` frames per (client slot,
//!   node) pair for their request rings ([`nessie_sd::CLIENT_SLOTS`] slots),
//!   also address space only.
//! * `op_timeout` 2 s and `expiry` 5 s, since one operation moves up to a
//!   whole value; a small per-client cache (16 entries: the job reads each
//!   value once, and the cache would hold whole chunks).
//!
//! Redis needs no sizing (its default 512 MB bulk limit bounds a value).

use crate::job::{run_task, JobSpec, MapReduce};
use crate::keys::Keys;
use crate::report::JobReport;
use crate::JobError;
use nessie::fabric::VerbCounts;
use nessie::{Config, KvClient};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::{Duration, Instant};
use text_kv::TextClient;

/// A store: the three of the paper, the two reference servers, LMDB, and
/// no store at all. The one list of stores for the jobs here and for the
/// harness (`nessie-bench`), whose spec files and flags use the lowercase
/// names (`cd`, `sd`, `hy`, `redis`, `memcached`, `lmdb`, `null`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// Nessie, client-driven (`nessie`).
    #[cfg_attr(feature = "clap", value(alias = "nessie"))]
    Cd,
    /// The server-driven baseline (`nessie-sd`).
    Sd,
    /// The hybrid baseline (`nessie-hy`).
    Hy,
    /// A Redis server, over its text protocol.
    Redis,
    /// A memcached server, over its text protocol (the harness only).
    Memcached,
    /// One LMDB environment that the node processes of one host share, in
    /// `/dev/shm` (the harness only).
    Lmdb,
    /// No store: a per-process in-memory map, which measures the harness's
    /// own overhead (the harness only).
    Null,
}

impl StoreKind {
    /// Every store a job can run on.
    pub const ALL: [StoreKind; 4] = [
        StoreKind::Cd,
        StoreKind::Sd,
        StoreKind::Hy,
        StoreKind::Redis,
    ];

    /// The three systems of the paper, in its order.
    pub const PAPER: [StoreKind; 3] = [StoreKind::Cd, StoreKind::Sd, StoreKind::Hy];

    /// The label of reports and of the paper's figures (`CD`, `SD`, `HY`)
    /// or the product's name.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            StoreKind::Cd => "CD",
            StoreKind::Sd => "SD",
            StoreKind::Hy => "HY",
            StoreKind::Redis => "Redis",
            StoreKind::Memcached => "memcached",
            StoreKind::Lmdb => "LMDB",
            StoreKind::Null => "null",
        }
    }

    /// Whether it is one of the nessie stores, whose nodes live in the
    /// job's (or the benchmark's) processes, in a nessie shm cluster on
    /// that fabric.
    #[must_use]
    pub fn is_nessie(self) -> bool {
        matches!(self, StoreKind::Cd | StoreKind::Sd | StoreKind::Hy)
    }

    /// Whether it is a reference server reached over its text protocol
    /// (Redis, memcached).
    #[must_use]
    pub fn is_peer(self) -> bool {
        matches!(self, StoreKind::Redis | StoreKind::Memcached)
    }

    /// Whether the store runs server worker threads (a node process then
    /// gets `threads - server_workers` client workers).
    #[must_use]
    pub fn has_server_workers(self) -> bool {
        matches!(self, StoreKind::Sd | StoreKind::Hy)
    }

    /// Whether all nodes see one data set. The `null` store is private to
    /// each process, so every node preloads every key.
    #[must_use]
    pub fn shares_data(self) -> bool {
        self != StoreKind::Null
    }

    /// Whether jobs run on it ([`StoreKind::ALL`]).
    #[must_use]
    pub fn runs_jobs(self) -> bool {
        StoreKind::ALL.contains(&self)
    }
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

impl FromStr for StoreKind {
    type Err = JobError;

    fn from_str(s: &str) -> Result<Self, JobError> {
        match s.to_ascii_lowercase().as_str() {
            "cd" | "nessie" => Ok(StoreKind::Cd),
            "sd" => Ok(StoreKind::Sd),
            "hy" => Ok(StoreKind::Hy),
            "redis" => Ok(StoreKind::Redis),
            "memcached" => Ok(StoreKind::Memcached),
            "lmdb" => Ok(StoreKind::Lmdb),
            "null" => Ok(StoreKind::Null),
            _ => Err(JobError::Spec(format!(
                "unknown store {s:?} (cd, sd, hy, redis, memcached, lmdb or null)"
            ))),
        }
    }
}

/// What a job will put into the store, for [`job_config`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizing {
    /// Number of tasks.
    pub tasks: usize,
    /// Bytes all maps shuffle together (about the input size).
    pub shuffle_bytes: u64,
    /// The job's `max_value`.
    pub max_value: usize,
    /// Whether reducers keep their output in the store.
    pub output_in_store: bool,
}

/// `base` (nodes, fabric, cluster name, …) with tables, value size and
/// timeouts fitted to a job (see the module documentation).
///
/// # Errors
/// [`JobError::Spec`] if the result is not a valid configuration (e.g. a
/// job too large to address).
pub fn job_config(base: &Config, sizing: &Sizing) -> Result<Config, JobError> {
    let mut c = base.clone();
    let nodes = c.nodes.max(1) as u64;
    let tasks = sizing.tasks.max(1) as u64;
    let max_value = sizing.max_value.max(1) as u64;
    let copies = if sizing.output_in_store { 2 } else { 1 };
    let values = copies * (sizing.shuffle_bytes.div_ceil(max_value) + tasks * tasks);
    let top_slots = values.min(values.saturating_mul(2).div_ceil(nodes) + 16);
    c.value_size_max = sizing.max_value;
    c.key_size_max = c.key_size_max.max(128);
    let classes = c.size_classes().len() as u64;
    let top_class = c.size_classes().len() - 1;
    let slot = c.class_slot_bytes(top_class) as u64;
    c.data_bytes_per_node = top_slots
        .checked_mul(slot)
        .and_then(|b| b.checked_mul(classes))
        .and_then(|b| usize::try_from(b + classes).ok())
        .ok_or_else(|| JobError::Spec("the job's data tables would not be addressable".into()))?;
    // Every value of the job and the small keys (digests, summaries,
    // arrivals), at an index load factor of at most a quarter.
    let keys = values + 8 * tasks + 64;
    c.index_slots_per_node = (4 * keys).div_ceil(nodes).next_power_of_two().max(4096) as usize;
    c.cache_entries = 16;
    c.op_timeout = Duration::from_secs(2);
    c.expiry = Duration::from_secs(5);
    c.validate()
        .map_err(|e| JobError::Spec(format!("store configuration: {e}")))?;
    Ok(c)
}

/// Checks that the stage's keys fit the store's `key_size_max`.
fn check_keys(config: &Config, spec: &JobSpec, chunks: usize) -> Result<(), JobError> {
    let longest = Keys::new(&spec.stage)?.longest(spec.tasks, chunks);
    if longest > config.key_size_max {
        return Err(JobError::Spec(format!(
            "keys of stage {:?} reach {longest} bytes, over key_size_max = {}",
            spec.stage, config.key_size_max
        )));
    }
    Ok(())
}

fn start_error(kind: StoreKind) -> impl FnOnce(nessie::Error) -> JobError {
    move |source| JobError::Start {
        store: kind.label(),
        source,
    }
}

fn redis_client(addr: SocketAddr) -> Result<Box<dyn KvClient>, JobError> {
    TextClient::connect_redis(addr)
        .map(|c| Box::new(c) as Box<dyn KvClient>)
        .map_err(|e| start_error(StoreKind::Redis)(nessie::Error::Io(e)))
}

/// The Redis server's address, for a job on Redis.
fn redis_addr(redis: Option<SocketAddr>) -> Result<SocketAddr, JobError> {
    redis.ok_or_else(|| JobError::Spec("Redis needs a server address".into()))
}

/// The error for a store jobs do not run on.
fn no_jobs_on(kind: StoreKind) -> JobError {
    JobError::Spec(format!("jobs do not run on {kind} (cd, sd, hy or redis)"))
}

/// All nodes of a store in this process (the `local` fabric), or a Redis
/// server every client connects to.
#[derive(Debug)]
pub enum LocalCluster {
    /// Nessie.
    Cd(nessie::Cluster),
    /// The server-driven baseline.
    Sd(nessie_sd::Cluster),
    /// The hybrid baseline.
    Hy(nessie_hy::Cluster),
    /// Redis at an address, seen as `nodes` nodes (one per task).
    Redis {
        /// The server.
        addr: SocketAddr,
        /// How many nodes clients may name.
        nodes: usize,
    },
}

impl LocalCluster {
    /// Starts `config.nodes` nodes of `kind` in this process; for Redis,
    /// only remembers `redis`.
    ///
    /// # Errors
    /// [`JobError::Start`] with the store's error; [`JobError::Spec`] for
    /// Redis without an address.
    pub fn start(
        kind: StoreKind,
        config: Config,
        redis: Option<SocketAddr>,
    ) -> Result<Self, JobError> {
        let err = start_error(kind);
        Ok(match kind {
            StoreKind::Cd => LocalCluster::Cd(nessie::Cluster::local(config).map_err(err)?),
            StoreKind::Sd => LocalCluster::Sd(nessie_sd::Cluster::local(config).map_err(err)?),
            StoreKind::Hy => LocalCluster::Hy(nessie_hy::Cluster::local(config).map_err(err)?),
            StoreKind::Redis => LocalCluster::Redis {
                addr: redis_addr(redis)?,
                nodes: config.nodes,
            },
            StoreKind::Memcached | StoreKind::Lmdb | StoreKind::Null => {
                return Err(no_jobs_on(kind))
            }
        })
    }

    /// Which store.
    #[must_use]
    pub fn kind(&self) -> StoreKind {
        match self {
            LocalCluster::Cd(_) => StoreKind::Cd,
            LocalCluster::Sd(_) => StoreKind::Sd,
            LocalCluster::Hy(_) => StoreKind::Hy,
            LocalCluster::Redis { .. } => StoreKind::Redis,
        }
    }

    /// Number of nodes.
    #[must_use]
    pub fn nodes(&self) -> usize {
        match self {
            LocalCluster::Cd(c) => c.config().nodes,
            LocalCluster::Sd(c) => c.config().nodes,
            LocalCluster::Hy(c) => c.config().nodes,
            LocalCluster::Redis { nodes, .. } => *nodes,
        }
    }

    /// A client on node `node`, for one thread.
    ///
    /// # Errors
    /// [`JobError::Start`] with the store's error (unknown node, no free
    /// client slot, Redis unreachable).
    pub fn client(&self, node: usize) -> Result<Box<dyn KvClient>, JobError> {
        let err = start_error(self.kind());
        Ok(match self {
            LocalCluster::Cd(c) => Box::new(c.client(node).map_err(err)?),
            LocalCluster::Sd(c) => Box::new(c.client(node).map_err(err)?),
            LocalCluster::Hy(c) => Box::new(c.client(node).map_err(err)?),
            LocalCluster::Redis { addr, .. } => redis_client(*addr)?,
        })
    }

    /// Verbs the server workers issued so far (SD and HY).
    #[must_use]
    pub fn server_verbs(&self) -> Option<VerbCounts> {
        match self {
            LocalCluster::Sd(c) => Some(c.server_verbs()),
            LocalCluster::Hy(c) => Some(c.server_verbs()),
            _ => None,
        }
    }
}

/// This process's node of a store whose nodes are processes (`shm` or
/// `tcp` fabric), or a Redis server.
#[derive(Debug)]
pub enum StoreNode {
    /// Nessie.
    Cd(nessie::Node),
    /// The server-driven baseline (its server workers run while it lives).
    Sd(nessie_sd::Node),
    /// The hybrid baseline.
    Hy(nessie_hy::Node),
    /// Redis at an address.
    Redis(SocketAddr),
}

impl StoreNode {
    /// Starts node `node_id` of `kind` (creating its regions and waiting for
    /// its peers'); for Redis, only remembers `redis`.
    ///
    /// # Errors
    /// [`JobError::Start`] with the store's error; [`JobError::Spec`] for
    /// Redis without an address.
    pub fn start(
        kind: StoreKind,
        config: Config,
        node_id: usize,
        redis: Option<SocketAddr>,
    ) -> Result<Self, JobError> {
        let err = start_error(kind);
        Ok(match kind {
            StoreKind::Cd => StoreNode::Cd(nessie::Node::start(config, node_id).map_err(err)?),
            StoreKind::Sd => StoreNode::Sd(nessie_sd::Node::start(config, node_id).map_err(err)?),
            StoreKind::Hy => StoreNode::Hy(nessie_hy::Node::start(config, node_id).map_err(err)?),
            StoreKind::Redis => StoreNode::Redis(redis_addr(redis)?),
            StoreKind::Memcached | StoreKind::Lmdb | StoreKind::Null => {
                return Err(no_jobs_on(kind))
            }
        })
    }

    /// A client of this node, for one thread.
    ///
    /// # Errors
    /// [`JobError::Start`] with the store's error.
    pub fn client(&self) -> Result<Box<dyn KvClient>, JobError> {
        Ok(match self {
            StoreNode::Cd(n) => Box::new(n.client().map_err(start_error(StoreKind::Cd))?),
            StoreNode::Sd(n) => Box::new(n.client().map_err(start_error(StoreKind::Sd))?),
            StoreNode::Hy(n) => Box::new(n.client().map_err(start_error(StoreKind::Hy))?),
            StoreNode::Redis(addr) => redis_client(*addr)?,
        })
    }

    /// Verbs this node's server workers issued so far (SD and HY).
    #[must_use]
    pub fn server_verbs(&self) -> Option<VerbCounts> {
        match self {
            StoreNode::Sd(n) => Some(n.server_verbs()),
            StoreNode::Hy(n) => Some(n.server_verbs()),
            _ => None,
        }
    }
}

/// Runs every task of `spec` on `cluster`, one thread per task (task `t`
/// on node `t mod nodes`), and collects their reports.
///
/// # Errors
/// The root cause if any task failed (a task's own error rather than the
/// [`JobError::Aborted`] it caused elsewhere); [`JobError::Spec`] if the
/// job's keys or values do not fit the store.
pub fn run_threads<J: MapReduce + ?Sized>(
    cluster: &LocalCluster,
    job: &J,
    spec: &JobSpec,
    config: &Config,
) -> Result<JobReport, JobError> {
    spec.validate(0)?;
    if cluster.kind().is_nessie() && spec.max_value > config.value_size_max {
        return Err(JobError::Spec(format!(
            "max_value = {} is over the store's value_size_max = {}",
            spec.max_value, config.value_size_max
        )));
    }
    check_keys(config, spec, 1 << 20)?;
    let mut clients = (0..spec.tasks)
        .map(|t| cluster.client(t % cluster.nodes().max(1)))
        .collect::<Result<Vec<_>, _>>()?;
    let server_before = cluster.server_verbs();
    let start = Instant::now();
    let results: Vec<Result<_, JobError>> = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter_mut()
            .enumerate()
            .map(|(task, client)| {
                (
                    task,
                    s.spawn(move || run_task(client.as_mut(), job, spec, task)),
                )
            })
            .collect();
        handles
            .into_iter()
            .map(|(task, h)| h.join().unwrap_or(Err(JobError::TaskPanicked { task })))
            .collect()
    });
    let wall_secs = start.elapsed().as_secs_f64();
    let mut tasks = Vec::with_capacity(results.len());
    let mut aborted = None;
    for r in results {
        match r {
            Ok(t) => tasks.push(t),
            Err(e @ JobError::Aborted { .. }) => aborted = aborted.or(Some(e)),
            Err(e) => return Err(e),
        }
    }
    if let Some(e) = aborted {
        return Err(e);
    }
    let server_verbs = cluster
        .server_verbs()
        .zip(server_before)
        .map(|(after, before)| after - before);
    Ok(JobReport {
        store: cluster.kind().label().to_owned(),
        tasks,
        wall_secs,
        server_verbs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_fit_the_job() {
        let base = Config {
            nodes: 3,
            ..Config::default()
        };
        let sizing = Sizing {
            tasks: 3,
            shuffle_bytes: 64 << 20,
            max_value: 1 << 20,
            output_in_store: false,
        };
        let c = job_config(&base, &sizing).unwrap();
        assert_eq!(c.value_size_max, 1 << 20);
        let top = c.size_classes().len() - 1;
        // 64 full chunks + 9 partial values, twice a third of them + 16.
        assert!(c.class_slots(top) >= 65, "{}", c.class_slots(top));
        assert!(c.class_slots(top) <= 73, "{}", c.class_slots(top));
        for class in 0..top {
            assert!(c.class_slots(class) >= c.class_slots(top));
        }
        let with_output = job_config(
            &base,
            &Sizing {
                output_in_store: true,
                ..sizing
            },
        )
        .unwrap();
        assert!(with_output.data_bytes_per_node > c.data_bytes_per_node);
        assert!(matches!(
            job_config(
                &base,
                &Sizing {
                    shuffle_bytes: u64::MAX / 2,
                    ..sizing
                }
            ),
            Err(JobError::Spec(_))
        ));
    }

    #[test]
    fn store_names_parse() {
        assert_eq!("CD".parse::<StoreKind>().unwrap(), StoreKind::Cd);
        assert_eq!("redis".parse::<StoreKind>().unwrap(), StoreKind::Redis);
        assert_eq!("null".parse::<StoreKind>().unwrap(), StoreKind::Null);
        assert_eq!("LMDB".parse::<StoreKind>().unwrap(), StoreKind::Lmdb);
        assert!(!StoreKind::Lmdb.runs_jobs() && !StoreKind::Lmdb.is_peer());
        assert!(StoreKind::Lmdb.shares_data());
        assert!("mongo".parse::<StoreKind>().is_err());
        assert!(!StoreKind::Memcached.runs_jobs());
        assert!(StoreKind::Redis.runs_jobs() && !StoreKind::Redis.is_nessie());
        assert_eq!(StoreKind::Hy.to_string(), "HY");
    }
}
