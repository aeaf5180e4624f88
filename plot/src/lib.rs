//! Line charts as PNG files: `nvsh bench --plot` and `nvsh plot` (time and bus bandwidth
//! against message size), `nvsh-gpt plot` (losses against step). A [`Figure`] is a title and a
//! grid of [`Panel`]s, each with its axes and [`Series`]; [`write`] draws it with plotters'
//! bitmap backend and writes the PNG whole or not at all ([`atomic_file`], which `nvsh-gpt`'s
//! checkpoints and exports use too).
//!
//! Text needs a TrueType font read at run time ([`font`]); without one the chart is drawn
//! without text and [`Rendered::warning`] says why.

pub mod atomic_file;
pub mod font;
pub mod png_file;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};

pub use atomic_file::{probe_writable, write_atomic, AtomicFile, CommitError};
pub use font::{font, FontState, FONT_ENV};
pub use png_file::{check_writable, read_png, Image};

/// How an axis maps values: linear, or logarithmic with ticks at powers of 2 (byte sizes) or
/// at 1, 2 and 5 times powers of 10.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Linear,
    Log2,
    Log10,
}

/// One axis: its name, scale and how a tick value is written.
#[derive(Debug, Clone)]
pub struct Axis {
    pub label: String,
    pub scale: Scale,
    pub format: fn(f64) -> String,
}

/// Solid, dashed or dotted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stroke {
    Solid,
    Dashed,
    Dotted,
}

impl Stroke {
    /// Dash length and gap, pixels; None for a solid line.
    fn dashes(self) -> Option<(u32, u32)> {
        match self {
            Stroke::Solid => None,
            Stroke::Dashed => Some((8, 6)),
            Stroke::Dotted => Some((2, 4)),
        }
    }
}

/// Where a panel's legend sits: in the corner its lines leave empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corner {
    UpperLeft,
    UpperRight,
    LowerLeft,
    LowerRight,
}

/// One line: a legend entry, its points (x, y) in data units, its stroke and colour (an index
/// into the palette, so that one candidate keeps its colour across panels), and whether each
/// point gets a dot (for few, measured points; a dense curve reads better without).
#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub stroke: Stroke,
    pub color: usize,
    pub markers: bool,
}

/// One chart. `key`: legend entries for what a stroke means where several series share it
/// (solid: back to back, dotted: after compute), drawn in grey after the series' entries.
#[derive(Debug, Clone)]
pub struct Panel {
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
    pub legend: Corner,
    pub key: Vec<(String, Stroke)>,
}

/// A title over a grid of panels, `columns` wide, filled row by row.
#[derive(Debug, Clone)]
pub struct Figure {
    pub title: String,
    pub panels: Vec<Panel>,
    pub columns: usize,
    pub panel_size: (u32, u32),
}

/// Height of the figure's title band, pixels.
pub const TITLE_HEIGHT: u32 = 48;
/// The background colour.
pub const BACKGROUND: [u8; 3] = [255, 255, 255];
/// Space between a panel's edge and its plotting area: caption above, tick labels and axis name
/// left and below (pixels; the tests look inside these bounds).
pub const PANEL_MARGIN: u32 = 12;
pub const CAPTION_HEIGHT: u32 = 30;
pub const X_LABEL_AREA: u32 = 50;
pub const Y_LABEL_AREA: u32 = 78;

impl Figure {
    /// Rows of panels.
    pub fn rows(&self) -> usize {
        self.panels.len().div_ceil(self.columns.max(1)).max(1)
    }

    /// Width and height of the image, pixels.
    pub fn size(&self) -> (u32, u32) {
        let cols = self.columns.clamp(1, self.panels.len().max(1)) as u32;
        (
            cols * self.panel_size.0,
            TITLE_HEIGHT + self.rows() as u32 * self.panel_size.1,
        )
    }

    /// The plotting area of panel `i` (x range, y range in pixels): where its lines are drawn,
    /// inside the caption, tick labels and margins. An upper bound; plotters may shrink it by a
    /// few pixels.
    pub fn plot_area(&self, i: usize) -> ((u32, u32), (u32, u32)) {
        let cols = self.columns.max(1);
        let (w, h) = self.panel_size;
        let (x0, y0) = ((i % cols) as u32 * w, TITLE_HEIGHT + (i / cols) as u32 * h);
        (
            (x0 + PANEL_MARGIN + Y_LABEL_AREA, x0 + w - PANEL_MARGIN),
            (
                y0 + PANEL_MARGIN + CAPTION_HEIGHT,
                y0 + h - PANEL_MARGIN - X_LABEL_AREA,
            ),
        )
    }
}

