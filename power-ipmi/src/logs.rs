//! The per-node CSV logs written by `scripts/sample.sh`, and their merge
//! into one table (the `power-merge` binary).
//!
//! A log directory holds, per node, any of `NODE.ipmi.csv`
//! (`timestamp,watts`), `NODE.rapl.csv`
//! (`timestamp,zone,name,energy_uj,max_energy_range_uj`) and `NODE.cpu.csv`
//! (`node,start,end,elapsed_s,user_s,system_s,exit_status,command`).
//! [`merge`] integrates each with the same code the samplers use — the
//! trapezoid rule of [`PowerTrace`], the wrap-around rule of
//! [`crate::counter_delta_uj`] and RAPL's
//! [`total_joules`](crate::RaplReport::total_joules) — and adds a `TOTAL`
//! row per source.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{read_text, PowerError};
use crate::report::{IpmiReport, RaplReport, RaplZoneEnergy};
use crate::sampler::rapl::{parent_zone, CounterTotal};
use crate::trace::PowerTrace;

/// The logs of one node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeLogs {
    /// The node's name (the file names' prefix).
    pub node: String,
    /// `NODE.ipmi.csv`.
    pub ipmi: Option<PathBuf>,
    /// `NODE.rapl.csv`.
    pub rapl: Option<PathBuf>,
    /// `NODE.cpu.csv`.
    pub cpu: Option<PathBuf>,
}

/// Groups log files by node. Each path is a log file or a directory whose
/// `*.ipmi.csv`, `*.rapl.csv` and `*.cpu.csv` files are taken.
///
/// # Errors
///
/// [`PowerError::Io`] for an unreadable directory or a missing path,
/// [`PowerError::InvalidConfig`] for a file that is not a log or a node whose
/// log appears twice.
pub fn find_logs(paths: &[PathBuf]) -> Result<Vec<NodeLogs>, PowerError> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let entries = std::fs::read_dir(path).map_err(|e| PowerError::io(path, e))?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| classify(p).is_some())
                .collect();
            found.sort();
            files.extend(found);
        } else if path.exists() {
            if classify(path).is_none() {
                return Err(PowerError::InvalidConfig {
                    setting: "log file",
                    detail: format!(
                        "{} is not NODE.ipmi.csv, NODE.rapl.csv or NODE.cpu.csv",
                        path.display()
                    ),
                });
            }
            files.push(path.clone());
        } else {
            return Err(PowerError::io(path, std::io::ErrorKind::NotFound.into()));
        }
    }
    let mut nodes: BTreeMap<String, NodeLogs> = BTreeMap::new();
    for file in files {
        let Some((node, kind)) = classify(&file) else {
            continue;
        };
        let entry = nodes.entry(node.clone()).or_insert_with(|| NodeLogs {
            node: node.clone(),
            ..NodeLogs::default()
        });
        let slot = match kind {
            Kind::Ipmi => &mut entry.ipmi,
            Kind::Rapl => &mut entry.rapl,
            Kind::Cpu => &mut entry.cpu,
        };
        if let Some(first) = slot.replace(file.clone()) {
            return Err(PowerError::InvalidConfig {
                setting: "log file",
                detail: format!(
                    "node {node} has two logs of one kind: {} and {}",
                    first.display(),
                    file.display()
                ),
            });
        }
    }
    Ok(nodes.into_values().collect())
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Ipmi,
    Rapl,
    Cpu,
}

fn classify(path: &Path) -> Option<(String, Kind)> {
    let name = path.file_name()?.to_str()?;
    [
        (".ipmi.csv", Kind::Ipmi),
        (".rapl.csv", Kind::Rapl),
        (".cpu.csv", Kind::Cpu),
    ]
    .into_iter()
    .find_map(|(suffix, kind)| {
        name.strip_suffix(suffix)
            .filter(|n| !n.is_empty())
            .map(|n| (n.to_owned(), kind))
    })
}

/// Data lines of a CSV log: skips the header (a first line that does not
/// start with a digit) and blank lines; yields 1-based line numbers.
fn data_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(i, l)| !l.is_empty() && (*i != 1 || l.starts_with(|c: char| c.is_ascii_digit())))
}

