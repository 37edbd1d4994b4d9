//! Workers for a replicated cluster (`Config::replicas` > 1) whose view
//! changes under them: a member killed, or cut off from the others. Each
//! worker thread logs its calls as [`workload::run_node_workers`] does, but
//! tells the outcomes apart the way a client of a replicated store must:
//!
//! * success: logged with its result;
//! * `ViewChanging`, `NoQuorum`: the store did nothing, so the call is
//!   logged as refused and left out of the history;
//! * `Timeout`, a fabric error, a full table: the outcome is unknown, so the
//!   call stays in the history without a response.
//!
//! After a refused or unknown call a thread backs off for a while (as a
//! client retrying would), which also keeps the number of unknown outcomes,
//! and with it the checker's search, small. Any other error fails the node
//! process.
//!
//! [`serving_gap`] measures, from the merged history, how long the cluster
//! served nothing.
//!
//! [`workload::run_node_workers`]: crate::process::workload::run_node_workers

use crate::history::{Call, ClientId, History};
use crate::process::history::{now_ns, ProcLog};
use crate::process::stress::{stress_key, unique_value};
use crate::process::workload::client_id;
use nessie::{Error, KvClient, Node};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Shape of one node process's work.
#[derive(Debug, Clone, Copy)]
pub struct FaultWork {
    /// This node.
    pub node: usize,
    /// Worker threads.
    pub threads: usize,
    /// Keys shared by every node.
    pub keys: usize,
    /// Largest value, bytes.
    pub max_value: usize,
    /// Pause between a thread's operations.
    pub pause: Duration,
    /// Pause after a refused call or one of unknown outcome.
    pub backoff: Duration,
    /// Mixed into every thread's seed.
    pub salt: u64,
    /// The file (in the run's directory) whose appearance says the fault
    /// has happened.
    pub marker: &'static str,
    /// Successful operations each thread does once `marker` exists, then it
    /// stops (`usize::MAX`: it stops only when `dir/stop` appears).
    pub after_marker: usize,
    /// A thread still not done after this long stops and says so.
    pub limit: Duration,
}

/// What one node's workers saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// Calls that succeeded.
    pub ok: usize,
    /// Of those, the ones that started once the marker existed.
    pub ok_after_marker: usize,
    /// Refused with `ViewChanging`.
    pub view_changing: usize,
    /// Refused with `NoQuorum`.
    pub no_quorum: usize,
    /// `Timeout` or a fabric error: outcome unknown.
    pub unknown: usize,
    /// A full data table or index (also logged as unknown).
    pub full: usize,
    /// The slowest call, ms.
    pub slowest_ms: f64,
    /// Threads that hit `limit` before their work was done.
    pub gave_up: usize,
    /// When the first call was refused with `ViewChanging` (wall-clock ns,
    /// as the logs; 0: none was).
    pub first_view_changing_ns: u64,
    /// One message per distinct error of unknown outcome.
    pub errors: Vec<String>,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.ok += other.ok;
        self.ok_after_marker += other.ok_after_marker;
        self.view_changing += other.view_changing;
        self.no_quorum += other.no_quorum;
        self.unknown += other.unknown;
        self.full += other.full;
        self.slowest_ms = self.slowest_ms.max(other.slowest_ms);
        self.gave_up += other.gave_up;
        self.first_view_changing_ns =
            match (self.first_view_changing_ns, other.first_view_changing_ns) {
                (0, t) | (t, 0) => t,
                (a, b) => a.min(b),
            };
        for e in &other.errors {
            if !self.errors.contains(e) {
                self.errors.push(e.clone());
            }
        }
    }

    /// The tally as text ([`Tally::parse`] reads it back).
    #[must_use]
    pub fn to_text(&self) -> String {
        format!(
            "{} {} {} {} {} {} {:.3} {} {}\n{}",
            self.ok,
            self.ok_after_marker,
            self.view_changing,
            self.no_quorum,
            self.unknown,
            self.full,
            self.slowest_ms,
            self.gave_up,
            self.first_view_changing_ns,
            self.errors.join("\n")
        )
    }

    /// Reads [`Tally::to_text`]'s output.
    #[must_use]
    pub fn parse(text: &str) -> Option<Tally> {
        let mut lines = text.lines();
        let head: Vec<&str> = lines.next()?.split(' ').collect();
        let n = |i: usize| head.get(i).and_then(|s| s.parse::<usize>().ok());
        Some(Tally {
            ok: n(0)?,
            ok_after_marker: n(1)?,
            view_changing: n(2)?,
            no_quorum: n(3)?,
            unknown: n(4)?,
            full: n(5)?,
            slowest_ms: head.get(6)?.parse().ok()?,
            gave_up: n(7)?,
            first_view_changing_ns: head.get(8)?.parse().ok()?,
            errors: lines.map(str::to_owned).collect(),
        })
    }

    /// Reads node `node`'s tally from the run's directory.
    #[must_use]
    pub fn read(dir: &Path, node: usize) -> Option<Tally> {
        Tally::parse(&std::fs::read_to_string(tally_path(dir, node)).ok()?)
    }
}

