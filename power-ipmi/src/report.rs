//! What the samplers measured.

use serde::Serialize;

use crate::trace::PowerTrace;

/// The measurement of one sampler over one `start`–`stop` run.
///
/// Each kind says what its source can say and nothing more: IPMI gives the
/// node's wall power, RAPL the energy counters of the CPU packages and DRAM,
/// CPU time the seconds the process spent on a CPU (no energy at all).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EnergyReport {
    /// Node power from the BMC.
    Ipmi(IpmiReport),
    /// RAPL energy counters.
    Rapl(RaplReport),
    /// CPU time of a process and its threads.
    CpuTime(CpuTimeReport),
}

impl EnergyReport {
    /// Wall-clock seconds from `start` to `stop`.
    pub fn elapsed_s(&self) -> f64 {
        match self {
            EnergyReport::Ipmi(r) => r.elapsed_s,
            EnergyReport::Rapl(r) => r.elapsed_s,
            EnergyReport::CpuTime(r) => r.elapsed_s,
        }
    }

    /// Energy in Joules, when the source measures energy: the integral of
    /// the IPMI readings, or RAPL's [`total_joules`](RaplReport::total_joules).
    pub fn joules(&self) -> Option<f64> {
        match self {
            EnergyReport::Ipmi(r) => Some(r.joules),
            EnergyReport::Rapl(r) => Some(r.total_joules()),
            EnergyReport::CpuTime(_) => None,
        }
    }

    /// CPU-seconds (user + system), when the source measures CPU time.
    pub fn cpu_seconds(&self) -> Option<f64> {
        match self {
            EnergyReport::CpuTime(r) => Some(r.cpu_s),
            _ => None,
        }
    }

    /// Divides what was measured by the number of operations the run
    /// performed; `None` for zero operations.
    ///
    /// ```
    /// # use power_ipmi::{EnergyReport, CpuTimeReport};
    /// # fn f(report: EnergyReport) {
    /// if let Some(per_op) = report.per_operation(1_000_000) {
    ///     println!("{:?} CPU-s/op, {:?} J/op", per_op.cpu_seconds, per_op.joules);
    /// }
    /// # }
    /// ```
    pub fn per_operation(&self, operations: u64) -> Option<PerOperation> {
        if operations == 0 {
            return None;
        }
        let n = operations as f64;
        let above_idle = match self {
            EnergyReport::Ipmi(r) => r.above_idle_joules,
            _ => None,
        };
        Some(PerOperation {
            operations,
            joules: self.joules().map(|j| j / n),
            above_idle_joules: above_idle.map(|j| j / n),
            cpu_seconds: self.cpu_seconds().map(|s| s / n),
        })
    }
}

/// A report divided by an operation count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PerOperation {
    /// The operation count divided by.
    pub operations: u64,
    /// Joules per operation, when energy was measured.
    pub joules: Option<f64>,
    /// Joules above idle per operation, when an idle baseline was set.
    pub above_idle_joules: Option<f64>,
    /// CPU-seconds per operation, when CPU time was measured.
    pub cpu_seconds: Option<f64>,
}

/// Node power read from the BMC, integrated over the run.
#[derive(Debug, Clone, Serialize)]
pub struct IpmiReport {
    /// Where readings came from: `dcmi`, or `sensor:NAME[+NAME...]`.
    pub source: String,
    /// Wall-clock seconds from `start` to `stop`.
    pub elapsed_s: f64,
    /// Seconds from the first to the last successful reading; the energy
    /// covers this span (normally `elapsed_s` minus well under a second).
    pub covered_s: f64,
    /// Successful readings.
    pub samples: usize,
    /// Readings that failed and were skipped (the trapezoid bridges them).
    pub failed_samples: usize,
    /// The last failure's message, if any reading failed.
    pub last_error: Option<String>,
    /// Energy over `covered_s`, Joules (trapezoid rule).
    pub joules: f64,
    /// Time-weighted mean power, Watts.
    pub mean_watts: f64,
    /// Lowest reading, Watts.
    pub min_watts: f64,
    /// Highest reading, Watts.
    pub max_watts: f64,
    /// The idle baseline `P_idle` in force, Watts.
    pub idle_watts: Option<f64>,
    /// `mean_watts − P_idle`.
    pub above_idle_watts: Option<f64>,
    /// `joules − P_idle · covered_s`.
    pub above_idle_joules: Option<f64>,
    /// Every successful reading, seconds since `start`.
    pub trace: PowerTrace,
}

