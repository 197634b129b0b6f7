//! Data-dependent sizes end to end: an ONNX model whose output shapes depend on
//! its data (NonZero, TopK with a runtime K, Slice with runtime bounds, Reshape to a runtime
//! shape) imports with fresh symbols; a plan made with every bounded symbol at its bound
//! passes the plan verifier, and so does the same placement for every smaller value of those
//! symbols (checked at several bindings); `memplan plan --bound` plans it and says which
//! sizes it bounded, and without `--bound` names the symbols to bind.

mod common;

use std::path::PathBuf;

use memplan_ir::GraphError as _;
use memplan_ir::{Bindings, Graph, SymbolId};
use memplan_onnx::proto::{GraphProto, ModelProto, OperatorSetIdProto, ValueInfoProto};
use memplan_onnx::{ImportOptions, import};
use memplan_planner::{Plan, PlanOptions, plan_graph, verify_plan};
use prost::Message;

use common::memplan;
use common::onnx::{F32, I64, op, vi};

/// `x[4, 6]` through NonZero, TopK (runtime K), Slice (runtime bounds) and Reshape (runtime
/// target), with elementwise ops after each so that in-place writes and views are in play.
fn model() -> Vec<u8> {
    let output = |name: &str| ValueInfoProto {
        name: name.into(),
        ..Default::default()
    };
    let graph = GraphProto {
        name: "data_dependent".into(),
        input: vec![
            vi("x", F32, &["4", "6"]),
            vi("k", I64, &["1"]),
            vi("starts", I64, &["1"]),
            vi("ends", I64, &["1"]),
            vi("target", I64, &["2"]),
        ],
        node: vec![
            op("Relu", &["x"], &["a"]),
            op("NonZero", &["a"], &["nz"]),
            op("Transpose", &["nz"], &["nzt"]),
            op("TopK", &["a", "k"], &["v", "i"]),
            op("Neg", &["v"], &["vn"]),
            op("Slice", &["a", "starts", "ends"], &["sl"]),
            op("Sigmoid", &["sl"], &["sg"]),
            op("Reshape", &["a", "target"], &["r"]),
            op("Relu", &["r"], &["rr"]),
        ],
        output: ["nzt", "vn", "i", "sg", "rr"].map(output).to_vec(),
        ..Default::default()
    };
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

fn graph() -> Graph {
    import(&model(), &ImportOptions::default()).unwrap()
}

/// The plan's placement, re-sized for smaller values of the bounded symbols: every buffer
/// keeps its offset and takes its size at `smaller`.
fn shrunk(graph: &Graph, plan: &Plan, smaller: &Bindings) -> Plan {
    let mut out = plan.clone();
    out.settings.bindings = graph
        .symbols()
        .iter_enumerated()
        .filter_map(|(s, name)| Some((name.clone(), smaller.get(s)?)))
        .collect();
    out.buffers.retain_mut(|b| {
        let bytes = graph.tensor(b.tensor).bytes(smaller).unwrap();
        assert!(
            bytes <= b.bytes,
            "`{}` grows below the bound",
            graph.tensor(b.tensor).name
        );
        b.bytes = bytes;
        bytes > 0
    });
    out
}

#[test]
fn a_plan_at_the_bounds_holds_for_every_smaller_value() {
    let g = graph();
    let name = |s: SymbolId| g.symbols().get(s).unwrap().clone();
    let bounded: Vec<(String, String)> = g
        .symbol_bounds()
        .iter()
        .map(|(s, e)| (name(*s), e.display(g.symbols()).to_string()))
        .collect();
    let want = [
        ("NonZero_nz_o0_d1", "24"),
        ("TopK_v_o0_d1", "6"),
        ("Slice_sl_o0_d0", "4"),
        ("Reshape_r_o0_d0", "24"),
        ("Reshape_r_o0_d1", "24"),
    ];
    assert_eq!(
        bounded,
        want.map(|(a, b)| (a.to_owned(), b.to_owned())).to_vec()
    );
    // The Reshape's (and the Relu after it) bytes are exact whatever its dims.
    let rr = g.tensor(g.find_tensor("rr").unwrap());
    assert_eq!(rr.static_bytes(), Ok(96));

    let (at_bound, _) = g.bind_to_bounds(&Bindings::new()).unwrap();
    let options = PlanOptions::default().with_bindings(at_bound.clone());
    let plan = plan_graph(&g, &options).unwrap();
    verify_plan(&g, &plan).unwrap();
    assert!(
        plan.stats.views + plan.stats.inplace > 0,
        "aliasing is in play"
    );

    let sym = |n: &str| g.find_symbol(n).unwrap();
    let (nz, topk, slice) = (
        sym("NonZero_nz_o0_d1"),
        sym("TopK_v_o0_d1"),
        sym("Slice_sl_o0_d0"),
    );
    let (r0, r1) = (sym("Reshape_r_o0_d0"), sym("Reshape_r_o0_d1"));
    for (n, k, s) in [(0, 0, 0), (1, 1, 1), (7, 3, 2), (23, 5, 3), (24, 6, 4)] {
        let smaller = Bindings::new()
            .with(nz, n)
            .with(topk, k)
            .with(slice, s)
            .with(r0, 4)
            .with(r1, 6);
        let p = shrunk(&g, &plan, &smaller);
        if let Err(e) = verify_plan(&g, &p) {
            panic!(
                "the plan at the bounds fails at nz={n} k={k} slice={s}: {}",
                e.with_graph(&g)
            );
        }
    }
}

#[test]
fn plan_bound_plans_at_the_bounds_and_says_which() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("data_dependent");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("data_dependent.onnx");
    std::fs::write(&path, model()).unwrap();
    let path = path.to_str().unwrap();

    let without = memplan(&["plan", path]);
    assert!(!without.status.success());
    let err = String::from_utf8_lossy(&without.stderr);
    assert!(
        err.contains("NonZero_nz_o0_d1") && err.contains("--bound"),
        "{err}"
    );

    let with = memplan(&["plan", "--bound", path]);
    let err = String::from_utf8_lossy(&with.stderr);
    assert!(with.status.success(), "{err}");
    assert!(
        err.contains("bounded: NonZero_nz_o0_d1 = 24 (at most 24)"),
        "{err}"
    );
    assert!(err.contains("bounded: TopK_v_o0_d1 = 6"), "{err}");
    let out = String::from_utf8_lossy(&with.stdout);
    assert!(out.contains("verified: the plan passes"), "{out}");
    // --bound where nothing is left to bound says so rather than nothing.
    let mut args = vec!["plan".to_owned(), "--bound".to_owned(), path.to_owned()];
    for line in err.lines() {
        if let Some(rest) = line.strip_prefix("bounded: ")
            && let Some((name, _)) = rest.split_once(" = ")
        {
            args.extend(["--dim".to_owned(), format!("{name}=1")]);
        }
    }
    assert!(args.len() > 5, "{err}");
    let all = memplan(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&all.stderr);
    assert!(all.status.success(), "{err}");
    assert!(
        err.contains("--bound: graph") && err.contains("changes nothing"),
        "{err}"
    );

    // The bounds are notes: `--quiet` keeps standard error for errors.
    let quiet = memplan(&["plan", "--bound", "-q", path]);
    assert!(quiet.status.success());
    assert_eq!(String::from_utf8_lossy(&quiet.stderr), "");

    // A --dim value wins over the bound.
    let dim = memplan(&["plan", "--bound", "--dim", "TopK_v_o0_d1=2", path]);
    let err = String::from_utf8_lossy(&dim.stderr);
    assert!(dim.status.success(), "{err}");
    assert!(!err.contains("bounded: TopK_v_o0_d1"), "{err}");

    let inspect = memplan(&["inspect", path]);
    let out = String::from_utf8_lossy(&inspect.stdout);
    assert!(inspect.status.success());
    assert!(out.contains("NonZero_nz_o0_d1 <= 24"), "{out}");
}
