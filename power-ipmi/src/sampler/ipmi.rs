//! Node power from the BMC through `ipmitool`, sampled on a background
//! thread and integrated with the trapezoid rule.
//!
//! Timeline of one run: `start` takes reading 0 on the caller's thread (so a
//! BMC that cannot answer fails `start`), a thread then reads every
//! `interval` on a fixed schedule (a slow reading skips the slots it
//! overran instead of drifting), and `stop` takes the last reading on the
//! caller's thread. Each reading is stamped with the middle of its
//! `ipmitool` call, which over a LAN takes tens to hundreds of
//! milliseconds. A failed reading is counted and skipped.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::PowerError;
use crate::ipmitool::{IpmiTool, LanTarget};
use crate::report::{EnergyReport, IpmiReport};
use crate::sampler::{check_idle, not_started, EnergySampler};
use crate::trace::PowerTrace;

/// Which BMC reading is the node's power.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PowerSource {
    /// DCMI Get Power Reading if the BMC supports it and says power
    /// measurement is active; otherwise the sum of `sensors`, or, when
    /// `sensors` is empty, the one sensor of the SDR repository that reads
    /// in Watts (several such sensors are an error: name the right ones).
    Auto {
        /// Sensors to sum when DCMI is not available.
        sensors: Vec<String>,
    },
    /// DCMI Get Power Reading only.
    Dcmi,
    /// The sum of these sensors (`ipmitool sdr get`), each reading in Watts,
    /// e.g. the input power of every power supply.
    Sensors(Vec<String>),
}

/// Settings of an [`IpmiSampler`].
#[derive(Debug, Clone)]
pub struct IpmiConfig {
    /// How to run `ipmitool` and which BMC to ask.
    pub tool: IpmiTool,
    /// Which reading is the node's power.
    pub source: PowerSource,
    /// Time between readings (default 1 s). BMCs refresh their power
    /// reading about once a second, so shorter intervals mostly repeat
    /// values.
    pub interval: Duration,
    /// The idle baseline `P_idle` in Watts; reports then also give power and
    /// energy above idle. Set it with [`IpmiSampler::measure_idle`] or from
    /// an earlier measurement.
    pub idle_watts: Option<f64>,
}

impl IpmiConfig {
    /// The local BMC, DCMI with sensor fallback, 1 Hz.
    pub fn local() -> Self {
        Self::with_tool(IpmiTool::local())
    }

    /// A BMC over the network, DCMI with sensor fallback, 1 Hz.
    pub fn lan(target: LanTarget) -> Self {
        Self::with_tool(IpmiTool::lan(target))
    }

    fn with_tool(tool: IpmiTool) -> Self {
        IpmiConfig {
            tool,
            source: PowerSource::Auto {
                sensors: Vec::new(),
            },
            interval: Duration::from_secs(1),
            idle_watts: None,
        }
    }
}

/// The power source decided at `start`.
#[derive(Debug, Clone)]
enum Resolved {
    Dcmi,
    Sensors(Vec<String>),
}

impl Resolved {
    fn read(&self, tool: &IpmiTool) -> Result<f64, PowerError> {
        match self {
            Resolved::Dcmi => tool.dcmi_power_reading().map(|r| r.watts),
            Resolved::Sensors(names) => tool.sensors_watts(names),
        }
    }

    fn label(&self) -> String {
        match self {
            Resolved::Dcmi => "dcmi".to_owned(),
            Resolved::Sensors(names) => format!("sensor:{}", names.join("+")),
        }
    }
}

/// An idle-power measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IdleBaseline {
    /// Time-weighted mean power, Watts.
    pub watts: f64,
    /// Successful readings it rests on.
    pub samples: usize,
    /// Seconds the readings span.
    pub covered_s: f64,
}

