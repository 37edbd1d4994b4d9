//! The report of a `failover` run: the three times, the restore, the
//! phases, the time series (CSV) and its figure.

use super::analysis::{Marks, Phase, Row, SliceFigures, SERVED};
use super::driver::Outcome;
use crate::launcher::Fabric;
use crate::report::{bytes_label, num, Figure, FigureKind, Marker, Panel, Series, Table};

/// What the tables need to know about the run besides its buckets.
pub(super) struct Setting {
    /// The lost node.
    pub victim: usize,
    /// The fabric (how the loss was made).
    pub fabric: Fabric,
    /// Copies of every share.
    pub replicas: usize,
    /// `data_bytes_per_node` of the run's configuration.
    pub data_bytes_per_node: usize,
}

/// `v` in s with two decimals, `-` if unknown.
fn secs(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"))
}

/// The events of the run and the three times.
pub(super) fn times(m: &Marks, s: &Setting) -> Table {
    let mut t = Table::new(
        "failover",
        &format!(
            "Failover: node {} lost and replaced (times in s since the run began)",
            s.victim
        ),
        &["event", "t (s)", "since", "took (s)", "what"],
    );
    let how = match s.fabric {
        Fabric::Shm => {
            "its regions declared lost (every process refuses their verbs), then its process killed"
        }
        _ => "its process killed (SIGKILL)",
    };
    t.row(vec![
        "loss".into(),
        secs(Some(m.kill_s)),
        "-".into(),
        "-".into(),
        format!("node {}: {how}", s.victim),
    ]);
    t.row(vec![
        "detect".into(),
        secs(m.detect_s),
        "loss".into(),
        secs(m.detect()),
        "the first ViewChanging a survivor saw".into(),
    ]);
    t.row(vec![
        "serve again".into(),
        secs(m.serve_s),
        "loss".into(),
        secs(m.serve_again()),
        format!(
            "the start of the first {} ms bucket from the detection on without a refusal and above {:.0} % of the median before the loss ({} ops/s)",
            num(m.bucket_s * 1e3),
            SERVED * 100.0,
            num(m.baseline_ops_s)
        ),
    ]);
    t.row(vec![
        "rejoin start".into(),
        secs(m.spawn_s),
        "-".into(),
        "-".into(),
        format!("the replacement process of node {} started", s.victim),
    ]);
    t.row(vec![
        "restore done".into(),
        secs(m.restored_s),
        "rejoin start".into(),
        secs(m.restore()),
        format!(
            "Node::rejoin returned: {} copies of every share again, the node active",
            s.replicas
        ),
    ]);
    t.row(vec![
        "stop".into(),
        secs(Some(m.stop_s)),
        "-".into(),
        "-".into(),
        format!(
            "{} successful operations ended after the restore",
            m.ok_after_restore
        ),
    ]);
    t
}

/// What the replacement's restore copied.
pub(super) fn restore(o: &Outcome, s: &Setting) -> Table {
    let mut t = Table::new(
        "restore",
        "Restore: what the replacement copied from the primaries (RestoreFigures)",
        &[
            "node",
            "rejoin call (s)",
            "index slots",
            "data slots",
            "bytes read",
            "read",
            "recopies",
            "tables held",
        ],
    );
    let held = s.data_bytes_per_node as f64 * s.replicas as f64;
    let row = if let Some(r) = &o.restore {
        vec![
            r.node.to_string(),
            secs(Some(
                (r.returned_us.saturating_sub(r.called_us)) as f64 / 1e6,
            )),
            r.index_slots.to_string(),
            r.data_slots.to_string(),
            r.bytes_read.to_string(),
            bytes_label(r.bytes_read as f64),
            r.recopies.to_string(),
            bytes_label(held),
        ]
    } else {
        let mut row = vec![s.victim.to_string()];
        row.resize(7, "-".into());
        row.push(bytes_label(held));
        row
    };
    t.row(row);
    t.notes.push(format!(
        "The restore copies every slot of every table the node holds ({} copies of {} of data tables each), used or not, and reads each chunk twice (copy, then verify); \"rejoin call\" is the time inside Node::rejoin, two view changes and their drains included.",
        s.replicas,
        bytes_label(s.data_bytes_per_node as f64)
    ));
    t
}

