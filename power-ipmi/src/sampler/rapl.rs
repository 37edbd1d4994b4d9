//! RAPL energy counters from the Linux powercap tree.
//!
//! The kernel exposes each RAPL domain as a zone directory
//! `/sys/class/powercap/intel-rapl:P` (a CPU package) with subzones
//! `intel-rapl:P:S` (`core`, `uncore`, `dram`), and on some machines
//! `psys` (the platform). Each zone has a `name`, a cumulative `energy_uj`
//! counter in microjoules and `max_energy_range_uj`, the value after which
//! the counter wraps to zero. In sysfs the subzones are both listed flat
//! under `/sys/class/powercap` and nested inside their parent's directory;
//! discovery accepts either layout and deduplicates by zone id.
//!
//! A counter can wrap more than once between two reads if they are far
//! apart (a 262 kJ range wraps in about 15 minutes at 300 W), so the sampler
//! also reads every `poll_interval` on a background thread and adds up the
//! deltas. A decrease between two reads is taken as one wrap:
//! `delta = max_energy_range_uj − before + after`.
//!
//! Since Linux 5.10 `energy_uj` is readable by root only; an unprivileged
//! `start` fails with [`PowerError::PermissionDenied`].

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{read_text, PowerError};
use crate::report::{EnergyReport, RaplReport, RaplZoneEnergy};
use crate::sampler::{check_idle, not_started, EnergySampler};

/// The default powercap root.
pub const POWERCAP_ROOT: &str = "/sys/class/powercap";

/// Settings of a [`RaplSampler`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaplConfig {
    /// The powercap root ([`POWERCAP_ROOT`]; a fake tree in tests).
    pub root: PathBuf,
    /// Time between background reads; `None` reads only at `start`, `stop`
    /// and [`RaplSampler::poll_now`]. Default 5 s, well inside the shortest
    /// wrap period of current CPUs.
    pub poll_interval: Option<Duration>,
}

impl Default for RaplConfig {
    fn default() -> Self {
        RaplConfig {
            root: PathBuf::from(POWERCAP_ROOT),
            poll_interval: Some(Duration::from_secs(5)),
        }
    }
}

/// One RAPL zone found under the powercap root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaplZone {
    /// The zone's directory name (`intel-rapl:0:1`).
    pub id: String,
    /// Its `name` file (`package-0`, `core`, `dram`, ...).
    pub name: String,
    /// The parent zone's id, for subzones.
    pub parent: Option<String>,
    /// Its `energy_uj` file.
    pub energy_path: PathBuf,
    /// Its `max_energy_range_uj` (0 if the file is absent: no wrap known).
    pub max_energy_range_uj: u64,
}

impl RaplZone {
    /// Reads the zone's counter, microjoules.
    ///
    /// # Errors
    ///
    /// [`PowerError::PermissionDenied`] when not root (Linux ≥ 5.10),
    /// [`PowerError::Io`], or [`PowerError::Parse`] if the file does not
    /// hold a number.
    pub fn read_uj(&self) -> Result<u64, PowerError> {
        read_u64(&self.energy_path, "RAPL energy_uj")
    }
}

fn read_u64(path: &Path, what: &'static str) -> Result<u64, PowerError> {
    let text = read_text(path)?;
    text.trim()
        .parse()
        .map_err(|_| PowerError::parse(what, text.trim()))
}

/// Lists the RAPL zones under `root` (`intel-rapl:*` and
/// `intel-rapl-mmio:*` directories holding an `energy_uj`), parents before
/// subzones.
///
/// # Errors
///
/// [`PowerError::NoRaplZones`] when there is none (no RAPL, or no powercap
/// tree at all), [`PowerError::Io`] / [`PowerError::Parse`] on unreadable
/// `name` or `max_energy_range_uj` files.
pub fn discover_rapl_zones(root: &Path) -> Result<Vec<RaplZone>, PowerError> {
    let mut zones = Vec::new();
    visit(root, 0, &mut zones)?;
    if zones.is_empty() {
        return Err(PowerError::NoRaplZones {
            root: root.to_path_buf(),
        });
    }
    zones.sort_by_key(|z| zone_sort_key(&z.id));
    Ok(zones)
}

