//! Draws [`Figure`]s as SVG and PNG with plotters.
//!
//! Text needs a TrueType font (plotters' `ttf` feature finds one through
//! fontconfig). Where none is usable, figures are drawn without any text —
//! axes, bars and lines only — and the report says so; the numbers are in
//! results.json and the CSVs either way.

use super::{bytes_label, time_unit_ns, Figure, FigureKind, Series};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const SIZE: (u32, u32) = (900, 560);
/// A timeline with a second panel is taller; the upper panel takes
/// [`UPPER_SHARE`] of it.
const TALL: (u32, u32) = (900, 760);
const UPPER_SHARE: f64 = 0.55;
/// Markers' lines and labels.
const MARKER: RGBColor = RGBColor(60, 60, 60);
const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
];

/// Whether plotters can lay out text on this machine.
pub fn text_available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| ("sans-serif", 12.0).into_font().box_size("Ag").is_ok())
}

/// Writes `<name>.svg` and `<name>.png` into `dir`.
pub(super) fn render(f: &Figure, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let svg = dir.join(format!("{}.svg", f.name));
    let png = dir.join(format!("{}.png", f.name));
    let text = text_available();
    let size = if f.kind == FigureKind::Timeline && f.lower.is_some() {
        TALL
    } else {
        SIZE
    };
    {
        let root = SVGBackend::new(&svg, size).into_drawing_area();
        draw(&root, f, text).or_else(|e| if text { draw(&root, f, false) } else { Err(e) })?;
        root.present().map_err(|e| e.to_string())?;
    }
    {
        let root = BitMapBackend::new(&png, size).into_drawing_area();
        draw(&root, f, text).or_else(|e| if text { draw(&root, f, false) } else { Err(e) })?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(vec![svg, png])
}

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Ranges padded around data, never empty.
fn range(values: impl Iterator<Item = f64>, from_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if from_zero {
        lo = lo.min(0.0);
    }
    if hi - lo < 1e-12 {
        hi = lo + 1.0;
    }
    let pad = (hi - lo) * 0.05;
    (if from_zero { lo } else { lo - pad }, hi + pad)
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "the signature plotters' label formatters take"
)]
fn y_format(v: &f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A time of `v` units of `ns_per_unit` ns in the unit that reads best:
/// `1 µs`, `250 µs`, `1 ms`, `2.5 s`.
fn time_label(v: f64, ns_per_unit: f64) -> String {
    let ns = v * ns_per_unit;
    let (x, unit) = if ns >= 1e9 {
        (ns / 1e9, "s")
    } else if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns >= 1e3 {
        (ns / 1e3, "µs")
    } else {
        (ns, "ns")
    };
    // Up to three significant digits, without trailing zeros.
    let digits = if x >= 100.0 {
        0
    } else if x >= 10.0 {
        1
    } else {
        2
    };
    let text = format!("{x:.digits$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        &text
    };
    format!("{text} {unit}")
}

/// A decade axis: the range of log10 of the positive `values`, widened to
/// whole decades so every tick is a power of ten.
fn decades(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let (lo, hi) = (lo.log10().floor(), hi.log10().ceil());
    (lo, if hi > lo { hi } else { lo + 1.0 })
}

/// The label of tick `v` (log10 of the value) of a decade axis in
/// `ns_per_unit`: only powers of ten are labelled.
fn decade_label(v: f64, ns_per_unit: f64) -> String {
    if (v - v.round()).abs() < 1e-6 {
        time_label(10f64.powf(v.round()), ns_per_unit)
    } else {
        String::new()
    }
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    f: &Figure,
    text: bool,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(err)?;
    match f.kind {
        FigureKind::Bar => bars(root, f, text),
        FigureKind::Line | FigureKind::Cdf => lines(root, f, text),
        FigureKind::Timeline => timeline(root, f, text),
    }
}

fn builder<'a, 'b, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    f: &Figure,
    text: bool,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(root);
    b.margin(16);
    if text {
        b.caption(&f.title, ("sans-serif", 20))
            .x_label_area_size(48)
            .y_label_area_size(72);
    } else {
        b.x_label_area_size(4).y_label_area_size(4);
    }
    b
}

