//! Reports: `results.json` (every parameter, run and figure), one CSV per
//! table, SVG and PNG plots, and `report.md` placing our numbers beside the
//! paper's with a one-line verdict per claim.

mod plot;

use crate::error::{HarnessError, Result};
use crate::measure::RunFigures;
use crate::spec::RunSpec;
/// Sizes are labelled by the workload module, which names runs by them.
pub use crate::workload::bytes_label;
use nessie_examples::StoreKind;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub use plot::text_available;

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Completed and measured.
    Ok,
    /// Not run: the system is not available here.
    Skipped,
    /// Started but failed (the error is in `reason`).
    Failed,
}

/// One run of an experiment, as recorded in results.json.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run's label.
    pub label: String,
    /// The system.
    pub system: StoreKind,
    /// How it ended.
    pub status: RunStatus,
    /// Why it was skipped or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Everything it was run with.
    pub spec: RunSpec,
    /// Its measurements.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub figures: Option<RunFigures>,
    /// Where its config, spec and node logs are.
    pub dir: PathBuf,
}

/// A table: written as CSV and as a markdown table in the report.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Table {
    /// File stem of the CSV.
    pub name: String,
    /// Caption.
    pub title: String,
    /// Column headers.
    pub columns: Vec<String>,
    /// Rows of formatted cells.
    pub rows: Vec<Vec<String>>,
    /// How many trailing columns go to the CSV only: a markdown table that
    /// wide would not be read, and another table shows their figures.
    #[serde(default)]
    pub csv_only: usize,
    /// Sentences shown under the table.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Table {
    /// An empty table.
    #[must_use]
    pub fn new(name: &str, title: &str, columns: &[&str]) -> Self {
        Table {
            name: name.to_owned(),
            title: title.to_owned(),
            columns: columns.iter().map(|&c| c.to_owned()).collect(),
            rows: Vec::new(),
            csv_only: 0,
            notes: Vec::new(),
        }
    }

    /// Appends a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as CSV (RFC 4180 quoting).
    #[must_use]
    pub fn csv(&self) -> String {
        let quote = |s: &str| {
            if s.contains([',', '"', '\n']) {
                format!("\"{}\"", s.replace('"', "\"\""))
            } else {
                s.to_owned()
            }
        };
        let mut out = String::new();
        for line in std::iter::once(&self.columns).chain(&self.rows) {
            let cells: Vec<String> = line.iter().map(|c| quote(c)).collect();
            out.push_str(&cells.join(","));
            out.push('\n');
        }
        out
    }

    /// The table in markdown (without its CSV-only columns).
    #[must_use]
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let shown = self.columns.len().saturating_sub(self.csv_only);
        let line = |cells: &[String]| {
            cells
                .iter()
                .take(shown)
                .map(|c| c.replace('|', "\\|"))
                .collect::<Vec<_>>()
                .join(" | ")
        };
        let _ = writeln!(out, "| {} |", line(&self.columns));
        let _ = writeln!(out, "|{}", "---|".repeat(shown));
        for r in &self.rows {
            let _ = writeln!(out, "| {} |", line(r));
        }
        out
    }
}

/// What a figure draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FigureKind {
    /// Lines with markers over a numeric x axis.
    Line,
    /// Step lines of cumulative distributions (y in [0, 1]).
    Cdf,
    /// Grouped bars over named categories.
    Bar,
    /// Lines over time on a linear axis (a run's time series), with an
    /// optional second panel below ([`Figure::lower`]) and vertical
    /// markers at the run's events ([`Figure::markers`]).
    Timeline,
}

/// One named series of a figure.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// Points `(x, y)`; for bar charts x is the category index.
    pub points: Vec<(f64, f64)>,
}

/// A vertical line across a figure at `x`, with a label (a timeline's
/// events).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Marker {
    /// Where, in x axis units.
    pub x: f64,
    /// What happened there.
    pub label: String,
}

/// A timeline's second panel, under the first and on the same x axis; on
/// a log axis if its y label is a time.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Panel {
    /// Y axis label.
    pub y_label: String,
    /// The data.
    pub series: Vec<Series>,
}

