//! The sampler trait, its three implementations, and a set that runs several
//! at once.

use serde::Serialize;

use crate::error::PowerError;
use crate::report::EnergyReport;

pub(crate) mod cpu;
pub(crate) mod ipmi;
pub(crate) mod rapl;

/// A source of energy (or CPU time) measurements over a run.
///
/// The life of a sampler is `start`, the work to measure, `stop`, as many
/// times as wanted. `start` checks that the source works here — it takes a
/// first reading — so a missing tool, a BMC without power readings or an
/// unreadable counter shows up before the work begins, as a typed error.
/// Nothing is ever estimated: a source that cannot measure fails instead.
pub trait EnergySampler: Send {
    /// A short name for reports and logs (`ipmi`, `rapl`, `cpu`).
    fn name(&self) -> &str;

    /// Takes the first reading and starts sampling in the background where
    /// the source needs it.
    ///
    /// # Errors
    ///
    /// Why the source cannot measure here, or
    /// [`PowerError::AlreadyStarted`].
    fn start(&mut self) -> Result<(), PowerError>;

    /// Takes the last reading, stops background sampling and reports the
    /// run since `start`. The sampler can then be started again.
    ///
    /// # Errors
    ///
    /// [`PowerError::NotStarted`], or why the last reading failed.
    fn stop(&mut self) -> Result<EnergyReport, PowerError>;
}

/// What one sampler of a [`MeterSet`] yielded for a run.
#[derive(Debug, Serialize)]
#[serde(tag = "status", content = "value", rename_all = "snake_case")]
pub enum Measurement {
    /// The source measured this.
    Measured(EnergyReport),
    /// The source could not measure here; the reason.
    Unavailable(String),
}

/// One sampler's name and what it yielded.
#[derive(Debug, Serialize)]
pub struct Outcome {
    /// The sampler's [`name`](EnergySampler::name).
    pub sampler: String,
    /// Its report, or why there is none.
    pub measurement: Measurement,
}

/// Several samplers started and stopped together; a sampler that cannot
/// measure is reported as [`Measurement::Unavailable`] and does not stop the
/// others.
///
/// ```no_run
/// use power_ipmi::{CpuTimeSampler, IpmiConfig, IpmiSampler, MeterSet, RaplSampler};
///
/// let mut meters = MeterSet::new()
///     .with(IpmiSampler::new(IpmiConfig::local()))
///     .with(RaplSampler::system())
///     .with(CpuTimeSampler::this_process());
/// meters.start();
/// // ... the run ...
/// for outcome in meters.stop() {
///     println!("{}: {:?}", outcome.sampler, outcome.measurement);
/// }
/// ```
#[derive(Default)]
pub struct MeterSet {
    slots: Vec<Slot>,
}

struct Slot {
    sampler: Box<dyn EnergySampler>,
    start_error: Option<String>,
}

impl std::fmt::Debug for MeterSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.slots.iter().map(|s| s.sampler.name()))
            .finish()
    }
}

impl MeterSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a sampler.
    #[must_use]
    pub fn with(mut self, sampler: impl EnergySampler + 'static) -> Self {
        self.push(Box::new(sampler));
        self
    }

    /// Adds a boxed sampler.
    pub fn push(&mut self, sampler: Box<dyn EnergySampler>) {
        self.slots.push(Slot {
            sampler,
            start_error: None,
        });
    }

    /// Starts every sampler, remembering which could not start.
    pub fn start(&mut self) {
        for slot in &mut self.slots {
            slot.start_error = slot.sampler.start().err().map(|e| e.to_string());
        }
    }

    /// Stops every sampler and returns what each yielded, in the order they
    /// were added.
    pub fn stop(&mut self) -> Vec<Outcome> {
        self.slots
            .iter_mut()
            .map(|slot| {
                let measurement = match slot.start_error.take() {
                    Some(reason) => Measurement::Unavailable(reason),
                    None => match slot.sampler.stop() {
                        Ok(report) => Measurement::Measured(report),
                        Err(e) => Measurement::Unavailable(e.to_string()),
                    },
                };
                Outcome {
                    sampler: slot.sampler.name().to_owned(),
                    measurement,
                }
            })
            .collect()
    }
}
/// [`PowerError::AlreadyStarted`] if the sampler `name` has a run in
/// progress (`running` is set).
pub(crate) fn check_idle<T>(running: Option<&T>, name: &str) -> Result<(), PowerError> {
    match running {
        Some(_) => Err(PowerError::AlreadyStarted {
            sampler: name.into(),
        }),
        None => Ok(()),
    }
}

/// [`PowerError::NotStarted`] for the sampler `name`.
pub(crate) fn not_started(name: &str) -> PowerError {
    PowerError::NotStarted {
        sampler: name.into(),
    }
}