/// Node power from the BMC.
///
/// `start` decides the [`PowerSource`] and takes reading 0 on the caller's
/// thread (a BMC that cannot answer fails `start`); a background thread
/// then reads every `interval` on a fixed schedule (a slow reading skips
/// the slots it overran rather than drifting); `stop` takes the last
/// reading. Each reading is stamped with the middle of its `ipmitool` call;
/// a failed one is counted and skipped, the trapezoid bridging the gap.
///
/// ```no_run
/// use std::time::Duration;
/// use power_ipmi::{EnergySampler, IpmiConfig, IpmiSampler, LanTarget};
///
/// let mut bmc = LanTarget::new("10.0.0.17", "admin", "secret");
/// bmc.cipher_suite = Some(17);
/// let mut ipmi = IpmiSampler::new(IpmiConfig::lan(bmc));
/// let idle = ipmi.measure_idle(Duration::from_secs(30))?; // the node must be idle
/// ipmi.start()?;
/// // ... the run ...
/// let report = ipmi.stop()?;
/// println!("P_idle {:.0} W, {:?} J above idle", idle.watts, report.joules());
/// # Ok::<(), power_ipmi::PowerError>(())
/// ```
#[derive(Debug)]
pub struct IpmiSampler {
    config: IpmiConfig,
    running: Option<Running>,
}

#[derive(Debug)]
struct Running {
    origin: Instant,
    source: Resolved,
    first: (f64, f64),
    stop: Sender<()>,
    thread: JoinHandle<Log>,
}

/// What the background thread collected.
#[derive(Debug, Default)]
struct Log {
    samples: Vec<(f64, f64)>,
    failed: usize,
    last_error: Option<String>,
}

impl Log {
    fn record(&mut self, reading: Result<(f64, f64), PowerError>) {
        match reading {
            Ok(s) => self.samples.push(s),
            Err(e) => {
                self.failed += 1;
                self.last_error = Some(e.to_string());
            }
        }
    }
}

const NAME: &str = "ipmi";

impl IpmiSampler {
    /// A sampler with these settings; nothing runs until `start`.
    pub fn new(config: IpmiConfig) -> Self {
        IpmiSampler {
            config,
            running: None,
        }
    }

    /// The settings.
    pub fn config(&self) -> &IpmiConfig {
        &self.config
    }

    /// Sets (or clears) the idle baseline used by later reports.
    pub fn set_idle_watts(&mut self, watts: Option<f64>) {
        self.config.idle_watts = watts;
    }

    /// Samples for `duration` while the caller keeps the node idle, stores
    /// the mean as the idle baseline `P_idle`, and returns it.
    ///
    /// # Errors
    ///
    /// Those of [`start`](EnergySampler::start) and
    /// [`stop`](EnergySampler::stop).
    pub fn measure_idle(&mut self, duration: Duration) -> Result<IdleBaseline, PowerError> {
        self.start()?;
        std::thread::sleep(duration);
        let report = self.stop_ipmi()?;
        let baseline = IdleBaseline {
            watts: report.mean_watts,
            samples: report.samples,
            covered_s: report.covered_s,
        };
        self.config.idle_watts = Some(baseline.watts);
        Ok(baseline)
    }

    /// Decides the power source and takes the first reading.
    fn resolve(&self, origin: Instant) -> Result<(Resolved, (f64, f64)), PowerError> {
        let tool = &self.config.tool;
        let try_source = |source: Resolved| -> Result<(Resolved, (f64, f64)), PowerError> {
            let reading = sample(tool, &source, origin)?;
            if matches!(source, Resolved::Dcmi) && reading.1 <= 0.0 {
                // A running machine does not draw 0 W: the BMC answers the
                // command without measuring.
                return Err(PowerError::DcmiUnsupported {
                    detail: "the BMC answers DCMI power readings with 0 W".into(),
                });
            }
            Ok((source, reading))
        };
        match &self.config.source {
            PowerSource::Dcmi => try_source(Resolved::Dcmi),
            PowerSource::Sensors(names) => try_source(Resolved::Sensors(check_names(names)?)),
            PowerSource::Auto { sensors } => match try_source(Resolved::Dcmi) {
                Ok(found) => Ok(found),
                Err(
                    dcmi @ (PowerError::DcmiUnsupported { .. }
                    | PowerError::DcmiInactive
                    | PowerError::MissingField { .. }
                    | PowerError::Parse { .. }),
                ) => {
                    let names = if sensors.is_empty() {
                        let found = tool.power_sensors()?;
                        match found.len() {
                            0 => {
                                return Err(PowerError::NoPowerSensor {
                                    dcmi: dcmi.to_string(),
                                })
                            }
                            1 => found,
                            _ => return Err(PowerError::AmbiguousPowerSensors { found }),
                        }
                    } else {
                        check_names(sensors)?
                    };
                    try_source(Resolved::Sensors(names))
                }
                Err(other) => Err(other),
            },
        }
    }
}