/// A plot, shaped like one of the paper's figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Figure {
    /// File stem of the SVG and PNG.
    pub name: String,
    /// Caption (which paper figure it mirrors).
    pub title: String,
    /// Kind of chart.
    pub kind: FigureKind,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Logarithmic (base 2) x axis, labelled in bytes.
    pub log2_x_bytes: bool,
    /// Category names of a bar chart.
    pub categories: Vec<String>,
    /// The data.
    pub series: Vec<Series>,
    /// Vertical lines at events ([`FigureKind::Timeline`] only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub markers: Vec<Marker>,
    /// A second panel below ([`FigureKind::Timeline`] only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lower: Option<Panel>,
}

impl Figure {
    /// An empty figure.
    #[must_use]
    pub fn new(name: &str, title: &str, kind: FigureKind, x_label: &str, y_label: &str) -> Self {
        Figure {
            name: name.to_owned(),
            title: title.to_owned(),
            kind,
            x_label: x_label.to_owned(),
            y_label: y_label.to_owned(),
            log2_x_bytes: false,
            categories: Vec::new(),
            series: Vec::new(),
            markers: Vec::new(),
            lower: None,
        }
    }

    /// Adds a series.
    pub fn series(&mut self, name: impl Into<String>, points: Vec<(f64, f64)>) {
        self.series.push(Series {
            name: name.into(),
            points,
        });
    }

    /// Nanoseconds per unit of the y axis, if it is a time (its label is
    /// or ends with `ns`, `µs`, `ms` or `s`).
    #[must_use]
    pub fn y_time_unit_ns(&self) -> Option<f64> {
        time_unit_ns(&self.y_label)
    }

    /// Nanoseconds per unit of the x axis, if it is a time.
    #[must_use]
    pub fn x_time_unit_ns(&self) -> Option<f64> {
        time_unit_ns(&self.x_label)
    }

    /// Whether the y axis is logarithmic (base 10): for latency bars, whose
    /// systems differ by decades (µs beside ms would be unreadable on a
    /// linear axis). Other bars (throughput, bytes) stay linear.
    #[must_use]
    pub fn log_y(&self) -> bool {
        self.kind == FigureKind::Bar && self.y_time_unit_ns().is_some()
    }

    /// Whether the x axis is logarithmic (base 10): for latency
    /// distributions and lines over a time. (Byte axes have their own base
    /// 2 scale, [`Figure::log2_x_bytes`].)
    #[must_use]
    pub fn log_x(&self) -> bool {
        matches!(self.kind, FigureKind::Line | FigureKind::Cdf)
            && !self.log2_x_bytes
            && self.x_time_unit_ns().is_some()
    }
}

/// Nanoseconds per unit of an axis labelled `label` (the unit is its last
/// word, possibly in parentheses), if that is a time unit.
fn time_unit_ns(label: &str) -> Option<f64> {
    let unit = label
        .split_whitespace()
        .last()?
        .trim_matches(|c| c == '(' || c == ')' || c == ',');
    match unit {
        "ns" => Some(1.0),
        "µs" | "us" => Some(1e3),
        "ms" => Some(1e6),
        "s" => Some(1e9),
        _ => None,
    }
}

/// Whether our result has the shape the paper reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The shape holds.
    Holds,
    /// It does not.
    Differs,
    /// Cannot be judged from this run (a system missing, no data).
    Unknown,
}

impl Verdict {
    /// From a condition that is known.
    #[must_use]
    pub fn of(holds: bool) -> Self {
        if holds {
            Verdict::Holds
        } else {
            Verdict::Differs
        }
    }

    fn label(self) -> &'static str {
        match self {
            Verdict::Holds => "✅ shape holds",
            Verdict::Differs => "❌ shape differs",
            Verdict::Unknown => "❔ not judged",
        }
    }
}

/// One claim of the paper beside our measurement.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Comparison {
    /// Which figure or table (e.g. "Fig. 4").
    pub source: String,
    /// The paper's number or claim.
    pub paper: String,
    /// Ours.
    pub ours: String,
    /// The verdict.
    pub verdict: Verdict,
}