fn field<T: std::str::FromStr>(
    path: &Path,
    line: usize,
    raw: Option<&str>,
    what: &str,
) -> Result<T, PowerError> {
    let raw = raw.map(str::trim).unwrap_or_default();
    raw.parse().map_err(|_| PowerError::Log {
        path: path.to_path_buf(),
        line,
        detail: format!("bad {what} {raw:?}"),
    })
}

/// An IPMI log: the first timestamp (Unix seconds) and the readings, with
/// times relative to it.
///
/// # Errors
///
/// [`PowerError::Log`] for a malformed line or a timestamp earlier than the
/// one before it; I/O errors.
pub fn read_ipmi_log(path: &Path) -> Result<(f64, PowerTrace), PowerError> {
    let text = read_text(path)?;
    let mut origin = None;
    let mut trace = PowerTrace::new();
    for (n, line) in data_lines(&text) {
        let mut parts = line.split(',');
        let t: f64 = field(path, n, parts.next(), "timestamp")?;
        let w: f64 = field(path, n, parts.next(), "watts")?;
        if parts.next().is_some() || !t.is_finite() || !w.is_finite() {
            return Err(PowerError::Log {
                path: path.to_path_buf(),
                line: n,
                detail: format!("expected timestamp,watts, got {line:?}"),
            });
        }
        let origin = *origin.get_or_insert(t);
        let before = trace.len();
        trace.push(t - origin, w);
        if trace.len() == before {
            return Err(PowerError::Log {
                path: path.to_path_buf(),
                line: n,
                detail: "timestamp earlier than the line before".into(),
            });
        }
    }
    Ok((origin.unwrap_or(0.0), trace))
}

/// A RAPL log integrated per zone: first and last timestamp, and each
/// zone's energy (deltas between successive reads, one wrap per decrease).
///
/// # Errors
///
/// [`PowerError::Log`] for a malformed line, or a counter that went down in
/// a zone without `max_energy_range_uj`; I/O errors.
pub fn read_rapl_log(path: &Path) -> Result<(f64, f64, Vec<RaplZoneEnergy>), PowerError> {
    let text = read_text(path)?;
    let mut zones: BTreeMap<String, (String, CounterTotal)> = BTreeMap::new();
    let (mut first, mut last) = (f64::INFINITY, f64::NEG_INFINITY);
    for (n, line) in data_lines(&text) {
        let parts: Vec<&str> = line.split(',').collect();
        if parts.len() != 5 {
            return Err(PowerError::Log {
                path: path.to_path_buf(),
                line: n,
                detail: format!(
                    "expected timestamp,zone,name,energy_uj,max_energy_range_uj, got {line:?}"
                ),
            });
        }
        let t: f64 = field(path, n, Some(parts[0]), "timestamp")?;
        let uj: u64 = field(path, n, Some(parts[3]), "energy_uj")?;
        let range: u64 = field(path, n, Some(parts[4]), "max_energy_range_uj")?;
        first = first.min(t);
        last = last.max(t);
        match zones.get_mut(parts[1]) {
            None => {
                zones.insert(
                    parts[1].to_owned(),
                    (parts[2].to_owned(), CounterTotal::new(uj)),
                );
            }
            Some((_, total)) => {
                total.advance(uj, range).ok_or_else(|| PowerError::Log {
                    path: path.to_path_buf(),
                    line: n,
                    detail: "counter went down and the zone has no max_energy_range_uj".into(),
                })?;
            }
        }
    }
    let energies = zones
        .into_iter()
        .map(|(id, (name, total))| RaplZoneEnergy {
            parent: parent_zone(&id),
            id,
            name,
            joules: total.joules(),
            wraps: total.wraps(),
        })
        .collect();
    if first > last {
        (first, last) = (0.0, 0.0);
    }
    Ok((first, last, energies))
}

/// The CPU-time row of a `NODE.cpu.csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuLog {
    /// Unix time the command started.
    pub start: f64,
    /// Unix time it ended.
    pub end: f64,
    /// User CPU-seconds of the command and its waited-for children.
    pub user_s: f64,
    /// System CPU-seconds.
    pub system_s: f64,
    /// The command's exit status.
    pub exit_status: i32,
}

