//! Running `ipmitool` and parsing what it prints.
//!
//! Only three commands are used:
//!
//! * `ipmitool dcmi power reading` — DCMI Get Power Reading; the line
//!   `Instantaneous power reading: N Watts` is the node's power, and
//!   `Power reading state is: activated` says the BMC measures it.
//! * `ipmitool sdr get NAME...` — the full sensor record and current reading
//!   of named sensors; the unit is checked on every reading (it must be
//!   Watts). `sdr get` is used rather than `sensor reading` because the
//!   latter prints no unit.
//! * `ipmitool sdr list full` — to find the sensors that read in Watts.
//!
//! Parsers are plain functions over the text so that odd output (a BMC that
//! prints `na`, an unknown sensor, an empty reply) becomes a typed error
//! instead of a panic or a made-up number.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::error::PowerError;

/// Which BMC `ipmitool` talks to.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IpmiTarget {
    /// The local BMC through the kernel driver (`/dev/ipmi0`); usually needs
    /// root.
    Local,
    /// A BMC over the network (`-I lanplus -H host -p port -U user`).
    Lan(LanTarget),
}

/// A BMC reached over the network.
///
/// The password is handed to `ipmitool` through the `IPMI_PASSWORD`
/// environment variable of the child process (`-E`), not on its command
/// line, so it does not show in `ps`; `Debug` prints it redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct LanTarget {
    /// Host name or address of the BMC.
    pub host: String,
    /// UDP port (623 on real BMCs).
    pub port: u16,
    /// User name.
    pub user: String,
    /// Password.
    pub password: String,
    /// `lanplus` (IPMI 2.0, RMCP+) when true, `lan` (IPMI 1.5) when false.
    pub lanplus: bool,
    /// Cipher suite (`-C`); `None` lets ipmitool choose. Some BMCs need 17,
    /// `OpenIPMI`'s simulator answers 3 without the cipher-suite query.
    pub cipher_suite: Option<u8>,
}

impl LanTarget {
    /// A `lanplus` target on port 623 with ipmitool's default cipher suite.
    pub fn new(
        host: impl Into<String>,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        LanTarget {
            host: host.into(),
            port: 623,
            user: user.into(),
            password: password.into(),
            lanplus: true,
            cipher_suite: None,
        }
    }
}

impl std::fmt::Debug for LanTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LanTarget")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .field("lanplus", &self.lanplus)
            .field("cipher_suite", &self.cipher_suite)
            .finish()
    }
}

impl std::fmt::Debug for IpmiTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IpmiTarget::Local => f.write_str("Local"),
            IpmiTarget::Lan(lan) => lan.fmt(f),
        }
    }
}

/// How to run `ipmitool`: which binary, which BMC, how long to wait.
#[derive(Debug, Clone)]
pub struct IpmiTool {
    /// The program (`ipmitool`, looked up in `PATH`).
    pub program: PathBuf,
    /// The BMC.
    pub target: IpmiTarget,
    /// How long one command may take before it is killed (default 10 s;
    /// ipmitool's own LAN retries take up to a few seconds).
    pub timeout: Duration,
    /// A local copy of the SDR repository (`ipmitool sdr dump FILE`), passed
    /// as `-S FILE` so that sensor readings do not fetch the whole
    /// repository from the BMC every time.
    pub sdr_cache: Option<PathBuf>,
}

/// One DCMI Get Power Reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DcmiReading {
    /// `Instantaneous power reading`, Watts.
    pub watts: f64,
    /// `Power reading state is: activated` (`None` if ipmitool did not say).
    pub active: Option<bool>,
}

/// A named sensor's reading from `ipmitool sdr get`.
#[derive(Debug, Clone, PartialEq)]
pub struct SensorReading {
    /// The sensor's name (`Sensor ID`).
    pub name: String,
    /// The value, in `unit`.
    pub value: f64,
    /// The unit as ipmitool prints it (`Watts`).
    pub unit: String,
}

