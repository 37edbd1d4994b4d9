//! The harness's side of a `failover` run: node processes of this binary
//! (`nessie-bench node`, as every experiment starts them, with a run spec
//! that asks for a time series), one of which is killed mid-run and later
//! replaced by a process that rejoins under the same id (`node --rejoin`).
//!
//! ```text
//! every node ready → preload → run      (time zero: the bucket of `run`)
//! kill_at:   the victim reports its buckets so far (`flush`), then
//!            shm: its regions declared lost, then SIGKILL
//!            tcp: SIGKILL
//! rejoin_at: the replacement starts; it says `restored`, then `ready`,
//!            and is told `run`
//! end:       end_at, or after_restore past the restore if that is later
//!            (a replacement still rejoining is waited for up to
//!            rejoin_limit); then `stop` → each live node's timeline → `exit`
//! ```
//!
//! Every process and the cluster's shared-memory files are removed when
//! the run ends, whichever way ([`Procs`]). The live nodes' own buckets
//! stay in the run's directory (`timelines.json`).

use crate::cluster::remove_cluster_shm;
use crate::error::{HarnessError, Result};
use crate::launcher::{Fabric, RunFiles, RunSecret};
use crate::measure::timeline::{unix_now_us, NodeTimeline, RestoreReport};
use crate::proc::{failed, interrupted, ChildGuard, Line, Talking};
use crate::protocol::{NodeCommand, NodeEvent};
use crate::spec::RunSpec;
use nessie::Config;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

/// When the run's events happen, from the moment the harness says `run`.
#[derive(Clone, Debug)]
pub(super) struct Schedule {
    /// The node that is lost.
    pub victim: usize,
    /// When it is lost.
    pub kill_at: Duration,
    /// When its replacement starts.
    pub rejoin_at: Duration,
    /// When the run ends at the earliest.
    pub end_at: Duration,
    /// How long the run goes on after the restore finished, at least.
    pub after_restore: Duration,
    /// How long the replacement may take to rejoin before the run ends
    /// without it.
    pub rejoin_limit: Duration,
    /// On `shm`: how long verbs that passed the lost check before the loss
    /// may go on before the victim's regions are wiped.
    pub grace: Duration,
}

/// What a run gave, times in µs since the Unix epoch.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    /// When the harness said `run`.
    pub run_us: u64,
    /// When the victim was lost (its regions declared lost, or SIGKILL).
    pub kill_us: u64,
    /// When the replacement process was started.
    pub spawned_us: Option<u64>,
    /// What its restore did, if it finished.
    pub restore: Option<RestoreReport>,
    /// When the harness said `stop`.
    pub stop_us: u64,
    /// The nodes' buckets: the victim's until its loss, the survivors' and
    /// the replacement's.
    pub timelines: Vec<NodeTimeline>,
    /// What did not go to plan without failing the run.
    pub notes: Vec<String>,
}

/// Whose line an event was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Node(usize),
    Replacement,
}

/// Every process and file of one run; dropping it kills what still runs
/// and removes the cluster's shared-memory files (and the tcp secret).
#[derive(Debug, Default)]
struct Procs {
    nodes: Vec<Option<ChildGuard>>,
    replacement: Option<ChildGuard>,
    shm: Option<(String, PathBuf)>,
    secret: RunSecret,
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.nodes.clear();
        self.replacement = None;
        if let Some((name, dir)) = &self.shm {
            remove_cluster_shm(name, dir);
        }
    }
}

/// A run in progress.
struct Driving<'a> {
    exe: &'a Path,
    spec: &'a RunSpec,
    config: &'a Config,
    files: RunFiles,
    procs: Procs,
    events: Receiver<Line>,
    replacement_events: Option<Receiver<Line>>,
    logs: Vec<PathBuf>,
    schedule: &'a Schedule,
    killed: bool,
    out: Outcome,
}