/// Reads a `NODE.cpu.csv`.
///
/// # Errors
///
/// [`PowerError::Log`] when the file has no data row or a malformed one.
pub fn read_cpu_log(path: &Path) -> Result<CpuLog, PowerError> {
    let text = read_text(path)?;
    let (n, line) = data_lines(&text).next().ok_or_else(|| PowerError::Log {
        path: path.to_path_buf(),
        line: 1,
        detail: "no data row".into(),
    })?;
    // The command (last field) may hold commas.
    let parts: Vec<&str> = line.splitn(8, ',').collect();
    if parts.len() < 7 {
        return Err(PowerError::Log {
            path: path.to_path_buf(),
            line: n,
            detail: format!("expected node,start,end,elapsed_s,user_s,system_s,exit_status,command, got {line:?}"),
        });
    }
    Ok(CpuLog {
        start: field(path, n, Some(parts[1]), "start")?,
        end: field(path, n, Some(parts[2]), "end")?,
        user_s: field(path, n, Some(parts[4]), "user_s")?,
        system_s: field(path, n, Some(parts[5]), "system_s")?,
        exit_status: field(path, n, Some(parts[6]), "exit_status")?,
    })
}

/// The idle baseline to subtract.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Idle {
    /// No baseline.
    #[default]
    None,
    /// The same `P_idle` for every node, Watts.
    Watts(f64),
    /// `P_idle` per node (nodes missing from the map get none).
    PerNode(BTreeMap<String, f64>),
}

impl Idle {
    /// The per-node mean power of an idle run's IPMI logs.
    ///
    /// # Errors
    ///
    /// Those of [`find_logs`] and [`read_ipmi_log`];
    /// [`PowerError::InvalidConfig`] if no node has an IPMI log.
    pub fn from_logs(paths: &[PathBuf]) -> Result<Self, PowerError> {
        let mut map = BTreeMap::new();
        for node in find_logs(paths)? {
            if let Some(path) = &node.ipmi {
                if let Some(w) = read_ipmi_log(path)?.1.mean_watts() {
                    map.insert(node.node, w);
                }
            }
        }
        if map.is_empty() {
            return Err(PowerError::InvalidConfig {
                setting: "idle logs",
                detail: "no IPMI log with a reading".into(),
            });
        }
        Ok(Idle::PerNode(map))
    }

    fn for_node(&self, node: &str) -> Option<f64> {
        match self {
            Idle::None => None,
            Idle::Watts(w) => Some(*w),
            Idle::PerNode(map) => map.get(node).copied(),
        }
    }
}

/// One row of the merged table. Empty cells are `None`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MergedRow {
    /// The node, or `TOTAL`.
    pub node: String,
    /// `ipmi`, `rapl` (packages + DRAM), `rapl/ZONE/NAME`, or `cpu`.
    pub source: String,
    /// First timestamp, Unix seconds.
    pub start_unix: Option<f64>,
    /// Last timestamp, Unix seconds.
    pub end_unix: Option<f64>,
    /// Seconds covered.
    pub seconds: Option<f64>,
    /// Readings integrated.
    pub samples: Option<usize>,
    /// Energy, Joules.
    pub joules: Option<f64>,
    /// Mean power, Watts (`TOTAL`: the sum over nodes).
    pub mean_watts: Option<f64>,
    /// `P_idle`, Watts (`TOTAL`: the sum over nodes).
    pub idle_watts: Option<f64>,
    /// Energy above idle, Joules.
    pub above_idle_joules: Option<f64>,
    /// CPU-seconds (`cpu` rows).
    pub cpu_seconds: Option<f64>,
}

/// The node name of the summary rows.
pub const TOTAL: &str = "TOTAL";

