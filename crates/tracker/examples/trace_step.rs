//! Prints every allocation and free of one `hf` training step, with its phase, to diff with
//! the per-op trace of `testdata/runtime/harness.py`'s counter:
//! `cargo run --release -p memplan-tracker --example trace_step -- 'CONFIG_JSON' '{"batch":1,
//! "seq":512,"precision":"mixed","attention":"eager","checkpointing":"none","kernel":"foreach"}'`
//! (`INFER=1` for an inference forward, with `LAST=1` for last-position logits).
use memplan_ir::DType;
use memplan_tracker::estimate::*;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let config = TransformerConfig::from_hf_json(&a[1]).unwrap();
    let s: serde_json::Value = serde_json::from_str(&a[2]).unwrap();
    let g = |k: &str| s[k].as_str().unwrap().to_owned();
    let precision: Precision = g("precision").parse().unwrap();
    let dtype = if precision == Precision::Fp32 {
        DType::F32
    } else {
        DType::BF16
    };
    for l in eager::debug_trace(
        &config,
        s["batch"].as_u64().unwrap(),
        s["seq"].as_u64().unwrap(),
        dtype,
        g("attention").parse().unwrap(),
        precision,
        g("kernel").parse().unwrap(),
        g("checkpointing").parse().unwrap(),
    ) {
        println!("{l}");
    }
}