/// Runs `spec` (whose config is `config`, cluster `cluster`) on node
/// processes of this binary (`exe`) with its files in `dir`, losing and
/// replacing a node on `schedule`; `progress` hears the time since `run`
/// and what is happening.
///
/// # Errors
/// [`HarnessError::NodeFailed`] when a node other than the victim exits or
/// reports an error, the replacement fails to rejoin, or a phase misses its
/// deadline; [`HarnessError::Interrupted`] on Ctrl-C; I/O errors writing
/// the run's files. Everything is torn down either way.
pub(super) fn run(
    exe: &Path,
    spec: &RunSpec,
    config: &Config,
    cluster: &str,
    dir: &Path,
    schedule: &Schedule,
    progress: &mut dyn FnMut(Duration, &str),
) -> Result<Outcome> {
    let files = RunFiles::in_dir(dir)?;
    std::fs::create_dir_all(&files.dir).map_err(HarnessError::io("creating", &files.dir))?;
    std::fs::write(&files.config, config.to_toml()?)
        .map_err(HarnessError::io("writing", &files.config))?;
    std::fs::write(&files.spec, serde_json::to_vec_pretty(spec)?)
        .map_err(HarnessError::io("writing", &files.spec))?;
    let mut procs = Procs::default();
    if spec.fabric == Fabric::Tcp {
        procs.secret = RunSecret::prepare(&files.dir, |v| std::env::var(v).ok())?;
    } else {
        remove_cluster_shm(cluster, &config.shm_dir());
        procs.shm = Some((cluster.to_owned(), config.shm_dir()));
    }
    let talking = Talking::spawn_with(
        exe,
        spec.nodes,
        "starting a node process",
        |i| files.node_args(Some(i)),
        |i| files.dir.join(format!("node-{i}.stderr")),
        procs.secret.env(),
    )?;
    procs.nodes = talking.children.into_iter().map(Some).collect();
    let mut d = Driving {
        exe,
        spec,
        config,
        files,
        procs,
        events: talking.lines,
        replacement_events: None,
        logs: talking.logs,
        schedule,
        killed: false,
        out: Outcome::default(),
    };
    d.start(config.attach_timeout + Duration::from_secs(15))?;
    d.timeline(progress)?;
    d.finish()?;
    Ok(d.out)
}

