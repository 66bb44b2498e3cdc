//! PNG charts of time ratios: one group of up to three horizontal bars per row, with a line at
//! 1 (left of it: the first of the pair is faster).
//!
//! Text is drawn with plotters' `ab_glyph` backend from DejaVu Sans Mono embedded in the binary
//! (`bench/assets/`, Bitstream Vera license), so neither building nor running needs fontconfig,
//! freetype or any installed font.

use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::FontStyle;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::{BenchError, Result};

/// Rows of space under the bars for the legend.
const LEGEND_ROWS: f64 = 3.0;

/// The embedded font.
const FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");

/// Registers [`FONT`] as plotters' `sans-serif` (once per process).
fn register_font() -> Result<()> {
    static DONE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
            .map_err(|_| "the embedded font could not be parsed".to_owned())
    })
    .clone()
    .map_err(BenchError::Chart)
}

/// One bar group: label and up to three ratios (absent where a path was not timed).
#[derive(Clone, Debug, PartialEq)]
pub struct Bars {
    /// The row's name.
    pub label: String,
    /// The ratios, in the order of the series names given to [`draw_bars`].
    pub ratios: [Option<f64>; 3],
}

fn err<E: std::fmt::Display>(e: E) -> BenchError {
    BenchError::Chart(e.to_string())
}

/// Draws groups of horizontal ratio bars (one bar per series present, values printed, a line
/// at 1) to `path` (PNG), 1400 px wide, 30 px per group. `series` names `Bars::ratios` in
/// order; a series with no value in any group gets no legend entry. No groups: a chart that
/// says so.
///
/// # Errors
/// [`BenchError::Chart`] if the font or the PNG cannot be written.
pub fn draw_bars(title: &str, groups: &[Bars], series: &[&str; 3], path: &Path) -> Result<()> {
    register_font()?;
    let row_h = 30u32;
    // LEGEND_ROWS empty rows under the bars hold the legend.
    let (w, h) = (
        1400u32,
        140 + row_h * (groups.len().max(1) as u32 + LEGEND_ROWS as u32),
    );
    let root = BitMapBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    if groups.is_empty() {
        root.draw(&Text::new(title, (20, 20), ("sans-serif", 20).into_font()))
            .map_err(err)?;
        root.draw(&Text::new(
            "no ratios to show: fewer than two paths were timed in every case",
            (20, 70),
            ("sans-serif", 16).into_font(),
        ))
        .map_err(err)?;
        root.present().map_err(err)?;
        return Ok(());
    }
    let max = groups
        .iter()
        .flat_map(|g| g.ratios.iter().flatten())
        .fold(1.0f64, |a, &b| a.max(b));
    let x_max = (max * 1.15).clamp(1.5, 6.0);
    let rows = groups.len() as f64;
    let label_w = 9 * groups.iter().map(|g| g.label.len()).max().unwrap_or(10) as u32 + 20;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(label_w.min(700))
        .build_cartesian_2d(0.0..x_max, -LEGEND_ROWS..rows)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_desc("time ratio (< 1: the first path is faster)")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    let colors = [
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
    ];
    for (s, name) in series.iter().enumerate() {
        if groups.iter().all(|g| g.ratios[s].is_none()) {
            continue;
        }
        let color = colors[s];
        let rects = groups.iter().enumerate().filter_map(move |(i, g)| {
            let v = g.ratios[s]?;
            let top = rows - i as f64 - 0.12 - 0.25 * s as f64;
            Some(Rectangle::new(
                [(0.0, top - 0.22), (v.min(x_max), top)],
                color.filled(),
            ))
        });
        chart
            .draw_series(rects)
            .map_err(err)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
        let values = groups.iter().enumerate().filter_map(move |(i, g)| {
            let v = g.ratios[s]?;
            let top = rows - i as f64 - 0.12 - 0.25 * s as f64;
            Some(Text::new(
                format!("{v:.2}"),
                (v.min(x_max * 0.93) + 0.01 * x_max, top - 0.02),
                ("sans-serif", 11).into_font(),
            ))
        });
        chart.draw_series(values).map_err(err)?;
    }
    chart
        .draw_series(LineSeries::new(
            [(1.0, -LEGEND_ROWS), (1.0, rows)],
            BLACK.stroke_width(2),
        ))
        .map_err(err)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    // Group labels, right-aligned left of the plot at each group's middle.
    let style = ("sans-serif", 14)
        .into_font()
        .into_text_style(&root)
        .pos(Pos::new(HPos::Right, VPos::Center));
    for (i, g) in groups.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(0.0, rows - i as f64 - 0.5));
        root.draw(&Text::new(g.label.clone(), (x - 8, y), style.clone()))
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png_size(path: &Path) -> (u32, u32) {
        let b = std::fs::read(path).unwrap();
        assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
        let be = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        (be(16), be(20))
    }

    #[test]
    fn chart_file_is_written_with_one_row_per_group() {
        let dir = tempfile::tempdir().unwrap();
        let groups = [
            Bars {
                label: "bert-base.ffn-up.bias-gelu".into(),
                ratios: [Some(1.25), Some(0.9), None],
            },
            Bars {
                label: "llama3-8b.gate-up.swiglu".into(),
                ratios: [None, None, Some(1.1)],
            },
        ];
        let path = dir.path().join("ratios.png");
        draw_bars("title", &groups, &["a", "b", "c"], &path).unwrap();
        assert_eq!(png_size(&path), (1400, 140 + (2 + 3) * 30));
        // Text was drawn: labels make the file far larger than bars alone would.
        assert!(std::fs::metadata(&path).unwrap().len() > 10_000);
        let empty = dir.path().join("empty.png");
        draw_bars("title", &[], &["a", "b", "c"], &empty).unwrap();
        assert_eq!(png_size(&empty), (1400, 140 + (1 + 3) * 30));
    }
}
