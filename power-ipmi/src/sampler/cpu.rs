//! CPU time of a process and its threads from `/proc` — the proxy for
//! energy that is always available on Linux.
//!
//! `/proc/PID/stat` holds `utime` and `stime` (fields 14 and 15, in clock
//! ticks) summed over all the process's threads, including threads that
//! have exited; `/proc/PID/task/TID/stat` holds the same for one thread.
//! Ticks are converted with `sysconf(_SC_CLK_TCK)` (100 on Linux), so the
//! resolution is 10 ms.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::error::{read_text, PowerError};
use crate::report::{CpuTimeReport, EnergyReport, ThreadCpuTime};
use crate::sampler::{check_idle, not_started, EnergySampler};

/// Clock ticks per second, the unit of `/proc` CPU times
/// (`sysconf(_SC_CLK_TCK)`).
///
/// # Errors
///
/// [`PowerError::ClockTicks`] if `sysconf` fails or gives no positive value.
pub fn clock_ticks_per_second() -> Result<u64, PowerError> {
    use nix::unistd::{sysconf, SysconfVar};
    match sysconf(SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => u64::try_from(t).map_err(|e| PowerError::ClockTicks(e.to_string())),
        Ok(other) => Err(PowerError::ClockTicks(format!(
            "sysconf(_SC_CLK_TCK) gave {other:?}"
        ))),
        Err(e) => Err(PowerError::ClockTicks(e.to_string())),
    }
}

/// User and kernel CPU time.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CpuTimes {
    /// User-mode CPU-seconds.
    pub user_s: f64,
    /// Kernel-mode CPU-seconds.
    pub system_s: f64,
}

impl CpuTimes {
    /// `user_s + system_s`.
    pub fn cpu_s(&self) -> f64 {
        self.user_s + self.system_s
    }
}

/// The fields of a `/proc/.../stat` line that matter here.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stat {
    comm: String,
    utime: u64,
    stime: u64,
}

/// Parses a `/proc/PID/stat` or `/proc/PID/task/TID/stat` line. The command
/// name (field 2) is in parentheses and may itself hold spaces and
/// parentheses, so fields are counted from the last `)`.
fn parse_stat(line: &str) -> Result<Stat, PowerError> {
    let bad = || PowerError::parse("/proc stat line", line.trim_end());
    let open = line.find('(').ok_or_else(bad)?;
    let close = line.rfind(')').ok_or_else(bad)?;
    let comm = line.get(open + 1..close).ok_or_else(bad)?.to_owned();
    // After `)`: state (field 3), ppid (4), ... utime (14), stime (15).
    let rest: Vec<&str> = line[close + 1..].split_whitespace().collect();
    let field = |n: usize| -> Result<u64, PowerError> {
        rest.get(n - 3).and_then(|v| v.parse().ok()).ok_or_else(bad)
    };
    Ok(Stat {
        comm,
        utime: field(14)?,
        stime: field(15)?,
    })
}

fn read_stat(path: &Path) -> Result<Stat, PowerError> {
    parse_stat(&read_text(path)?)
}

fn to_times(stat: &Stat, ticks: u64) -> CpuTimes {
    let t = ticks as f64;
    CpuTimes {
        user_s: stat.utime as f64 / t,
        system_s: stat.stime as f64 / t,
    }
}

/// CPU time of process `pid` so far, all threads (living and exited).
///
/// # Errors
///
/// [`PowerError::Io`] if the process does not exist, [`PowerError::Parse`]
/// on an unexpected stat line, [`PowerError::ClockTicks`].
pub fn process_cpu_times(pid: i32) -> Result<CpuTimes, PowerError> {
    let stat = read_stat(&Path::new("/proc").join(pid.to_string()).join("stat"))?;
    Ok(to_times(&stat, clock_ticks_per_second()?))
}

