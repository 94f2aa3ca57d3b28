//! An SVG chart of memory over schedule positions: one step line per series (e.g. before and
//! after rematerialization), the peak of each marked, an optional limit as a dashed line.
//! Hand-written SVG, no dependency; the same input gives byte-identical output.

use std::fmt::Write;

/// One line of the chart: bytes at each schedule position.
#[derive(Clone, Copy, Debug)]
pub struct Series<'a> {
    pub label: &'a str,
    pub bytes: &'a [i64],
}

const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 360.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            c => o.push(c),
        }
    }
    o
}

/// Bytes in a short human form (`12.0 KiB`).
pub fn human(b: i64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if b.abs() < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut u = 0;
    while v.abs() >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// The chart. `x` is the schedule position (series of different lengths share the axis, which
/// spans the longest), `y` the bytes from 0 to the largest value (or the limit, if larger).
pub fn render_svg(title: &str, series: &[Series], limit: Option<i64>) -> String {
    let n = series
        .iter()
        .map(|s| s.bytes.len())
        .max()
        .unwrap_or(0)
        .max(1);
    let top_value = series
        .iter()
        .flat_map(|s| s.bytes.iter().copied())
        .chain(limit)
        .max()
        .unwrap_or(0)
        .max(1);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x = |p: f64| LEFT + plot_w * p / n as f64;
    let y = |b: i64| TOP + plot_h * (1.0 - b.max(0) as f64 / top_value as f64);
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        o,
        r#"<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#
    );
    let _ = writeln!(
        o,
        r#"<text x="{:.1}" y="22" text-anchor="middle" font-size="14">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
    // Axes, with ticks at 0, 1/2 and the top.
    let _ = writeln!(
        o,
        r#"<path d="M{LEFT:.1},{TOP:.1} V{:.1} H{:.1}" fill="none" stroke="black"/>"#,
        TOP + plot_h,
        LEFT + plot_w
    );
    for k in 0..=2 {
        let v = top_value * k / 2;
        let _ = writeln!(
            o,
            r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT,
            y(v),
            LEFT + plot_w,
            y(v),
            LEFT - 6.0,
            y(v) + 4.0,
            human(v)
        );
    }
    let _ = writeln!(
        o,
        r#"<text x="{LEFT:.1}" y="{:.1}" text-anchor="middle">0</text><text x="{:.1}" y="{:.1}" text-anchor="middle">{n}</text><text x="{:.1}" y="{:.1}" text-anchor="middle">schedule position</text>"#,
        TOP + plot_h + 16.0,
        LEFT + plot_w,
        TOP + plot_h + 16.0,
        LEFT + plot_w / 2.0,
        TOP + plot_h + 32.0
    );
    if let Some(l) = limit {
        let _ = writeln!(
            o,
            r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#ff7f0e" stroke-dasharray="6,4"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#ff7f0e">limit {}</text>"##,
            LEFT,
            y(l),
            LEFT + plot_w,
            y(l),
            LEFT + plot_w,
            y(l) - 4.0,
            human(l)
        );
    }
    for (k, s) in series.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        // A step line: position p holds its value over [p, p+1).
        let mut d = String::new();
        for (p, &b) in s.bytes.iter().enumerate() {
            let cmd = if p == 0 { 'M' } else { 'L' };
            let _ = write!(
                d,
                "{cmd}{:.1},{:.1} H{:.1} ",
                x(p as f64),
                y(b),
                x(p as f64 + 1.0)
            );
        }
        let _ = writeln!(
            o,
            r#"<path d="{}" fill="none" stroke="{color}" stroke-width="1.5"/>"#,
            d.trim_end()
        );
        if let Some((p, &b)) = s
            .bytes
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))
        {
            let _ = writeln!(
                o,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                x(p as f64 + 0.5),
                y(b)
            );
        }
        let peak = s.bytes.iter().copied().max().unwrap_or(0);
        let ly = HEIGHT - 12.0;
        let lx = LEFT + 220.0 * k as f64;
        let _ = writeln!(
            o,
            r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="4" fill="{color}"/><text x="{:.1}" y="{ly:.1}">{} (peak {})</text>"#,
            ly - 6.0,
            lx + 16.0,
            escape(s.label),
            human(peak)
        );
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_is_deterministic_and_marks_peaks() {
        let before = [0, 4096, 16384, 8192];
        let after = [0, 4096, 12288, 8192, 4096];
        let s = [
            Series {
                label: "before",
                bytes: &before,
            },
            Series {
                label: "after <remat>",
                bytes: &after,
            },
        ];
        let a = render_svg("main", &s, Some(14336));
        assert_eq!(a, render_svg("main", &s, Some(14336)));
        assert!(a.starts_with("<svg "), "{a}");
        assert!(a.ends_with("</svg>\n"));
        assert_eq!(
            a.matches("<path d=\"M").count(),
            3,
            "axes and two lines: {a}"
        );
        assert!(a.contains("before (peak 16.0 KiB)"), "{a}");
        assert!(a.contains("after &lt;remat&gt; (peak 12.0 KiB)"), "{a}");
        assert!(a.contains("limit 14.0 KiB"), "{a}");
        // The top of the y axis is the largest value: 16 KiB at y = TOP.
        assert!(a.contains(">16.0 KiB</text>"), "{a}");
        // The first series' peak (position 2 of 5) is marked at x = 90 + 690 * 2.5 / 5.
        assert!(a.contains(r#"<circle cx="435.0" cy="40.0""#), "{a}");
        let empty = render_svg("e", &[], None);
        assert!(empty.contains("</svg>"));
    }
}