/// Everything an experiment produced.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// The subcommand.
    pub experiment: String,
    /// What it reproduces.
    pub title: String,
    /// When it was run (RFC 3339).
    pub created: String,
    /// The command line.
    pub command: Vec<String>,
    /// The host: cores, kernel.
    pub host: serde_json::Value,
    /// What the nodes ran on: launcher, fabric, network.
    #[serde(default)]
    pub setup: String,
    /// The experiment's parameters.
    pub params: serde_json::Value,
    /// Every run.
    pub runs: Vec<RunRecord>,
    /// Tables.
    pub tables: Vec<Table>,
    /// Tables too long to read in report.md (a time series): written as
    /// CSV and into results.json, and named in report.md.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data: Vec<Table>,
    /// Figures.
    pub figures: Vec<Figure>,
    /// The paper beside ours.
    pub comparisons: Vec<Comparison>,
    /// Caveats and observations.
    pub notes: Vec<String>,
    /// What the experiment measured as a whole, for programs to read
    /// (`failover`: its three times); null for the others.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub outcome: serde_json::Value,
}

impl Report {
    /// An empty report of `experiment`.
    #[must_use]
    pub fn new(experiment: &str, title: &str, params: serde_json::Value) -> Self {
        Report {
            experiment: experiment.to_owned(),
            title: title.to_owned(),
            created: chrono::Local::now().to_rfc3339(),
            command: std::env::args().collect(),
            host: host_info(),
            setup: "one process per node on one host, `shm` fabric (one-sided verbs are memory copies and atomics, not RDMA); the paper used 15 nodes with 10 GbE RDMA NICs. Compare shapes, not absolute numbers.".to_owned(),
            params,
            runs: Vec::new(),
            tables: Vec::new(),
            data: Vec::new(),
            figures: Vec::new(),
            comparisons: Vec::new(),
            notes: Vec::new(),
            outcome: serde_json::Value::Null,
        }
    }

    /// The measured runs of `system`, in order.
    pub fn ok_runs(&self) -> impl Iterator<Item = (&RunRecord, &RunFigures)> {
        self.runs
            .iter()
            .filter_map(|r| r.figures.as_ref().map(|f| (r, f)))
    }

    /// Prints the tables, the comparisons with the paper and the notes on
    /// stdout, and where the full report (in `dir`) is.
    pub fn print(&self, dir: &Path) {
        println!("setup: {}\n", self.setup);
        for t in &self.tables {
            println!("{}\n\n{}", t.title, t.markdown());
            for n in &t.notes {
                println!("{n}\n");
            }
        }
        for c in &self.comparisons {
            println!(
                "{}: paper {} | ours {} | {:?}",
                c.source, c.paper, c.ours, c.verdict
            );
        }
        for n in &self.notes {
            println!("note: {n}");
        }
        println!("\nreport: {}", dir.join("report.md").display());
    }