impl IpmiTool {
    /// `ipmitool` on the local BMC.
    pub fn local() -> Self {
        Self::with_target(IpmiTarget::Local)
    }

    /// `ipmitool` on a BMC over the network.
    pub fn lan(target: LanTarget) -> Self {
        Self::with_target(IpmiTarget::Lan(target))
    }

    fn with_target(target: IpmiTarget) -> Self {
        IpmiTool {
            program: PathBuf::from("ipmitool"),
            target,
            timeout: Duration::from_secs(10),
            sdr_cache: None,
        }
    }

    fn command(&self, args: &[&str]) -> (Command, String) {
        let mut cmd = Command::new(&self.program);
        let mut shown = vec![self.program.display().to_string()];
        let mut arg = |cmd: &mut Command, a: &str| {
            cmd.arg(a);
            shown.push(a.to_owned());
        };
        if let IpmiTarget::Lan(lan) = &self.target {
            arg(&mut cmd, "-I");
            arg(&mut cmd, if lan.lanplus { "lanplus" } else { "lan" });
            arg(&mut cmd, "-H");
            arg(&mut cmd, &lan.host);
            arg(&mut cmd, "-p");
            arg(&mut cmd, &lan.port.to_string());
            arg(&mut cmd, "-U");
            arg(&mut cmd, &lan.user);
            arg(&mut cmd, "-E");
            cmd.env("IPMI_PASSWORD", &lan.password);
            if let Some(c) = lan.cipher_suite {
                arg(&mut cmd, "-C");
                arg(&mut cmd, &c.to_string());
            }
        }
        if let Some(cache) = &self.sdr_cache {
            arg(&mut cmd, "-S");
            arg(&mut cmd, &cache.display().to_string());
        }
        for a in args {
            arg(&mut cmd, a);
        }
        (cmd, shown.join(" "))
    }

    /// Runs `ipmitool ARGS...` and returns what it printed.
    ///
    /// # Errors
    ///
    /// [`PowerError::ToolMissing`] if the program cannot be started,
    /// [`PowerError::ToolTimeout`] if it runs past [`timeout`](Self::timeout)
    /// (it is killed), [`PowerError::ToolFailed`] on a failure status.
    pub fn run(&self, args: &[&str]) -> Result<ToolOutput, PowerError> {
        let (mut cmd, shown) = self.command(args);
        run_with_timeout(&mut cmd, &shown, self.timeout)
    }

    /// Takes one DCMI power reading.
    ///
    /// # Errors
    ///
    /// [`PowerError::DcmiUnsupported`] when the BMC rejects the DCMI command,
    /// [`PowerError::MissingField`] or [`PowerError::Parse`] on unexpected
    /// output, and the errors of [`run`](Self::run).
    pub fn dcmi_power_reading(&self) -> Result<DcmiReading, PowerError> {
        let out = match self.run(&["dcmi", "power", "reading"]) {
            Ok(out) => out,
            Err(PowerError::ToolFailed { output, .. }) if output.contains("DCMI") => {
                return Err(PowerError::DcmiUnsupported {
                    detail: last_line(&output),
                })
            }
            Err(e) => return Err(e),
        };
        parse_dcmi_power_reading(&out.stdout)?
            .ok_or_else(|| out.missing("`Instantaneous power reading` line"))
    }

    /// Reads the named sensors with one `sdr get`, in the order given.
    ///
    /// # Errors
    ///
    /// [`PowerError::SensorNotFound`] for a name the BMC does not know,
    /// [`PowerError::NoReading`] for a sensor without a valid reading,
    /// [`PowerError::Parse`] on unexpected output, and the errors of
    /// [`run`](Self::run).
    pub fn read_sensors(&self, names: &[String]) -> Result<Vec<SensorReading>, PowerError> {
        let mut args = vec!["sdr", "get"];
        args.extend(names.iter().map(String::as_str));
        let out = self.run(&args)?;
        let mut blocks = parse_sdr_get(&out.stdout)?;
        names
            .iter()
            .map(|name| {
                let i = blocks.iter().position(|b| b.name == *name).ok_or_else(|| {
                    PowerError::SensorNotFound {
                        sensor: name.clone(),
                    }
                })?;
                let (value, unit) = blocks.swap_remove(i).reading?;
                Ok(SensorReading {
                    name: name.clone(),
                    value,
                    unit,
                })
            })
            .collect()
    }