impl Driving<'_> {
    /// Start-up and preload, then `run`.
    fn start(&mut self, attach: Duration) -> Result<()> {
        let nodes = self.spec.nodes;
        self.count(nodes, "start-up", attach, |e| {
            matches!(e, NodeEvent::Ready { .. })
        })?;
        self.send_all(NodeCommand::Preload)?;
        self.count(nodes, "the preload", Duration::from_secs(600), |e| {
            matches!(e, NodeEvent::Preloaded { .. })
        })?;
        self.send_all(NodeCommand::Run)?;
        self.out.run_us = unix_now_us();
        Ok(())
    }

    /// From `run` to `stop`: the loss, the replacement, the end.
    fn timeline(&mut self, progress: &mut dyn FnMut(Duration, &str)) -> Result<()> {
        let s = self.schedule.clone();
        let started = Instant::now();
        let mut restored_at: Option<Instant> = None;
        let mut spawned_at: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let since = now - started;
            if !self.killed && since >= s.kill_at {
                self.kill_victim()?;
            }
            if self.killed && spawned_at.is_none() && since >= s.rejoin_at {
                self.spawn_replacement()?;
                spawned_at = Some(now);
            }
            if restored_at.is_none() && spawned_at.is_some_and(|sp| now >= sp + s.rejoin_limit) {
                self.out.notes.push(format!(
                    "the replacement did not finish its restore within {:?} of its start; the run ended without it",
                    s.rejoin_limit
                ));
                break;
            }
            // A restore that ends after the planned end is waited for, and
            // measured `after_restore` past it.
            let end = match (restored_at, spawned_at) {
                (Some(r), _) => (started + s.end_at).max(r + s.after_restore),
                (None, Some(_)) => now + Duration::from_secs(1),
                (None, None) => started + s.end_at.max(s.rejoin_at),
            };
            if now >= end {
                break;
            }
            let what = match (self.killed, spawned_at, restored_at) {
                (false, ..) => "before the loss".to_owned(),
                (true, None, _) => format!("node {} lost", s.victim),
                (true, Some(_), None) => "the replacement is rejoining".to_owned(),
                (true, Some(_), Some(_)) => "restored".to_owned(),
            };
            progress(since, &what);
            match self.next_event(Duration::from_millis(20))? {
                Some((Who::Replacement, NodeEvent::Restored { restore })) => {
                    restored_at = Some(Instant::now());
                    self.out.restore = Some(restore);
                }
                Some((Who::Replacement, NodeEvent::Ready { .. })) => {
                    self.send(Who::Replacement, NodeCommand::Run)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `stop` to every live node, their timelines, then `exit`.
    fn finish(&mut self) -> Result<()> {
        let replacement_runs = self.out.restore.is_some();
        if !replacement_runs {
            // Still rejoining (or never started): it has nothing to report.
            self.procs.replacement = None;
            self.replacement_events = None;
        }
        let mut live: Vec<Who> = (0..self.spec.nodes)
            .filter(|&n| n != self.schedule.victim || !self.killed)
            .map(Who::Node)
            .collect();
        if replacement_runs {
            live.push(Who::Replacement);
        }
        for &who in &live {
            self.send(who, NodeCommand::Stop)?;
        }
        self.out.stop_us = unix_now_us();
        let deadline = Instant::now() + self.config.op_timeout + Duration::from_secs(30);
        let mut waiting = live.clone();
        while !waiting.is_empty() {
            if Instant::now() > deadline {
                return Err(self.failure(waiting[0], "sent no timeline within 30 s of `stop`"));
            }
            if let Some((who, NodeEvent::Timeline { timeline })) =
                self.next_event(Duration::from_millis(50))?
            {
                waiting.retain(|w| *w != who);
                self.out.timelines.push(*timeline);
            }
        }
        let raw = self.files.dir.join("timelines.json");
        std::fs::write(&raw, serde_json::to_vec(&self.out.timelines)?)
            .map_err(HarnessError::io("writing", &raw))?;
        for &who in &live {
            self.send(who, NodeCommand::Exit)?;
        }
        let exit_by = Instant::now() + Duration::from_secs(15);
        let guards = self
            .procs
            .nodes
            .iter_mut()
            .flatten()
            .chain(self.procs.replacement.as_mut());
        for guard in guards {
            let left = exit_by.saturating_duration_since(Instant::now());
            if guard.wait_for(left).is_none_or(|status| !status.success()) {
                self.out.notes.push(format!(
                    "a node process (pid {}) did not exit cleanly within 15 s of `exit`; it was killed",
                    guard.pid()
                ));
            }
        }
        Ok(())
    }

    /// Loses the victim: it reports its buckets so far (`flush`), then on
    /// `shm` its regions are declared lost (every process refuses its
    /// verbs) and wiped after the grace, and its process is killed; on
    /// `tcp` the process is killed.
    fn kill_victim(&mut self) -> Result<()> {
        let victim = self.schedule.victim;
        self.send(Who::Node(victim), NodeCommand::Flush)?;
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some((Who::Node(n), NodeEvent::Timeline { timeline })) =
                self.next_event(Duration::from_millis(20))?
            {
                if n == victim {
                    self.out.timelines.push(*timeline);
                    break;
                }
            }
            if Instant::now() > deadline {
                self.out.notes.push(format!(
                    "node {victim} did not report its buckets within 5 s of `flush`: its operations before the loss are missing"
                ));
                break;
            }
        }
        self.killed = true;
        self.out.kill_us = unix_now_us();
        if self.spec.fabric == Fabric::Shm {
            nessie::fabric::ShmFabric::lose(
                &self.config.shm_dir(),
                victim,
                &nessie::store_regions(self.config),
                self.schedule.grace,
            )
            .map_err(nessie::Error::from)?;
        }
        // Dropping the guard kills the process group with SIGKILL.
        if let Some(slot) = self.procs.nodes.get_mut(victim) {
            *slot = None;
        }
        Ok(())
    }

    /// Starts the replacement: `node --node-id <victim> --rejoin`.
    fn spawn_replacement(&mut self) -> Result<()> {
        let victim = self.schedule.victim;
        let mut args = self.files.node_args(Some(victim));
        args.push("--rejoin".into());
        let log = self
            .files
            .dir
            .join(format!("node-{victim}-replacement.stderr"));
        let mut talking = Talking::spawn_with(
            self.exe,
            1,
            "starting the replacement",
            |_| args.clone(),
            |_| log.clone(),
            self.procs.secret.env(),
        )?;
        self.out.spawned_us = Some(unix_now_us());
        self.procs.replacement = talking.children.pop();
        self.replacement_events = Some(talking.lines);
        self.logs.push(log);
        Ok(())
    }

    /// Waits until `n` events `counts` accepts have arrived.
    fn count(
        &mut self,
        n: usize,
        phase: &str,
        timeout: Duration,
        counts: fn(&NodeEvent) -> bool,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut seen = 0;
        while seen < n {
            if Instant::now() > deadline {
                return Err(HarnessError::NodeFailed {
                    node: 0,
                    why: format!("the cluster did not finish {phase} within {timeout:?}"),
                });
            }
            if let Some((_, e)) = self.next_event(Duration::from_millis(50))? {
                seen += usize::from(counts(&e));
            }
        }
        Ok(())
    }

    /// The next event of a node or the replacement within `wait`. A line of
    /// the victim once it was lost is ignored; an `error` event, or a
    /// process other than the victim that exits, fails the run.
    fn next_event(&mut self, wait: Duration) -> Result<Option<(Who, NodeEvent)>> {
        if interrupted() {
            return Err(HarnessError::Interrupted);
        }
        let line = match self.replacement_events.as_ref().map(Receiver::try_recv) {
            Some(Ok(line)) => Some((Who::Replacement, line)),
            Some(Err(TryRecvError::Disconnected)) => {
                return Err(self.failure(Who::Replacement, "exited"));
            }
            Some(Err(TryRecvError::Empty)) | None => self
                .events
                .recv_timeout(wait)
                .ok()
                .map(|l| (Who::Node(line_child(&l)), l)),
        };
        let Some((who, line)) = line else {
            return Ok(None);
        };
        let lost = self.killed && who == Who::Node(self.schedule.victim);
        match line {
            _ if lost => Ok(None),
            Line::Closed(_) => Err(self.failure(who, "exited during the run")),
            Line::Text(_, text) => {
                let event: NodeEvent = serde_json::from_str(&text).map_err(|e| {
                    HarnessError::Protocol(format!("{who:?} printed {text:?}: {e}"))
                })?;
                if let NodeEvent::Error { message, .. } = &event {
                    return Err(self.failure(who, &format!("reported: {message}")));
                }
                Ok(Some((who, event)))
            }
        }
    }

    fn send(&mut self, who: Who, cmd: NodeCommand) -> Result<()> {
        let guard = match who {
            Who::Node(n) => self.procs.nodes.get_mut(n).and_then(Option::as_mut),
            Who::Replacement => self.procs.replacement.as_mut(),
        };
        let sent = guard.and_then(ChildGuard::stdin).is_some_and(|s| {
            writeln!(s, "{}", cmd.word())
                .and_then(|()| s.flush())
                .is_ok()
        });
        if sent {
            Ok(())
        } else {
            Err(self.failure(who, "its stdin closed (it exited)"))
        }
    }

    fn send_all(&mut self, cmd: NodeCommand) -> Result<()> {
        for n in 0..self.spec.nodes {
            self.send(Who::Node(n), cmd)?;
        }
        Ok(())
    }

    /// `who` failed: `what`, with the tail of its stderr.
    fn failure(&self, who: Who, what: &str) -> HarnessError {
        let (node, log) = match who {
            Who::Node(n) => (n, self.logs.get(n)),
            Who::Replacement => (self.schedule.victim, self.logs.get(self.spec.nodes)),
        };
        let what = match who {
            Who::Node(_) => what.to_owned(),
            Who::Replacement => format!("its replacement {what}"),
        };
        match log {
            Some(log) => failed(node, &what, log),
            None => HarnessError::NodeFailed { node, why: what },
        }
    }
}

/// The child a line came from.
fn line_child(line: &Line) -> usize {
    match line {
        Line::Text(c, _) | Line::Closed(c) => *c,
    }
}
