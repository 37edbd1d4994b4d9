//! The controller of a chaos run: it starts the node processes, injects
//! the faults, carries each kill-and-wipe through to its replacement's
//! rejoin, stops the run and collects the verdict.
//!
//! A kill-and-wipe goes: SIGKILL the node inside an operation; declare its
//! host lost (`ShmFabric::lose`); wait until a survivor's MEMBERSHIP region
//! records a decided view that names the node lost, then for that view's
//! drain (`lease` + landing bound + skew, and a margin), by which every
//! survivor has activated it or let its lease lapse; only then start the
//! replacement. Starting it earlier is unsafe: `Node::rejoin` takes the
//! lost node's region files (clearing the lost mark) and fills them with
//! its start values before it reads the view, so a survivor still serving
//! the old view would read the replacement's empty memory as the lost
//! node's, and a refused rejoin (the node not yet lost in the view) leaves
//! the files unmarked and a later rejoin impossible.

use super::{
    chaos_config, stall_for, ChaosPlan, ChaosReport, AUDIT_CLIENTS, CHILD_ENV, DIR_ENV,
    FILLER_CLIENT, GENERATION_ENV, PLAN_ENV,
};
use crate::process::history::{read_logs, stop_mid_operation};
use crate::process::workload::wait_until_started;
use nessie::fabric::wire::REGION_HEADER_BYTES;
use nessie::fabric::ShmFabric;
use nessie::layout::membership::{
    view_words, MemberState, ViewRecord, DECISION_OFFSET, MEMBERSHIP,
};
use nessie::layout::WORD;
use nessie::Config;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// How long the survivors may take to decide a view without a lost node.
const DECIDE_LIMIT: Duration = Duration::from_secs(30);
/// How long a replacement may take from its start until its rejoin returns.
const REJOIN_LIMIT: Duration = Duration::from_secs(60);
/// How long the processes may take to finish once told to stop.
const EXIT_LIMIT: Duration = Duration::from_secs(90);
/// The cluster stays whole at least this long between two kill-and-wipes,
const WHOLE_AT_LEAST: Duration = Duration::from_secs(1);
/// and once it has been whole this long, the next fault on a node that may
/// be wiped is a kill-and-wipe (so that a run has a few of them).
const WIPE_WITHIN: Duration = Duration::from_secs(4);

struct Procs(Vec<Option<Child>>, PathBuf);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in self.0.iter_mut().flatten() {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

/// A node killed and wiped, on its way back.
#[derive(Debug, Clone, Copy)]
struct Loss {
    node: usize,
    killed: Instant,
    /// When a decided view naming it lost was first seen.
    decided: Option<Instant>,
    /// When its replacement was started.
    spawned: Option<Instant>,
}

struct Controller<'a> {
    plan: ChaosPlan,
    config: Config,
    dir: PathBuf,
    procs: Procs,
    /// The generation of each node's current process.
    generations: Vec<u64>,
    child: &'a dyn Fn() -> Command,
    rng: StdRng,
    report: ChaosReport,
    burst: u64,
    loss: Option<Loss>,
    /// Since when no node has been lost.
    whole_since: Instant,
}

/// Runs a chaos plan. `child` builds the command that starts one node
/// process (the caller's own binary, told by [`CHILD_ENV`] to call
/// [`child_main`]); this function adds the environment.
///
/// # Errors
/// Failing to set up the run (directories, spawning); violations are in the
/// report, not errors.
///
/// [`child_main`]: super::child_main
pub fn run(plan: ChaosPlan, child: impl Fn() -> Command) -> std::io::Result<ChaosReport> {
    let dir =
        std::env::temp_dir().join(format!("nessie-chaos-{}-{}", std::process::id(), plan.seed));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let mut c = Controller {
        plan,
        config: chaos_config(&dir, &plan),
        dir: dir.clone(),
        procs: Procs(Vec::new(), dir.clone()),
        generations: vec![0; plan.nodes],
        child: &child,
        rng: StdRng::seed_from_u64(plan.seed),
        report: ChaosReport::default(),
        burst: 0,
        loss: None,
        whole_since: Instant::now(),
    };
    for node in 0..plan.nodes {
        let process = c.spawn(node, 0)?;
        c.procs.0.push(Some(process));
    }
    if !wait_until_started(&dir, plan.nodes, Duration::from_secs(120)) {
        return Err(std::io::Error::other("chaos nodes did not start"));
    }
    c.whole_since = Instant::now();
    c.inject()?;
    c.finish()?;
    c.collect()?;
    Ok(c.report)
}

