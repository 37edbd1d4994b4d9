//! The crate's one error type.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a sampler could not measure, or a log could not be read.
///
/// Every variant carries what a person needs to act on it: the command that
/// failed with its stderr, the line that did not parse, the file that could
/// not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PowerError {
    /// An external tool (`ipmitool`) could not be started.
    #[error("cannot run `{program}`: {source} (is it installed? e.g. `apt-get install ipmitool`)")]
    ToolMissing {
        /// The program that was looked up.
        program: String,
        /// Why it could not be started.
        #[source]
        source: io::Error,
    },
    /// An external tool exited with a failure status.
    #[error("`{command}` failed ({status}): {output}")]
    ToolFailed {
        /// The command line, password removed.
        command: String,
        /// The exit status as text (`exit status: 1`, `signal: 9`).
        status: String,
        /// What the tool printed on stderr (on stdout if stderr was empty),
        /// trimmed.
        output: String,
    },
    /// An external tool did not finish in time and was killed.
    #[error("`{command}` did not finish within {timeout:?} and was killed")]
    ToolTimeout {
        /// The command line, password removed.
        command: String,
        /// The time limit.
        timeout: Duration,
    },
    /// A line of tool output or of a file did not have the expected form.
    #[error("cannot parse {what} from {line:?}")]
    Parse {
        /// What was being parsed (`DCMI power reading`, `/proc stat line`).
        what: &'static str,
        /// The offending line.
        line: String,
    },
    /// A tool succeeded but its output lacked the expected field.
    #[error("`{command}` printed no {what}; its output was {output:?}")]
    MissingField {
        /// The command line, password removed.
        command: String,
        /// The field looked for.
        what: &'static str,
        /// The whole output (stdout then stderr), trimmed.
        output: String,
    },
    /// The BMC does not implement DCMI Get Power Reading.
    #[error("the BMC does not support DCMI power readings: {detail}")]
    DcmiUnsupported {
        /// What the BMC or ipmitool said.
        detail: String,
    },
    /// The BMC answers DCMI Get Power Reading but says power measurement is
    /// deactivated, so its number cannot be trusted.
    #[error("the BMC reports DCMI power measurement as deactivated; name a power sensor instead")]
    DcmiInactive,
    /// A named sensor is not in the BMC's SDR repository.
    #[error("sensor {sensor:?} is not in the BMC's SDR repository")]
    SensorNotFound {
        /// The sensor name asked for.
        sensor: String,
    },
    /// A named sensor does not read in Watts.
    #[error("sensor {sensor:?} reads in {unit:?}, not Watts")]
    NotWatts {
        /// The sensor name.
        sensor: String,
        /// The unit it reports.
        unit: String,
    },
    /// A sensor exists but has no valid reading right now.
    #[error("sensor {sensor:?} has no reading ({reading})")]
    NoReading {
        /// The sensor name.
        sensor: String,
        /// What ipmitool printed instead of a number.
        reading: String,
    },
    /// Neither DCMI nor any sensor reading in Watts is available.
    #[error("no power reading: DCMI is not supported ({dcmi}) and the SDR repository has no sensor reading in Watts")]
    NoPowerSensor {
        /// Why DCMI failed.
        dcmi: String,
    },
    /// More than one sensor reads in Watts, so the sampler cannot know which
    /// one (or which sum) is the node's power.
    #[error("several sensors read in Watts ({}); name the ones whose sum is the node's power", .found.join(", "))]
    AmbiguousPowerSensors {
        /// The sensors found.
        found: Vec<String>,
    },
    /// A file exists but may not be read by this user.
    #[error("permission denied reading {}{}", .path.display(), hint_for(.path))]
    PermissionDenied {
        /// The file.
        path: PathBuf,
    },
    /// A file could not be read or listed.
    #[error("cannot read {}: {source}", .path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The powercap tree has no RAPL zone.
    #[error("no RAPL zone (intel-rapl:*) under {}", .root.display())]
    NoRaplZones {
        /// The powercap root searched.
        root: PathBuf,
    },
    /// A RAPL counter went backwards although its zone has no wrap range.
    #[error("RAPL counter {} went backwards and the zone has no max_energy_range_uj", .path.display())]
    CounterWentBackwards {
        /// The `energy_uj` file.
        path: PathBuf,
    },
    /// `sysconf(_SC_CLK_TCK)` failed.
    #[error("cannot get clock ticks per second: {0}")]
    ClockTicks(String),
    /// `getrusage(2)` failed.
    #[error("getrusage: {0}")]
    Rusage(String),
    /// `stop` was called on a sampler that is not running.
    #[error("sampler {sampler} is not started")]
    NotStarted {
        /// The sampler's name.
        sampler: String,
    },
    /// `start` was called on a sampler that is already running.
    #[error("sampler {sampler} is already started")]
    AlreadyStarted {
        /// The sampler's name.
        sampler: String,
    },
    /// A sampler's background thread could not be started.
    #[error("cannot start the {sampler} sampling thread: {source}")]
    Spawn {
        /// The sampler's name.
        sampler: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A sampler's background thread panicked; its samples are lost.
    #[error("the {sampler} sampling thread panicked")]
    SamplerPanicked {
        /// The sampler's name.
        sampler: String,
    },
    /// Too few readings succeeded to integrate power over the run.
    #[error("{sampler}: too few successful readings to integrate ({detail})")]
    TooFewReadings {
        /// The sampler's name.
        sampler: String,
        /// The last failure, or why there was none.
        detail: String,
    },
    /// A setting is out of range.
    #[error("invalid setting {setting}: {detail}")]
    InvalidConfig {
        /// The setting's name.
        setting: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// A line of a sampling log is malformed.
    #[error("{}:{line}: {detail}", .path.display())]
    Log {
        /// The log file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// What is wrong.
        detail: String,
    },
}

fn hint_for(path: &Path) -> &'static str {
    if path.ends_with("energy_uj") {
        " (RAPL counters are readable by root only since Linux 5.10; run as root or grant read access)"
    } else {
        ""
    }
}

impl PowerError {
    /// Wraps an I/O error on `path`, turning `PermissionDenied` into its own
    /// variant.
    pub(crate) fn io(path: &Path, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::PermissionDenied {
            PowerError::PermissionDenied {
                path: path.to_path_buf(),
            }
        } else {
            PowerError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    }

    pub(crate) fn parse(what: &'static str, line: &str) -> Self {
        PowerError::Parse {
            what,
            line: line.to_owned(),
        }
    }
}

/// Reads a whole small file (sysfs, procfs) as text.
pub(crate) fn read_text(path: &Path) -> Result<String, PowerError> {
    std::fs::read_to_string(path).map_err(|e| PowerError::io(path, e))
}
