//! Draws [`Figure`]s as SVG and PNG with plotters.
//!
//! Text needs a TrueType font (plotters' `ttf` feature finds one through
//! fontconfig). Where none is usable, figures are drawn without any text —
//! axes, bars and lines only — and the report says so; the numbers are in
//! results.json and the CSVs either way.

use super::{bytes_label, Figure, FigureKind};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const SIZE: (u32, u32) = (900, 560);
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
    {
        let root = SVGBackend::new(&svg, SIZE).into_drawing_area();
        draw(&root, f, text).or_else(|e| if text { draw(&root, f, false) } else { Err(e) })?;
        root.present().map_err(|e| e.to_string())?;
    }
    {
        let root = BitMapBackend::new(&png, SIZE).into_drawing_area();
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

#[allow(
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

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    f: &Figure,
    text: bool,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(err)?;
    match f.kind {
        FigureKind::Bar => bars(root, f, text),
        FigureKind::Line | FigureKind::Cdf => lines(root, f, text),
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
    let tx = |x: f64| if f.log2_x_bytes { x.max(1.0).log2() } else { x };
    let xs = f
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| tx(p.0)));
    let (x0, x1) = range(xs, cdf);
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
        if f.log2_x_bytes {
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
            mesh.x_desc(f.x_label.as_str()).y_desc(f.y_label.as_str());
            if integral {
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

fn bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    f: &Figure,
    text: bool,
) -> Result<(), String> {
    let n = f.categories.len().max(1);
    let (_, y1) = range(
        f.series.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
        true,
    );
    let mut chart = builder(root, f, text)
        .build_cartesian_2d(0.0..n as f64, 0.0..y1)
        .map_err(err)?;
    {
        let mut mesh = chart.configure_mesh();
        mesh.disable_x_mesh()
            .x_labels(0)
            .y_label_formatter(&y_format);
        if text {
            mesh.y_desc(f.y_label.as_str()).x_desc(f.x_label.as_str());
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
        let rects = s.points.iter().map(|&(c, y)| {
            Rectangle::new(
                [(c + left, 0.0), (c + left + width * 0.95, y)],
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
            let (px, py) = chart.backend_coord(&(c as f64 + 0.5, 0.0));
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
}
