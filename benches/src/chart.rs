//! A grouped bar chart as a hand-written SVG (no plotting dependency): one group per
//! scenario, one bar per series (store) in each group, a legend, and a logarithmic value
//! axis when the values span more than [`LOG_SCALE_SPAN`] (a non-persistent scenario next to
//! an fsync-bound one would otherwise flatten every small bar to nothing).
//!
//! `ferromq perf`'s own SVG writer (`client::load::perf::report::svg_chart`) draws one
//! throughput line over time, a different chart; its XML escaping is reused.

use std::fmt::Write;

use client::load::perf::report::escape;

/// Use a logarithmic axis when the largest value is more than this many times the smallest.
pub const LOG_SCALE_SPAN: f64 = 20.0;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 480.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 78.0;
const BOTTOM: f64 = 60.0;
/// Colour-blind-safe colours (Okabe and Ito), one per series, repeated past seven.
const COLOURS: [&str; 7] =
    ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442"];

/// One group of bars: its label (e.g. `S2`, with a second line saying what it is) and one
/// value per series, `None` where a series has none.
#[derive(Debug, Clone)]
pub struct Group {
    pub label: String,
    pub caption: String,
    pub values: Vec<Option<f64>>,
}

/// How values map to heights.
#[derive(Debug, Clone, Copy)]
enum Scale {
    /// From 0 to `max`.
    Linear { max: f64 },
    /// From 10^`low` to 10^`high`.
    Log { low: i32, high: i32 },
}

impl Scale {
    fn for_values(values: &[f64]) -> Scale {
        let max = values.iter().copied().fold(0.0, f64::max);
        let min = values.iter().copied().filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
        if max <= 0.0 || !min.is_finite() {
            return Scale::Linear { max: 1.0 };
        }
        if max / min > LOG_SCALE_SPAN {
            Scale::Log { low: min.log10().floor() as i32, high: max.log10().ceil() as i32 }
        } else {
            Scale::Linear { max: nice_ceiling(max) }
        }
    }

    /// The fraction of the plot's height for `value` (0 at the bottom).
    fn fraction(self, value: f64) -> f64 {
        match self {
            Scale::Linear { max } => (value / max).clamp(0.0, 1.0),
            Scale::Log { low, high } if value > 0.0 => {
                ((value.log10() - low as f64) / (high - low).max(1) as f64).clamp(0.0, 1.0)
            }
            Scale::Log { .. } => 0.0,
        }
    }

    /// The values with a grid line and a label.
    fn ticks(self) -> Vec<f64> {
        match self {
            Scale::Linear { max } => (0..=5).map(|i| max * i as f64 / 5.0).collect(),
            Scale::Log { low, high } => (low..=high).map(|e| 10f64.powi(e)).collect(),
        }
    }

    fn is_log(self) -> bool {
        matches!(self, Scale::Log { .. })
    }
}

/// 1, 2 or 5 times a power of ten, at least `value`.
fn nice_ceiling(value: f64) -> f64 {
    let power = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * power).find(|v| *v >= value).unwrap_or(value)
}