/// Integrates every node's logs and appends `TOTAL` rows for `ipmi`,
/// `rapl` and `cpu`: energies and mean powers summed over nodes (so the
/// `ipmi` total's `mean_watts` is the cluster's power; divide by the node
/// count for the per-node average the paper plots), `above_idle_joules`
/// only when every node has a baseline.
///
/// # Errors
///
/// Those of the log readers.
pub fn merge(nodes: &[NodeLogs], idle: &Idle) -> Result<Vec<MergedRow>, PowerError> {
    let mut rows = Vec::new();
    for node in nodes {
        if let Some(path) = &node.ipmi {
            let (origin, trace) = read_ipmi_log(path)?;
            let r = IpmiReport::from_trace(
                String::new(),
                trace.covered_s(),
                trace,
                0,
                None,
                idle.for_node(&node.node),
            );
            rows.push(MergedRow {
                node: node.node.clone(),
                source: "ipmi".into(),
                start_unix: Some(origin),
                end_unix: Some(origin + r.covered_s),
                seconds: Some(r.covered_s),
                samples: Some(r.samples),
                joules: Some(r.joules),
                mean_watts: (r.samples > 0).then_some(r.mean_watts),
                idle_watts: r.idle_watts,
                above_idle_joules: r.above_idle_joules,
                cpu_seconds: None,
            });
        }
        if let Some(path) = &node.rapl {
            let (start, end, zones) = read_rapl_log(path)?;
            let seconds = end - start;
            let watts = |j: f64| (seconds > 0.0).then(|| j / seconds);
            let row = |source: String, joules: f64| MergedRow {
                node: node.node.clone(),
                source,
                start_unix: Some(start),
                end_unix: Some(end),
                seconds: Some(seconds),
                joules: Some(joules),
                mean_watts: watts(joules),
                ..MergedRow::default()
            };
            let report = RaplReport {
                elapsed_s: seconds,
                zones,
                polls: 0,
                failed_polls: 0,
                last_error: None,
            };
            rows.push(row("rapl".into(), report.total_joules()));
            for z in &report.zones {
                rows.push(row(format!("rapl/{}/{}", z.id, z.name), z.joules));
            }
        }
        if let Some(path) = &node.cpu {
            let c = read_cpu_log(path)?;
            rows.push(MergedRow {
                node: node.node.clone(),
                source: "cpu".into(),
                start_unix: Some(c.start),
                end_unix: Some(c.end),
                seconds: Some(c.end - c.start),
                cpu_seconds: Some(c.user_s + c.system_s),
                ..MergedRow::default()
            });
        }
    }
    let mut totals = Vec::new();
    for source in ["ipmi", "rapl", "cpu"] {
        let of: Vec<&MergedRow> = rows.iter().filter(|r| r.source == source).collect();
        if of.is_empty() {
            continue;
        }
        let sum =
            |f: fn(&MergedRow) -> Option<f64>| -> Option<f64> { of.iter().map(|r| f(r)).sum() };
        totals.push(MergedRow {
            node: TOTAL.into(),
            source: source.into(),
            start_unix: of.iter().filter_map(|r| r.start_unix).reduce(f64::min),
            end_unix: of.iter().filter_map(|r| r.end_unix).reduce(f64::max),
            seconds: of.iter().filter_map(|r| r.seconds).reduce(f64::max),
            samples: of.iter().map(|r| r.samples).sum(),
            joules: sum(|r| r.joules),
            mean_watts: sum(|r| r.mean_watts),
            idle_watts: sum(|r| r.idle_watts),
            above_idle_joules: sum(|r| r.above_idle_joules),
            cpu_seconds: sum(|r| r.cpu_seconds),
        });
    }
    rows.extend(totals);
    Ok(rows)
}

/// The header of [`write_csv`]'s table.
pub const CSV_HEADER: &str =
    "node,source,start_unix,end_unix,seconds,samples,joules,mean_watts,idle_watts,above_idle_joules,cpu_seconds";

