//! A real BMC on loopback for the tests: `OpenIPMI`'s `ipmi_sim` with a LAN
//! channel on 127.0.0.1 (a free unprivileged UDP port), one admin user, and
//! analog sensors whose values the test sets by writing the files
//! `ipmi_sim` polls (`sensor_add ... poll 100 file PATH`, every 100 ms).
//!
//! The stock `ipmi_sim` does not implement DCMI. When a C compiler and
//! `OpenIPMI`'s headers (`libopenipmi-dev`) are present, `dcmi_module.c` is
//! built and loaded (`loadlib` in `lan.conf`): it registers a handler for
//! the DCMI group extension that answers Get Power Reading from a file,
//! so `ipmitool dcmi power reading` can be tested too.
//!
//! State (config, SDRs, sensor files) lives in a temporary directory; the
//! simulator is killed when the [`Simulator`] is dropped.

#![allow(dead_code, unreachable_pub)] // each test crate uses a part

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use power_ipmi::LanTarget;

/// What lets the simulator tests run.
const INSTALL: &str = "apt-get install openipmi ipmitool libopenipmi-dev";

/// Skips `test` loudly (a failure under `NESSIE_REQUIRE_TOOLS`).
pub fn skip(test: &str, why: &str) {
    optional_tools::skip(test, why, INSTALL);
}

/// An analog sensor of the simulated BMC.
#[derive(Debug, Clone, Copy)]
pub struct SimSensor {
    /// Sensor number (1..=255).
    pub number: u8,
    /// ID string (at most 16 bytes).
    pub name: &'static str,
    /// IPMI base unit code: 6 = Watts, 1 = degrees C.
    pub unit: u8,
    /// Reading = M × raw byte.
    pub m: u8,
}

/// The node's power: "Pwr Consumption", Watts, 2 W per raw step (0–510 W).
pub const POWER: SimSensor = SimSensor {
    number: 1,
    name: "Pwr Consumption",
    unit: 6,
    m: 2,
};

/// A second power sensor, for the ambiguity test.
pub const PSU2: SimSensor = SimSensor {
    number: 2,
    name: "PS2 Input Power",
    unit: 6,
    m: 1,
};

/// A temperature sensor, for the wrong-unit test.
pub const TEMP: SimSensor = SimSensor {
    number: 3,
    name: "Inlet Temp",
    unit: 1,
    m: 1,
};

pub const USER: &str = "nessie";
pub const PASSWORD: &str = "power-test";