fn lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    f: &Figure,
    text: bool,
) -> Result<(), String> {
    let cdf = f.kind == FigureKind::Cdf;
    // Log axes are drawn on linear coordinates of the logarithm.
    let x_time = f.x_time_unit_ns().filter(|_| f.log_x());
    let tx = |x: f64| {
        if f.log2_x_bytes {
            x.max(1.0).log2()
        } else if x_time.is_some() {
            x.max(f64::MIN_POSITIVE).log10()
        } else {
            x
        }
    };
    let (x0, x1) = if x_time.is_some() {
        decades(f.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)))
    } else {
        let xs = f
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| tx(p.0)));
        range(xs, cdf)
    };
    let (y0, y1) = if cdf {
        (0.0, 1.02)
    } else {
        range(
            f.series.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
            true,
        )
    };
    let mut chart = builder(root, f, text)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(err)?;
    // Small integer axes (hogs, node counts): a tick per integer.
    let integral = !f.log2_x_bytes
        && x1 - x0 <= 21.0
        && f.series
            .iter()
            .flat_map(|s| &s.points)
            .all(|p| p.0.fract() == 0.0);
    let x_fmt = |v: &f64| {
        if let Some(unit) = x_time {
            decade_label(*v, unit)
        } else if f.log2_x_bytes {
            bytes_label(v.exp2().round())
        } else if integral {
            format!("{v:.0}")
        } else {
            y_format(v)
        }
    };
    {
        let mut mesh = chart.configure_mesh();
        mesh.x_label_formatter(&x_fmt).y_label_formatter(&y_format);
        if text {
            mesh.x_desc(if x_time.is_some() {
                "latency (log scale)"
            } else {
                f.x_label.as_str()
            })
            .y_desc(f.y_label.as_str());
            if integral || x_time.is_some() {
                mesh.x_labels((x1 - x0).ceil() as usize + 1);
            }
        } else {
            mesh.x_labels(0).y_labels(0);
        }
        mesh.draw().map_err(err)?;
    }
    for (i, s) in f
        .series
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.points.is_empty())
    {
        let color = COLORS[i % COLORS.len()];
        let mut pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (tx(x), y)).collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<(f64, f64)> = if cdf {
            let mut p = vec![(x0, 0.0)];
            let mut last = 0.0;
            for &(x, y) in &pts {
                p.push((x, last));
                p.push((x, y));
                last = y;
            }
            p.push((x1, last));
            p
        } else {
            pts.clone()
        };
        let series = chart
            .draw_series(LineSeries::new(path, color.stroke_width(2)))
            .map_err(err)?;
        if text {
            series.label(s.name.as_str()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
        if !cdf {
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(err)?;
        }
    }
    if text && f.series.iter().any(|s| !s.points.is_empty()) {
        chart
            .configure_series_labels()
            .position(if cdf {
                SeriesLabelPosition::LowerRight
            } else {
                legend_corner(f, x0, x1, y1, &tx)
            })
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

/// The upper corner whose quarter of the plot holds fewer points, so the
/// legend hides as little as possible.
fn legend_corner(
    f: &Figure,
    x0: f64,
    x1: f64,
    y1: f64,
    tx: &dyn Fn(f64) -> f64,
) -> SeriesLabelPosition {
    let third = (x1 - x0) / 3.0;
    let (mut left, mut right) = (0, 0);
    for p in f.series.iter().flat_map(|s| &s.points) {
        if p.1 > y1 * 0.7 {
            if tx(p.0) < x0 + third {
                left += 1;
            } else if tx(p.0) > x1 - third {
                right += 1;
            }
        }
    }
    if left > right {
        SeriesLabelPosition::UpperRight
    } else {
        SeriesLabelPosition::UpperLeft
    }
}

/// A timeline: its series over a linear time axis from 0, its lower
/// panel (if any) below on the same axis, and its markers across both,
/// labelled in the upper panel.
fn timeline<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    f: &Figure,
    text: bool,
) -> Result<(), String> {
    let xs = f
        .series
        .iter()
        .chain(f.lower.iter().flat_map(|p| &p.series))
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(f.markers.iter().map(|m| m.x));
    let x = range(xs, true);
    let upper = Pane {
        caption: Some(&f.title),
        y_label: &f.y_label,
        series: &f.series,
        first_color: 0,
        label_markers: true,
    };
    let Some(lower) = &f.lower else {
        return pane(root, f, &upper, x, text);
    };
    let at = (f64::from(root.dim_in_pixel().1) * UPPER_SHARE) as i32;
    let (top, bottom) = root.split_vertically(at);
    pane(&top, f, &upper, x, text)?;
    let below = Pane {
        caption: None,
        y_label: &lower.y_label,
        series: &lower.series,
        first_color: f.series.len(),
        label_markers: false,
    };
    pane(&bottom, f, &below, x, text)
}

/// One panel of a timeline.
struct Pane<'a> {
    caption: Option<&'a str>,
    y_label: &'a str,
    series: &'a [Series],
    /// The colour of its first series (the panels' colours differ).
    first_color: usize,
    label_markers: bool,
}