impl IpmiReport {
    pub(crate) fn from_trace(
        source: String,
        elapsed_s: f64,
        trace: PowerTrace,
        failed_samples: usize,
        last_error: Option<String>,
        idle_watts: Option<f64>,
    ) -> Self {
        let joules = trace.joules();
        let covered_s = trace.covered_s();
        let mean_watts = trace.mean_watts().unwrap_or(0.0);
        IpmiReport {
            source,
            elapsed_s,
            covered_s,
            samples: trace.len(),
            failed_samples,
            last_error,
            joules,
            mean_watts,
            min_watts: trace.min_watts().unwrap_or(0.0),
            max_watts: trace.max_watts().unwrap_or(0.0),
            idle_watts,
            above_idle_watts: idle_watts.map(|idle| mean_watts - idle),
            above_idle_joules: idle_watts.map(|idle| joules - idle * covered_s),
            trace,
        }
    }
}

/// Energy of each RAPL zone over the run.
#[derive(Debug, Clone, Serialize)]
pub struct RaplReport {
    /// Wall-clock seconds from `start` to `stop`.
    pub elapsed_s: f64,
    /// Every zone that was read, parents before their subzones.
    pub zones: Vec<RaplZoneEnergy>,
    /// Counter reads (start, background polls, stop).
    pub polls: u64,
    /// Background polls that failed (a later poll covers their span unless
    /// a counter wrapped twice in between).
    pub failed_polls: u64,
    /// The last failure's message, if any poll failed.
    pub last_error: Option<String>,
}

impl RaplReport {
    /// Package plus DRAM energy: the top-level `package-N` zones and the
    /// `dram` zones. Subzones `core` and `uncore` are already inside their
    /// package, and `psys` (the whole platform, where present) overlaps the
    /// packages, so they are reported per zone only.
    pub fn total_joules(&self) -> f64 {
        self.zones
            .iter()
            .filter(|z| (z.parent.is_none() && z.name.starts_with("package")) || z.name == "dram")
            .map(|z| z.joules)
            .sum()
    }
}

/// One RAPL zone's energy over the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RaplZoneEnergy {
    /// The zone's directory name (`intel-rapl:0:1`).
    pub id: String,
    /// The zone's `name` file (`package-0`, `core`, `uncore`, `dram`, `psys`).
    pub name: String,
    /// The parent zone's id, for subzones.
    pub parent: Option<String>,
    /// Energy, Joules.
    pub joules: f64,
    /// How many times the counter wrapped past `max_energy_range_uj`.
    pub wraps: u32,
}

/// CPU time of one process (all its threads, including those that exited)
/// and of each thread alive at `stop`.
#[derive(Debug, Clone, Serialize)]
pub struct CpuTimeReport {
    /// The process measured.
    pub pid: i32,
    /// Wall-clock seconds from `start` to `stop`.
    pub elapsed_s: f64,
    /// Clock ticks per second (`sysconf(_SC_CLK_TCK)`); CPU times are whole
    /// ticks, so anything under a few ticks is noise.
    pub ticks_per_second: u64,
    /// User-mode CPU-seconds.
    pub user_s: f64,
    /// Kernel-mode CPU-seconds.
    pub system_s: f64,
    /// `user_s + system_s`.
    pub cpu_s: f64,
    /// Per thread alive at `stop` (empty unless per-thread sampling is on).
    pub threads: Vec<ThreadCpuTime>,
}

impl CpuTimeReport {
    /// Average number of CPUs kept busy: `cpu_s / elapsed_s`.
    pub fn utilization(&self) -> f64 {
        if self.elapsed_s > 0.0 {
            self.cpu_s / self.elapsed_s
        } else {
            0.0
        }
    }
}

/// One thread's CPU time over the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThreadCpuTime {
    /// Thread id.
    pub tid: i32,
    /// The thread's name (`comm`).
    pub name: String,
    /// User-mode CPU-seconds.
    pub user_s: f64,
    /// Kernel-mode CPU-seconds.
    pub system_s: f64,
    /// `user_s + system_s`.
    pub cpu_s: f64,
    /// The thread did not exist at `start`; its whole life is counted.
    pub started_during_run: bool,
}

/// The paper's comparison of two systems' power at the same load,
/// relative to idle (§6.3, Fig. 14): how much of the baseline's power above
/// idle the candidate saves, `(P_base − P_cand) / (P_base − P_idle)`.
///
/// `None` when the baseline is not above idle.
///
/// ```
/// use power_ipmi::above_idle_saving;
///
/// // Fig. 14: idle 81 W. At 80% load NessieSD draws 130 W and Nessie 121 W;
/// // at 20% load, 113 W and 100 W.
/// let at_80 = above_idle_saving(130.0, 121.0, 81.0).unwrap();
/// let at_20 = above_idle_saving(113.0, 100.0, 81.0).unwrap();
/// assert_eq!((at_80 * 100.0).round(), 18.0);
/// assert_eq!((at_20 * 100.0).round(), 41.0);
/// ```
pub fn above_idle_saving(
    baseline_watts: f64,
    candidate_watts: f64,
    idle_watts: f64,
) -> Option<f64> {
    let above = baseline_watts - idle_watts;
    (above > 0.0).then(|| (baseline_watts - candidate_watts) / above)
}
