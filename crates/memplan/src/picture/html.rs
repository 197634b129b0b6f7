//! The picture as one self-contained HTML file (`memplan plan --html FILE`): the plan's data
//! as JSON, and the script and style that draw it on a canvas, all inline, so the file works
//! offline and can be mailed around. The page adds to the SVG: hover details (name, op,
//! shape, dtype, bytes, lifetime, alias), zoom (wheel) and pan (drag), a search box over
//! tensor names and ops, and the list of tensors live at the peak step.
//!
//! A canvas keeps the page responsive on graphs with thousands of buffers: a redraw is one
//! pass over the blocks, and hover is one pass over them too.

use memplan_planner::AliasKind;
use memplan_tracker::HumanBytes;

use super::Picture;

const SCRIPT: &str = include_str!("view.js");
const STYLE: &str = include_str!("view.css");

/// The page's data: compact arrays, decoded by `view.js`.
fn data(p: &Picture) -> serde_json::Value {
    let blocks: Vec<serde_json::Value> = p
        .blocks
        .iter()
        .map(|b| {
            serde_json::json!([
                b.first,
                b.last,
                b.offset,
                b.extent,
                b.category,
                match b.alias {
                    None => 0,
                    Some(AliasKind::View) => 1,
                    Some(AliasKind::InPlace) => 2,
                    Some(AliasKind::Part) => 3,
                },
                b.storage,
                b.name,
                b.op,
                b.kind.name(),
                b.shape,
                b.dtype,
                b.parent.clone().unwrap_or_default(),
                b.bytes,
                b.rows.map_or(1, |r| r.0),
                b.tensor.map(|t| t.0),
            ])
        })
        .collect();
    let categories: Vec<serde_json::Value> = p
        .categories
        .iter()
        .map(|c| serde_json::json!([c.label, c.colour, c.peak_bytes, c.bytes]))
        .collect();
    serde_json::json!({
        "graph": p.graph,
        "steps": p.steps,
        "arena": p.arena_bytes,
        "lower": p.lower_bound_bytes,
        "weights": p.weight_bytes,
        "peak": p.peak_step,
        "live": p.live,
        "ops": p.step_ops,
        "categories": categories,
        "blocks": blocks,
        "largest": p.to_label(40),
        "atPeak": p.at_peak,
        "phases": p
            .phases
            .iter()
            .map(|(name, a, b)| serde_json::json!([name, a, b, super::phase_colour(name)]))
            .collect::<Vec<_>>(),
    })
}

/// The page as HTML text.
pub fn render(p: &Picture) -> String {
    // Inside a <script> element only `</` can end it early; `<\/` means the same in JSON.
    let json = data(p).to_string().replace("</", "<\\/");
    let title = super::svg::escape(&format!(
        "{}: arena {} — memplan",
        p.graph,
        HumanBytes(p.arena_bytes)
    ));
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
{STYLE}</style>
</head>
<body>
<header>
  <h1 id="title"></h1>
  <div id="summary"></div>
</header>
<main>
  <div id="plot-wrap">
    <div id="toolbar">
      <input id="search" type="search" placeholder="search tensors and ops (Enter: next match)" autocomplete="off">
      <span id="matches"></span>
      <button id="reset" type="button" title="show everything (or double-click the plot)">reset zoom</button>
      <span class="hint">wheel: zoom · shift+wheel: steps only · alt+wheel: addresses only · drag: pan</span>
    </div>
    <canvas id="plot"></canvas>
    <div id="tip" hidden></div>
  </div>
  <aside>
    <section id="legend"><h2>colours: the op that made each tensor</h2><p class="hint">figures: its bytes live at the peak step (over the whole run: hover)</p></section>
    <section id="peak"><h2>live at the peak</h2></section>
  </aside>
</main>
<script id="data" type="application/json">{json}</script>
<script>
{SCRIPT}</script>
</body>
</html>
"#
    )
}
