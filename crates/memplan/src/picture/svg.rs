//! The picture as a standalone SVG file (`memplan plan --svg FILE`).
//!
//! Layout: a title line; the plot (steps across, arena addresses up) with one `<rect
//! class="buf">` per block, carrying `data-block` (its index) and `data-storage` (the index
//! of the block whose bytes it lives in), and a `<title>` that viewers show on hover; the
//! live-bytes curve, the lower bound and the peak step over it; a side panel with the
//! figures and the tensors live at the peak; the legend below, saying what its figures are.
//! Rectangles are placed at exact (unrounded) positions, so two of them overlap only where
//! their blocks share bytes at a common step, which the plan allows only within one storage;
//! the one exception is a block narrower than [`MIN_WIDTH`], drawn that wide around its
//! place (and marked `data-widened`), so that a tensor live for one step of thousands is seen.

use std::fmt::Write as _;

use memplan_planner::AliasKind;
use memplan_tracker::HumanBytes;

use super::{Picture, byte_unit, tick_label, ticks};

/// Width of the whole picture.
pub const WIDTH: f64 = 1400.0;
/// Height of the whole picture.
pub const HEIGHT: f64 = 860.0;
/// The plot area: left, top, right, bottom.
pub const PLOT: (f64, f64, f64, f64) = (100.0, 64.0, 1080.0, 700.0);

/// How many blocks get a label (where one fits): those live at the peak first, then the
/// largest storages.
const LABELS: usize = 16;
/// The narrowest a block is drawn, in pixels: a tensor live for one step of thousands (the
/// logits at the end of a language model) would otherwise be a sliver.
pub const MIN_WIDTH: f64 = 4.0;
/// How many tensors the peak list names.
const PEAK_LIST: usize = 14;

/// Escapes text for XML content and attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Shortens `s` to at most `n` characters, marking the cut with an ellipsis.
fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_owned();
    }
    let keep: String = s.chars().take(n.saturating_sub(1)).collect();
    format!("{keep}…")
}

/// A block's left and right edges, rounded, at least [`MIN_WIDTH`] apart (widened evenly
/// around its place, kept inside the plot).
fn widened(x0: f64, x1: f64) -> (f64, f64) {
    let (left, _, right, _) = PLOT;
    let (mut a, mut b) = (round2(x0), round2(x1));
    if b - a < MIN_WIDTH {
        let mid = (a + b) / 2.0;
        a = (mid - MIN_WIDTH / 2.0).max(left);
        b = (a + MIN_WIDTH).min(right);
        a = b - MIN_WIDTH;
        (a, b) = (round2(a), round2(b));
    }
    (a, b)
}

