//! Chaos runs: a multi-process `shm` cluster under a mixed workload while a
//! controller injects faults, then a verdict.
//!
//! Faults, at random times:
//! * **kill** — SIGKILL a node process mid-operation (at most all but two;
//!   without replicas only);
//! * **kill-and-wipe** — with replicas: SIGKILL a node process
//!   mid-operation, declare its host lost (`ShmFabric::lose`: every process
//!   refuses its verbs, its memory is wiped), and once the survivors have
//!   decided a view without it and drained, start a replacement process for
//!   the same node id that calls `Node::rejoin` and then works as the others
//!   do (`control.rs`); one node lost at a time, the next only after the
//!   replacement's rejoin returned;
//! * **stall** — SIGSTOP a node for longer than `expiry`, then SIGCONT
//!   (with replicas, shorter than `failure_timeout`: a stalled node is not
//!   evicted);
//!
//! kills and stalls at a moment when one of the node's workers has an
//! operation in flight ([`stop_mid_operation`]), counted in the report;
//! * **fill** — a node PUTs large values under fresh keys, deleting each
//!   right away (its slot stays staged for `expiry`), until its data table
//!   reports [`nessie::Error::DataTableFull`];
//! * **crowd** — a node PUTs small values under fresh keys until the index
//!   reports [`nessie::Error::IndexFull`], then deletes them;
//!
//! and, all the time, **migrate and recycle pressure**: the index is tiny
//! and kept three-quarters full by preloaded filler keys, so inserting a hot
//! key again after its deletion MIGRATEs others (recursively), and the data
//! tables are tiny, so slots are recycled as fast as they expire, markers of
//! interrupted MIGRATEs are resolved by the recycler, and writers wait for
//! slots. The report counts migrations, reclaimed slots and resolved
//! markers from every node.
//!
//! Checked afterwards: every process that was not killed exited cleanly (an
//! unexpected error or a panic fails it: full tables must come back as typed
//! errors, and with replicas a call may only be refused with `ViewChanging`
//! or `NoQuorum`, logged as not executed, or end with an unknown outcome);
//! the merged history of all processes, the replacements' and the audit
//! reads included, is linearizable (killed and timed-out operations have
//! unknown outcomes), so every acknowledged PUT or DELETE is reflected; and
//! after the last fault (with replicas: after the last rejoin, through
//! every node) every key answers within two timed-out attempts once dead
//! owners are past `op_timeout + 2·max_clock_skew` (no wedge).
//!
//! [`stop_mid_operation`]: crate::process::history::stop_mid_operation

mod control;
mod node;

pub use control::run;
pub use node::child_main;

use nessie::{Config, FabricConfig};
use std::path::Path;
use std::time::Duration;

/// Environment variable telling a process it is a chaos node.
pub const CHILD_ENV: &str = "NESSIE_CHAOS_NODE";
const DIR_ENV: &str = "NESSIE_CHAOS_DIR";
const PLAN_ENV: &str = "NESSIE_CHAOS_PLAN";
/// The generation of a node's process: 0 for the first, g for the g-th
/// replacement (which rejoins).
const GENERATION_ENV: &str = "NESSIE_CHAOS_GENERATION";

/// Shape of a chaos run.
#[derive(Debug, Clone, Copy)]
pub struct ChaosPlan {
    /// Node processes.
    pub nodes: usize,
    /// Worker threads per node.
    pub workers: usize,
    /// Hot keys the workers share.
    pub keys: usize,
    /// How long faults are injected.
    pub duration: Duration,
    /// Mean time between faults.
    pub fault_every: Duration,
    /// Seed of the fault schedule and the workloads.
    pub seed: u64,
    /// Copies of every entry (`Config::replicas`): 1, or 2 for runs with
    /// kill-and-wipe faults and rejoins (at least 3 nodes).
    pub replicas: usize,
}

impl ChaosPlan {
    /// The bounded run of the test suite: about half a minute, ≥ 20 faults.
    #[must_use]
    pub fn quick(seed: u64) -> ChaosPlan {
        ChaosPlan {
            nodes: 4,
            workers: 2,
            keys: 16,
            duration: Duration::from_secs(25),
            fault_every: Duration::from_millis(700),
            seed,
            replicas: 1,
        }
    }

    /// The bounded replicated run of the test suite: three nodes with two
    /// copies of everything, about 35 s of faults with kill-and-wipes and
    /// their rejoins among the stalls, fills and crowds.
    #[must_use]
    pub fn replicated(seed: u64) -> ChaosPlan {
        ChaosPlan {
            nodes: 3,
            workers: 2,
            keys: 12,
            duration: Duration::from_secs(35),
            fault_every: Duration::from_millis(800),
            seed,
            replicas: 2,
        }
    }