impl Controller<'_> {
    fn spawn(&self, node: usize, generation: u64) -> std::io::Result<Child> {
        let mut cmd = (self.child)();
        cmd.env(CHILD_ENV, node.to_string())
            .env(DIR_ENV, &self.dir)
            .env(PLAN_ENV, self.plan.encode())
            .env(GENERATION_ENV, generation.to_string());
        cmd.spawn()
    }

    fn pid(&self, node: usize) -> Pid {
        Pid::from_raw(self.procs.0[node].as_ref().map_or(0, |c| c.id() as i32))
    }

    /// The logs of `node`'s current workers.
    fn logs(&self, node: usize) -> Vec<PathBuf> {
        (0..self.plan.workers)
            .map(|w| {
                self.plan
                    .worker_log(&self.dir, node, self.generations[node], w)
            })
            .collect()
    }

    /// Injects faults for the plan's duration, then lets a loss still under
    /// way finish its rejoin.
    fn inject(&mut self) -> std::io::Result<()> {
        let end = Instant::now() + self.plan.duration;
        let mut next = Instant::now() + self.gap();
        loop {
            if let Err(violation) = self.advance_loss() {
                self.report.violations.push(violation);
                return Ok(());
            }
            let now = Instant::now();
            if now >= end {
                if self.loss.is_none() {
                    return Ok(());
                }
            } else if now >= next {
                self.fault()?;
                next = Instant::now() + self.gap();
            }
            let tick = next
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50));
            std::thread::sleep(tick.max(Duration::from_millis(1)));
        }
    }

    fn gap(&mut self) -> Duration {
        self.plan.fault_every.mul_f64(self.rng.gen_range(0.5..1.5))
    }

    /// One fault on a random node that has a process.
    fn fault(&mut self) -> std::io::Result<()> {
        let alive: Vec<usize> = (0..self.plan.nodes)
            .filter(|&n| self.procs.0[n].is_some())
            .collect();
        let node = alive[self.rng.gen_range(0..alive.len())];
        let kind = self.rng.gen_range(0..10);
        let replicated = self.plan.replicated_run();
        let overdue = self.whole_since.elapsed() >= WIPE_WITHIN;
        if replicated && (kind < 3 || overdue) && self.may_wipe(node) {
            return self.kill_and_wipe(node);
        }
        match kind {
            0 if !replicated && alive.len() > 2 && node != 0 => self.kill(node),
            0..=3 => self.stall(node),
            kind => {
                self.burst += 1;
                let what = if kind < 7 { "fill" } else { "crowd" };
                let name = format!("{what}-{node}-{}", self.burst);
                let _ = std::fs::write(self.dir.join(name), b"");
            }
        }
        Ok(())
    }

    /// Whether `node` may be killed and wiped now: no node is lost, the
    /// cluster has been whole for a while, `node` is not the one wiped
    /// last (so that the next loss needs a replacement's restored copies),
    /// and it is not in a burst (whose keys would stay behind and crowd the
    /// index for good).
    fn may_wipe(&self, node: usize) -> bool {
        self.loss.is_none()
            && self.report.wiped_nodes.last() != Some(&node)
            && self.whole_since.elapsed() >= WHOLE_AT_LEAST
            && !self.dir.join(format!("bursting-{node}")).exists()
    }

    /// Stops `node` inside an operation if it can; counts it.
    fn stop_inside(&mut self, node: usize) -> nix::Result<()> {
        let logs = self.logs(node);
        let mid = stop_mid_operation(self.pid(node), &logs, 500, Duration::from_micros(200))?;
        self.report.faults_mid_operation += u64::from(mid);
        Ok(())
    }

    fn kill(&mut self, node: usize) {
        let _ = self.stop_inside(node);
        if let Some(mut c) = self.procs.0[node].take() {
            let _ = c.kill();
            let _ = c.wait();
            self.report.kills += 1;
        }
    }

    fn stall(&mut self, node: usize) {
        if self.stop_inside(node).is_ok() {
            std::thread::sleep(stall_for(&self.config));
            let _ = kill(self.pid(node), Signal::SIGCONT);
            self.report.stalls += 1;
        }
    }

    fn kill_and_wipe(&mut self, node: usize) -> std::io::Result<()> {
        let _ = self.stop_inside(node);
        let Some(mut c) = self.procs.0[node].take() else {
            return Ok(());
        };
        let _ = c.kill();
        let _ = c.wait();
        let killed = Instant::now();
        ShmFabric::lose(
            &self.config.shm_dir(),
            node,
            &nessie::store_regions(&self.config),
            Duration::from_millis(20),
        )
        .map_err(std::io::Error::other)?;
        self.report.wipes += 1;
        self.report.wiped_nodes.push(node);
        self.loss = Some(Loss {
            node,
            killed,
            decided: None,
            spawned: None,
        });
        Ok(())
    }

    /// Moves a loss on: from the kill to a decided view without the node,
    /// through its drain to the replacement's start, to its rejoin's
    /// return. A step that takes too long, or a replacement that exits
    /// first, is a violation.
    fn advance_loss(&mut self) -> Result<(), String> {
        let Some(mut loss) = self.loss else {
            return Ok(());
        };
        let node = loss.node;
        let now = Instant::now();
        match (loss.decided, loss.spawned) {
            (None, _) => {
                if decided_view(&self.config, node)
                    .is_some_and(|v| v.members[node].0 == MemberState::Lost)
                {
                    loss.decided = Some(now);
                } else if now - loss.killed > DECIDE_LIMIT {
                    return Err(format!(
                        "the survivors did not decide a view without node {node} within {DECIDE_LIMIT:?} of its loss"
                    ));
                }
            }
            (Some(decided), None) => {
                let drain = self.config.effective_lease()
                    + self.config.landing_bound()
                    + self.config.max_clock_skew
                    + Duration::from_millis(300);
                if now >= decided + drain {
                    let generation = self.generations[node] + 1;
                    let process = self
                        .spawn(node, generation)
                        .map_err(|e| format!("starting a replacement of node {node}: {e}"))?;
                    self.procs.0[node] = Some(process);
                    self.generations[node] = generation;
                    loss.spawned = Some(now);
                }
            }
            (Some(_), Some(spawned)) => {
                let generation = self.generations[node];
                let path = self.dir.join(format!("rejoined-{node}-{generation}"));
                if let Ok(text) = std::fs::read_to_string(&path) {
                    self.count_rejoin(&text)?;
                    self.report.longest_loss = self.report.longest_loss.max(now - loss.killed);
                    self.loss = None;
                    self.whole_since = now;
                    return Ok(());
                }
                let exited = self.procs.0[node]
                    .as_mut()
                    .and_then(|c| c.try_wait().ok().flatten());
                if let Some(status) = exited {
                    self.procs.0[node] = None;
                    return Err(format!(
                        "the replacement of node {node} (generation {generation}) exited with {status} before its rejoin returned"
                    ));
                }
                if now - spawned > REJOIN_LIMIT {
                    return Err(format!(
                        "the replacement of node {node} (generation {generation}) did not rejoin within {REJOIN_LIMIT:?}"
                    ));
                }
            }
        }
        self.loss = Some(loss);
        Ok(())
    }

    /// Reads a replacement's `rejoined-` file: the rejoin's ms, then the
    /// index slots, data slots and bytes it restored.
    fn count_rejoin(&mut self, text: &str) -> Result<(), String> {
        let n: Vec<u64> = text
            .split_whitespace()
            .filter_map(|s| s.parse().ok())
            .collect();
        let [ms, index, data, bytes] = n[..] else {
            return Err(format!("a replacement's rejoined file reads {text:?}"));
        };
        self.report.rejoins += 1;
        self.report.slowest_rejoin = self.report.slowest_rejoin.max(Duration::from_millis(ms));
        self.report.restored_slots += index + data;
        self.report.restored_bytes += bytes;
        Ok(())
    }

    /// Tells every process to stop and waits for each, bounded: one that
    /// fails, or is still running after [`EXIT_LIMIT`] (wedged), is a
    /// violation.
    fn finish(&mut self) -> std::io::Result<()> {
        std::fs::write(self.dir.join("stop"), b"")?;
        let deadline = Instant::now() + EXIT_LIMIT;
        for (node, slot) in self.procs.0.iter_mut().enumerate() {
            let Some(c) = slot.as_mut() else {
                continue;
            };
            let status = loop {
                if let Some(status) = c.try_wait()? {
                    break Some(status);
                }
                if Instant::now() > deadline {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            match status {
                Some(status) if status.success() => {}
                Some(status) => self
                    .report
                    .violations
                    .push(format!("node {node} exited with {status}")),
                None => {
                    let _ = c.kill();
                    let _ = c.wait();
                    self.report.violations.push(format!(
                        "node {node} did not finish within {EXIT_LIMIT:?} of the stop"
                    ));
                }
            }
            *slot = None;
        }
        Ok(())
    }

    /// Reads what the processes left: finished bursts, their violations,
    /// pressure counts; then the merged history and its check.
    fn collect(&mut self) -> std::io::Result<()> {
        let report = &mut self.report;
        for entry in std::fs::read_dir(&self.dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if name.starts_with("done-fill") {
                report.fills += 1;
            } else if name.starts_with("done-crowd") {
                report.crowds += 1;
            } else if name.starts_with("violation-") {
                let text = std::fs::read_to_string(self.dir.join(&name))?;
                report.violations.push(text);
            } else if name.starts_with("pressure-") {
                let text = std::fs::read_to_string(self.dir.join(&name))?;
                add_pressure(report, &text);
            }
        }
        let history = read_logs(&self.dir)?;
        report.operations = history.len();
        report.unknown = history.unknown_outcomes();
        let first_generation = (self.plan.nodes * self.plan.workers) as u64;
        let clients = history.ops().iter().map(|op| op.client);
        report.replacement_operations = clients
            .clone()
            .filter(|&c| (first_generation..FILLER_CLIENT).contains(&c))
            .count();
        report.audited = clients.filter(|&c| c >= AUDIT_CLIENTS).count();
        if let Err(e) = crate::linearizability::check(&history) {
            report.violations.push(e.to_string());
        }
        Ok(())
    }
}

fn add_pressure(report: &mut ChaosReport, text: &str) {
    for line in text.lines() {
        let Some((what, n)) = line.split_once(' ') else {
            continue;
        };
        let n: u64 = n.parse().unwrap_or(0);
        match what {
            "migrations" => report.migrations += n,
            "recoveries" => report.recoveries += n,
            "reclaimed" => report.reclaimed += n,
            "markers_resolved" => report.markers_resolved += n,
            "waited_for_slots" => report.waited_for_slots += n,
            "refused" => report.refused += n,
            _ => {}
        }
    }
}

/// The newest view decided in the cluster, as the nodes other than `lost`
/// record it in their MEMBERSHIP regions (the decision word a proposer
/// writes there, M4), read from their `shm` region files; `None` if none
/// is readable whole.
fn decided_view(config: &Config, lost: usize) -> Option<ViewRecord> {
    (0..config.nodes)
        .filter(|&n| n != lost)
        .filter_map(|n| {
            let path = ShmFabric::region_path(&config.shm_dir(), n, MEMBERSHIP);
            let file = std::fs::File::open(path).ok()?;
            let mut bytes = vec![0u8; view_words(config.nodes) * WORD];
            let at = REGION_HEADER_BYTES as u64 + DECISION_OFFSET;
            file.read_exact_at(&mut bytes, at).ok()?;
            ViewRecord::decode(&bytes, config.nodes)
        })
        .max_by_key(|v| v.epoch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn pressure_lines_add_up() {
        let mut r = ChaosReport::default();
        add_pressure(&mut r, "migrations 3\nrefused 7\nreclaimed 2\n");
        add_pressure(&mut r, "migrations 1\nnonsense\n");
        assert_eq!((r.migrations, r.refused, r.reclaimed), (4, 7, 2));
    }

    #[test]
    fn no_view_is_read_from_a_missing_directory() {
        let plan = ChaosPlan::replicated(1);
        let config = chaos_config(Path::new("/nonexistent/nessie-chaos"), &plan);
        assert!(decided_view(&config, 0).is_none());
    }
}