fn visit(dir: &Path, depth: usize, zones: &mut Vec<RaplZone>) -> Result<(), PowerError> {
    // Control type (`intel-rapl`) → zone → subzone: three levels; the bound
    // also keeps sysfs symlink cycles out.
    if depth > 3 {
        return Ok(());
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if depth == 0 && e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(PowerError::io(dir, e)),
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("intel-rapl"))
        .collect();
    names.sort();
    for id in names {
        let path = dir.join(&id);
        let energy_path = path.join("energy_uj");
        if id.contains(':') && energy_path.exists() && !zones.iter().any(|z: &RaplZone| z.id == id)
        {
            let name = read_text(&path.join("name"))?.trim().to_owned();
            let range_path = path.join("max_energy_range_uj");
            let max_energy_range_uj = if range_path.exists() {
                read_u64(&range_path, "RAPL max_energy_range_uj")?
            } else {
                0
            };
            let parent = parent_zone(&id);
            zones.push(RaplZone {
                id: id.clone(),
                name,
                parent,
                energy_path,
                max_energy_range_uj,
            });
        }
        if path.is_dir() {
            visit(&path, depth + 1, zones)?;
        }
    }
    Ok(())
}

/// The parent of a subzone id: `intel-rapl:0:1` → `intel-rapl:0`; `None`
/// for a top-level zone.
pub(crate) fn parent_zone(id: &str) -> Option<String> {
    id.rsplit_once(':')
        .map(|(p, _)| p)
        .filter(|p| p.contains(':'))
        .map(str::to_owned)
}

/// `intel-rapl:10:1` → ("intel-rapl", [10, 1]) so that zones sort by number.
fn zone_sort_key(id: &str) -> (String, Vec<u64>) {
    let mut parts = id.split(':');
    let kind = parts.next().unwrap_or_default().to_owned();
    (kind, parts.map(|p| p.parse().unwrap_or(u64::MAX)).collect())
}

/// Microjoules between two reads of a counter that wraps after
/// `max_range_uj`: `after − before`, or, when the counter went down, one
/// wrap: `max_range_uj − before + after`. `None` when the counter went down
/// and no range is known.
///
/// ```
/// use power_ipmi::counter_delta_uj;
///
/// assert_eq!(counter_delta_uj(1_000, 5_000, 262_143_328_850), Some(4_000));
/// // Wrapped: 1000 µJ to the top of the range, then 500 µJ past zero.
/// assert_eq!(counter_delta_uj(262_143_327_850, 500, 262_143_328_850), Some(1_500));
/// assert_eq!(counter_delta_uj(10, 5, 0), None);
/// ```
pub fn counter_delta_uj(before: u64, after: u64, max_range_uj: u64) -> Option<u64> {
    if after >= before {
        Some(after - before)
    } else if max_range_uj > 0 {
        Some(max_range_uj.saturating_sub(before).saturating_add(after))
    } else {
        None
    }
}

/// A counter's running total: the sampler's and the log reader's one
/// accumulation rule.
#[derive(Debug, Clone)]
pub(crate) struct CounterTotal {
    last_uj: u64,
    total_uj: u128,
    wraps: u32,
}

impl CounterTotal {
    /// Starts at a first reading.
    pub(crate) fn new(first_uj: u64) -> Self {
        CounterTotal {
            last_uj: first_uj,
            total_uj: 0,
            wraps: 0,
        }
    }

    /// Adds the energy up to the reading `after_uj`; `None` (nothing added)
    /// when the counter went down and `max_range_uj` is 0.
    pub(crate) fn advance(&mut self, after_uj: u64, max_range_uj: u64) -> Option<()> {
        let delta = counter_delta_uj(self.last_uj, after_uj, max_range_uj)?;
        self.wraps += u32::from(after_uj < self.last_uj);
        self.total_uj += u128::from(delta);
        self.last_uj = after_uj;
        Some(())
    }

    /// The total, Joules (exact below 2^53 µJ, 9 GJ).
    pub(crate) fn joules(&self) -> f64 {
        self.total_uj as f64 / 1e6
    }

    /// Wraps seen.
    pub(crate) fn wraps(&self) -> u32 {
        self.wraps
    }
}

#[derive(Debug)]
struct State {
    zones: Vec<RaplZone>,
    totals: Vec<CounterTotal>,
    polls: u64,
    failed_polls: u64,
    last_error: Option<String>,
}

impl State {
    /// Reads every zone, then adds the deltas (all or nothing).
    fn poll(&mut self) -> Result<(), PowerError> {
        let now: Vec<u64> = self
            .zones
            .iter()
            .map(RaplZone::read_uj)
            .collect::<Result<_, _>>()?;
        let mut next = self.totals.clone();
        for ((zone, total), &after) in self.zones.iter().zip(&mut next).zip(&now) {
            total
                .advance(after, zone.max_energy_range_uj)
                .ok_or_else(|| PowerError::CounterWentBackwards {
                    path: zone.energy_path.clone(),
                })?;
        }
        self.totals = next;
        self.polls += 1;
        Ok(())
    }

    fn record(&mut self, result: Result<(), PowerError>) {
        if let Err(e) = result {
            self.failed_polls += 1;
            self.last_error = Some(e.to_string());
        }
    }
}