    /// Reads the named sensors and returns their sum in Watts.
    ///
    /// # Errors
    ///
    /// [`PowerError::NotWatts`] if a sensor reads in another unit, and the
    /// errors of [`read_sensors`](Self::read_sensors).
    pub fn sensors_watts(&self, names: &[String]) -> Result<f64, PowerError> {
        let mut sum = 0.0;
        for r in self.read_sensors(names)? {
            if !r.unit.eq_ignore_ascii_case("watts") {
                return Err(PowerError::NotWatts {
                    sensor: r.name,
                    unit: r.unit,
                });
            }
            sum += r.value;
        }
        Ok(sum)
    }

    /// The names of the sensors that currently read in Watts, from
    /// `sdr list full`.
    ///
    /// # Errors
    ///
    /// The errors of [`run`](Self::run).
    pub fn power_sensors(&self) -> Result<Vec<String>, PowerError> {
        let out = self.run(&["sdr", "list", "full"])?;
        Ok(parse_sdr_list_watts(&out.stdout))
    }
}

/// What a finished tool printed.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    /// The command line (password removed).
    pub command: String,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl ToolOutput {
    fn missing(&self, what: &'static str) -> PowerError {
        let mut output = self.stdout.trim().to_owned();
        if !self.stderr.trim().is_empty() {
            output.push_str(" / ");
            output.push_str(self.stderr.trim());
        }
        PowerError::MissingField {
            command: self.command.clone(),
            what,
            output,
        }
    }
}

fn last_line(text: &str) -> String {
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_owned()
}

/// Runs `cmd` with piped output, killing it after `timeout`. Output is read
/// on two helper threads so that a chatty tool cannot block on a full pipe.
pub(crate) fn run_with_timeout(
    cmd: &mut Command,
    shown: &str,
    timeout: Duration,
) -> Result<ToolOutput, PowerError> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|source| PowerError::ToolMissing {
        program: cmd.get_program().to_string_lossy().into_owned(),
        source,
    })?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                // A read error only truncates the diagnostic text.
                let _ = p.read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status: Option<ExitStatus> = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                // Killing a child that has just exited fails harmlessly.
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(PowerError::ToolFailed {
                    command: shown.to_owned(),
                    status: "unknown".into(),
                    output: e.to_string(),
                });
            }
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    let Some(status) = status else {
        return Err(PowerError::ToolTimeout {
            command: shown.to_owned(),
            timeout,
        });
    };
    if !status.success() {
        let output = if stderr.trim().is_empty() {
            &stdout
        } else {
            &stderr
        };
        return Err(PowerError::ToolFailed {
            command: shown.to_owned(),
            status: status.to_string(),
            output: output.trim().to_owned(),
        });
    }
    Ok(ToolOutput {
        command: shown.to_owned(),
        stdout,
        stderr,
    })
}

/// Parses `ipmitool dcmi power reading` output. `Ok(None)` when there is no
/// `Instantaneous power reading` line at all.
///
/// # Errors
///
/// [`PowerError::Parse`] (with the line) when the line is there but its value
/// is not `N Watts`; [`PowerError::DcmiInactive`] when the BMC says power
/// measurement is deactivated.
pub fn parse_dcmi_power_reading(text: &str) -> Result<Option<DcmiReading>, PowerError> {
    let mut watts = None;
    let mut active = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim();
        let value = value.trim();
        if key.eq_ignore_ascii_case("Instantaneous power reading") {
            let number = value
                .strip_suffix("Watts")
                .or_else(|| value.strip_suffix("watts"))
                .map(str::trim)
                .and_then(|n| n.parse::<f64>().ok())
                .filter(|w| w.is_finite() && *w >= 0.0);
            watts = Some(number.ok_or_else(|| PowerError::parse("DCMI power reading", line))?);
        } else if key.eq_ignore_ascii_case("Power reading state is") {
            active = match value.to_ascii_lowercase().as_str() {
                "activated" => Some(true),
                "deactivated" => Some(false),
                _ => return Err(PowerError::parse("DCMI power reading state", line)),
            };
        }
    }
    if active == Some(false) {
        return Err(PowerError::DcmiInactive);
    }
    Ok(watts.map(|watts| DcmiReading { watts, active }))
}