    /// Writes results.json, the CSVs, the plots and report.md into `dir`;
    /// returns the files written.
    ///
    /// # Errors
    /// [`HarnessError::Io`] if a file cannot be written. A plot that fails
    /// to draw becomes a note instead.
    pub fn write(&mut self, dir: &Path) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir).map_err(HarnessError::io("creating", dir))?;
        let cores = self.host["cores"].as_f64().unwrap_or(0.0);
        // Only the load before the first run: during runs it counts our own
        // node processes.
        let at_start = self.host["load_average_at_start"].as_f64();
        if let Some(busy) = at_start.filter(|&l| cores > 0.0 && l > cores / 2.0) {
            let note = format!(
                "the host was busy before the runs started (1-minute load average {busy:.1} on {cores} cores): other processes competed for the CPU, expect noisy numbers"
            );
            if !self.notes.contains(&note) {
                self.notes.push(note);
            }
        }
        let mut written = Vec::new();
        let mut put = |name: &str, bytes: &[u8]| -> Result<()> {
            let p = dir.join(name);
            std::fs::write(&p, bytes).map_err(HarnessError::io("writing", &p))?;
            written.push(p);
            Ok(())
        };
        for t in self.tables.iter().chain(&self.data) {
            put(&format!("{}.csv", t.name), t.csv().as_bytes())?;
        }
        let mut plotted = Vec::new();
        for f in &self.figures {
            match plot::render(f, dir) {
                Ok(files) => plotted.push((f.name.clone(), files)),
                Err(e) => self.notes.push(format!("figure {} not drawn: {e}", f.name)),
            }
        }
        if !plot::text_available() && !self.figures.is_empty() {
            self.notes.push(
                "no usable font was found: plots are drawn without text (see results.json for the numbers)"
                    .into(),
            );
        }
        put("results.json", &serde_json::to_vec_pretty(&self)?)?;
        put("report.md", self.markdown().as_bytes())?;
        for (_, files) in plotted {
            written.extend(files);
        }
        Ok(written)
    }

    /// The report in markdown.
    #[must_use]
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "# nessie-bench {}: {}\n", self.experiment, self.title);
        let _ = writeln!(md, "- run: {}", self.created);
        let _ = writeln!(md, "- command: `{}`", self.command.join(" "));
        let h = &self.host;
        let _ = writeln!(
            md,
            "- host: {} cores ({}), Linux {}, load average {} before the runs",
            h["cores"],
            h["cpu"].as_str().unwrap_or("?"),
            h["kernel"].as_str().unwrap_or("?"),
            h["load_average_at_start"]
        );
        let _ = writeln!(md, "- setup: {}\n", self.setup);
        let _ = writeln!(
            md,
            "## Parameters\n\n```json\n{}\n```\n",
            serde_json::to_string_pretty(&self.params).unwrap_or_default()
        );
        let skipped: Vec<&RunRecord> = self
            .runs
            .iter()
            .filter(|r| r.status != RunStatus::Ok)
            .collect();
        if !skipped.is_empty() {
            let _ = writeln!(md, "## Runs not measured\n");
            for r in skipped {
                let _ = writeln!(
                    md,
                    "- {} ({}): {}",
                    r.label,
                    if r.status == RunStatus::Skipped {
                        "skipped"
                    } else {
                        "failed"
                    },
                    r.reason.as_deref().unwrap_or("")
                );
            }
            md.push('\n');
        }
        for t in &self.tables {
            let _ = writeln!(
                md,
                "## {}\n\n{}\n(`{}.csv`)\n",
                t.title,
                t.markdown(),
                t.name
            );
            for n in &t.notes {
                let _ = writeln!(md, "{n}\n");
            }
        }
        for t in &self.data {
            let _ = writeln!(
                md,
                "## {}\n\n(`{}.csv`: {} × {}, columns {})\n",
                t.title,
                t.name,
                t.rows.len(),
                t.columns.len(),
                t.columns.join(", ")
            );
            for n in &t.notes {
                let _ = writeln!(md, "{n}\n");
            }
        }
        if !self.figures.is_empty() {
            let _ = writeln!(md, "## Figures\n");
            for f in &self.figures {
                let _ = writeln!(
                    md,
                    "### {}\n\n![{name}]({name}.svg)\n\n(`{name}.png` too)\n",
                    f.title,
                    name = f.name
                );
            }
        }
        if !self.comparisons.is_empty() {
            let mut t = Table::new("", "", &["paper", "published", "ours", "verdict"]);
            for c in &self.comparisons {
                t.row(vec![
                    c.source.clone(),
                    c.paper.clone(),
                    c.ours.clone(),
                    c.verdict.label().to_owned(),
                ]);
            }
            let _ = writeln!(md, "## Beside the paper\n\n{}", t.markdown());
        }
        if !self.notes.is_empty() {
            let _ = writeln!(md, "## Notes\n");
            for n in &self.notes {
                let _ = writeln!(md, "- {n}");
            }
        }
        md
    }
}

fn host_info() -> serde_json::Value {
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_default();
    serde_json::json!({
        "cores": cores,
        "kernel": kernel,
        "cpu": cpu,
        "load_average_at_start": load_average(),
    })
}

/// The host's 1-minute load average.
#[must_use]
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A number with three significant digits (tables).
#[must_use]
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// `0.25` → `+25%`.
#[must_use]
pub fn pct(ratio: f64) -> String {
    percent_label(ratio, true)
}

/// `0.25` → `25%` (a share, no sign).
#[must_use]
pub fn share(ratio: f64) -> String {
    percent_label(ratio, false)
}