fn latency_cells(us: Option<(f64, f64)>) -> [String; 2] {
    us.map_or_else(
        || ["-".into(), "-".into()],
        |(p50, p99)| [num(p50), num(p99)],
    )
}

/// Throughput, latency and refusals per phase of the run.
pub(super) fn phases(phases: &[Phase]) -> Table {
    let mut t = Table::new(
        "phases",
        "Phases of the run (buckets that start in each)",
        &[
            "phase",
            "from (s)",
            "to (s)",
            "median ops/s",
            "GET p50 µs",
            "GET p99 µs",
            "PUT p50 µs",
            "PUT p99 µs",
            "refused",
            "failed",
        ],
    );
    for p in phases {
        let f: &SliceFigures = &p.figures;
        let mut row = vec![
            p.name.to_owned(),
            secs(Some(p.from_s)),
            secs(Some(p.to_s)),
            num(p.median_ops_s),
        ];
        row.extend(latency_cells(f.get_us));
        row.extend(latency_cells(f.put_us));
        row.push(f.refused().to_string());
        row.push(f.failed.to_string());
        t.row(row);
    }
    t
}

/// The time series, one row per bucket (CSV only).
pub(super) fn series(rows: &[Row]) -> Table {
    let mut t = Table::new(
        "timeline",
        "Time series",
        &[
            "t_s",
            "ok_per_s",
            "get_ok",
            "put_ok",
            "get_p50_us",
            "get_p99_us",
            "put_p50_us",
            "put_p99_us",
            "view_changing",
            "no_quorum",
            "failed",
        ],
    );
    let cell = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.1}"));
    for r in rows {
        let f = &r.slice;
        t.row(vec![
            format!("{:.3}", r.t_s),
            format!("{:.0}", r.ok_per_s),
            f.get_ok.to_string(),
            f.put_ok.to_string(),
            cell(f.get_us.map(|q| q.0)),
            cell(f.get_us.map(|q| q.1)),
            cell(f.put_us.map(|q| q.0)),
            cell(f.put_us.map(|q| q.1)),
            f.view_changing.to_string(),
            f.no_quorum.to_string(),
            f.failed.to_string(),
        ]);
    }
    t.notes.push(
        "One row per bucket, all nodes added up: t_s is the bucket's start in s since the run began; ok_per_s the successful operations per second; the latencies (µs) are of the successful operations and empty where there were none; view_changing and no_quorum count refusals, failed every other error."
            .into(),
    );
    t
}

/// Throughput and p99 over time, with the run's events.
pub(super) fn figure(rows: &[Row], m: &Marks, victim: usize) -> Figure {
    let mut f = Figure::new(
        "failover",
        &format!("Node {victim} lost and replaced: throughput and p99 latency"),
        FigureKind::Timeline,
        "seconds since the run began",
        "operations/s",
    );
    let per_s = 1.0 / m.bucket_s;
    let points = |get: &dyn Fn(&Row) -> f64| -> Vec<(f64, f64)> {
        rows.iter().map(|r| (r.t_s, get(r))).collect()
    };
    f.series("successful", points(&|r| r.ok_per_s));
    f.series("refused", points(&|r| r.slice.refused() as f64 * per_s));
    f.series("failed", points(&|r| r.slice.failed as f64 * per_s));
    let p99 = |us: Option<(f64, f64)>| us.map_or(f64::NAN, |q| q.1);
    f.lower = Some(Panel {
        y_label: "p99 latency of successful operations, µs".into(),
        series: vec![
            Series {
                name: "GET p99".into(),
                points: points(&|r| p99(r.slice.get_us)),
            },
            Series {
                name: "PUT p99".into(),
                points: points(&|r| p99(r.slice.put_us)),
            },
        ],
    });
    let events = [
        (Some(m.kill_s), "kill"),
        (m.serve_s, "view active"),
        (m.spawn_s, "rejoin start"),
        (m.restored_s, "restore done"),
    ];
    for (at, label) in events {
        if let Some(x) = at {
            f.markers.push(Marker {
                x,
                label: label.into(),
            });
        }
    }
    f
}