/// `26316`, `1.2k`... kept short: bars are narrow.
fn short(value: f64) -> String {
    if value >= 1_000_000.0 {
        format!("{:.0}M", value / 1_000_000.0)
    } else if value >= 10_000.0 {
        format!("{:.0}k", value / 1000.0)
    } else if value >= 1000.0 {
        format!("{:.1}k", value / 1000.0)
    } else if value >= 10.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

/// The chart: `title` on top, `unit` along the value axis, `series` named in the legend in
/// the order of each group's values.
pub fn grouped_bars(title: &str, unit: &str, series: &[String], groups: &[Group]) -> String {
    let values: Vec<f64> = groups.iter().flat_map(|g| g.values.iter().flatten().copied()).collect();
    let scale = Scale::for_values(&values);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{HEIGHT}' \
         viewBox='0 0 {WIDTH} {HEIGHT}' font-family='sans-serif' font-size='11'>"
    );
    let _ = writeln!(svg, "<rect width='100%' height='100%' fill='white'/>");
    let _ = writeln!(svg, "<text x='{LEFT}' y='20' font-size='14'>{}</text>", escape(title));
    legend(&mut svg, series);
    axis(&mut svg, scale, unit, plot_w, plot_h);
    let group_w = plot_w / groups.len().max(1) as f64;
    let bar_w = group_w * 0.8 / series.len().max(1) as f64;
    for (g, group) in groups.iter().enumerate() {
        let x0 = LEFT + g as f64 * group_w + group_w * 0.1;
        for (s, value) in group.values.iter().enumerate() {
            let x = x0 + s as f64 * bar_w;
            bar(&mut svg, scale, *value, x, bar_w, plot_h, COLOURS[s % COLOURS.len()]);
        }
        let centre = LEFT + (g as f64 + 0.5) * group_w;
        let base = TOP + plot_h;
        let _ = writeln!(
            svg,
            "<text x='{centre:.1}' y='{:.1}' text-anchor='middle' font-size='12' \
             font-weight='bold'>{}</text>",
            base + 16.0,
            escape(&group.label)
        );
        let _ = writeln!(
            svg,
            "<text x='{centre:.1}' y='{:.1}' text-anchor='middle' font-size='9'>{}</text>",
            base + 30.0,
            escape(&group.caption)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn legend(svg: &mut String, series: &[String]) {
    let mut x = LEFT;
    for (s, name) in series.iter().enumerate() {
        let colour = COLOURS[s % COLOURS.len()];
        let _ = writeln!(svg, "<rect x='{x:.1}' y='32' width='12' height='12' fill='{colour}'/>");
        let _ = writeln!(svg, "<text x='{:.1}' y='42'>{}</text>", x + 16.0, escape(name));
        x += 24.0 + 7.0 * name.chars().count() as f64;
    }
}

fn axis(svg: &mut String, scale: Scale, unit: &str, plot_w: f64, plot_h: f64) {
    for tick in scale.ticks() {
        let y = TOP + plot_h * (1.0 - scale.fraction(tick));
        let _ = writeln!(
            svg,
            "<line x1='{LEFT}' y1='{y:.1}' x2='{:.1}' y2='{y:.1}' stroke='#ddd'/>",
            LEFT + plot_w
        );
        let _ = writeln!(
            svg,
            "<text x='{:.1}' y='{:.1}' text-anchor='end'>{}</text>",
            LEFT - 6.0,
            y + 4.0,
            short(tick)
        );
    }
    let scale_name = if scale.is_log() { "log scale" } else { "linear scale" };
    let _ = writeln!(
        svg,
        "<text transform='translate(16 {:.1}) rotate(-90)' text-anchor='middle'>{} ({scale_name})</text>",
        TOP + plot_h / 2.0,
        escape(unit)
    );
    let _ = writeln!(
        svg,
        "<line x1='{LEFT}' y1='{:.1}' x2='{:.1}' y2='{:.1}' stroke='#333'/>",
        TOP + plot_h,
        LEFT + plot_w,
        TOP + plot_h
    );
}

/// One bar with its value written up its side; a missing value is marked `n/a`.
fn bar(
    svg: &mut String,
    scale: Scale,
    value: Option<f64>,
    x: f64,
    width: f64,
    plot_h: f64,
    colour: &str,
) {
    let base = TOP + plot_h;
    let label_x = x + width / 2.0 + 3.5;
    let Some(value) = value else {
        let _ = writeln!(
            svg,
            "<text transform='translate({label_x:.1} {:.1}) rotate(-90)' font-size='9' \
             fill='#888'>n/a</text>",
            base - 4.0
        );
        return;
    };
    let height = plot_h * scale.fraction(value);
    let _ = writeln!(
        svg,
        "<rect x='{x:.1}' y='{:.1}' width='{:.1}' height='{height:.1}' fill='{colour}'>\
         <title>{value:.0}</title></rect>",
        base - height,
        (width - 1.0).max(1.0)
    );
    let _ = writeln!(
        svg,
        "<text transform='translate({label_x:.1} {:.1}) rotate(-90)' font-size='9'>{}</text>",
        base - height - 3.0,
        short(value)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_ranges_get_a_log_axis() {
        assert!(Scale::for_values(&[10.0, 30_000.0]).is_log());
        assert!(!Scale::for_values(&[800.0, 1200.0]).is_log());
    }

    #[test]
    fn the_chart_has_a_bar_per_value_and_marks_missing_ones() {
        let groups = vec![Group {
            label: "S1".into(),
            caption: "a <b>".into(),
            values: vec![Some(100.0), None],
        }];
        let svg = grouped_bars("t", "msgs/s", &["journal".into(), "pg".into()], &groups);
        assert_eq!(svg.matches("<rect x=").count(), 2 + 1); // two legend swatches, one bar
        assert!(svg.contains("n/a"));
        assert!(svg.contains("a &lt;b&gt;"));
    }
}
