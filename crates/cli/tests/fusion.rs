//! `--fuse` on every spelling today's exporters write (`testdata/fusion`, made by its
//! `make.py`): hand-written attention (`F.scaled_dot_product_attention` without and with
//! float, boolean and causal masks, with grouped-query heads; written out with a division,
//! in 3-D `bmm` form, with Gemma-2's soft-capping, with `masked_fill`, with Hugging Face's
//! `repeat_kv`), GELU, SiLU, normalisations and products added to residuals, and Hugging Face
//! models in their `eager` and `sdpa` attention implementations, each exported by the dynamo
//! exporter at opsets 18, 20 and 23, the TorchScript exporter, and ONNX Runtime's transformer
//! optimizer.
//!
//! For each export, `make.py` writes down what the model computes (`expect.json`): attention
//! layers, GELUs, SiLUs, normalisations, products added to a residual. With `--fuse all`
//! each is one kernel in the fused graph, and none is left written out (no `Softmax`, no
//! `Erf`, no `ReduceMean` remains; no `Sigmoid` where a SiLU was); the rewrite passes the
//! verifier's own check of each kernel, and the plan passes the plan verifier and the
//! pattern check, with both attention kernels' scratch.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::{memplan, stderr};
use memplan_ir::{Attr, Graph};
use memplan_planner::{Fusions, PlanOptions, fuse_graph, verify_fusion};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/fusion/onnx")
}

/// What each export computes, from `expect.json`.
fn expectations() -> BTreeMap<String, BTreeMap<String, u64>> {
    let text = std::fs::read_to_string(dir().join("expect.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn load(name: &str) -> Graph {
    let path = dir().join(format!("{name}.onnx"));
    memplan_onnx::load(&path, &memplan_onnx::ImportOptions::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The kernels of each kind in a fused graph, and the ops written out that each kind leaves
/// behind when it fails.
fn kernels(g: &Graph) -> BTreeMap<&'static str, u64> {
    let mut out: BTreeMap<&'static str, u64> = BTreeMap::new();
    for node in g.nodes().iter() {
        let act = match node.attr("activation") {
            Some(Attr::Str(a)) if node.op == "memplan.BiasAct" => a.as_str(),
            _ => node.op.as_str(),
        };
        let kind = match act {
            "memplan.Attention"
            | "Attention"
            | "com.microsoft.Attention"
            | "com.microsoft.MultiHeadAttention" => "attention",
            "Gelu"
            | "QuickGelu"
            | "com.microsoft.Gelu"
            | "com.microsoft.FastGelu"
            | "com.microsoft.BiasGelu"
            | "com.microsoft.QuickGelu" => "gelu",
            "Swish" => "silu",
            "LayerNormalization"
            | "RMSNormalization"
            | "GroupNormalization"
            | "InstanceNormalization"
            | "SimplifiedLayerNormalization"
            | "com.microsoft.SkipLayerNormalization"
            | "com.microsoft.SkipSimplifiedLayerNormalization"
            | "com.microsoft.EmbedLayerNormalization"
            | "memplan.SkipNorm" => "norm",
            "memplan.ConvAdd"
            | "memplan.ConvTransposeAdd"
            | "memplan.GemmAdd"
            | "memplan.MatMulAdd" => "conv_add",
            "Softmax" => "left:Softmax",
            "Erf" => "left:Erf",
            "ReduceMean" => "left:ReduceMean",
            "Sigmoid" => "left:Sigmoid",
            _ => continue,
        };
        *out.entry(kind).or_default() += 1;
    }
    out
}

#[test]
fn every_spelling_is_one_kernel_each() {
    let expect = expectations();
    assert!(expect.len() > 60, "only {} exports", expect.len());
    let mut wrong = Vec::new();
    for (name, want) in &expect {
        let graph = load(name);
        let options = PlanOptions::default().with_fuse(Fusions::ALL.with_constants(false));
        let fused = fuse_graph(&graph, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
        if let Err(e) = verify_fusion(&graph, &fused.graph) {
            wrong.push(format!("{name}: the verifier refuses the fusion: {e}"));
            continue;
        }
        let got = kernels(&fused.graph);
        for kind in ["attention", "gelu", "silu", "norm", "conv_add"] {
            let (w, g) = (
                want.get(kind).copied().unwrap_or(0),
                got.get(kind).copied().unwrap_or(0),
            );
            if w != g {
                wrong.push(format!("{name}: {g} {kind} kernels, {w} computed"));
            }
        }
        for left in ["left:Softmax", "left:Erf", "left:ReduceMean"] {
            if let Some(n) = got.get(left) {
                wrong.push(format!("{name}: {n} {left} written out"));
            }
        }
        if want.get("silu").is_some_and(|&n| n > 0)
            && let Some(n) = got.get("left:Sigmoid")
        {
            wrong.push(format!("{name}: {n} Sigmoid written out"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The dims to plan an export at: its symbols at small values (the images 12 x 12).
fn dims(graph: &Graph) -> Vec<String> {
    graph
        .symbols()
        .iter()
        .filter(|s| !graph.find_symbol(s).is_some_and(|id| graph.is_derived(id)))
        .flat_map(|s| {
            let v = match s.as_str() {
                "height" | "width" => 12,
                "batch" => 2,
                _ => 9,
            };
            ["--dim".to_owned(), format!("{s}={v}")]
        })
        .collect()
}

#[test]
fn every_fused_plan_passes_both_checks_with_either_kernel() {
    for name in expectations().keys() {
        let path = dir().join(format!("{name}.onnx"));
        let path = path.to_string_lossy();
        let dims = dims(&load(name));
        for kernel in ["eager", "flash"] {
            let mut args = vec![
                "check",
                &path,
                "--fuse",
                "all",
                "--attention",
                kernel,
                "--bound",
            ];
            args.extend(dims.iter().map(String::as_str));
            let o = memplan(&args);
            assert_eq!(o.status.code(), Some(0), "{name} {kernel}: {}", stderr(&o));
        }
    }
}