/// RAPL energy per zone, from the `energy_uj` counters under a powercap
/// root, read at `start`, every `poll_interval` on a background thread, at
/// [`poll_now`](Self::poll_now) and at `stop`; one wrap at
/// `max_energy_range_uj` is assumed whenever a counter decreases
/// ([`counter_delta_uj`]).
///
/// ```no_run
/// use power_ipmi::{EnergySampler, RaplSampler};
///
/// let mut rapl = RaplSampler::system();
/// rapl.start()?; // fails unless root on Linux >= 5.10
/// // ... the run ...
/// let report = rapl.stop()?;
/// println!("{:?} J (packages + DRAM)", report.joules());
/// # Ok::<(), power_ipmi::PowerError>(())
/// ```
#[derive(Debug)]
pub struct RaplSampler {
    config: RaplConfig,
    running: Option<Running>,
}

#[derive(Debug)]
struct Running {
    origin: Instant,
    state: Arc<Mutex<State>>,
    stop: Option<(Sender<()>, JoinHandle<()>)>,
}

const NAME: &str = "rapl";

impl RaplSampler {
    /// A sampler with these settings.
    pub fn new(config: RaplConfig) -> Self {
        RaplSampler {
            config,
            running: None,
        }
    }

    /// `/sys/class/powercap`, background reads every 5 s.
    pub fn system() -> Self {
        Self::new(RaplConfig::default())
    }

    /// Reads every zone now and adds the deltas since the previous read;
    /// the background thread does the same every `poll_interval`.
    ///
    /// # Errors
    ///
    /// [`PowerError::NotStarted`], or why a zone could not be read (nothing
    /// is added then).
    pub fn poll_now(&self) -> Result<(), PowerError> {
        let running = self.running.as_ref().ok_or_else(|| not_started(NAME))?;
        lock(&running.state).poll()
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    // A poll that panicked left the totals consistent (it adds all deltas
    // or none), so a poisoned lock is still usable.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl EnergySampler for RaplSampler {
    fn name(&self) -> &str {
        NAME
    }

    fn start(&mut self) -> Result<(), PowerError> {
        check_idle(self.running.as_ref(), NAME)?;
        if self.config.poll_interval.is_some_and(|d| d.is_zero()) {
            return Err(PowerError::InvalidConfig {
                setting: "poll_interval",
                detail: "must be more than zero".into(),
            });
        }
        let zones = discover_rapl_zones(&self.config.root)?;
        let origin = Instant::now();
        let totals = zones
            .iter()
            .map(|z| z.read_uj().map(CounterTotal::new))
            .collect::<Result<_, _>>()?;
        let state = Arc::new(Mutex::new(State {
            zones,
            totals,
            polls: 1,
            failed_polls: 0,
            last_error: None,
        }));
        let stop = match self.config.poll_interval {
            None => None,
            Some(interval) => {
                let (tx, rx) = mpsc::channel::<()>();
                let shared = Arc::clone(&state);
                let thread = std::thread::Builder::new()
                    .name("power-rapl".into())
                    .spawn(move || loop {
                        match rx.recv_timeout(interval) {
                            Err(RecvTimeoutError::Timeout) => {
                                let mut state = lock(&shared);
                                let result = state.poll();
                                state.record(result);
                            }
                            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                        }
                    })
                    .map_err(|source| PowerError::Spawn {
                        sampler: NAME.into(),
                        source,
                    })?;
                Some((tx, thread))
            }
        };
        self.running = Some(Running {
            origin,
            state,
            stop,
        });
        Ok(())
    }

    fn stop(&mut self) -> Result<EnergyReport, PowerError> {
        let running = self.running.take().ok_or_else(|| not_started(NAME))?;
        if let Some((tx, thread)) = running.stop {
            let _ = tx.send(());
            thread.join().map_err(|_| PowerError::SamplerPanicked {
                sampler: NAME.into(),
            })?;
        }
        let mut state = lock(&running.state);
        state.poll()?;
        let elapsed_s = running.origin.elapsed().as_secs_f64();
        let zones = state
            .zones
            .iter()
            .zip(&state.totals)
            .map(|(zone, total)| RaplZoneEnergy {
                id: zone.id.clone(),
                name: zone.name.clone(),
                parent: zone.parent.clone(),
                joules: total.joules(),
                wraps: total.wraps(),
            })
            .collect();
        Ok(EnergyReport::Rapl(RaplReport {
            elapsed_s,
            zones,
            polls: state.polls,
            failed_polls: state.failed_polls,
            last_error: state.last_error.clone(),
        }))
    }
}

impl Drop for RaplSampler {
    fn drop(&mut self) {
        if let Some(Running {
            stop: Some((tx, thread)),
            ..
        }) = self.running.take()
        {
            let _ = tx.send(());
            let _ = thread.join();
        }
    }
}