fn tally_path(dir: &Path, node: usize) -> PathBuf {
    dir.join(format!("tally-{node}"))
}

/// How a call ended, as the log and the tally record it.
enum Ended {
    Ok,
    Refused,
    Unknown,
}

/// Runs and logs one call, counting its outcome in `tally`.
///
/// # Panics
/// On an error a replicated store must not return here (`DataLost`,
/// `Corrupt`, ...), or a log write that fails.
fn call_once(
    client: &mut dyn KvClient,
    log: &mut ProcLog,
    call: &Call,
    tally: &mut Tally,
) -> Ended {
    let id = log.invoke(call).expect("log an invocation");
    let started = Instant::now();
    let result = call.apply(client);
    tally.slowest_ms = tally.slowest_ms.max(started.elapsed().as_secs_f64() * 1e3);
    match result {
        Ok(ret) => {
            log.returned(id, &ret).expect("log a response");
            tally.ok += 1;
            Ended::Ok
        }
        Err(Error::ViewChanging { .. }) => {
            log.refused(id).expect("log a refusal");
            tally.view_changing += 1;
            if tally.first_view_changing_ns == 0 {
                tally.first_view_changing_ns = now_ns();
            }
            Ended::Refused
        }
        Err(Error::NoQuorum { .. }) => {
            log.refused(id).expect("log a refusal");
            tally.no_quorum += 1;
            Ended::Refused
        }
        Err(e @ (Error::Timeout | Error::Fabric(_))) => {
            tally.unknown += 1;
            let message = e.to_string();
            if !tally.errors.contains(&message) {
                tally.errors.push(message);
            }
            Ended::Unknown
        }
        Err(Error::DataTableFull | Error::IndexFull) => {
            tally.full += 1;
            Ended::Unknown
        }
        Err(e) => panic!("{call:?}: {e}"),
    }
}

/// One worker thread's loop.
fn worker(mut client: nessie::Client, dir: &Path, work: FaultWork, thread: usize) -> Tally {
    let id = client_id(work.node, work.threads, thread);
    let mut log = ProcLog::create(&dir.join(format!("hist-{id}")), id).expect("log");
    let mut rng = StdRng::seed_from_u64(id ^ work.salt);
    let (stop, marker) = (dir.join("stop"), dir.join(work.marker));
    let mut tally = Tally::default();
    let began = Instant::now();
    for i in 0.. {
        let after = marker.exists();
        if stop.exists() || (after && tally.ok_after_marker >= work.after_marker) {
            break;
        }
        if began.elapsed() > work.limit {
            tally.gave_up += 1;
            break;
        }
        let key = stress_key(rng.gen_range(0..work.keys));
        let call = match rng.gen_range(0..10) {
            0..=3 => Call::put(key, unique_value(id, i, rng.gen_range(0..=work.max_value))),
            4 => Call::delete(key),
            _ => Call::get(key),
        };
        match call_once(&mut client, &mut log, &call, &mut tally) {
            Ended::Ok => {
                tally.ok_after_marker += usize::from(after);
                std::thread::sleep(work.pause);
            }
            Ended::Refused | Ended::Unknown => std::thread::sleep(work.backoff),
        }
    }
    tally
}

/// Runs `work` on `node`'s clients, logging into `dir/hist-<client>`, and
/// writes the node's tally to the run's directory ([`Tally::read`]).
///
/// # Panics
/// On an error no replicated store should return (the node process then
/// fails), or when a client cannot be made.
pub fn run_fault_workers(node: &Node, dir: &Path, work: FaultWork) -> Tally {
    let threads: Vec<_> = (0..work.threads)
        .map(|t| {
            let client = node.client().expect("client");
            let dir = dir.to_path_buf();
            std::thread::spawn(move || worker(client, &dir, work, t))
        })
        .collect();
    let mut tally = Tally::default();
    for t in threads {
        tally.add(&t.join().expect("a worker panicked"));
    }
    std::fs::write(tally_path(dir, work.node), tally.to_text()).expect("write the tally");
    tally
}

