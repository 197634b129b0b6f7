//! `memplan plan --svg` and `--html`: the SVG is parsed and its structure checked against
//! the plan JSON written by the same run (one rectangle per buffer, every one inside the
//! axes, overlaps only where the plan shares bytes); the HTML is one offline file.

mod common;

use common::{graph, memplan};

use std::path::{Path, PathBuf};

fn scratch(test: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("memplan-cli-picture-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[derive(Debug)]
struct Rect {
    block: usize,
    storage: usize,
    widened: bool,
    x: f64,
    y: f64,
    w: f64,
    h: f64,
}

fn attr(node: roxmltree::Node<'_, '_>, name: &str) -> f64 {
    node.attribute(name)
        .unwrap_or_else(|| panic!("rect without {name}"))
        .parse()
        .unwrap()
}

/// Plans `file`, writing the plan JSON and the SVG, and checks the SVG's structure.
fn check_picture(file: &str, extra: &[&str]) -> (serde_json::Value, String) {
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = scratch(&format!("{}-{n}", file.replace('/', "_")));
    let svg_path = dir.join("plan.svg");
    let json_path = dir.join("plan.json");
    let g = graph(file);
    let mut args = vec![
        "plan",
        g.as_str(),
        "--format",
        "json",
        "-o",
        json_path.to_str().unwrap(),
        "--svg",
        svg_path.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let run = memplan(&args);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    check_svg(&svg, &plan);
    let _ = std::fs::remove_dir_all(&dir);
    (plan, svg)
}

fn check_svg(svg: &str, plan: &serde_json::Value) {
    let doc = roxmltree::Document::parse(svg).expect("the SVG is well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    let plot = doc
        .descendants()
        .find(|n| n.attribute("class") == Some("plot"))
        .expect("a plot area");
    let (px, py) = (attr(plot, "x"), attr(plot, "y"));
    let (pw, ph) = (attr(plot, "width"), attr(plot, "height"));
    let rects: Vec<Rect> = doc
        .descendants()
        .filter(|n| {
            n.tag_name().name() == "rect"
                && n.attribute("class")
                    .is_some_and(|c| c.split(' ').any(|w| w == "buf"))
        })
        .map(|n| Rect {
            block: n.attribute("data-block").unwrap().parse().unwrap(),
            storage: n.attribute("data-storage").unwrap().parse().unwrap(),
            widened: n.attribute("data-widened").is_some(),
            x: attr(n, "x"),
            y: attr(n, "y"),
            w: attr(n, "width"),
            h: attr(n, "height"),
        })
        .collect();

    // One shape per buffer (and per workspace), each block once.
    let buffers = plan["buffers"].as_array().unwrap();
    let workspaces = plan["workspaces"].as_array().map_or(0, Vec::len);
    assert_eq!(rects.len(), buffers.len() + workspaces);
    let mut seen: Vec<usize> = rects.iter().map(|r| r.block).collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..rects.len()).collect::<Vec<_>>());

    // Inside the axes.
    let eps = 1e-6;
    for r in &rects {
        assert!(r.w >= 0.0 && r.h >= 0.0, "{r:?}");
        assert!(
            r.x >= px - eps && r.x + r.w <= px + pw + eps,
            "{r:?} outside"
        );
        assert!(
            r.y >= py - eps && r.y + r.h <= py + ph + eps,
            "{r:?} outside"
        );
    }

    // Buffers appear in plan order; aliases share their storage's bytes.
    let mut by_block: Vec<&Rect> = rects.iter().collect();
    by_block.sort_by_key(|r| r.block);
    for (b, r) in buffers.iter().zip(&by_block) {
        let aliased = !b["alias"].is_null();
        assert_eq!(aliased, r.storage != r.block, "{b} vs {r:?}");
    }

    // Every block at least a few pixels wide (issue 29, item 16: one step of thousands was
    // a sliver).
    for r in &rects {
        assert!(r.w >= 4.0 - eps, "{r:?} is narrower than 4 px");
    }

    // No overlaps the plan does not have: two rectangles cross only within one storage, or
    // where a block narrower than 4 px was drawn wider around its place.
    let mut order: Vec<&Rect> = rects.iter().collect();
    order.sort_by(|a, b| a.x.total_cmp(&b.x));
    for (i, a) in order.iter().enumerate() {
        for b in &order[i + 1..] {
            if b.x >= a.x + a.w - eps {
                break;
            }
            let overlap = a.y < b.y + b.h - eps && b.y < a.y + a.h - eps;
            if overlap && !a.widened && !b.widened && a.h > eps && b.h > eps {
                assert_eq!(
                    a.storage, b.storage,
                    "blocks {} and {} overlap but share no storage",
                    a.block, b.block
                );
            }
        }
    }
}

#[test]
fn the_svg_has_one_rectangle_per_buffer_inside_the_axes_and_no_false_overlaps() {
    // Views and in-place outputs (shufflenet), a plain network (squeezenet), Concat parts
    // (the U-Net), and shufflenet without aliasing, where no two rectangles may overlap at
    // all.
    let (_, svg) = check_picture("json/light_shufflenet_b1.json", &[]);
    assert!(svg.contains("class=\"buf alias"), "no alias drawn");
    check_picture("json/light_squeezenet_b1.json", &["--schedule", "memory"]);
    let (_, unet) = check_picture("json/smp_unet_resnet34_b1.json", &[]);
    assert!(
        unet.contains("class=\"buf alias part"),
        "no Concat part drawn"
    );
    let (plan, _) = check_picture(
        "json/light_shufflenet_b1.json",
        &["--no-views", "--no-inplace", "--no-concat-elision"],
    );
    assert!(
        plan["buffers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["alias"].is_null())
    );
}

#[test]
fn the_svg_shows_the_curve_the_bound_the_peak_and_labels() {
    let (plan, svg) = check_picture("json/light_squeezenet_b1.json", &[]);
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let class = |c: &str| {
        doc.descendants()
            .filter(|n| n.attribute("class") == Some(c))
            .count()
    };
    assert_eq!(class("live"), 1);
    assert_eq!(class("lower-bound"), 1);
    assert_eq!(class("peak"), 1);
    let labels = doc
        .descendants()
        .find(|n| n.attribute("class") == Some("labels"))
        .unwrap();
    assert!(labels.children().filter(|n| n.is_element()).count() >= 3);
    // The live curve has one level per step.
    let d = doc
        .descendants()
        .find(|n| n.attribute("class") == Some("live"))
        .unwrap()
        .attribute("d")
        .unwrap();
    let steps = plan["schedule"].as_array().unwrap().len();
    assert_eq!(d.matches('H').count(), steps);
    assert!(svg.contains("peak: step"));
}

#[test]
fn pictures_are_deterministic_and_the_html_is_one_offline_file() {
    let dir = scratch("html");
    let g = graph("json/light_squeezenet_b1.json");
    let paths: Vec<PathBuf> = ["a.html", "b.html", "a.svg", "b.svg"]
        .iter()
        .map(|n| dir.join(n))
        .collect();
    let p = |i: usize| paths[i].to_str().unwrap().to_owned();
    for (html, svg) in [(p(0), p(2)), (p(1), p(3))] {
        let run = memplan(&["plan", &g, "--html", &html, "--svg", &svg, "--quiet"]);
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let read = |path: &Path| std::fs::read(path).unwrap();
    assert_eq!(read(&paths[0]), read(&paths[1]));
    assert_eq!(read(&paths[2]), read(&paths[3]));
    let html = String::from_utf8(read(&paths[0])).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    for remote in ["http://", "https://", "src=", "<link"] {
        assert!(!html.contains(remote), "the page loads `{remote}`");
    }
    // The data is valid JSON with one entry per buffer.
    let start = html.find("type=\"application/json\">").unwrap() + 24;
    let end = start + html[start..].find("</script>").unwrap();
    let data: serde_json::Value = serde_json::from_str(&html[start..end]).unwrap();
    assert_eq!(data["graph"], "light_squeezenet_b1");
    assert_eq!(data["blocks"].as_array().unwrap().len(), 67);
    assert!(html.contains("id=\"search\""));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_large_graph_draws_quickly_into_a_file_of_sensible_size() {
    let dir = scratch("large");
    let svg = dir.join("p.svg");
    let html = dir.join("p.html");
    let start = std::time::Instant::now();
    let run = memplan(&[
        "plan",
        &graph("json/smollm_135m_b1.json"),
        "--svg",
        svg.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(start.elapsed().as_secs() < 60);
    let svg_bytes = std::fs::metadata(&svg).unwrap().len();
    let html_bytes = std::fs::metadata(&html).unwrap().len();
    assert!(svg_bytes < 2_000_000, "{svg_bytes}");
    assert!(html_bytes < 1_000_000, "{html_bytes}");
    let _ = std::fs::remove_dir_all(&dir);
}
