//! `memplan compare`: every configuration of every graph, the best marked, in four formats;
//! without times the output is the same on every run.

mod common;

use common::{graph, memplan, stdout};

#[test]
fn json_rows_cover_every_configuration_and_mark_the_smallest_arena() {
    let a = graph("json/light_squeezenet_b1.json");
    let b = graph("json/light_shufflenet_b1.json");
    let args = [
        "compare",
        a.as_str(),
        b.as_str(),
        "--strategies",
        "all",
        "--schedules",
        "given,memory",
        "--aliasing",
        "on,off",
        "--format",
        "json",
        "--no-time",
    ];
    let o = memplan(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2 * memplan_packing::Strategy::ALL.len() * 2 * 2);
    for name in ["light_squeezenet_b1", "light_shufflenet_b1"] {
        let mine: Vec<&serde_json::Value> = rows.iter().filter(|r| r["graph"] == name).collect();
        let best = mine
            .iter()
            .map(|r| r["arena_bytes"].as_u64().unwrap())
            .min()
            .unwrap();
        for r in &mine {
            let arena = r["arena_bytes"].as_u64().unwrap();
            let bound = r["lower_bound_bytes"].as_u64().unwrap();
            assert!(arena >= bound, "{r}");
            assert_eq!(r["best"], arena == best, "{r}");
            assert!(r.get("seconds").is_none());
        }
        // Aliasing never makes the best arena larger.
        let best_off = mine
            .iter()
            .filter(|r| r["aliasing"] == false)
            .map(|r| r["arena_bytes"].as_u64().unwrap())
            .min()
            .unwrap();
        assert!(best <= best_off);
    }
    assert_eq!(stdout(&memplan(&args)), stdout(&o), "deterministic");
}

#[test]
fn csv_markdown_and_text_agree() {
    let a = graph("json/light_squeezenet_b1.json");
    let run = |format: &str| {
        let o = memplan(&[
            "compare",
            &a,
            "--strategies",
            "naive,greedy-size",
            "--format",
            format,
            "--no-time",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        stdout(&o)
    };
    let csv = run("csv");
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("graph,strategy,schedule,aliasing,arena_bytes,lower_bound_bytes,ratio,best")
    );
    assert_eq!(lines.clone().count(), 2);
    assert!(
        csv.contains("light_squeezenet_b1,greedy-size,given,on,3928576,3928576,1.0000,true"),
        "{csv}"
    );
    let md = run("markdown");
    assert!(md.starts_with("| graph | strategy |"), "{md}");
    assert!(md.contains("**best**"), "{md}");
    let text = run("text");
    assert!(
        text.contains("greedy-size") && text.contains("best"),
        "{text}"
    );
    assert!(text.contains("3.75 MiB"), "{text}");
}

#[test]
fn a_folder_is_every_graph_in_it_and_bad_lists_are_usage_errors() {
    let dir = std::env::temp_dir().join(format!("memplan-cli-compare-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["light_squeezenet_b1", "light_shufflenet_b1"] {
        std::fs::copy(
            graph(&format!("json/{name}.json")),
            dir.join(format!("{name}.json")),
        )
        .unwrap();
    }
    std::fs::write(dir.join("notes.txt"), "not a graph").unwrap();
    let o = memplan(&[
        "compare",
        dir.to_str().unwrap(),
        "--format",
        "csv",
        "--no-time",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = stdout(&o);
    let graphs: Vec<&str> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap())
        .collect();
    assert_eq!(graphs, ["light_shufflenet_b1", "light_squeezenet_b1"]);
    let _ = std::fs::remove_dir_all(&dir);

    let o = memplan(&[
        "compare",
        &graph("json/light_squeezenet_b1.json"),
        "--schedules",
        "fastest",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown value `fastest`"));
}