/// `v` rounded to two decimals.
fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// Number to text with at most two decimals and no trailing zeros.
fn num(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

/// The picture as SVG text.
#[allow(clippy::cast_precision_loss, reason = "pixel positions")]
#[allow(clippy::too_many_lines, reason = "one drawing, top to bottom")]
pub fn render(p: &Picture) -> String {
    let (left, top, right, bottom) = PLOT;
    let steps = f64::from(p.steps.max(1));
    let max_bytes = p
        .arena_bytes
        .max(p.lower_bound_bytes)
        .max(p.live.iter().copied().max().unwrap_or(0))
        .max(1);
    let ymax = max_bytes as f64;
    let x = |s: f64| left + s / steps * (right - left);
    let y = |b: f64| bottom - b / ymax * (bottom - top);

    let mut s = String::with_capacity(512 + 400 * p.blocks.len());
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        "<title>memplan plan of {}</title>\n<style>rect.buf:hover{{stroke:#000;stroke-width:1.5}}</style>",
        escape(&p.graph)
    );
    let _ = writeln!(
        s,
        r##"<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>"##
    );
    let ratio = if p.lower_bound_bytes == 0 {
        String::new()
    } else {
        format!(
            ", {:.3}x the lower bound",
            p.arena_bytes as f64 / p.lower_bound_bytes as f64
        )
    };
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="26" font-size="17" font-weight="bold">{}: arena {}{ratio}</text>"#,
        escape(&p.graph),
        HumanBytes(p.arena_bytes)
    );
    let _ = writeln!(
        s,
        r##"<text x="{left}" y="46" fill="#555">{} steps, {} buffers; x: schedule step, y: address in the arena; hover a block for its tensor</text>"##,
        p.steps,
        p.blocks.len()
    );

    // Axes and grid.
    let _ = writeln!(s, r##"<g class="axes" font-size="11" fill="#333">"##);
    let _ = writeln!(
        s,
        r##"<rect class="plot" x="{left}" y="{top}" width="{}" height="{}" fill="#fafafa" stroke="#999"/>"##,
        num(right - left),
        num(bottom - top)
    );
    // Training phases: a band along the top of the plot.
    for (name, a, b) in &p.phases {
        let (x0, x1) = (x(f64::from(*a)), x(f64::from(*b) + 1.0));
        let _ = writeln!(
            s,
            r##"<rect class="phase" data-phase="{name}" x="{}" y="{}" width="{}" height="10" fill="{}"><title>{name}: steps {a}-{b}</title></rect>"##,
            num(x0),
            num(top - 12.0),
            num((x1 - x0).max(0.5)),
            super::phase_colour(name)
        );
        if x1 - x0 > 60.0 {
            let _ = writeln!(
                s,
                r##"<text x="{}" y="{}" font-size="10" fill="#222">{name}</text>"##,
                num(x0 + 3.0),
                num(top - 4.0)
            );
        }
    }
    let (unit, unit_name) = byte_unit(max_bytes);
    for t in ticks(ymax, 8.0, unit) {
        let ty = y(t);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{right}" y1="{0}" y2="{0}" stroke="#e4e4e4"/><text x="{1}" y="{2}" text-anchor="end">{3}</text>"##,
            num(ty),
            num(left - 6.0),
            num(ty + 4.0),
            tick_label(t, unit, unit_name)
        );
    }
    for t in ticks(steps, 10.0, 1.0) {
        let tx = x(t);
        let _ = writeln!(
            s,
            r##"<line x1="{0}" x2="{0}" y1="{top}" y2="{bottom}" stroke="#eeeeee"/><text x="{0}" y="{1}" text-anchor="middle">{2}</text>"##,
            num(tx),
            num(bottom + 16.0),
            t.round()
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">schedule step</text>"#,
        num((left + right) / 2.0),
        num(bottom + 34.0)
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(24 {}) rotate(-90)" text-anchor="middle">address in the arena</text>"#,
        num((top + bottom) / 2.0)
    );
    s.push_str("</g>\n");

    // The blocks: storages first, then aliases on top of them.
    let _ = writeln!(s, r#"<g class="blocks">"#);
    let order = p
        .blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| b.alias.is_none())
        .chain(
            p.blocks
                .iter()
                .enumerate()
                .filter(|(_, b)| b.alias.is_some()),
        );
    for (i, b) in order {
        let colour = p.categories.get(b.category).map_or("#999", |c| c.colour);
        // Rounding is monotone: blocks apart in the plan stay apart (at most touching).
        let (x0, x1) = widened(x(f64::from(b.first)), x(f64::from(b.last) + 1.0));
        let widened_attr = if x1 - x0
            > round2(x(f64::from(b.last) + 1.0)) - round2(x(f64::from(b.first))) + 1e-9
        {
            r#" data-widened="1""#
        } else {
            ""
        };
        let y0 = round2(y(b.offset as f64 + b.extent as f64));
        let y1 = round2(y(b.offset as f64));
        // Outlines only where they show; blocks under a pixel wide get a hairline of their own
        // colour so that they stay visible (the geometry is unchanged).
        let roomy = x1 - x0 >= 6.0 && y1 - y0 >= 6.0;
        let (class, mut style) = match b.alias {
            None => ("buf", String::new()),
            Some(AliasKind::View) => ("buf alias view", r#" fill-opacity="0.55""#.to_owned()),
            Some(AliasKind::InPlace) => ("buf alias inplace", r#" fill-opacity="0.8""#.to_owned()),
            Some(AliasKind::Part) => ("buf alias part", r#" fill-opacity="0.7""#.to_owned()),
        };
        if let Some(kind) = b.alias
            && roomy
        {
            let dash = match kind {
                AliasKind::View => "3 2",
                AliasKind::InPlace => "1 2",
                AliasKind::Part => "4 1 1 1",
            };
            style.push_str(&format!(
                r##" stroke="#222" stroke-width="0.7" stroke-dasharray="{dash}""##
            ));
        } else if x1 - x0 < 1.0 || y1 - y0 < 1.0 {
            style.push_str(&format!(r#" stroke="{colour}" stroke-width="0.6""#));
        }
        let alias = match (&b.alias, &b.parent) {
            (Some(kind), Some(parent)) => format!(
                "\n{} of {}",
                match kind {
                    AliasKind::View => "view",
                    AliasKind::InPlace => "written in place over",
                    AliasKind::Part => "written into its slice of",
                },
                escape(parent)
            ),
            _ => String::new(),
        };
        let runs = b.rows.map_or_else(String::new, |(rows, stride)| {
            format!(
                "\nin {rows} runs of {} bytes, {} apart (one per row of the Concat's output)",
                memplan_tracker::group_digits(b.bytes / rows),
                memplan_tracker::group_digits(stride)
            )
        });
        let _ = writeln!(
            s,
            r#"<rect class="{class}" data-block="{i}" data-storage="{}"{widened_attr} x="{}" y="{}" width="{}" height="{}" fill="{colour}"{style}><title>{} ({})
{} {} {}
{} at offset {}
steps {}{alias}{runs}</title></rect>"#,
            b.storage,
            num(x0),
            num(y0),
            num(x1 - x0),
            num(y1 - y0),
            escape(&b.name),
            escape(&b.op),
            escape(b.kind.name()),
            escape(&b.dtype),
            escape(&b.shape),
            memplan_ir::ExactBytes(b.bytes),
            memplan_ir::Grouped(b.offset),
            crate::report::steps(b.first, b.last),
        );
    }
    s.push_str("</g>\n");

    // Labels on the largest storages: inside where the name fits (across, or up a tall
    // narrow block); the very largest get one beside them otherwise.
    let _ = writeln!(
        s,
        r##"<g class="labels" font-size="11" fill="#111" pointer-events="none" stroke="#ffffff" stroke-width="3" stroke-opacity="0.7" paint-order="stroke">"##
    );
    let mut placed: Vec<(f64, f64, f64, f64)> = Vec::new();
    // Whether a label's box is free; takes it if so.
    let mut claim = |x0: f64, y0: f64, x1: f64, y1: f64| {
        if placed
            .iter()
            .any(|r| x0 < r.2 && r.0 < x1 && y0 < r.3 && r.1 < y1)
        {
            return false;
        }
        placed.push((x0, y0, x1, y1));
        true
    };
    let text_width = |t: &str| 6.5 * t.chars().count() as f64;
    for (rank, i) in p.to_label(LABELS).into_iter().enumerate() {
        let Some(b) = p.blocks.get(i) else { continue };
        let (bx0, bx1) = widened(x(f64::from(b.first)), x(f64::from(b.last) + 1.0));
        let by0 = y(b.offset as f64 + b.extent as f64);
        let by1 = y(b.offset as f64);
        let (w, h) = (bx1 - bx0, by1 - by0);
        let text = format!("{} {}", b.name, HumanBytes(b.bytes));
        let chars = |room: f64| ((room - 6.0) / 6.5).floor();
        if h >= 13.0 && chars(w) >= 6.0 {
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "small"
            )]
            let text = shorten(&text, chars(w) as usize);
            if !claim(bx0, by0, bx0 + text_width(&text) + 6.0, by0 + 16.0) {
                continue;
            }
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}">{}</text>"#,
                num(bx0 + 3.0),
                num(by0 + 12.0),
                escape(&text)
            );
        } else if w >= 13.0 && chars(h) >= 6.0 {
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "small"
            )]
            let text = shorten(&text, chars(h) as usize);
            let c = bx0 + w / 2.0;
            if !claim(c - 8.0, by1 - text_width(&text) - 6.0, c + 8.0, by1) {
                continue;
            }
            let _ = writeln!(
                s,
                r#"<text transform="translate({} {}) rotate(-90)">{}</text>"#,
                num(bx0 + w / 2.0 + 4.0),
                num(by1 - 3.0),
                escape(&text)
            );
        } else if rank < 5 && h >= 4.0 {
            // Beside the block, on the side with more room, with a leader.
            let mid = (by0 + by1) / 2.0;
            let (anchor, tx, lx) = if bx0 - left > right - bx1 {
                ("end", bx0 - 14.0, bx0 - 12.0)
            } else {
                ("start", bx1 + 14.0, bx1 + 12.0)
            };
            let edge = if anchor == "end" { bx0 } else { bx1 };
            let text = shorten(&text, 40);
            let tw = text_width(&text);
            let (cx0, cx1) = if anchor == "end" {
                (tx - tw, tx)
            } else {
                (tx, tx + tw)
            };
            if !claim(cx0, mid - 8.0, cx1, mid + 8.0) {
                continue;
            }
            let _ = writeln!(
                s,
                r##"<line x1="{lx}" x2="{edge}" y1="{mid}" y2="{mid}" stroke="#111" stroke-width="1" stroke-opacity="1"/><text x="{tx}" y="{ty}" text-anchor="{anchor}">{label}</text>"##,
                lx = num(lx),
                edge = num(edge),
                mid = num(mid),
                tx = num(tx),
                ty = num(mid + 4.0),
                label = escape(&text)
            );
        }
    }
    s.push_str("</g>\n");

    // The live-bytes curve, the lower bound and the peak.
    let mut path = String::new();
    for (step, &bytes) in p.live.iter().enumerate() {
        let sx = x(step as f64);
        let sy = y(bytes as f64);
        if step == 0 {
            let _ = write!(path, "M{} {}", num(sx), num(sy));
        } else {
            let _ = write!(path, "V{}", num(sy));
        }
        let _ = write!(path, "H{}", num(x(step as f64 + 1.0)));
    }
    let _ = writeln!(
        s,
        r##"<path class="live" d="{path}" fill="none" stroke="#111" stroke-width="1.4" stroke-linejoin="round"/>"##
    );
    let lb = y(p.lower_bound_bytes as f64);
    let _ = writeln!(
        s,
        r##"<line class="lower-bound" x1="{left}" x2="{right}" y1="{0}" y2="{0}" stroke="#c0392b" stroke-width="1.4" stroke-dasharray="6 4"/>"##,
        num(lb)
    );
    let peak_right = x(f64::from(p.peak_step) + 0.5) > (left + right) / 2.0;
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" fill="#c0392b" font-size="11" text-anchor="{}">lower bound {}</text>"##,
        num(if peak_right { left + 4.0 } else { right - 4.0 }),
        num(lb + 13.0),
        if peak_right { "start" } else { "end" },
        HumanBytes(p.lower_bound_bytes)
    );
    let arena_y = y(p.arena_bytes as f64);
    let _ = writeln!(
        s,
        r##"<line class="arena" x1="{left}" x2="{right}" y1="{0}" y2="{0}" stroke="#333" stroke-width="1"/>"##,
        num(arena_y)
    );
    let peak_x = x(f64::from(p.peak_step) + 0.5);
    let peak_live = p.live.get(p.peak_step as usize).copied().unwrap_or(0);
    let _ = writeln!(
        s,
        r##"<line class="peak" x1="{0}" x2="{0}" y1="{top}" y2="{bottom}" stroke="#8e44ad" stroke-width="1.4" stroke-dasharray="2 3"/>"##,
        num(peak_x)
    );
    let anchor = if peak_x > (left + right) / 2.0 {
        ("end", peak_x - 4.0)
    } else {
        ("start", peak_x + 4.0)
    };
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" fill="#8e44ad" text-anchor="{}" font-weight="bold">peak: step {}, {} live</text>"##,
        num(anchor.1),
        num(top - 4.0),
        anchor.0,
        p.peak_step,
        HumanBytes(peak_live)
    );

    // Side panel: figures, then the tensors live at the peak.
    let px = right + 24.0;
    let mut py = top + 8.0;
    let line = |s: &mut String, py: &mut f64, text: &str, extra: &str| {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}"{extra}>{}</text>"#,
            num(px),
            num(*py),
            escape(text)
        );
        *py += 17.0;
    };
    line(&mut s, &mut py, "arena", r#" font-weight="bold""#);
    line(
        &mut s,
        &mut py,
        &memplan_ir::ExactBytes(p.arena_bytes).to_string(),
        "",
    );
    line(
        &mut s,
        &mut py,
        &format!("lower bound {}", HumanBytes(p.lower_bound_bytes)),
        r##" fill="#c0392b""##,
    );
    line(
        &mut s,
        &mut py,
        &format!("weights {} (own region)", HumanBytes(p.weight_bytes)),
        "",
    );
    line(
        &mut s,
        &mut py,
        &format!(
            "peak live {} at step {}",
            HumanBytes(peak_live),
            p.peak_step
        ),
        r##" fill="#8e44ad""##,
    );
    py += 10.0;
    line(
        &mut s,
        &mut py,
        &format!(
            "live at step {} ({}):",
            p.peak_step,
            p.step_ops
                .get(p.peak_step as usize)
                .map_or("", String::as_str)
        ),
        r#" font-weight="bold""#,
    );
    for &i in p.at_peak.iter().take(PEAK_LIST) {
        let Some(b) = p.blocks.get(i) else { continue };
        let mark = match (b.alias, &b.parent) {
            (Some(AliasKind::View), Some(parent)) => format!(" (view of {})", shorten(parent, 12)),
            (Some(AliasKind::InPlace), Some(parent)) => {
                format!(" (over {})", shorten(parent, 12))
            }
            _ => String::new(),
        };
        line(
            &mut s,
            &mut py,
            &format!(
                "{:>9}  {}{mark}",
                HumanBytes(b.bytes).to_string(),
                shorten(&b.name, 24)
            ),
            r#" font-family="DejaVu Sans Mono, monospace" font-size="11" xml:space="preserve""#,
        );
    }
    if p.at_peak.len() > PEAK_LIST {
        line(
            &mut s,
            &mut py,
            &format!("... and {} more", p.at_peak.len() - PEAK_LIST),
            r##" fill="#555""##,
        );
    }

    // Legend.
    let mut lx = left;
    let mut ly = bottom + 58.0;
    let _ = writeln!(s, r#"<g class="legend" font-size="11">"#);
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" fill="#555">colours: the op that made each tensor; figures: its bytes live at the peak step {} (over the whole run, one after another: hover)</text>"##,
        num(lx),
        num(ly - 8.0),
        p.peak_step
    );
    let mut entries: Vec<(String, String)> = p
        .categories
        .iter()
        .map(|c| {
            (
                format!(
                    r#"<rect x="{{x}}" y="{{y}}" width="12" height="12" fill="{}"><title>{} over the whole run</title></rect>"#,
                    c.colour,
                    HumanBytes(c.bytes)
                ),
                format!("{} {}", c.label, HumanBytes(c.peak_bytes)),
            )
        })
        .collect();
    entries.push((
        r##"<rect x="{x}" y="{y}" width="12" height="12" fill="#bbb" fill-opacity="0.55" stroke="#222" stroke-dasharray="3 2"/>"##.to_owned(),
        "dashed: a view or in-place output, in its storage's colour".to_owned(),
    ));
    entries.push((
        r##"<line x1="{x}" x2="{x12}" y1="{ym}" y2="{ym}" stroke="#111" stroke-width="1.6"/>"##
            .to_owned(),
        "live bytes".to_owned(),
    ));
    entries.push((
        r##"<line x1="{x}" x2="{x12}" y1="{ym}" y2="{ym}" stroke="#c0392b" stroke-width="1.6" stroke-dasharray="4 2"/>"##
            .to_owned(),
        "lower bound".to_owned(),
    ));
    entries.push((
        r##"<line x1="{x6}" x2="{x6}" y1="{y}" y2="{y12}" stroke="#8e44ad" stroke-width="1.6" stroke-dasharray="2 3"/>"##
            .to_owned(),
        "peak step".to_owned(),
    ));
    for (swatch, label) in entries {
        let width = 22.0 + 6.6 * label.chars().count() as f64 + 18.0;
        if lx + width > WIDTH - 20.0 {
            lx = left;
            ly += 20.0;
        }
        let swatch = swatch
            .replace("{x12}", &num(lx + 12.0))
            .replace("{x6}", &num(lx + 6.0))
            .replace("{y12}", &num(ly + 12.0))
            .replace("{x}", &num(lx))
            .replace("{ym}", &num(ly + 6.0))
            .replace("{y}", &num(ly));
        let _ = writeln!(
            s,
            r#"{swatch}<text x="{}" y="{}">{}</text>"#,
            num(lx + 17.0),
            num(ly + 10.0),
            escape(&label)
        );
        lx += width;
    }
    s.push_str("</g>\n</svg>\n");
    s
}
