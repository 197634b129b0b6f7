//! The workload a row of `testdata/runtime/*.jsonl` ran, as `harness.py`'s settings say:
//! shared by the `runtime_truth` test and the `runtime_truth` example (`#[path]`), so both
//! read a row the same way.

use memplan_ir::DType;
use memplan_tracker::estimate::{
    AttentionImpl, Checkpointing, Logits, Optimizer, OptimizerKernel, Precision, Runtime, Training,
    Workload,
};
use serde_json::Value;

/// The workload a row ran, as the harness's settings say.
pub fn workload(row: &Value) -> Workload {
    let get = |k: &str| row[k].as_str().unwrap_or("").to_owned();
    let mut w = Workload::inference(
        row["batch"].as_u64().unwrap(),
        row["seq"].as_u64().unwrap(),
        DType::BF16,
    );
    w.runtime = Some(Runtime::Hf);
    w.attention = get("attention").parse::<AttentionImpl>().unwrap();
    // Training rows name their 16-bit dtype since the sixth session (`bf16` before).
    w.dtype = match get("dtype").as_str() {
        "f16" => DType::F16,
        "f32" => DType::F32,
        _ => DType::BF16,
    };
    if row["precision"].is_null() {
        w.logits = if get("logits") == "all" {
            Logits::All
        } else {
            Logits::Last
        };
    } else {
        let precision: Precision = get("precision").parse().unwrap();
        w.training = Some(
            Training::new(match get("optimizer").as_str() {
                "" => Optimizer::AdamW,
                name => name.parse::<Optimizer>().unwrap(),
            })
            .with_precision(precision)
            .with_kernel(get("kernel").parse::<OptimizerKernel>().unwrap())
            .with_checkpointing(get("checkpointing").parse::<Checkpointing>().unwrap()),
        );
        if precision == Precision::Fp32 {
            w.dtype = DType::F32;
        }
    }
    w
}