/// `ratio` in whole percent, with a sign if `signed`; `-` if not finite.
fn percent_label(ratio: f64, signed: bool) -> String {
    match (ratio.is_finite(), signed) {
        (false, _) => "-".into(),
        (true, true) => format!("{:+.0}%", ratio * 100.0),
        (true, false) => format!("{:.0}%", ratio * 100.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Report {
        let mut r = Report::new("compare", "test", serde_json::json!({"quick": true}));
        let mut t = Table::new("summary", "Summary", &["system", "ops/s"]);
        t.row(vec!["CD".into(), "1,000".into()]);
        r.tables.push(t);
        let mut f = Figure::new(
            "throughput",
            "Throughput",
            FigureKind::Bar,
            "system",
            "ops/s",
        );
        f.categories = vec!["CD".into(), "SD".into()];
        f.series("throughput", vec![(0.0, 10.0), (1.0, 5.0)]);
        r.figures.push(f);
        let mut l = Figure::new("sweep", "Sweep", FigureKind::Line, "value size", "MB/s");
        l.log2_x_bytes = true;
        l.series("CD", vec![(256.0, 1.0), (16384.0, 3.0)]);
        l.series("SD", vec![(256.0, 2.0), (16384.0, 2.5)]);
        r.figures.push(l);
        let mut c = Figure::new("cdf", "CDF", FigureKind::Cdf, "verbs", "fraction");
        c.series("CD-GET", vec![(2.0, 0.5), (3.0, 1.0)]);
        r.figures.push(c);
        let mut series = Table::new("timeline", "Time series", &["t_s", "ok_per_s"]);
        series.row(vec!["0.000".into(), "900".into()]);
        r.data.push(series);
        r.comparisons.push(Comparison {
            source: "Fig. 4".into(),
            paper: "CD > SD".into(),
            ours: "CD 2× SD".into(),
            verdict: Verdict::Holds,
        });
        r
    }

    #[test]
    fn report_writes_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = sample();
        let files = r.write(dir.path()).unwrap();
        for name in [
            "results.json",
            "report.md",
            "summary.csv",
            "throughput.svg",
            "throughput.png",
            "sweep.svg",
            "sweep.png",
            "cdf.svg",
            "cdf.png",
            "timeline.csv",
        ] {
            let p = dir.path().join(name);
            assert!(
                p.exists(),
                "{name} missing; wrote {files:?}; notes {:?}",
                r.notes
            );
            assert!(std::fs::metadata(&p).unwrap().len() > 0, "{name} empty");
        }
        let csv = std::fs::read_to_string(dir.path().join("summary.csv")).unwrap();
        assert_eq!(csv, "system,ops/s\nCD,\"1,000\"\n");
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("results.json")).unwrap())
                .unwrap();
        assert_eq!(json["experiment"], "compare");
        assert_eq!(json["figures"][0]["series"][0]["points"][0][1], 10.0);
        let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
        assert!(md.contains("| CD | 1,000 |"));
        assert!(md.contains("shape holds"));
        assert!(md.contains("![throughput](throughput.svg)"));
        assert!(md.contains("(`timeline.csv`: 1 × 2, columns t_s, ok_per_s)"));
        assert!(
            !md.contains("| 0.000 |"),
            "a data table stays out of report.md"
        );
    }

    #[test]
    fn csv_only_columns_and_table_notes() {
        let mut t = Table::new("wide", "Wide", &["system", "ops/s", "extra"]);
        t.csv_only = 1;
        t.row(vec!["CD".into(), "5".into(), "7".into()]);
        t.notes.push("CD is fast.".into());
        assert_eq!(t.csv(), "system,ops/s,extra\nCD,5,7\n");
        assert_eq!(t.markdown(), "| system | ops/s |\n|---|---|\n| CD | 5 |\n");
        let mut r = Report::new("compare", "test", serde_json::json!({}));
        r.tables.push(t);
        let md = r.markdown();
        assert!(md.contains("(`wide.csv`)\n\nCD is fast."), "{md}");
        let back: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(
            (back.tables[0].csv_only, back.tables[0].notes.len()),
            (1, 1)
        );
    }

    #[test]
    fn labels_read_well() {
        assert_eq!(bytes_label(16384.0), "16KiB");
        assert_eq!(bytes_label(256.0), "256B");
        assert_eq!(bytes_label(1536.0), "1.5KiB");
        assert_eq!(num(1234.5), "1234");
        assert_eq!(num(0.01234), "0.012");
        assert_eq!(pct(0.254), "+25%");
        assert_eq!(pct(-0.3), "-30%");
        assert_eq!(share(0.333), "33%");
    }
}