    fn encode(&self) -> String {
        format!(
            "{} {} {} {} {} {} {}",
            self.nodes,
            self.workers,
            self.keys,
            self.duration.as_millis(),
            self.fault_every.as_millis(),
            self.seed,
            self.replicas
        )
    }

    fn decode(s: &str) -> Option<ChaosPlan> {
        let v: Vec<u64> = s
            .split(' ')
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        let [nodes, workers, keys, duration, every, seed, replicas] = v[..] else {
            return None;
        };
        Some(ChaosPlan {
            nodes: nodes as usize,
            workers: workers as usize,
            keys: keys as usize,
            duration: Duration::from_millis(duration),
            fault_every: Duration::from_millis(every),
            seed,
            replicas: replicas as usize,
        })
    }

    fn replicated_run(&self) -> bool {
        self.replicas > 1
    }

    /// The client id of worker `w` of generation `generation` of `node`
    /// (generation 0: `node * workers + w`).
    fn worker_client(&self, node: usize, generation: u64, w: usize) -> u64 {
        (generation * self.nodes as u64 + node as u64) * self.workers as u64 + w as u64
    }

    /// The history log of that worker.
    fn worker_log(&self, dir: &Path, node: usize, generation: u64, w: usize) -> std::path::PathBuf {
        dir.join(format!("hist-{}", self.worker_client(node, generation, w)))
    }
}

/// Client ids besides the workers': the filler preload, each process's
/// bursts, each node's audit (offset by generation and node).
const FILLER_CLIENT: u64 = 999_999;
const BURST_CLIENTS: u64 = 1_000_000;
const AUDIT_CLIENTS: u64 = 2_000_000;

/// Index slots per node: with the hot keys and [`fillers`], the index is
/// about three-quarters full.
const CHAOS_INDEX_SLOTS: usize = 8;

/// The filler keys node 0 preloads to crowd the index.
fn fillers(plan: &ChaosPlan) -> Vec<Vec<u8>> {
    let slots = CHAOS_INDEX_SLOTS * plan.nodes;
    let fill = (slots * 3 / 4).saturating_sub(plan.keys);
    (0..fill)
        .map(|i| format!("filler-{i}").into_bytes())
        .collect()
}

/// The configuration every chaos node uses: short timeouts so faults
/// resolve quickly, a tiny index and tiny data tables so MIGRATE and
/// recycling never rest and the fill and crowd faults hit their limits.
/// With replicas: a lease of 1 s (an operation, 100 ms, plus the landing
/// bound, 156 ms, fits in it) and a failure timeout of 1 s, twice a stall,
/// so that a loss is detected within about a second and a stall is not
/// taken for one.
#[must_use]
pub fn chaos_config(dir: &Path, plan: &ChaosPlan) -> Config {
    Config {
        cluster: format!("chaos-{}", xxhash_name(dir)),
        nodes: plan.nodes,
        replicas: plan.replicas,
        index_slots_per_node: CHAOS_INDEX_SLOTS,
        value_size_max: 4096,
        // About 256 slots of the smallest class, 26 of the largest.
        data_bytes_per_node: 5 * 256 * nessie::layout::dte::entry_bytes(128, 256),
        expiry: Duration::from_millis(300),
        op_timeout: Duration::from_millis(100),
        max_clock_skew: Duration::from_millis(5),
        lease: if plan.replicated_run() {
            Duration::from_secs(1)
        } else {
            Duration::ZERO
        },
        failure_timeout: Duration::from_secs(1),
        fabric: FabricConfig::Shm {
            dir: Some(dir.join("regions")),
        },
        attach_timeout: Duration::from_secs(30),
        ..Config::default()
    }
}

/// How long a stall lasts: past `expiry`, so the stalled node's entries
/// are left to helpers, and well short of `failure_timeout`.
fn stall_for(config: &Config) -> Duration {
    config.expiry + Duration::from_millis(150)
}