fn check_names(names: &[String]) -> Result<Vec<String>, PowerError> {
    if names.is_empty() {
        return Err(PowerError::InvalidConfig {
            setting: "sensors",
            detail: "no sensor named".into(),
        });
    }
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            return Err(PowerError::InvalidConfig {
                setting: "sensors",
                detail: format!("sensor {n:?} named twice"),
            });
        }
    }
    Ok(names.to_vec())
}

/// One reading, stamped with the middle of the `ipmitool` call.
fn sample(tool: &IpmiTool, source: &Resolved, origin: Instant) -> Result<(f64, f64), PowerError> {
    let before = origin.elapsed().as_secs_f64();
    let watts = source.read(tool)?;
    let after = origin.elapsed().as_secs_f64();
    Ok((f64::midpoint(before, after), watts))
}

fn sampling_loop(
    tool: &IpmiTool,
    source: &Resolved,
    origin: Instant,
    interval: Duration,
    stop: &mpsc::Receiver<()>,
) -> Log {
    let mut log = Log::default();
    let mut next = interval;
    loop {
        let wait = next.saturating_sub(origin.elapsed());
        match stop.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return log,
        }
        log.record(sample(tool, source, origin));
        let now = origin.elapsed();
        while next <= now {
            next += interval;
        }
    }
}

impl EnergySampler for IpmiSampler {
    fn name(&self) -> &str {
        NAME
    }

    fn start(&mut self) -> Result<(), PowerError> {
        check_idle(self.running.as_ref(), NAME)?;
        let interval = self.config.interval;
        if interval.is_zero() {
            return Err(PowerError::InvalidConfig {
                setting: "interval",
                detail: "must be more than zero".into(),
            });
        }
        let origin = Instant::now();
        let (source, first) = self.resolve(origin)?;
        let (stop, stop_rx) = mpsc::channel();
        let tool = self.config.tool.clone();
        let thread_source = source.clone();
        let thread = std::thread::Builder::new()
            .name("power-ipmi".into())
            .spawn(move || sampling_loop(&tool, &thread_source, origin, interval, &stop_rx))
            .map_err(|source| PowerError::Spawn {
                sampler: NAME.into(),
                source,
            })?;
        self.running = Some(Running {
            origin,
            source,
            first,
            stop,
            thread,
        });
        Ok(())
    }

    fn stop(&mut self) -> Result<EnergyReport, PowerError> {
        self.stop_ipmi().map(EnergyReport::Ipmi)
    }
}

impl IpmiSampler {
    fn stop_ipmi(&mut self) -> Result<IpmiReport, PowerError> {
        let running = self.running.take().ok_or_else(|| not_started(NAME))?;
        // The thread may already be gone (it only ends on this message).
        let _ = running.stop.send(());
        let mut log = running
            .thread
            .join()
            .map_err(|_| PowerError::SamplerPanicked {
                sampler: NAME.into(),
            })?;
        log.record(sample(&self.config.tool, &running.source, running.origin));
        let elapsed_s = running.origin.elapsed().as_secs_f64();
        let mut trace = PowerTrace::new();
        for (t, w) in std::iter::once(running.first).chain(log.samples) {
            trace.push(t, w);
        }
        if trace.len() < 2 {
            // One reading spans no time: there is no energy to report.
            return Err(PowerError::TooFewReadings {
                sampler: NAME.into(),
                detail: log
                    .last_error
                    .unwrap_or_else(|| "one reading spans no time".into()),
            });
        }
        Ok(IpmiReport::from_trace(
            running.source.label(),
            elapsed_s,
            trace,
            log.failed,
            log.last_error,
            self.config.idle_watts,
        ))
    }
}

impl Drop for IpmiSampler {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            let _ = running.stop.send(());
            let _ = running.thread.join();
        }
    }
}
