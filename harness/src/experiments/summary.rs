//! The tables and figures that sum up a set of runs: the summary table,
//! bar charts and latency CDFs.

use super::{data_tables, tails, Done};
use crate::measure::RunFigures;
use crate::report::{num, Figure, FigureKind, Report, RunStatus, Table};
use crate::spec::RunSpec;
use crate::workload::WorkloadSpec;
use nessie_examples::StoreKind;

/// The measured runs among `done` of `system`.
pub fn runs_of(done: &[Done], system: StoreKind) -> impl Iterator<Item = (&RunSpec, &RunFigures)> {
    done.iter()
        .filter(move |d| d.record.system == system)
        .filter_map(|d| d.figures().map(|f| (&d.record.spec, f)))
}

/// The measured run of `system` with this value size and GET ratio.
#[must_use]
pub fn run_at(
    done: &[Done],
    system: StoreKind,
    value_size: usize,
    get_ratio: f64,
) -> Option<&RunFigures> {
    runs_of(done, system)
        .find(|(spec, _)| {
            spec.workload.value_size == value_size
                && (spec.workload.get_ratio - get_ratio).abs() < 1e-9
        })
        .map(|(_, f)| f)
}

/// Adds the summary table, the tail tables and the figures of `done`, runs
/// of `workload`.
pub fn add_summary(report: &mut Report, workload: &WorkloadSpec, done: &[Done]) {
    report.tables.push(summary_table(
        "summary",
        &format!("Summary: {}", workload.describe()),
        done,
    ));
    report.tables.push(tails::tail_table(done));
    report.tables.push(tails::preemption_table(done));
    if let Some(t) = data_tables::data_tables_table(done) {
        report.tables.push(t);
    }
    report.figures.extend(summary_figures("", done));
}

/// The replica column's cell of `d`: CD's copy count, or that the system
/// keeps a single copy.
fn replicas_cell(d: &Done) -> String {
    match (d.record.system, d.record.spec.replicas) {
        (StoreKind::Cd, r) => r.unwrap_or(1).to_string(),
        _ => "1 (unreplicated)".to_owned(),
    }
}

/// The summary table of a set of runs (compare, peers): throughput,
/// goodput, latency, cost per operation, CPU; the CSV also has the tail
/// figures (preemption, the slowest 1 % and 0.1 %), after those. When a
/// run was given a replica count (`--replicas`), an `r` column after the
/// system says how many copies each system keeps.
#[must_use]
pub fn summary_table(name: &str, title: &str, done: &[Done]) -> Table {
    let with_r = done.iter().any(|d| d.record.spec.replicas.is_some());
    let mut t = Table::new(
        name,
        title,
        &[
            "system",
            "kops/s",
            "goodput MB/s",
            "GET p50 µs",
            "GET p99 µs",
            "GET p99.9 µs",
            "PUT p50 µs",
            "PUT p99 µs",
            "PUT p99.9 µs",
            "verbs/GET",
            "verbs/PUT",
            "net B/GET",
            "net B/PUT",
            "CPU µs/op",
            "CPU cores/node",
            "faults/PUT",
            "errors",
        ],
    );
    let tail = tails::summary_columns();
    t.csv_only = tail.len();
    t.columns.extend(tail);
    if with_r {
        t.columns.insert(1, "r".to_owned());
    }
    for d in done {
        let head: Vec<String> = std::iter::once(d.name())
            .chain(with_r.then(|| replicas_cell(d)))
            .collect();
        let Some(f) = d.figures() else {
            let why = match d.record.status {
                RunStatus::Skipped => "not available",
                _ => "failed",
            };
            let mut row = head;
            row.push(why.to_owned());
            row.resize(t.columns.len(), "-".into());
            t.row(row);
            continue;
        };
        t.row(
            head.into_iter()
                .chain([
                    num(f.throughput_ops_s / 1e3),
                    num(f.goodput_mb_s),
                    num(f.get.p50_us),
                    num(f.get.p99_us),
                    num(f.get.p999_us),
                    num(f.put.p50_us),
                    num(f.put.p99_us),
                    num(f.put.p999_us),
                    num(f.get.verbs_per_op),
                    num(f.put.verbs_per_op),
                    num(f.get.remote_bytes_per_op),
                    num(f.put.remote_bytes_per_op),
                    num(f.cpu_us_per_op),
                    num(f.cpu_util_per_node),
                    num(f.put.faults_per_op),
                    f.all.errors.to_string(),
                ])
                .chain(tails::summary_cells(f))
                .collect(),
        );
    }
    if with_r {
        t.notes.push(
            "r: copies of every entry and index slot. CD keeps r on consecutive nodes and a PUT writes them all; the other systems are unreplicated (one copy)."
                .to_owned(),
        );
    }
    t
}