fn xxhash_name(dir: &Path) -> u64 {
    dir.to_string_lossy()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// What a chaos run did and found.
#[derive(Debug, Clone, Default)]
pub struct ChaosReport {
    /// Operations in the merged history.
    pub operations: usize,
    /// Operations with an unknown outcome.
    pub unknown: usize,
    /// Processes killed (without replicas).
    pub kills: usize,
    /// Processes killed and their hosts declared lost (with replicas).
    pub wipes: usize,
    /// The nodes killed and wiped, in order.
    pub wiped_nodes: Vec<usize>,
    /// Replacements whose `Node::rejoin` returned.
    pub rejoins: usize,
    /// The longest `Node::rejoin` call of a replacement.
    pub slowest_rejoin: Duration,
    /// The longest time a node was lost: from its kill until its
    /// replacement's rejoin returned.
    pub longest_loss: Duration,
    /// Index and data slots the replacements copied.
    pub restored_slots: u64,
    /// Bytes the replacements read from the primaries.
    pub restored_bytes: u64,
    /// Calls refused with `ViewChanging` or `NoQuorum` (not executed).
    pub refused: u64,
    /// Operations of the replacements' workers in the merged history.
    pub replacement_operations: usize,
    /// Reads of the final audit in the merged history (with replicas every
    /// node reads every hot key and filler, without them node 0 does).
    pub audited: usize,
    /// Stalls longer than `expiry`.
    pub stalls: usize,
    /// Kills and stalls that caught a worker inside an operation.
    pub faults_mid_operation: u64,
    /// Data-table fills that reached `DataTableFull`.
    pub fills: usize,
    /// Index crowdings that reached `IndexFull`.
    pub crowds: usize,
    /// MIGRATEs the nodes' clients performed.
    pub migrations: u64,
    /// Entries of dead or aborted owners the clients recovered.
    pub recoveries: u64,
    /// Slots the nodes' recyclers returned to the free lists.
    pub reclaimed: u64,
    /// MIGRATE markers the recyclers resolved before reusing a copy's slot.
    pub markers_resolved: u64,
    /// Writes that waited for a free slot.
    pub waited_for_slots: u64,
    /// Violations found (linearizability, wedges, failed processes).
    pub violations: Vec<String>,
}

impl ChaosReport {
    /// Faults injected in all.
    #[must_use]
    pub fn faults(&self) -> usize {
        self.kills + self.wipes + self.stalls + self.fills + self.crowds
    }

    /// The one-line summary.
    #[must_use]
    pub fn summary(&self) -> String {
        let replicated = if self.wipes > 0 || self.rejoins > 0 {
            format!(
                "; replicas: {} kill-and-wipes (nodes {:?}), {} rejoins (slowest {:.1} s, longest loss {:.1} s, {} slots and {} KiB restored), {} operations by the replacements' workers, {} calls refused",
                self.wipes,
                self.wiped_nodes,
                self.rejoins,
                self.slowest_rejoin.as_secs_f64(),
                self.longest_loss.as_secs_f64(),
                self.restored_slots,
                self.restored_bytes / 1024,
                self.replacement_operations,
                self.refused
            )
        } else {
            String::new()
        };
        format!(
            "chaos: {} operations ({} unknown, {} audit reads), {} faults injected ({} kills, {} kill-and-wipes, {} stalls > expiry, {} of those inside an operation, {} data-table fills, {} index crowdings); pressure: {} migrations, {} recoveries, {} slots reclaimed, {} markers resolved by recyclers, {} writes waited for a slot{replicated}; {} violations",
            self.operations,
            self.unknown,
            self.audited,
            self.faults(),
            self.kills,
            self.wipes,
            self.stalls,
            self.faults_mid_operation,
            self.fills,
            self.crowds,
            self.migrations,
            self.recoveries,
            self.reclaimed,
            self.markers_resolved,
            self.waited_for_slots,
            self.violations.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_reads_back() {
        for plan in [ChaosPlan::quick(3), ChaosPlan::replicated(11)] {
            let back = ChaosPlan::decode(&plan.encode()).unwrap();
            assert_eq!(back.encode(), plan.encode());
        }
    }

    #[test]
    fn both_configurations_are_valid() {
        let dir = Path::new("/tmp/nessie-chaos-config");
        for plan in [ChaosPlan::quick(3), ChaosPlan::replicated(11)] {
            let config = chaos_config(dir, &plan);
            config.validate().unwrap();
            assert!(stall_for(&config) > config.expiry);
            assert!(stall_for(&config) * 2 <= config.failure_timeout);
        }
    }

    #[test]
    fn replacements_have_their_own_clients() {
        let plan = ChaosPlan::replicated(1);
        let mut ids: Vec<u64> = (0..4)
            .flat_map(|g| {
                (0..plan.nodes).flat_map(move |n| (0..plan.workers).map(move |w| (n, g, w)))
            })
            .map(|(n, g, w)| plan.worker_client(n, g, w))
            .collect();
        assert_eq!(plan.worker_client(2, 0, 1), 5);
        let all = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), all);
        assert!(ids.iter().all(|&id| id < FILLER_CLIENT));
    }
}