/// Reads every key of `0..keys` once through `node`, logging into
/// `dir/hist-audit-<node>` as client `audit_client`: refused and unknown
/// reads are retried until `limit` after the first try. Run after every
/// worker of the cluster is done, so the checker sees each read after all
/// writes: a key must hold its latest acknowledged value, or one of the
/// unknown-outcome writes after it.
///
/// # Panics
/// If a key is not served within `limit`.
pub fn audit(
    node: &Node,
    dir: &Path,
    node_id: usize,
    keys: usize,
    audit_client: ClientId,
    limit: Duration,
) {
    audit_into(
        node,
        dir,
        &format!("hist-audit-{node_id}"),
        (node_id, keys),
        audit_client,
        limit,
    );
}

/// As [`audit`], logging to the file `log` of `dir` (a second audit of the
/// same node needs a log of its own).
///
/// # Panics
/// As [`audit`].
pub fn audit_into(
    node: &Node,
    dir: &Path,
    log: &str,
    (node_id, keys): (usize, usize),
    audit_client: ClientId,
    limit: Duration,
) {
    let mut client = node.client().expect("client");
    let path = dir.join(log);
    let mut log = ProcLog::create(&path, audit_client).expect("log");
    let mut tally = Tally::default();
    let deadline = Instant::now() + limit;
    for k in 0..keys {
        let call = Call::get(stress_key(k));
        while !matches!(
            call_once(&mut client, &mut log, &call, &mut tally),
            Ended::Ok
        ) {
            assert!(
                Instant::now() < deadline,
                "node {node_id}: key {k} not served by the audit: {tally:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Marks `node` as past step `name` and waits until every node of `nodes`
/// is; returns `false` if `timeout` passed first.
#[must_use]
pub fn barrier(dir: &Path, name: &str, node: usize, nodes: &[usize], timeout: Duration) -> bool {
    let path = |n: usize| dir.join(format!("{name}-{n}"));
    let _ = std::fs::write(path(node), b"");
    let deadline = Instant::now() + timeout;
    while !nodes.iter().all(|&n| path(n).exists()) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// The longest stretch, from `from_ns` (wall-clock ns) on, in which no
/// call of `clients` succeeded: the start and end of the gap (the end is
/// the response of the first success after it). `None` when no call of
/// theirs succeeded after `from_ns`.
#[must_use]
pub fn serving_gap(history: &History, clients: &[ClientId], from_ns: u64) -> Option<(u64, u64)> {
    let mut done: Vec<u64> = history
        .ops()
        .iter()
        .filter(|op| clients.contains(&op.client))
        .filter_map(crate::history::Operation::responded)
        .filter(|&t| t >= from_ns)
        .collect();
    done.sort_unstable();
    let mut last = from_ns;
    let mut best: Option<(u64, u64)> = None;
    for t in done {
        if best.is_none_or(|(a, b)| t - last > b - a) {
            best = Some((last, t));
        }
        last = t;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Operation, Ret};

    #[test]
    fn a_tally_reads_back() {
        let t = Tally {
            ok: 5,
            ok_after_marker: 2,
            view_changing: 3,
            no_quorum: 4,
            unknown: 1,
            full: 0,
            slowest_ms: 12.5,
            gave_up: 0,
            first_view_changing_ns: 1_700_000_000_123_456_789,
            errors: vec!["a b".into(), "c".into()],
        };
        assert_eq!(Tally::parse(&t.to_text()), Some(t));
    }

    #[test]
    fn the_gap_is_the_longest_stretch_without_a_success() {
        let mut h = History::new();
        let get = || Call::get(b"k".to_vec());
        for (client, at) in [(1, 10), (1, 20), (2, 90), (1, 95), (3, 500)] {
            h.push(Operation::returned(
                client,
                get(),
                at - 1,
                at,
                Ret::Get(None),
            ));
        }
        h.push(Operation::unknown(1, get(), 30));
        assert_eq!(serving_gap(&h, &[1, 2], 5), Some((20, 90)));
        assert_eq!(serving_gap(&h, &[1, 2], 96), None);
        assert_eq!(serving_gap(&h, &[3], 0), Some((0, 500)));
    }
}