/// Writes the rows as CSV with [`CSV_HEADER`].
///
/// # Errors
///
/// Write errors.
pub fn write_csv(rows: &[MergedRow], mut out: impl Write) -> std::io::Result<()> {
    fn num(v: Option<f64>, decimals: usize) -> String {
        v.map_or_else(String::new, |v| format!("{v:.decimals$}"))
    }
    writeln!(out, "{CSV_HEADER}")?;
    for r in rows {
        writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{}",
            r.node,
            r.source,
            num(r.start_unix, 6),
            num(r.end_unix, 6),
            num(r.seconds, 3),
            r.samples.map_or_else(String::new, |n| n.to_string()),
            num(r.joules, 3),
            num(r.mean_watts, 3),
            num(r.idle_watts, 3),
            num(r.above_idle_joules, 3),
            num(r.cpu_seconds, 3),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn merges_two_nodes_with_idle_and_wrap() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(
            d,
            "a.ipmi.csv",
            "timestamp,watts\n100.0,100\n101.0,100\n102.0,200\n",
        );
        write(d, "b.ipmi.csv", "timestamp,watts\n100.5,50\n102.5,50\n");
        write(
            d,
            "a.rapl.csv",
            "timestamp,zone,name,energy_uj,max_energy_range_uj\n\
             100.0,intel-rapl:0,package-0,999000000,1000000000\n\
             100.0,intel-rapl:0:0,dram,0,1000000000\n\
             102.0,intel-rapl:0,package-0,1000000,1000000000\n\
             102.0,intel-rapl:0:0,dram,3000000,1000000000\n",
        );
        write(
            d,
            "a.cpu.csv",
            "node,start,end,elapsed_s,user_s,system_s,exit_status,command\n\
             a,100.1,101.9,1.8,1.250,0.250,0,\"sh -c 'a, b'\"\n",
        );
        let nodes = find_logs(&[d.to_path_buf()]).unwrap();
        assert_eq!(nodes.len(), 2);
        let idle = Idle::PerNode(BTreeMap::from([
            ("a".to_owned(), 80.0),
            ("b".to_owned(), 40.0),
        ]));
        let rows = merge(&nodes, &idle).unwrap();
        let get = |node: &str, source: &str| {
            rows.iter()
                .find(|r| r.node == node && r.source == source)
                .unwrap()
        };
        let a = get("a", "ipmi");
        assert_eq!(a.joules, Some(250.0));
        assert_eq!(a.above_idle_joules, Some(250.0 - 160.0));
        assert_eq!(get("b", "ipmi").joules, Some(100.0));
        // Package wrapped once: 1 J to the top, then 1 J; DRAM 3 J.
        assert_eq!(get("a", "rapl/intel-rapl:0/package-0").joules, Some(2.0));
        assert_eq!(get("a", "rapl").joules, Some(5.0));
        assert_eq!(get("a", "cpu").cpu_seconds, Some(1.5));
        let total = get(TOTAL, "ipmi");
        assert_eq!(total.joules, Some(350.0));
        assert_eq!(total.mean_watts, Some(125.0 + 50.0));
        assert_eq!(total.above_idle_joules, Some(90.0 + 20.0));
        let mut out = Vec::new();
        write_csv(&rows, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with(CSV_HEADER));
        assert!(text.contains(
            "TOTAL,ipmi,100.000000,102.500000,2.000,5,350.000,175.000,120.000,110.000,\n"
        ));
    }

    #[test]
    fn bad_logs_name_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "n.ipmi.csv",
            "timestamp,watts\n1.0,100\n2.0,lots\n",
        );
        match read_ipmi_log(&p) {
            Err(PowerError::Log { line, detail, .. }) => {
                assert_eq!(line, 3);
                assert!(detail.contains("lots"));
            }
            other => panic!("{other:?}"),
        }
        let p = write(dir.path(), "m.ipmi.csv", "2.0,100\n1.0,100\n");
        assert!(matches!(
            read_ipmi_log(&p),
            Err(PowerError::Log { line: 2, .. })
        ));
        let p = write(
            dir.path(),
            "r.rapl.csv",
            "1.0,intel-rapl:0,package-0,10,0\n2.0,intel-rapl:0,package-0,5,0\n",
        );
        assert!(matches!(
            read_rapl_log(&p),
            Err(PowerError::Log { line: 2, .. })
        ));
        let p = write(dir.path(), "c.cpu.csv", "node,start\n");
        assert!(matches!(read_cpu_log(&p), Err(PowerError::Log { .. })));
        assert!(find_logs(&[dir.path().join("nope")]).is_err());
        let stray = write(dir.path(), "notes.txt", "x");
        assert!(find_logs(&[stray]).is_err());
    }
}