/// Bar charts of throughput, latency percentiles and network bytes per
/// operation, one bar group per measured run.
#[must_use]
pub fn summary_figures(prefix: &str, done: &[Done]) -> Vec<Figure> {
    let measured: Vec<(String, &RunFigures)> = done
        .iter()
        .filter_map(|d| d.figures().map(|f| (d.name(), f)))
        .collect();
    let categories: Vec<String> = measured.iter().map(|(l, _)| l.clone()).collect();
    let points = |get: &dyn Fn(&RunFigures) -> f64| -> Vec<(f64, f64)> {
        measured
            .iter()
            .enumerate()
            .map(|(i, (_, f))| (i as f64, get(f)))
            .collect()
    };
    let mut tp = Figure::new(
        &format!("{prefix}throughput"),
        "Throughput (successful operations per second)",
        FigureKind::Bar,
        "system",
        "kops/s",
    );
    tp.categories.clone_from(&categories);
    tp.series("throughput", points(&|f| f.throughput_ops_s / 1e3));
    let mut lat = Figure::new(
        &format!("{prefix}latency"),
        "Latency percentiles",
        FigureKind::Bar,
        "system",
        "µs",
    );
    lat.categories.clone_from(&categories);
    lat.series("GET p50", points(&|f| f.get.p50_us));
    lat.series("GET p99", points(&|f| f.get.p99_us));
    lat.series("PUT p50", points(&|f| f.put.p50_us));
    lat.series("PUT p99", points(&|f| f.put.p99_us));
    let mut bytes = Figure::new(
        &format!("{prefix}bytes"),
        "Bytes moved between nodes per operation",
        FigureKind::Bar,
        "system",
        "bytes/op",
    );
    bytes.categories = categories;
    bytes.series("GET", points(&|f| f.get.remote_bytes_per_op));
    bytes.series("PUT", points(&|f| f.put.remote_bytes_per_op));
    vec![tp, lat, bytes]
}

/// Most points a latency CDF keeps per line: enough for a smooth curve,
/// few enough to keep results.json and the SVGs small.
const CDF_POINTS: usize = 400;

/// The latency CDFs of `done`'s measured runs, one figure for GETs and one
/// for PUTs, one line per run (named by its system), in µs on a log axis.
#[must_use]
pub fn latency_cdfs(prefix: &str, done: &[Done]) -> Vec<Figure> {
    crate::workload::OpKind::ALL
        .into_iter()
        .map(|kind| {
            let name = kind.name();
            let mut fig = Figure::new(
                &format!("{prefix}latency-cdf-{}", name.to_ascii_lowercase()),
                &format!("{name} latency CDF"),
                FigureKind::Cdf,
                "µs",
                &format!("fraction of {name}s"),
            );
            for d in done {
                let Some(merged) = &d.merged else { continue };
                let h = &merged.kind(kind).latency_ns;
                if h.0.is_empty() {
                    continue;
                }
                let points = thin(h.cdf(), CDF_POINTS)
                    .into_iter()
                    .map(|(ns, q)| (ns / 1e3, q))
                    .collect();
                fig.series(d.name(), points);
            }
            fig
        })
        .collect()
}

/// Adds [`latency_cdfs`] of `done` to `report`.
pub fn add_latency_cdfs(report: &mut Report, prefix: &str, done: &[Done]) {
    report.figures.extend(latency_cdfs(prefix, done));
}

/// At most about `max` of `points`, evenly spaced by index, always keeping
/// the last (the maximum, where a CDF reaches 1).
fn thin(points: Vec<(f64, f64)>, max: usize) -> Vec<(f64, f64)> {
    let step = points.len().div_ceil(max.max(1)).max(1);
    if step == 1 {
        return points;
    }
    let last = points.last().copied();
    let mut kept: Vec<(f64, f64)> = points.into_iter().step_by(step).collect();
    if kept.last().copied() != last {
        kept.extend(last);
    }
    kept
}

/// The median of `values` (the mean of the middle two of an even count);
/// 0 for none.
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => f64::midpoint(values[n / 2 - 1], values[n / 2]),
    }
}

/// Throughput of the first measured run of `system` among `done`.
#[must_use]
pub fn throughput_of(done: &[Done], system: StoreKind) -> Option<f64> {
    runs_of(done, system)
        .next()
        .map(|(_, f)| f.throughput_ops_s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::FigureKind;
    #[test]
    fn latency_figures_get_log_axes() {
        let figs = summary_figures("", &[]);
        let of = |name: &str| figs.iter().find(|f| f.name == name).unwrap();
        assert!(of("latency").log_y());
        assert!(!of("throughput").log_y() && !of("bytes").log_y());
        let cdfs = latency_cdfs("", &[]);
        let names: Vec<&str> = cdfs.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["latency-cdf-get", "latency-cdf-put"]);
        assert!(cdfs.iter().all(|f| f.log_x() && f.kind == FigureKind::Cdf));
    }

    #[test]
    fn medians_take_the_middle() {
        assert_eq!(median(vec![]), 0.0);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn cdfs_are_thinned_to_their_end() {
        let points: Vec<(f64, f64)> = (1..=1000)
            .map(|i| (f64::from(i), f64::from(i) / 1e3))
            .collect();
        let kept = thin(points.clone(), 400);
        assert!(kept.len() <= 401, "{}", kept.len());
        assert_eq!(kept.first(), points.first());
        assert_eq!(kept.last(), Some(&(1000.0, 1.0)));
        assert_eq!(thin(points[..10].to_vec(), 400).len(), 10);
    }
}
