//! Histories recorded by separate OS processes: one line per invocation and
//! per response, flushed before the operation starts, so a process killed
//! with SIGKILL leaves its in-flight operation as an unknown outcome. A call
//! the store refused without doing anything (a view change, no quorum) is
//! marked so and left out of the history.
//!
//! Timestamps are wall-clock nanoseconds, which all processes of one host
//! share.

use crate::history::{Call, History, Operation, Ret};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

/// Wall-clock time, ns since the Unix epoch: the time base of every log
/// (and of the marks the process scenarios compare with them).
#[must_use]
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2 + 1);
    s.push('x');
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let s = s.strip_prefix('x')?;
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Appends one client's operations to a log file.
#[derive(Debug)]
pub struct ProcLog {
    file: File,
    client: u64,
    next: u64,
}

impl ProcLog {
    /// A log for `client` at `path` (created or truncated).
    ///
    /// # Errors
    /// I/O errors.
    pub fn create(path: &Path, client: u64) -> std::io::Result<ProcLog> {
        Ok(ProcLog {
            file: File::create(path)?,
            client,
            next: 0,
        })
    }

    /// Logs an invocation (flushed before returning); returns its id.
    ///
    /// # Errors
    /// I/O errors.
    pub fn invoke(&mut self, call: &Call) -> std::io::Result<u64> {
        let id = self.next;
        self.next += 1;
        let line = match call {
            Call::Get(k) => format!("I {} {id} {} get {}\n", self.client, now_ns(), hex(k)),
            Call::Put(k, v) => format!(
                "I {} {id} {} put {} {}\n",
                self.client,
                now_ns(),
                hex(k),
                hex(v)
            ),
            Call::Delete(k) => format!("I {} {id} {} del {}\n", self.client, now_ns(), hex(k)),
        };
        self.file.write_all(line.as_bytes())?;
        Ok(id)
    }

    /// Logs the response of invocation `id`.
    ///
    /// # Errors
    /// I/O errors.
    pub fn returned(&mut self, id: u64, ret: &Ret) -> std::io::Result<()> {
        let what = match ret {
            Ret::Get(None) => "none".to_string(),
            Ret::Get(Some(v)) => format!("some {}", hex(v)),
            Ret::Put => "ok".to_string(),
            Ret::Delete(b) => format!("del {b}"),
        };
        let line = format!("R {} {id} {} {what}\n", self.client, now_ns());
        self.file.write_all(line.as_bytes())
    }

    /// Logs that invocation `id` was refused and did nothing (the store
    /// said so: `ViewChanging`, `NoQuorum`): [`read_logs`] drops it.
    ///
    /// # Errors
    /// I/O errors.
    pub fn refused(&mut self, id: u64) -> std::io::Result<()> {
        let line = format!("N {} {id} {}\n", self.client, now_ns());
        self.file.write_all(line.as_bytes())
    }
}

/// Reads every log in `dir` whose name starts with `hist-` into one
/// history. Invocations without a response are unknown outcomes, refused
/// ones ([`ProcLog::refused`]) are left out; a torn last line (the writer
/// was killed mid-write) is ignored.
///
/// # Errors
/// I/O errors.
pub fn read_logs(dir: &Path) -> std::io::Result<History> {
    let mut history = History::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if !path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("hist-"))
        {
            continue;
        }
        let mut calls: HashMap<(u64, u64), (Call, u64)> = HashMap::new();
        let mut order = Vec::new();
        let mut rets: HashMap<(u64, u64), (Ret, u64)> = HashMap::new();
        for line in BufReader::new(File::open(&path)?).lines() {
            let line = line?;
            let f: Vec<&str> = line.split(' ').collect();
            let parse = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok());
            match (f.first().copied(), parse(1), parse(2), parse(3)) {
                (Some("I"), Some(c), Some(id), Some(t)) => {
                    let call = match (f.get(4).copied(), f.get(5).and_then(|s| unhex(s))) {
                        (Some("get"), Some(k)) => Call::Get(k),
                        (Some("del"), Some(k)) => Call::Delete(k),
                        (Some("put"), Some(k)) => match f.get(6).and_then(|s| unhex(s)) {
                            Some(v) => Call::Put(k, v),
                            None => continue,
                        },
                        _ => continue,
                    };
                    calls.insert((c, id), (call, t));
                    order.push((c, id));
                }
                (Some("R"), Some(c), Some(id), Some(t)) => {
                    let ret = match (f.get(4).copied(), f.get(5).copied()) {
                        (Some("none"), _) => Ret::Get(None),
                        (Some("some"), Some(v)) => match unhex(v) {
                            Some(v) => Ret::Get(Some(v)),
                            None => continue,
                        },
                        (Some("ok"), _) => Ret::Put,
                        (Some("del"), Some(b)) => Ret::Delete(b == "true"),
                        _ => continue,
                    };
                    rets.insert((c, id), (ret, t));
                }
                (Some("N"), Some(c), Some(id), Some(_)) => {
                    calls.remove(&(c, id));
                }
                _ => {}
            }
        }
        for key in order {
            // Every key of `order` was recorded in `calls`, once.
            let Some((call, invoked)) = calls.remove(&key) else {
                continue;
            };
            history.push(match rets.remove(&key) {
                Some((ret, at)) => Operation::returned(key.0, call, invoked, at.max(invoked), ret),
                None => Operation::unknown(key.0, call, invoked),
            });
        }
    }
    Ok(history)
}

/// Whether the log at `path` ends with an invocation: its client has an
/// operation in flight (if its process is stopped, the log cannot change).
#[must_use]
pub fn ends_in_flight(path: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = File::open(path) else {
        return false;
    };
    // The last line is short; read only the tail.
    let len = file.metadata().map_or(0, |m| m.len());
    if file
        .seek(SeekFrom::Start(len.saturating_sub(4096)))
        .is_err()
    {
        return false;
    }
    let mut tail = String::new();
    if file.read_to_string(&mut tail).is_err() {
        return false;
    }
    tail.lines().last().is_some_and(|l| l.starts_with("I "))
}

/// Stops process `pid` (SIGSTOP, and waits until it is stopped) at a moment
/// when one of the logs `logs` ends with an invocation, so that a kill or a
/// stall lands inside an operation: when a stop finds every client between
/// operations, resumes the process for `resume_for` and tries again, at
/// most `tries` times. The process is left stopped either way; returns
/// whether an operation is in flight.
///
/// # Errors
/// When the process cannot be signalled or waited for (it is gone).
pub fn stop_mid_operation(
    pid: nix::unistd::Pid,
    logs: &[std::path::PathBuf],
    tries: usize,
    resume_for: std::time::Duration,
) -> nix::Result<bool> {
    use nix::sys::signal::{kill, Signal};
    use nix::sys::wait::{waitpid, WaitPidFlag};
    for attempt in 0..tries.max(1) {
        if attempt > 0 {
            kill(pid, Signal::SIGCONT)?;
            std::thread::sleep(resume_for);
        }
        kill(pid, Signal::SIGSTOP)?;
        waitpid(pid, Some(WaitPidFlag::WUNTRACED))?;
        if logs.iter().any(|l| ends_in_flight(l)) {
            return Ok(true);
        }
    }
    Ok(false)
}