/// What [`write`] drew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub width: u32,
    pub height: u32,
    /// The font the text was drawn with; None when the chart has no text.
    pub font: Option<PathBuf>,
    /// Why there is no text, when there is none.
    pub warning: Option<String>,
}

/// Why a plot could not be made.
#[derive(Debug)]
pub enum PlotError {
    Draw(String),
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl std::fmt::Display for PlotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlotError::Draw(why) => write!(f, "drawing the plot failed: {why}"),
            PlotError::Write { path, source } => write!(
                f,
                "cannot write the plot to {} ({source}); give a path in an existing, writable \
                 directory",
                path.display()
            ),
        }
    }
}

impl std::error::Error for PlotError {}

/// Draws `fig` and writes it to `path` as PNG, through a temporary file renamed onto `path`.
pub fn write(fig: &Figure, path: &Path) -> Result<Rendered, PlotError> {
    let (png, rendered) = render(fig)?;
    atomic_file::write_atomic(path, &png).map_err(|source| PlotError::Write {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(rendered)
}

/// Draws `fig` into PNG bytes, with text when a font is there.
pub fn render(fig: &Figure) -> Result<(Vec<u8>, Rendered), PlotError> {
    let (font, warning) = match font() {
        FontState::Loaded(p) => (Some(p.clone()), None),
        FontState::Missing(why) => (None, Some(why.clone())),
    };
    let (width, height) = fig.size();
    let rgb = render_rgb(fig, font.is_some()).map_err(PlotError::Draw)?;
    let png = png_file::encode(&rgb, width, height).map_err(|e| PlotError::Draw(e.to_string()))?;
    Ok((
        png,
        Rendered {
            width,
            height,
            font,
            warning,
        },
    ))
}

/// Colours that stay apart on white and for most colour-blind readers (Tableau 10), none grey.
const PALETTE: [(u8, u8, u8); 9] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (188, 189, 34),
    (23, 190, 207),
];

/// The colour of [`Panel::key`]'s entries, apart from every series colour.
pub const KEY_RGB: [u8; 3] = [64, 64, 64];

/// The colour of [`Series::color`] `i`, as the PNG holds it.
pub fn series_rgb(i: usize) -> [u8; 3] {
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    [r, g, b]
}

fn color(i: usize) -> RGBColor {
    let [r, g, b] = series_rgb(i);
    RGBColor(r, g, b)
}

/// Draws into an RGB buffer; `text` false leaves out every piece of text (no font to draw it).
fn render_rgb(fig: &Figure, text: bool) -> Result<Vec<u8>, String> {
    let (w, h) = fig.size();
    let mut buf = vec![255u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (top, body) = root.split_vertically(TITLE_HEIGHT);
        if text {
            let style = TextStyle::from((font::FAMILY, 22).into_font())
                .pos(Pos::new(HPos::Center, VPos::Center));
            top.draw_text(&fig.title, &style, (w as i32 / 2, TITLE_HEIGHT as i32 / 2))
                .map_err(|e| e.to_string())?;
        }
        let cols = fig.columns.clamp(1, fig.panels.len().max(1));
        let areas = body.split_evenly((fig.rows(), cols));
        for (panel, area) in fig.panels.iter().zip(areas.iter()) {
            draw_panel(area, panel, text)?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(buf)
}

/// The value's position on the axis: log scales are drawn in log10 space.
fn to_axis(scale: Scale, v: f64) -> f64 {
    match scale {
        Scale::Linear => v,
        Scale::Log2 | Scale::Log10 => v.log10(),
    }
}

fn from_axis(scale: Scale, t: f64) -> f64 {
    match scale {
        Scale::Linear => t,
        Scale::Log2 | Scale::Log10 => 10f64.powf(t),
    }
}

/// Whether a value can be drawn on the scale (finite; positive on a log scale).
fn drawable(scale: Scale, v: f64) -> bool {
    v.is_finite() && (scale == Scale::Linear || v > 0.0)
}

/// The axis range (in axis units) around `values`, with a margin; a default when empty.
fn axis_range(scale: Scale, values: impl Iterator<Item = f64>) -> (f64, f64) {
    let t: Vec<f64> = values
        .filter(|&v| drawable(scale, v))
        .map(|v| to_axis(scale, v))
        .collect();
    let (lo, hi) = t
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    // A flat series still gets a visible span: a tenth of a decade, or of its value.
    let min_span = match scale {
        Scale::Linear => (hi.abs() * 0.1).max(1e-9),
        _ => 0.1,
    };
    let span = (hi - lo).max(min_span);
    let mid = (hi + lo) / 2.0;
    let (lo, hi) = (mid - span / 2.0, mid + span / 2.0);
    (lo - span * 0.06, hi + span * 0.06)
}

/// At most this many labelled ticks per axis.
const MAX_TICKS: usize = 10;

/// Tick positions (axis units) inside `lo..hi`.
fn ticks(scale: Scale, (lo, hi): (f64, f64)) -> Vec<f64> {
    match scale {
        Scale::Linear => {
            let raw = (hi - lo) / 6.0;
            let mag = 10f64.powf(raw.log10().floor());
            let step = [1.0, 2.0, 2.5, 5.0, 10.0]
                .iter()
                .map(|m| m * mag)
                .find(|&s| (hi - lo) / s <= MAX_TICKS as f64)
                .unwrap_or(10.0 * mag);
            let mut out = Vec::new();
            let mut t = (lo / step).ceil() * step;
            while t <= hi {
                // -0 and values like 1e-17 from the steps print as 0.
                out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
                t += step;
            }
            out
        }
        Scale::Log2 => {
            let (a, b) = (
                (from_axis(scale, lo)).log2().ceil() as i32,
                (from_axis(scale, hi)).log2().floor() as i32,
            );
            let count = (b - a + 1).max(1) as usize;
            let every = count.div_ceil(MAX_TICKS).max(1);
            (a..=b)
                .step_by(every)
                .map(|k| to_axis(scale, 2f64.powi(k)))
                .collect()
        }
        Scale::Log10 => {
            let (a, b) = (lo.floor() as i32, hi.ceil() as i32);
            let decades = (b - a).max(1) as usize;
            let mantissas: &[f64] = if decades <= 3 {
                &[1.0, 2.0, 5.0]
            } else {
                &[1.0]
            };
            let every = decades.div_ceil(MAX_TICKS).max(1);
            let mut out = Vec::new();
            for k in (a..=b).step_by(every) {
                for m in mantissas {
                    let t = (m * 10f64.powi(k)).log10();
                    if t >= lo && t <= hi {
                        out.push(t);
                    }
                }
            }
            out
        }
    }
}

/// A linear axis (in axis units) with the ticks [`ticks`] chose; plotters' own picks its
/// ticks itself, and its tick-binding wrapper loses the label formatter.
struct TickedAxis {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Ranged for TickedAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, (from, to): (i32, i32)) -> i32 {
        let f = (v - self.lo) / (self.hi - self.lo);
        from + (f * f64::from(to - from)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        // Bold grid lines at the ticks; no light lines between them.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

fn ticked(scale: Scale, (lo, hi): (f64, f64)) -> TickedAxis {
    TickedAxis {
        lo,
        hi,
        ticks: ticks(scale, (lo, hi)),
    }
}

fn draw_panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    p: &Panel,
    text: bool,
) -> Result<(), String> {
    let xr = axis_range(
        p.x.scale,
        p.series.iter().flat_map(|s| s.points.iter().map(|q| q.0)),
    );
    let yr = axis_range(
        p.y.scale,
        p.series.iter().flat_map(|s| s.points.iter().map(|q| q.1)),
    );
    let mut builder = ChartBuilder::on(area);
    builder.margin(PANEL_MARGIN);
    if text {
        builder
            .caption(&p.title, (font::FAMILY, 18))
            .x_label_area_size(X_LABEL_AREA)
            .y_label_area_size(Y_LABEL_AREA);
    } else {
        // The same plotting area as with text, so that a plot's layout does not depend on
        // the font being there; margins instead of label areas, since plotters draws tick
        // labels in those (and any text fails without a font).
        builder
            .margin_top(PANEL_MARGIN + CAPTION_HEIGHT)
            .margin_left(PANEL_MARGIN + Y_LABEL_AREA)
            .margin_bottom(PANEL_MARGIN + X_LABEL_AREA);
    }
    let mut chart = builder
        .build_cartesian_2d(ticked(p.x.scale, xr), ticked(p.y.scale, yr))
        .map_err(|e| e.to_string())?;
    let (xs, ys) = (p.x.scale, p.y.scale);
    let (xf, yf) = (p.x.format, p.y.format);
    let x_fmt = move |t: &f64| xf(from_axis(xs, *t));
    let y_fmt = move |t: &f64| yf(from_axis(ys, *t));
    let mut mesh = chart.configure_mesh();
    mesh.bold_line_style(RGBColor(225, 225, 225))
        .axis_style(RGBColor(90, 90, 90));
    if text {
        mesh.x_desc(p.x.label.as_str())
            .y_desc(p.y.label.as_str())
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .label_style((font::FAMILY, 14))
            .axis_desc_style((font::FAMILY, 15));
    }
    mesh.draw().map_err(|e| e.to_string())?;
    if !text {
        // The axes are drawn with the label areas; without them, a frame.
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(xr.0, yr.0), (xr.1, yr.1)],
                RGBColor(90, 90, 90),
            )))
            .map_err(|e| e.to_string())?;
    }

    // Lines drawn, and legend entries among them.
    let (mut drawn, mut entries) = (0, 0);
    for s in &p.series {
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|&&(x, y)| drawable(xs, x) && drawable(ys, y))
            .map(|&(x, y)| (to_axis(xs, x), to_axis(ys, y)))
            .collect();
        if pts.is_empty() {
            continue;
        }
        drawn += 1;
        let c = color(s.color);
        let style = c.stroke_width(2);
        if s.markers {
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                .map_err(|e| e.to_string())?;
        }
        let ann = match s.stroke.dashes() {
            // Segment by segment: plotters joins a wide polyline with unbounded miters, so a
            // one-step spike (a loss curve's) drew a miter far outside the plotting area.
            None => chart
                .draw_series(
                    pts.windows(2)
                        .map(|w| PathElement::new(vec![w[0], w[1]], style)),
                )
                .map_err(|e| e.to_string())?,
            Some((dash, gap)) => chart
                .draw_series(DashedLineSeries::new(pts, dash, gap, style))
                .map_err(|e| e.to_string())?,
        };
        // A series without a label has no legend entry (a key entry stands for it).
        if !s.label.is_empty() {
            entries += 1;
            ann.label(s.label.as_str())
                .legend(legend_sample(s.stroke, style));
        }
    }
    if drawn > 0 {
        entries += p.key.len();
        let [r, g, b] = KEY_RGB;
        let style = RGBColor(r, g, b).stroke_width(2);
        for (label, stroke) in &p.key {
            chart
                .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())
                .map_err(|e| e.to_string())?
                .label(label.as_str())
                .legend(legend_sample(*stroke, style));
        }
    }
    if text && entries > 0 {
        let pos = match p.legend {
            Corner::UpperLeft => SeriesLabelPosition::UpperLeft,
            Corner::UpperRight => SeriesLabelPosition::UpperRight,
            Corner::LowerLeft => SeriesLabelPosition::LowerLeft,
            Corner::LowerRight => SeriesLabelPosition::LowerRight,
        };
        chart
            .configure_series_labels()
            .position(pos)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(160, 160, 160))
            .label_font((font::FAMILY, 14))
            .draw()
            .map_err(|e| e.to_string())?;
    }
    if text && drawn == 0 {
        let (w, h) = area.dim_in_pixel();
        let style = TextStyle::from((font::FAMILY, 16).into_font())
            .pos(Pos::new(HPos::Center, VPos::Center));
        area.draw_text("no results to draw", &style, (w as i32 / 2, h as i32 / 2))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// A legend entry's sample of `stroke`: a short line.
fn legend_sample<DB: DrawingBackend>(
    stroke: Stroke,
    style: ShapeStyle,
) -> impl Fn((i32, i32)) -> DynElement<'static, DB, (i32, i32)> {
    move |(x, y)| {
        let path = vec![(x, y), (x + 22, y)];
        match stroke.dashes() {
            None => PathElement::new(path, style).into_dyn(),
            Some((dash, gap)) => DashedPathElement::new(path, dash, gap, style).into_dyn(),
        }
    }
}

