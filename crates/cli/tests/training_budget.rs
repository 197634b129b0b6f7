//! Recomputation under a budget on real graphs: for each graph and each budget between the
//! least any checkpointing found and what the step needs without recomputation, the FLOPs
//! `--checkpoint auto` recomputes, next to Chen et al.'s √n checkpointing (`every:N`, `N`
//! the square root of the forward's length) and to no checkpointing. memplan recomputes no
//! less than √n wherever √n fits, and every plan fits its budget and passes the verifier.
//!
//! `cargo test -p memplan-cli --test training_budget -- --nocapture` prints the table
//! (docs/MEASUREMENTS.md has it).

use memplan_ir::Graph;
use memplan_planner::{
    Checkpoint, PlanError, TrainingOptions, TrainingStep, plan_training, verify_plan,
};

mod common;
use common::load_testdata as load;

fn total(s: &TrainingStep) -> u64 {
    s.plan.arena_bytes + s.plan.weight_bytes
}

fn step(g: &Graph, checkpoint: Checkpoint) -> Result<TrainingStep, PlanError> {
    let s = plan_training(g, &TrainingOptions::default().with_checkpoint(checkpoint))?;
    verify_plan(&s.graph, &s.plan).unwrap();
    Ok(s)
}

fn pct(flops: u64, forward: u64) -> String {
    #[allow(clippy::cast_precision_loss, reason = "display")]
    let p = 100.0 * flops as f64 / forward.max(1) as f64;
    format!("{p:.1}%")
}

fn mib(b: u64) -> String {
    #[allow(clippy::cast_precision_loss, reason = "display")]
    let m = b as f64 / (1 << 20) as f64;
    format!("{m:.0}")
}

#[test]
fn auto_recomputes_less_than_square_root_checkpointing_at_every_budget() {
    let graphs = [
        (
            "light_resnet50_b1",
            load("graphs/onnx/light_resnet50_b1.onnx", &[]),
        ),
        (
            "tv_mobilenet_v3_large_b8",
            load("graphs/onnx/tv_mobilenet_v3_large_b8.onnx", &[]),
        ),
        (
            "smp_unet_resnet34_b1",
            load("graphs/onnx/smp_unet_resnet34_b1.onnx", &[]),
        ),
        (
            "vit_base_patch16_224_b8",
            load("graphs/onnx/vit_base_patch16_224_b8.onnx", &[]),
        ),
        (
            "bert_base (batch 8, seq 128)",
            load(
                "graphs/dynamic/onnx/bert_base.onnx",
                &[("batch", 8), ("seq", 128)],
            ),
        ),
        (
            "gpt2 (batch 4, seq 256)",
            load(
                "graphs/dynamic/onnx/gpt2.onnx",
                &[("batch", 4), ("seq", 256)],
            ),
        ),
        (
            "transformer (batch 64)",
            load("training/transformer/forward.onnx", &[("batch", 64)]),
        ),
    ];
    println!("| graph | budget (MiB) | none | √n (every:N) | memplan auto |");
    println!("|---|---|---|---|---|");
    let mut compared = 0;
    for (name, g) in &graphs {
        let none = step(g, Checkpoint::None).unwrap();
        let forward = none.summary.recompute.forward_flops;
        let n = g.nodes().len();
        let root = ((n as f64).sqrt().round() as usize).max(1);
        let sqrt = step(g, Checkpoint::Every(root)).unwrap();
        // The least memory found, from the error of a budget nothing meets.
        let least = match step(g, Checkpoint::Auto { budget: 1 }) {
            Err(PlanError::BudgetTooSmall { minimum, .. }) => minimum,
            other => panic!("{name}: {:?}", other.map(|s| s.summary.recompute)),
        };
        let most = total(&none);
        assert!(least <= total(&sqrt) && least <= most, "{name}");
        for k in 0..=5u64 {
            let budget = least + (most - least) * k / 5;
            let auto = step(g, Checkpoint::Auto { budget })
                .unwrap_or_else(|e| panic!("{name} at {budget}: {e}"));
            assert!(
                total(&auto) <= budget,
                "{name}: {} over {budget}",
                total(&auto)
            );
            let none_cell = if most <= budget {
                "fits".to_owned()
            } else {
                "does not fit".to_owned()
            };
            let sqrt_cell = if total(&sqrt) <= budget {
                compared += 1;
                assert!(
                    auto.summary.recompute.flops < sqrt.summary.recompute.flops,
                    "{name} at {budget}: auto {} > √n {}",
                    auto.summary.recompute.flops,
                    sqrt.summary.recompute.flops
                );
                pct(sqrt.summary.recompute.flops, forward)
            } else {
                "does not fit".to_owned()
            };
            println!(
                "| {name} | {} | {none_cell} | {sqrt_cell} (every:{root}) | {} ({} checkpoints) |",
                mib(budget),
                pct(auto.summary.recompute.flops, forward),
                auto.summary.checkpoints.len()
            );
        }
    }
    assert!(compared >= 10, "{compared}");
}