/// The runs of finite (and, on a log axis, positive) points of `points`,
/// in x order: a bucket without a value leaves a gap in the line.
fn segments(points: &[(f64, f64)], log: bool) -> Vec<Vec<(f64, f64)>> {
    let mut pts = points.to_vec();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
    for (x, y) in pts {
        if y.is_finite() && (!log || y > 0.0) {
            let y = if log { y.log10() } else { y };
            if let Some(run) = out.last_mut() {
                run.push((x, y));
            }
        } else if out.last().is_some_and(|s| !s.is_empty()) {
            out.push(Vec::new());
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

fn pane<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    f: &Figure,
    p: &Pane<'_>,
    (x0, x1): (f64, f64),
    text: bool,
) -> Result<(), String> {
    let y_time = time_unit_ns(p.y_label);
    let ys = p.series.iter().flat_map(|s| s.points.iter().map(|q| q.1));
    let (y0, mut y1) = match y_time {
        Some(_) => decades(ys),
        None => range(ys, true),
    };
    if p.label_markers && !f.markers.is_empty() {
        // Room above the data for the markers' labels.
        y1 += (y1 - y0) * 0.3;
    }
    let mut b = ChartBuilder::on(area);
    b.margin(16);
    if text {
        if let Some(caption) = p.caption {
            b.caption(caption, ("sans-serif", 20));
        }
        b.x_label_area_size(40).y_label_area_size(72);
    } else {
        b.x_label_area_size(4).y_label_area_size(4);
    }
    let mut chart = b.build_cartesian_2d(x0..x1, y0..y1).map_err(err)?;
    {
        let y_fmt = |v: &f64| match y_time {
            Some(unit) => decade_label(*v, unit),
            None => y_format(v),
        };
        let mut mesh = chart.configure_mesh();
        mesh.x_label_formatter(&y_format).y_label_formatter(&y_fmt);
        if text {
            mesh.x_desc(f.x_label.as_str()).y_desc(p.y_label);
            if y_time.is_some() {
                mesh.y_labels((y1 - y0).ceil() as usize + 1);
            }
        } else {
            mesh.x_labels(0).y_labels(0);
        }
        mesh.draw().map_err(err)?;
    }
    for (i, m) in f.markers.iter().enumerate() {
        let style = MARKER.stroke_width(1);
        chart
            .draw_series(DashedLineSeries::new([(m.x, y0), (m.x, y1)], 6, 4, style))
            .map_err(err)?;
        if text && p.label_markers {
            // Staggered, so that labels of close events do not overlap.
            let y = y1 - (y1 - y0) * (0.04 + 0.08 * (i % 3) as f64);
            let font = ("sans-serif", 13).into_font().color(&MARKER);
            let label = EmptyElement::at((m.x, y)) + Text::new(m.label.clone(), (5, 0), font);
            chart.draw_series(std::iter::once(label)).map_err(err)?;
        }
    }
    for (i, s) in p.series.iter().enumerate() {
        let color = COLORS[(i + p.first_color) % COLORS.len()];
        let mut drawn = false;
        for segment in segments(&s.points, y_time.is_some()) {
            let line = chart
                .draw_series(LineSeries::new(segment, color.stroke_width(2)))
                .map_err(err)?;
            if text && !drawn {
                line.label(s.name.as_str()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            }
            drawn = true;
        }
    }
    if text && p.series.iter().any(|s| !s.points.is_empty()) {
        // The end of a run is its steadiest stretch, and its lowest values
        // matter least: the legend goes there, clear of the markers' labels.
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

fn bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    f: &Figure,
    text: bool,
) -> Result<(), String> {
    let n = f.categories.len().max(1);
    let ys = f.series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    // A log axis is drawn on linear coordinates of log10, from a whole
    // decade below the smallest bar; bars of 0 are not drawn on it.
    let y_time = f.y_time_unit_ns().filter(|_| f.log_y());
    let (y0, y1) = match y_time {
        Some(_) => decades(ys),
        None => (0.0, range(ys, true).1),
    };
    let ty = |y: f64| if y_time.is_some() { y.log10() } else { y };
    let mut chart = builder(root, f, text)
        .build_cartesian_2d(0.0..n as f64, y0..y1)
        .map_err(err)?;
    {
        let y_fmt = |v: &f64| match y_time {
            Some(unit) => decade_label(*v, unit),
            None => y_format(v),
        };
        let mut mesh = chart.configure_mesh();
        mesh.disable_x_mesh().x_labels(0).y_label_formatter(&y_fmt);
        if text {
            mesh.x_desc(f.x_label.as_str());
            match y_time {
                Some(_) => mesh
                    .y_desc("latency (log scale)")
                    .y_labels((y1 - y0).ceil() as usize + 1),
                None => mesh.y_desc(f.y_label.as_str()),
            };
        } else {
            mesh.y_labels(0);
        }
        mesh.draw().map_err(err)?;
    }
    let groups = f.series.len().max(1) as f64;
    let width = 0.8 / groups;
    for (i, s) in f.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let left = 0.1 + i as f64 * width;
        let rects = s
            .points
            .iter()
            .filter(|p| y_time.is_none() || p.1 > 0.0)
            .map(|&(c, y)| {
                Rectangle::new(
                    [(c + left, y0), (c + left + width * 0.95, ty(y))],
                    color.filled(),
                )
            });
        let series = chart.draw_series(rects).map_err(err)?;
        if text && f.series.len() > 1 {
            series.label(s.name.as_str()).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled())
            });
        }
    }
    if text {
        if f.series.len() > 1 {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(err)?;
        }
        let style = ("sans-serif", 14).into_font().color(&BLACK);
        for (c, name) in f.categories.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(c as f64 + 0.5, y0));
            let w = i32::try_from(name.chars().count() * 4).unwrap_or(0);
            root.draw(&Text::new(name.clone(), (px - w, py + 8), style.clone()))
                .map_err(err)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_draw_without_text_too() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = Figure::new("bars", "Bars", FigureKind::Bar, "x", "y");
        f.categories = vec!["a".into(), "b".into()];
        f.series("s", vec![(0.0, 1.0), (1.0, 2.0)]);
        let a = dir.path().join("a.svg");
        let root = SVGBackend::new(&a, SIZE).into_drawing_area();
        draw(&root, &f, false).unwrap();
        let mut l = Figure::new("lines", "Lines", FigureKind::Cdf, "x", "y");
        l.series("s", vec![(1.0, 0.5), (2.0, 1.0)]);
        let b = dir.path().join("b.svg");
        let root = SVGBackend::new(&b, SIZE).into_drawing_area();
        draw(&root, &l, false).unwrap();
    }

    /// Latency bars of two systems a thousand times apart, 1 µs to 10 ms.
    fn latency_bars() -> Figure {
        let mut f = Figure::new("latency", "Latency", FigureKind::Bar, "system", "µs");
        f.categories = vec!["CD".into(), "SD".into()];
        f.series("GET p50", vec![(0.0, 1.0), (1.0, 1_000.0)]);
        f.series("GET p99", vec![(0.0, 12.0), (1.0, 10_000.0)]);
        f.series("PUT p50", vec![(0.0, 0.0), (1.0, 250.0)]);
        f
    }

    #[test]
    fn latency_bars_use_a_log_axis_and_render() {
        let f = latency_bars();
        assert!(f.log_y());
        let mut tp = Figure::new("tp", "Throughput", FigureKind::Bar, "system", "kops/s");
        tp.series("throughput", vec![(0.0, 1.0)]);
        assert!(!tp.log_y(), "throughput stays linear");
        assert_eq!(decades([1.0, 10_000.0].into_iter()), (0.0, 4.0));
        let dir = tempfile::tempdir().unwrap();
        for text in [false, text_available()] {
            let svg = dir.path().join(format!("bars-{text}.svg"));
            let root = SVGBackend::new(&svg, SIZE).into_drawing_area();
            draw(&root, &f, text).unwrap();
            root.present().unwrap();
            let drawn = std::fs::read_to_string(&svg).unwrap();
            // Five bars (the PUT p50 of 0 has no place on a log axis).
            assert!(drawn.matches("<rect").count() >= 5, "{text}");
            if text {
                for tick in ["1 µs", "10 µs", "100 µs", "1 ms", "10 ms"] {
                    assert!(drawn.contains(tick), "tick {tick} missing");
                }
            }
        }
        let files = render(&f, dir.path()).unwrap();
        assert!(files.iter().all(|p| p.exists()));
    }

    #[test]
    fn latency_cdfs_use_a_log_axis_and_render() {
        let mut c = Figure::new("cdf", "GET latency CDF", FigureKind::Cdf, "µs", "fraction");
        c.series("CD", vec![(1.5, 0.5), (20.0, 0.99), (900.0, 1.0)]);
        c.series("Redis", vec![(40.0, 0.5), (2_000.0, 1.0)]);
        assert!(c.log_x() && !c.log_y());
        let dir = tempfile::tempdir().unwrap();
        for text in [false, text_available()] {
            let svg = dir.path().join(format!("cdf-{text}.svg"));
            let root = SVGBackend::new(&svg, SIZE).into_drawing_area();
            draw(&root, &c, text).unwrap();
            root.present().unwrap();
            if text {
                let drawn = std::fs::read_to_string(&svg).unwrap();
                assert!(drawn.contains("1 ms"), "decade ticks are labelled");
            }
        }
    }

    #[test]
    fn timelines_draw_two_panels_markers_and_gaps() {
        let mut f = Figure::new(
            "failover",
            "Failover",
            FigureKind::Timeline,
            "time since the run began, s",
            "operations/s",
        );
        f.series("successful", vec![(0.0, 900.0), (0.1, 0.0), (0.2, 950.0)]);
        f.lower = Some(super::super::Panel {
            y_label: "p99 latency, µs".into(),
            series: vec![Series {
                name: "GET p99".into(),
                points: vec![(0.0, 40.0), (0.1, f64::NAN), (0.2, 300_000.0)],
            }],
        });
        for (x, label) in [(0.05, "kill"), (0.15, "view active")] {
            f.markers.push(super::super::Marker {
                x,
                label: label.into(),
            });
        }
        assert!(!f.log_x(), "time runs on a linear axis");
        assert_eq!(
            segments(&f.lower.as_ref().unwrap().series[0].points, true).len(),
            2,
            "a bucket without a value is a gap"
        );
        let dir = tempfile::tempdir().unwrap();
        for text in [false, text_available()] {
            let svg = dir.path().join(format!("timeline-{text}.svg"));
            let root = SVGBackend::new(&svg, TALL).into_drawing_area();
            draw(&root, &f, text).unwrap();
            root.present().unwrap();
            let drawn = std::fs::read_to_string(&svg).unwrap();
            assert!(
                drawn.matches("<polyline").count() >= 3,
                "two lines, a marker"
            );
            if text {
                assert!(drawn.contains("view active") && drawn.contains("1 ms"));
            }
        }
        assert!(render(&f, dir.path()).unwrap().iter().all(|p| p.exists()));
    }

    #[test]
    fn times_read_well() {
        assert_eq!(time_label(1.0, 1e3), "1 µs");
        assert_eq!(time_label(250.0, 1e3), "250 µs");
        assert_eq!(time_label(1_000.0, 1e3), "1 ms");
        assert_eq!(time_label(2_500.0, 1e6), "2.5 s");
        assert_eq!(time_label(0.1, 1e3), "100 ns");
        assert_eq!(decade_label(2.0, 1e3), "100 µs");
        assert_eq!(decade_label(2.5, 1e3), "");
    }
}