/// `t` as a UTC calendar date, YYYY-MM-DD.
pub fn utc_date(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    // Howard Hinnant's days-to-civil: the proleptic Gregorian calendar without a date crate.
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Today's UTC date, YYYY-MM-DD.
pub fn today() -> String {
    utc_date(std::time::SystemTime::now())
}

/// A tick value in few characters: 0.5, 12, 350, 1.2e4.
pub fn short_number(v: f64) -> String {
    let a = v.abs();
    if v == 0.0 {
        "0".into()
    } else if !(1e-3..1e5).contains(&a) {
        format!("{v:.0e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else {
        // Up to 3 significant digits, trailing zeros dropped.
        let digits = (2 - a.log10().floor() as i32).max(0) as usize;
        let s = format!("{v:.digits$}");
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn figure(series: Vec<Series>) -> Figure {
        let axis = |scale| Axis {
            label: "x".into(),
            scale,
            format: short_number,
        };
        Figure {
            title: "t".into(),
            panels: vec![
                Panel {
                    title: "a".into(),
                    x: axis(Scale::Log2),
                    y: axis(Scale::Log10),
                    series: series.clone(),
                    legend: Corner::UpperLeft,
                    key: Vec::new(),
                },
                Panel {
                    title: "b".into(),
                    x: axis(Scale::Linear),
                    y: axis(Scale::Linear),
                    series,
                    legend: Corner::UpperRight,
                    key: Vec::new(),
                },
            ],
            columns: 2,
            panel_size: (400, 300),
        }
    }

    fn line(color: usize, stroke: Stroke) -> Series {
        Series {
            label: "s".into(),
            points: vec![(4096.0, 2.0), (65536.0, 5.0), (1048576.0, 60.0)],
            stroke,
            color,
            markers: stroke == Stroke::Solid,
        }
    }

    /// With or without text, the lines land inside each panel's plotting area, in their
    /// colours; an empty panel draws no colour.
    #[test]
    fn lines_are_drawn_inside_the_plot_areas_with_and_without_text() {
        for text in [true, false] {
            if text && !matches!(font(), FontState::Loaded(_)) {
                continue; // no font on this machine: the text case cannot run
            }
            let fig = figure(vec![
                line(0, Stroke::Solid),
                line(3, Stroke::Dashed),
                line(5, Stroke::Dotted),
            ]);
            let (w, h) = fig.size();
            assert_eq!((w, h), (800, TITLE_HEIGHT + 300));
            let rgb = render_rgb(&fig, text).unwrap();
            let img = Image {
                width: w,
                height: h,
                rgb,
            };
            for i in 0..2 {
                let (xr, yr) = fig.plot_area(i);
                let n = img.count_coloured(xr, yr);
                assert!(n > 200, "text {text}, panel {i}: {n} coloured pixels");
                // Left of the plotting area: tick labels with text, blank without (drawing
                // text there would fail without a font, even where this process has one).
                let labels = img.count_unlike(
                    (xr.0 - Y_LABEL_AREA + 4, xr.0 - 4),
                    (yr.0, yr.1),
                    BACKGROUND,
                );
                assert_eq!(labels > 0, text, "panel {i}: {labels} label pixels");
            }
            // Nothing coloured outside the plot areas but the legend's samples.
            let title = img.count_coloured((0, w), (0, TITLE_HEIGHT));
            assert_eq!(title, 0, "text {text}");
            let empty = figure(vec![]);
            let img = Image {
                width: w,
                height: h,
                rgb: render_rgb(&empty, text).unwrap(),
            };
            assert_eq!(img.count_coloured((0, w), (0, h)), 0, "text {text}");
        }
    }

    /// Pixels of exactly `rgb` in the image of `fig` (with text or without).
    fn pixels_of(fig: &Figure, text: bool, rgb: [u8; 3]) -> usize {
        let (w, h) = fig.size();
        let img = Image {
            width: w,
            height: h,
            rgb: render_rgb(fig, text).unwrap(),
        };
        (0..h)
            .flat_map(|y| (0..w).map(move |x| (x, y)))
            .filter(|&(x, y)| img.pixel(x, y) == rgb)
            .count()
    }

    /// A dotted line is drawn in its colour with gaps (fewer pixels than solid); key entries
    /// add grey samples to the legend, and a series without a label adds none.
    #[test]
    fn dotted_lines_and_key_entries_are_drawn() {
        let unlabelled = |stroke| Series {
            label: String::new(),
            ..line(5, stroke)
        };
        let solid = pixels_of(
            &figure(vec![unlabelled(Stroke::Solid)]),
            false,
            series_rgb(5),
        );
        let dotted = pixels_of(
            &figure(vec![unlabelled(Stroke::Dotted)]),
            false,
            series_rgb(5),
        );
        assert!(
            dotted > 50 && dotted * 10 < solid * 8,
            "{dotted} of {solid}"
        );
        let mut keyed = figure(vec![unlabelled(Stroke::Dotted)]);
        for p in &mut keyed.panels {
            p.key = vec![
                ("back to back".into(), Stroke::Solid),
                ("after compute".into(), Stroke::Dotted),
            ];
        }
        // Without text there is no legend, so no key.
        assert_eq!(pixels_of(&keyed, false, KEY_RGB), 0);
        if !matches!(font(), FontState::Loaded(_)) {
            return; // no font on this machine: the legend cannot be drawn
        }
        let plain = figure(vec![unlabelled(Stroke::Dotted)]);
        let (with, without) = (
            pixels_of(&keyed, true, KEY_RGB),
            pixels_of(&plain, true, KEY_RGB),
        );
        // Two panels, each a solid (22 x 2) and a dotted sample.
        assert!(
            with >= without + 2 * 50,
            "{with} with the key, {without} without"
        );
        // No labels and no key: no legend box. Its border colour is in the antialiased text
        // too, but a box per panel would add hundreds of pixels of it.
        let border = |fig: &Figure| pixels_of(fig, true, [160, 160, 160]);
        let (boxed, bare) = (border(&keyed), border(&plain));
        assert!(
            bare < 100 && boxed > bare + 200,
            "{boxed} with the key, {bare} without"
        );
    }

    /// A one-step spike among many points (a loss curve's) stays inside the plotting area:
    /// plotters' wide lines draw a steep segment as a polygon whose far corners once landed
    /// above the title and below the axis.
    #[test]
    fn steep_spikes_stay_inside_the_plot_area() {
        let points: Vec<(f64, f64)> = (1..=1000)
            .map(|i| (i as f64, if i == 45 { 9.0 } else { 2.0 + 1.0 / i as f64 }))
            .collect();
        for stroke in [Stroke::Solid, Stroke::Dashed, Stroke::Dotted] {
            let mut fig = figure(vec![Series {
                label: "s".into(),
                points: points.clone(),
                stroke,
                color: 0,
                markers: false,
            }]);
            fig.panels.remove(0);
            fig.columns = 1;
            let (w, h) = fig.size();
            let img = Image {
                width: w,
                height: h,
                rgb: render_rgb(&fig, false).unwrap(),
            };
            let (xr, yr) = fig.plot_area(0);
            let inside = img.count_coloured(xr, yr);
            let all = img.count_coloured((0, w), (0, h));
            assert!(inside > 200, "{stroke:?}: {inside} coloured pixels inside");
            assert_eq!(all, inside, "{stroke:?}: {} pixels outside", all - inside);
        }
    }

    #[test]
    fn log_ticks_fall_on_powers_and_stay_few() {
        let r = axis_range(Scale::Log2, [4096.0, 256.0 * 1048576.0].into_iter());
        let t: Vec<f64> = ticks(Scale::Log2, r)
            .iter()
            .map(|&t| from_axis(Scale::Log2, t).round())
            .collect();
        assert!(t.len() <= MAX_TICKS && t.len() >= 5, "{t:?}");
        assert!(t.iter().all(|v| (*v as u64).is_power_of_two()), "{t:?}");
        assert!(t.contains(&4096.0), "{t:?}");
        let r = axis_range(Scale::Log10, [3.0, 700.0].into_iter());
        let t: Vec<f64> = ticks(Scale::Log10, r)
            .iter()
            .map(|&t| from_axis(Scale::Log10, t))
            .collect();
        for want in [5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0] {
            assert!(t.iter().any(|v| (v - want).abs() < 1e-9), "{want} {t:?}");
        }
        let t = ticks(Scale::Linear, (0.9, 4.1));
        assert_eq!(t, vec![1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]);
        // Nothing drawable: a default range, not a panic.
        assert_eq!(
            axis_range(Scale::Log10, [0.0, -1.0, f64::NAN].into_iter()),
            (0.0, 1.0)
        );
    }

    #[test]
    fn dates_and_numbers_print_as_people_read_them() {
        assert_eq!(utc_date(UNIX_EPOCH), "1970-01-01");
        let day = |d: u64| utc_date(UNIX_EPOCH + Duration::from_secs(d * 86_400 + 3600));
        assert_eq!(day(11_016), "2000-02-29");
        assert_eq!(day(20_779), "2026-11-22");
        assert_eq!(today().len(), 10);
        for (v, s) in [
            (0.0, "0"),
            (0.5, "0.5"),
            (0.125, "0.125"),
            (2.0, "2"),
            (12.5, "12.5"),
            (350.0, "350"),
            (1.5e5, "2e5"),
        ] {
            assert_eq!(short_number(v), s);
        }
    }
}