/// One block of `ipmitool sdr get` output: the sensor's name and its reading
/// (value and unit), or why it has none.
#[derive(Debug)]
pub(crate) struct SdrBlock {
    pub(crate) name: String,
    pub(crate) reading: Result<(f64, String), PowerError>,
}

/// Parses `ipmitool sdr get NAME...`: one block per sensor, each starting
/// with `Sensor ID : NAME (0xNN)` and holding a `Sensor Reading : V (+/- T)
/// UNIT` line (or `No Reading`, `Not Present`, ...).
pub(crate) fn parse_sdr_get(text: &str) -> Result<Vec<SdrBlock>, PowerError> {
    let mut blocks: Vec<SdrBlock> = Vec::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim();
        let value = value.trim();
        if key == "Sensor ID" {
            // `Pwr Consumption (0x1)`: the name is everything before the
            // last ` (`.
            let name = value.rfind(" (").map_or(value, |i| &value[..i]).trim();
            blocks.push(SdrBlock {
                name: name.to_owned(),
                reading: Err(PowerError::NoReading {
                    sensor: name.to_owned(),
                    reading: "no Sensor Reading line".into(),
                }),
            });
        } else if key == "Sensor Reading" {
            let Some(block) = blocks.last_mut() else {
                return Err(PowerError::parse(
                    "sdr get output (reading before Sensor ID)",
                    line,
                ));
            };
            block.reading = parse_reading_value(&block.name, value, line);
        }
    }
    Ok(blocks)
}

fn parse_reading_value(sensor: &str, value: &str, line: &str) -> Result<(f64, String), PowerError> {
    // `100 (+/- 0) Watts`, `12.500 (+/- 0.100) Volts`, or text such as
    // `No Reading` / `Not Present`.
    let mut words = value.split_whitespace();
    let Some(number) = words.next().and_then(|w| w.parse::<f64>().ok()) else {
        return Err(PowerError::NoReading {
            sensor: sensor.to_owned(),
            reading: value.to_owned(),
        });
    };
    if !number.is_finite() {
        return Err(PowerError::parse("sensor reading", line));
    }
    let rest = value
        .split_once(')')
        .map_or_else(|| value.split_once(' ').map_or("", |(_, r)| r), |(_, r)| r);
    let unit = rest.trim();
    if unit.is_empty() {
        return Err(PowerError::parse("sensor reading unit", line));
    }
    Ok((number, unit.to_owned()))
}