/// A running `ipmi_sim`.
#[derive(Debug)]
pub struct Simulator {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

/// The Full Sensor Record (SDR type 01h, IPMI 2.0 §43.1) of a threshold
/// sensor on the BMC (owner 20h, LUN 0), linear, `reading = M × raw`.
fn full_sensor_record(s: &SimSensor) -> Vec<u8> {
    assert!(s.name.len() <= 16);
    let sensor_type = if s.unit == 6 { 0x03 } else { 0x01 }; // Current / Temperature
    let mut r = vec![
        0x00,
        0x00, // record id (assigned by the repository)
        0x51, // SDR version
        0x01, // full sensor record
        0x00, // remaining length, set below
        0x20,
        0x00,
        s.number, // owner, LUN, sensor number
        0x07,
        0x01, // entity: system board, instance 1
        0x41, // initialisation: scanning
        0x40, // capabilities: auto re-arm, no thresholds
        sensor_type,
        0x01, // threshold-based
        0,
        0,
        0,
        0,
        0,
        0, // event and reading masks
        0x00,
        s.unit,
        0x00, // unsigned, base unit, no modifier
        0x00, // linear
        s.m,
        0x00, // M, tolerance
        0x00,
        0x00, // B, accuracy
        0x00, // accuracy, direction
        0x00, // R and B exponents
        0x00, // analog flags
        0,
        0,
        0, // nominal, normal max, normal min
        0xff,
        0x00, // sensor max, min
        0,
        0,
        0,
        0,
        0,
        0, // thresholds
        0,
        0, // hysteresis
        0,
        0,                         // reserved
        0,                         // OEM
        0xc0 | s.name.len() as u8, // 8-bit ASCII id string
    ];
    r.extend_from_slice(s.name.as_bytes());
    r[4] = (r.len() - 5) as u8;
    r
}

fn free_udp_port() -> u16 {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind a UDP port");
    socket.local_addr().expect("local address").port()
}

/// Builds `dcmi_module.c` into `dir`; `None` (with the reason) when there
/// is no compiler or no `OpenIPMI` headers.
fn build_dcmi_module(dir: &Path) -> Result<PathBuf, String> {
    if !Path::new("/usr/include/OpenIPMI/mcserv.h").exists() {
        return Err("OpenIPMI headers (libopenipmi-dev) not installed".into());
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/dcmi_module.c");
    let out = dir.join("dcmi_module.so");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-o"])
        .arg(&out)
        .arg(&source)
        .output()
        .map_err(|e| format!("no C compiler (cc): {e}"))?;
    if !status.status.success() {
        return Err(format!(
            "cc failed: {}",
            String::from_utf8_lossy(&status.stderr)
        ));
    }
    Ok(out)
}

fn ipmitool(port: u16, args: &[&str]) -> Command {
    let mut c = Command::new("ipmitool");
    c.args(["-I", "lanplus", "-H", "127.0.0.1", "-p", &port.to_string()]);
    c.args(["-U", USER, "-P", PASSWORD, "-C", "3"]);
    c.args(args);
    c.stdin(Stdio::null());
    c
}

/// Waits until the simulator answers `mc info`; false if it exits or the
/// time runs out.
fn wait_ready(child: &mut Child, port: u16, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if ipmitool(port, &["mc", "info"])
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

impl Simulator {
    /// Starts `ipmi_sim` with these sensors (all reading raw 0 until set),
    /// and the DCMI module if `dcmi`. `None` (after a loud notice) when the
    /// simulator, ipmitool or — for `dcmi` — the module cannot be had.
    pub fn start(test: &str, sensors: &[SimSensor], dcmi: bool) -> Option<Simulator> {
        if !optional_tools::require(test, &["ipmi_sim", "ipmitool"], INSTALL) {
            return None;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let module = if dcmi {
            match build_dcmi_module(dir.path()) {
                Ok(m) => Some(m),
                Err(why) => {
                    skip(
                        test,
                        &format!("cannot build the DCMI module for ipmi_sim: {why}"),
                    );
                    return None;
                }
            }
        } else {
            None
        };
        std::fs::create_dir(dir.path().join("state")).expect("state dir");
        let mut emu = String::from(
            "mc_setbmc 0x20\n\
             mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02\n",
        );
        for s in sensors {
            let bytes: Vec<String> = full_sensor_record(s)
                .iter()
                .map(|b| format!("0x{b:02x}"))
                .collect();
            let file = dir.path().join(format!("sensor{}.val", s.number));
            std::fs::write(&file, "0\n").expect("sensor file");
            emu.push_str(&format!(
                "main_sdr_add 0x20 {}\n\
                 sensor_add 0x20 0 {n} {t} 0x01 poll 100 file \"{f}\"\n\
                 sensor_set_event_support 0x20 0 {n} enable scanning per-state \
                 000000000000000 000000000000000 000000000000000 000000000000000\n",
                bytes.join(" "),
                n = s.number,
                t = if s.unit == 6 { "0x03" } else { "0x01" },
                f = file.display(),
            ));
        }
        emu.push_str("mc_enable 0x20\n");
        std::fs::write(dir.path().join("sim.emu"), emu).expect("emu file");
        std::fs::write(dir.path().join("dcmi.val"), "0\n").expect("dcmi file");

        let mut last_log = String::new();
        for _attempt in 0..3 {
            let port = free_udp_port();
            let mut conf = format!(
                "name \"nessie-test\"\n\
                 set_working_mc 0x20\n\
                 startlan 1\n\
                 addr 127.0.0.1 {port}\n\
                 priv_limit admin\n\
                 allowed_auths_callback none md5\n\
                 allowed_auths_user none md5\n\
                 allowed_auths_operator none md5\n\
                 allowed_auths_admin none md5\n\
                 guid a123456789abcdefa123456789abcdef\n\
                 endlan\n\
                 user 2 true \"{USER}\" \"{PASSWORD}\" admin 10 none md5\n"
            );
            if let Some(m) = &module {
                conf.push_str(&format!(
                    "loadlib \"{}\" \"{}\"\n",
                    m.display(),
                    dir.path().join("dcmi.val").display()
                ));
            }
            std::fs::write(dir.path().join("lan.conf"), conf).expect("lan.conf");
            let log = dir.path().join("ipmi_sim.log");
            let log_file = std::fs::File::create(&log).expect("log file");
            let child = Command::new("ipmi_sim")
                .arg("-c")
                .arg(dir.path().join("lan.conf"))
                .arg("-f")
                .arg(dir.path().join("sim.emu"))
                .arg("-s")
                .arg(dir.path().join("state"))
                .arg("-n")
                .stdin(Stdio::null())
                .stdout(log_file.try_clone().expect("log file"))
                .stderr(log_file)
                .spawn()
                .expect("spawn ipmi_sim");
            let mut child = child;
            if wait_ready(&mut child, port, Duration::from_secs(20)) {
                return Some(Simulator { child, dir, port });
            }
            last_log = std::fs::read_to_string(&log).unwrap_or_default();
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("ipmi_sim did not come up on loopback; its output:\n{last_log}");
    }

    /// The simulator as an ipmitool LAN target (cipher suite 3, which it
    /// answers without the cipher-suite query ipmitool otherwise warns on).
    pub fn lan(&self) -> LanTarget {
        let mut t = LanTarget::new("127.0.0.1", USER, PASSWORD);
        t.port = self.port;
        t.cipher_suite = Some(3);
        t
    }

    /// The UDP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// An `ipmitool` command against the simulator.
    pub fn ipmitool(&self, args: &[&str]) -> Command {
        ipmitool(self.port, args)
    }

    /// Sets a sensor to `value` in its unit (rounded to the sensor's step),
    /// and the DCMI reading to the same value when it is a Watts sensor.
    /// Files are replaced atomically so the simulator never reads half a
    /// number.
    pub fn set(&self, sensor: SimSensor, value: f64) {
        let raw = (value / f64::from(sensor.m)).round();
        assert!(
            (0.0..=255.0).contains(&raw),
            "{value} out of the sensor's range"
        );
        self.write_atomically(&format!("sensor{}.val", sensor.number), &format!("{raw}\n"));
        if sensor.unit == 6 {
            self.write_atomically("dcmi.val", &format!("{}\n", raw * f64::from(sensor.m)));
        }
    }

    fn write_atomically(&self, name: &str, text: &str) {
        let tmp = self.dir.path().join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).expect("write value");
        std::fs::rename(&tmp, self.dir.path().join(name)).expect("rename value");
    }

    /// Waits until `ipmitool sdr get` shows the sensor at `value` (the
    /// simulator polls the file every 100 ms).
    pub fn wait_for(&self, sensor: SimSensor, value: f64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let want = format!(": {} (", value.round());
        loop {
            let out = self
                .ipmitool(&["sdr", "get", sensor.name])
                .output()
                .expect("run ipmitool");
            if String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l.contains("Sensor Reading") && l.contains(&want))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "sensor {} never read {value}",
                sensor.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The temporary directory (for logs written by the test).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