/// CPU time of thread `tid` of process `pid` so far.
///
/// # Errors
///
/// As [`process_cpu_times`].
pub fn thread_cpu_times(pid: i32, tid: i32) -> Result<CpuTimes, PowerError> {
    let path = Path::new("/proc")
        .join(pid.to_string())
        .join("task")
        .join(tid.to_string())
        .join("stat");
    Ok(to_times(&read_stat(&path)?, clock_ticks_per_second()?))
}

/// CPU time of the calling process or thread so far, from `getrusage(2)`,
/// whose microseconds resolve the short spans a benchmark node or a job
/// task measures, where `/proc`'s 10 ms ticks would not.
fn own_cpu_times(who: nix::sys::resource::UsageWho) -> Result<CpuTimes, PowerError> {
    let usage =
        nix::sys::resource::getrusage(who).map_err(|e| PowerError::Rusage(e.to_string()))?;
    let secs = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 * 1e-6;
    Ok(CpuTimes {
        user_s: secs(usage.user_time()),
        system_s: secs(usage.system_time()),
    })
}

/// CPU time of the calling process so far, every thread of it (living
/// and exited).
///
/// # Errors
///
/// [`PowerError::Rusage`] if `getrusage` fails.
pub fn own_process_cpu_times() -> Result<CpuTimes, PowerError> {
    own_cpu_times(nix::sys::resource::UsageWho::RUSAGE_SELF)
}

/// CPU time of the calling thread so far.
///
/// # Errors
///
/// [`PowerError::Rusage`] if `getrusage` fails.
pub fn own_thread_cpu_times() -> Result<CpuTimes, PowerError> {
    own_cpu_times(nix::sys::resource::UsageWho::RUSAGE_THREAD)
}

#[derive(Debug)]
struct Snapshot {
    at: Instant,
    process: Stat,
    threads: BTreeMap<i32, Stat>,
}

/// CPU time of one process over a run, and per thread if asked.
///
/// ```
/// use power_ipmi::{CpuTimeSampler, EnergySampler};
///
/// let mut cpu = CpuTimeSampler::this_process();
/// cpu.start()?;
/// let mut x = 0u64;
/// for i in 0..1_000_000u64 { x = x.wrapping_mul(31).wrapping_add(i); }
/// std::hint::black_box(x);
/// let report = cpu.stop()?;
/// if let Some(per_op) = report.per_operation(1_000_000) {
///     assert!(per_op.cpu_seconds.unwrap() >= 0.0);
/// }
/// # Ok::<(), power_ipmi::PowerError>(())
/// ```
#[derive(Debug)]
pub struct CpuTimeSampler {
    pid: i32,
    per_thread: bool,
    ticks: Option<u64>,
    start: Option<Snapshot>,
}

const NAME: &str = "cpu";

impl CpuTimeSampler {
    /// The calling process, with per-thread times.
    pub fn this_process() -> Self {
        // Linux pids fit in i32 (pid_max ≤ 2^22).
        Self::for_pid(i32::try_from(std::process::id()).unwrap_or(i32::MAX))
    }

    /// Process `pid`, with per-thread times.
    pub fn for_pid(pid: i32) -> Self {
        CpuTimeSampler {
            pid,
            per_thread: true,
            ticks: None,
            start: None,
        }
    }

    /// Whether reports list each thread (default true).
    #[must_use]
    pub fn per_thread(mut self, on: bool) -> Self {
        self.per_thread = on;
        self
    }

    /// The process measured.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    fn proc_dir(&self) -> PathBuf {
        Path::new("/proc").join(self.pid.to_string())
    }

    fn snapshot(&self) -> Result<Snapshot, PowerError> {
        let dir = self.proc_dir();
        let process = read_stat(&dir.join("stat"))?;
        let mut threads = BTreeMap::new();
        if self.per_thread {
            let task = dir.join("task");
            let entries = std::fs::read_dir(&task).map_err(|e| PowerError::io(&task, e))?;
            for entry in entries.filter_map(Result::ok) {
                let Some(tid) = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| n.parse::<i32>().ok())
                else {
                    continue;
                };
                // A thread that exits between the listing and the read is
                // simply not there any more.
                if let Ok(stat) = read_stat(&entry.path().join("stat")) {
                    threads.insert(tid, stat);
                }
            }
        }
        Ok(Snapshot {
            at: Instant::now(),
            process,
            threads,
        })
    }
}

