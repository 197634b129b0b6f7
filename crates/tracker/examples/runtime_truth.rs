//! Compares `estimate --runtime hf` with the ground truth of `testdata/runtime/harness.py`:
//! `cargo run --release -p memplan-tracker --example runtime_truth -- FILE.jsonl`. Prints
//! one line per run (model type, settings, memplan ÷ PyTorch for the total and the
//! activations, both peaks' phases, memplan's and PyTorch's bytes) and the range of the ratios.

use std::io::BufRead;

#[path = "../tests/support/truth_row.rs"]
mod truth_row;

use memplan_tracker::estimate::{TransformerConfig, estimate};

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("a JSONL file from harness.py");
    let file = std::fs::File::open(&path).expect("readable");
    let mut totals = Vec::new();
    let mut acts = Vec::new();
    // (setting, value) -> the ratios of its rows.
    let mut by_setting: std::collections::BTreeMap<(String, String), (Vec<f64>, Vec<f64>)> =
        Default::default();
    for line in std::io::BufReader::new(file).lines() {
        let line = line.expect("a line");
        let row: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        let config = TransformerConfig::from_hf_json(&row["config"].to_string());
        let Ok(config) = config else {
            println!("{}: config refused: {:?}", row["model_type"], config.err());
            continue;
        };
        let get = |k: &str| row[k].as_str().unwrap_or("").to_owned();
        let w = truth_row::workload(&row);
        let training = w.training.is_some();
        let truth = row["peak_rounded_bytes"].as_u64().unwrap() as f64;
        // Rows from `gpu_check.py` (a device's figures) have no activation peak; they have
        // the device's reserved peak.
        let truth_act = row["activation_peak_bytes"]
            .as_u64()
            .map_or(f64::NAN, |b| b as f64);
        let device_margin = row["peak_reserved_bytes"]
            .as_u64()
            .map(|r| r.saturating_sub(truth as u64) as f64 / 1048576.0);
        match estimate(&config, &w) {
            Ok(e) => {
                let r = e.total_bytes as f64 / truth;
                let ra = e.activation_bytes as f64 / truth_act.max(1.0);
                totals.push(r);
                acts.push(ra);
                let keys: &[&str] = if training {
                    &[
                        "precision",
                        "dtype",
                        "optimizer",
                        "attention",
                        "checkpointing",
                        "kernel",
                    ]
                } else {
                    &["dtype", "attention", "logits"]
                };
                for k in keys {
                    let entry = by_setting.entry(((*k).to_owned(), get(k))).or_default();
                    entry.0.push(r);
                    entry.1.push(ra);
                }
                println!(
                    "{:<17} {:>2}x{:<5} {:<6} {:<6} {:<9} {:<10} total {:.3} act {:.3}  peak {:?} vs {}  margin {:.1} MiB  bytes {} / {}",
                    row["name"]
                        .as_str()
                        .or(row["model_type"].as_str())
                        .unwrap_or("?"),
                    w.batch,
                    w.seq,
                    if training {
                        // `amp/f16`, `mixed/momentum`: the dtype and optimizer when not the
                        // harness's defaults (bf16, AdamW).
                        let mut p = get("precision");
                        for (k, default) in [("dtype", "bf16"), ("optimizer", "adamw")] {
                            let v = get(k);
                            if !v.is_empty() && v != default {
                                p = format!("{p}/{v}");
                            }
                        }
                        p
                    } else {
                        get("dtype")
                    },
                    get("attention"),
                    if training {
                        get("checkpointing")
                    } else {
                        String::new()
                    },
                    if training {
                        get("kernel")
                    } else {
                        format!("logits={}", get("logits"))
                    },
                    r,
                    ra,
                    e.peak_phase.map(|p| p.name()),
                    row["peak_phase"],
                    e.allocator_margin_bytes as f64 / 1048576.0,
                    e.total_bytes,
                    truth as u64
                );
                if let Some(m) = device_margin {
                    println!(
                        "{:<17} device margin {m:.1} MiB (reserved - allocated); memplan's reserved / device's {:.3}",
                        "",
                        e.reserved_bytes() as f64
                            / row["peak_reserved_bytes"].as_f64().unwrap_or(f64::NAN)
                    );
                }
            }
            Err(err) => println!("{}: {err}", row["model_type"]),
        }
    }
    let range = |v: &[f64]| {
        (
            v.iter().copied().fold(f64::MAX, f64::min),
            v.iter().copied().fold(0.0, f64::max),
        )
    };
    println!("| setting | runs | total | activations |");
    println!("|---|---|---|---|");
    let cell = |v: &[f64]| {
        let (lo, hi) = range(v);
        format!("{lo:.3}-{hi:.3}")
    };
    for ((k, v), (t, a)) in &by_setting {
        println!("| {k} {v} | {} | {} | {} |", t.len(), cell(t), cell(a));
    }
    println!(
        "{} runs: total {:?}, activations {:?}",
        totals.len(),
        range(&totals),
        range(&acts)
    );
}