/// Parses `ipmitool sdr list full` (`NAME | 100 Watts | ok`) and returns the
/// names of the sensors whose reading is in Watts.
pub(crate) fn parse_sdr_list_watts(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split('|').map(str::trim);
            let name = fields.next()?;
            let reading = fields.next()?;
            let unit = reading.split_whitespace().nth(1)?;
            (unit.eq_ignore_ascii_case("watts") && !name.is_empty()).then(|| name.to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DCMI: &str = "
    Instantaneous power reading:                   132 Watts
    Minimum during sampling period:                  8 Watts
    Maximum during sampling period:                360 Watts
    Average power reading over sample period:      131 Watts
    IPMI timestamp:                           Thu Jan  1 00:00:00 2026
    Sampling period:                          00000001 Seconds.
    Power reading state is:                   activated

";

    #[test]
    fn dcmi_reading() {
        let r = parse_dcmi_power_reading(DCMI).unwrap().unwrap();
        assert_eq!(r.watts, 132.0);
        assert_eq!(r.active, Some(true));
    }

    #[test]
    fn dcmi_odd_output() {
        assert!(parse_dcmi_power_reading("").unwrap().is_none());
        assert!(parse_dcmi_power_reading("garbage\n:::\n")
            .unwrap()
            .is_none());
        let bad = "    Instantaneous power reading:     na Watts\n";
        match parse_dcmi_power_reading(bad) {
            Err(PowerError::Parse { line, .. }) => assert_eq!(line, bad.trim_end_matches('\n')),
            other => panic!("{other:?}"),
        }
        let off = DCMI.replace("is:                   activated", "is: deactivated");
        assert!(matches!(
            parse_dcmi_power_reading(&off),
            Err(PowerError::DcmiInactive)
        ));
        let odd_state = DCMI.replace("activated", "sleeping");
        assert!(matches!(
            parse_dcmi_power_reading(&odd_state),
            Err(PowerError::Parse { .. })
        ));
        let negative = "Instantaneous power reading: -5 Watts";
        assert!(matches!(
            parse_dcmi_power_reading(negative),
            Err(PowerError::Parse { .. })
        ));
    }

    const SDR_GET: &str = "Sensor ID              : PS1 Input Power (0x1)
 Entity ID             : 10.1 (Power Supply)
 Sensor Type (Threshold)  : Current (0x03)
 Sensor Reading        : 120 (+/- 0) Watts
 Status                : ok

Sensor ID              : PS2 Input Power (0x2)
 Entity ID             : 10.2 (Power Supply)
 Sensor Type (Threshold)  : Current (0x03)
 Sensor Reading        : No Reading
 Status                : ns

Sensor ID              : 12V (0x3)
 Sensor Reading        : 12.100 (+/- 0.100) Volts
";

    #[test]
    fn sdr_get_blocks() {
        let blocks = parse_sdr_get(SDR_GET).unwrap();
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks[0].name, "PS1 Input Power");
        assert_eq!(
            blocks[0].reading.as_ref().unwrap(),
            &(120.0, "Watts".to_owned())
        );
        assert!(
            matches!(&blocks[1].reading, Err(PowerError::NoReading { reading, .. }) if reading == "No Reading")
        );
        assert_eq!(
            blocks[2].reading.as_ref().unwrap(),
            &(12.1, "Volts".to_owned())
        );
        assert!(parse_sdr_get("").unwrap().is_empty());
        assert!(parse_sdr_get(" Sensor Reading : 5 (+/- 0) Watts\n").is_err());
    }

    #[test]
    fn sdr_list_finds_watts() {
        let list = "Inlet Temp       | 23 degrees C      | ok
PS1 Input Power  | 120 Watts         | ok
PS2 Input Power  | no reading        | ns
Pwr Consumption  | 240 Watts         | ok
broken line
";
        assert_eq!(
            parse_sdr_list_watts(list),
            ["PS1 Input Power", "Pwr Consumption"]
        );
    }

    #[test]
    fn password_stays_off_the_command_line() {
        let mut lan = LanTarget::new("bmc", "admin", "hunter2");
        lan.cipher_suite = Some(17);
        let tool = IpmiTool::lan(lan);
        let (_, shown) = tool.command(&["dcmi", "power", "reading"]);
        assert_eq!(
            shown,
            "ipmitool -I lanplus -H bmc -p 623 -U admin -E -C 17 dcmi power reading"
        );
        assert!(!format!("{tool:?}").contains("hunter2"));
    }

    #[test]
    fn missing_binary_is_typed() {
        let mut tool = IpmiTool::local();
        tool.program = PathBuf::from("/nonexistent/ipmitool");
        assert!(matches!(
            tool.dcmi_power_reading(),
            Err(PowerError::ToolMissing { .. })
        ));
    }
}