impl EnergySampler for CpuTimeSampler {
    fn name(&self) -> &str {
        NAME
    }

    fn start(&mut self) -> Result<(), PowerError> {
        check_idle(self.start.as_ref(), NAME)?;
        if self.ticks.is_none() {
            self.ticks = Some(clock_ticks_per_second()?);
        }
        self.start = Some(self.snapshot()?);
        Ok(())
    }

    fn stop(&mut self) -> Result<EnergyReport, PowerError> {
        let (Some(start), Some(ticks)) = (self.start.take(), self.ticks) else {
            return Err(not_started(NAME));
        };
        let end = self.snapshot()?;
        let t = ticks as f64;
        let secs = |a: u64, b: u64| b.saturating_sub(a) as f64 / t;
        let user_s = secs(start.process.utime, end.process.utime);
        let system_s = secs(start.process.stime, end.process.stime);
        let threads = end
            .threads
            .iter()
            .map(|(&tid, stat)| {
                let before = start.threads.get(&tid);
                let (u0, s0) = before.map_or((0, 0), |b| (b.utime, b.stime));
                let user_s = secs(u0, stat.utime);
                let system_s = secs(s0, stat.stime);
                ThreadCpuTime {
                    tid,
                    name: stat.comm.clone(),
                    user_s,
                    system_s,
                    cpu_s: user_s + system_s,
                    started_during_run: before.is_none(),
                }
            })
            .collect();
        Ok(EnergyReport::CpuTime(CpuTimeReport {
            pid: self.pid,
            elapsed_s: end.at.duration_since(start.at).as_secs_f64(),
            ticks_per_second: ticks,
            user_s,
            system_s,
            cpu_s: user_s + system_s,
            threads,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_line_with_odd_command_name() {
        let line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    1234 56 7 8 20 0 3 0 999 0 0\n";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.comm, "a) b (c)");
        assert_eq!((s.utime, s.stime), (1234, 56));
    }

    #[test]
    fn bad_stat_lines_are_typed_errors() {
        for line in [
            "",
            "12 noparen S 1",
            "12 (x) S 1 2",
            "12 (x) S 1 2 3 4 5 6 7 8 9 10 x 5",
        ] {
            match parse_stat(line) {
                Err(PowerError::Parse { line: l, .. }) => assert_eq!(l, line),
                other => panic!("{line:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn own_cpu_time_is_readable_both_ways() {
        // Spin until the kernel has accounted some CPU time to this process
        // (ticks of 10 ms; on a loaded host 30 ms of wall time may bring
        // none); a reader that always says 0 fails after 10 s.
        let spin = Instant::now();
        let pid = i32::try_from(std::process::id()).unwrap();
        loop {
            let from_proc = process_cpu_times(pid).unwrap().cpu_s();
            if from_proc > 0.0 {
                assert!(from_proc.is_finite());
                break;
            }
            assert!(
                spin.elapsed() < std::time::Duration::from_secs(10),
                "no CPU time accounted"
            );
            let busy = Instant::now();
            while busy.elapsed() < std::time::Duration::from_millis(5) {}
        }
        let process = own_process_cpu_times().unwrap().cpu_s();
        let thread = own_thread_cpu_times().unwrap().cpu_s();
        assert!(process > 0.0 && thread > 0.0 && thread <= process + 1e-6);
    }

    #[test]
    fn ticks_are_positive() {
        assert!(clock_ticks_per_second().unwrap() > 0);
    }
}
