//! # power-ipmi
//!
//! Energy measurement for the Nessie harness's `energy` experiment, after
//! the paper's §6.3 (power of every node read through IPMI while the stores
//! run at 5–100% of peak load, compared against an idle machine). Three
//! sources sit behind one [`EnergySampler`] trait, and each reports only
//! what it measured — a source that cannot measure here fails with a typed
//! [`PowerError`], which a [`MeterSet`] turns into
//! [`Measurement::Unavailable`] with the reason. No number is ever made up.
//!
//! | sampler | measures | needs |
//! |---|---|---|
//! | [`IpmiSampler`] | the node's wall power from its BMC (DCMI, or power sensors), integrated to Joules; power above an idle baseline | `ipmitool`; a local BMC (root) or a BMC over LAN |
//! | [`RaplSampler`] | CPU package and DRAM energy counters, per zone | Linux powercap; root since Linux 5.10 |
//! | [`CpuTimeSampler`] | CPU-seconds of a process and of each thread | Linux `/proc` (always there) |
//!
//! ```no_run
//! use std::time::Duration;
//! use power_ipmi::{
//!     CpuTimeSampler, IpmiConfig, IpmiSampler, LanTarget, Measurement, MeterSet, RaplSampler,
//! };
//!
//! let mut ipmi = IpmiSampler::new(IpmiConfig::lan(LanTarget::new("bmc-17", "admin", "secret")));
//! ipmi.measure_idle(Duration::from_secs(30))?; // P_idle, with the node idle
//! let mut meters = MeterSet::new()
//!     .with(ipmi)
//!     .with(RaplSampler::system())
//!     .with(CpuTimeSampler::this_process());
//! meters.start();
//! let operations = 1_000_000; // ... the run ...
//! for outcome in meters.stop() {
//!     match outcome.measurement {
//!         Measurement::Measured(report) => {
//!             println!("{}: {:?} J, per op {:?}", outcome.sampler, report.joules(),
//!                      report.per_operation(operations));
//!         }
//!         Measurement::Unavailable(why) => println!("{}: unavailable: {why}", outcome.sampler),
//!     }
//! }
//! # Ok::<(), power_ipmi::PowerError>(())
//! ```
//!
//! ## Architecture
//!
//! * `sampler` — the [`EnergySampler`] trait (`start` takes a first reading
//!   so that a source that does not work fails before the run; `stop`
//!   returns an [`EnergyReport`]) and [`MeterSet`]. One file per sampler:
//!   * `sampler/ipmi.rs` — [`IpmiSampler`]: decides the [`PowerSource`] at
//!     `start` (DCMI Get Power Reading if the BMC supports it and says
//!     measurement is active, else named sensors, else the one sensor
//!     reading in Watts), reads every `interval` (1 s) on a background
//!     thread on a fixed schedule, stamps each reading with the middle of
//!     its `ipmitool` call, integrates with the trapezoid rule, and
//!     subtracts an idle baseline measured by
//!     [`IpmiSampler::measure_idle`].
//!   * `sampler/rapl.rs` — [`RaplSampler`]: finds `intel-rapl:*` zones and
//!     subzones (flat or nested layout) under a configurable powercap root,
//!     reads `energy_uj` at start, every `poll_interval` and at stop, and
//!     adds deltas with wrap-around at `max_energy_range_uj`
//!     ([`counter_delta_uj`]).
//!   * `sampler/cpu.rs` — [`CpuTimeSampler`]: `utime + stime` of
//!     `/proc/PID/stat` and of every `/proc/PID/task/TID/stat`, in ticks of
//!     `sysconf(_SC_CLK_TCK)`; [`own_process_cpu_times`] and
//!     [`own_thread_cpu_times`] for the calling process and thread, from
//!     `getrusage`. The harness and the jobs read CPU time only here.
//! * `ipmitool` — [`IpmiTool`]: builds `ipmitool` command lines for a local
//!   or LAN BMC (password through the environment, not argv), runs them
//!   with a time limit, and parses `dcmi power reading`, `sdr get` and
//!   `sdr list` output into typed results.
//! * `trace` — [`PowerTrace`]: timestamped Watts and their trapezoid
//!   integral.
//! * `report` — [`EnergyReport`] and its per-source reports (all
//!   `serde::Serialize`), [`PerOperation`], and [`above_idle_saving`], the
//!   paper's "% less power above idle" figure.
//! * [`logs`] — the CSV logs of `scripts/sample.sh` and their merge into
//!   one table with per-node and total Joules (the `power-merge` binary).
//!
//! ## Scripts
//!
//! `scripts/sample.sh` samples IPMI (and RAPL) around any command on a node
//! and logs CSV; `power-merge DIR...` merges the logs of all nodes. See
//! docs/operations.md#energy-measurement.
//!
//! ## Thread safety
//!
//! Samplers are `Send` (they can be moved to the thread that runs the
//! experiment) but are driven through `&mut self`. The IPMI and RAPL
//! samplers own one background thread each while started; dropping a
//! started sampler stops and joins it.

#![deny(missing_docs)]

mod error;
mod ipmitool;
pub mod logs;
mod report;
mod sampler;
mod trace;

pub use error::PowerError;
pub use ipmitool::{
    parse_dcmi_power_reading, DcmiReading, IpmiTarget, IpmiTool, LanTarget, SensorReading,
    ToolOutput,
};
pub use report::{
    above_idle_saving, CpuTimeReport, EnergyReport, IpmiReport, PerOperation, RaplReport,
    RaplZoneEnergy, ThreadCpuTime,
};
pub use sampler::cpu::{
    clock_ticks_per_second, own_process_cpu_times, own_thread_cpu_times, process_cpu_times,
    thread_cpu_times, CpuTimeSampler, CpuTimes,
};
pub use sampler::ipmi::{IdleBaseline, IpmiConfig, IpmiSampler, PowerSource};
pub use sampler::rapl::{
    counter_delta_uj, discover_rapl_zones, RaplConfig, RaplSampler, RaplZone, POWERCAP_ROOT,
};
pub use sampler::{EnergySampler, Measurement, MeterSet, Outcome};
pub use trace::{PowerSample, PowerTrace};
