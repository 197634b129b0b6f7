//! ONNX control flow end to end: If, Loop and Scan bodies that read an outer value (a
//! captured value that must stay live until the node runs), a nested If inside a Loop, a
//! body that cannot be sized, and `memplan plan --verify` on such a model.
//!
//! Every model is built here in memory. The repro is always the same shape: `x = Relu(a)`,
//! `t = Neg(a)`, then a control-flow node whose body reads `x` without listing it, then a node
//! reading `t`. Before bodies were imported, `x` looked dead after `Relu` and `t` took its
//! bytes while the body still needed them.

mod common;

use memplan_ir::{Graph, GraphError, NodeId, TensorId};
use memplan_onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    ValueInfoProto,
};
use memplan_onnx::{ImportOptions, OnnxError, import};
use memplan_planner::{Plan, PlanError, PlanOptions, plan_graph, verify_plan};
use prost::Message;

use common::onnx::{BOOL, F32, I64, op, vi};

fn with_graph(mut node: NodeProto, attr: &str, g: GraphProto) -> NodeProto {
    node.attribute.push(AttributeProto {
        name: attr.into(),
        r#type: 5,
        g: Some(g),
        ..Default::default()
    });
    node
}

fn with_int(mut node: NodeProto, attr: &str, i: i64) -> NodeProto {
    node.attribute.push(AttributeProto {
        name: attr.into(),
        r#type: 2,
        i,
        ..Default::default()
    });
    node
}

fn graph(
    name: &str,
    inputs: Vec<ValueInfoProto>,
    nodes: Vec<NodeProto>,
    outputs: Vec<ValueInfoProto>,
) -> GraphProto {
    GraphProto {
        name: name.into(),
        input: inputs,
        node: nodes,
        output: outputs,
        ..Default::default()
    }
}

/// A scalar integer or bool initializer.
fn scalar(name: &str, elem: i32, v: i64) -> TensorProto {
    TensorProto {
        name: name.into(),
        data_type: elem,
        int64_data: if elem == I64 { vec![v] } else { Vec::new() },
        int32_data: if elem == I64 {
            Vec::new()
        } else {
            vec![i32::from(v != 0)]
        },
        ..Default::default()
    }
}

fn bytes(g: GraphProto) -> Vec<u8> {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(g),
        ..Default::default()
    }
    .encode_to_vec()
}

/// The outer part of the repro around a control-flow node `cf` whose first output is `r`:
/// `x = Relu(a)`, `t = Neg(a)`, `cf`, `out = Add(r, t)`.
fn repro(
    extra_inputs: Vec<ValueInfoProto>,
    inits: Vec<TensorProto>,
    cf: NodeProto,
    r_dims: &[&str],
) -> Vec<u8> {
    let mut inputs = vec![vi("a", F32, r_dims)];
    inputs.extend(extra_inputs);
    let mut g = graph(
        "repro",
        inputs,
        vec![
            op("Relu", &["a"], &["x"]),
            op("Neg", &["a"], &["t"]),
            cf,
            op("Add", &["r", "t"], &["out"]),
        ],
        vec![vi("out", F32, r_dims)],
    );
    g.initializer = inits;
    bytes(g)
}

fn load(model: &[u8]) -> Graph {
    import(model, &ImportOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

fn id(g: &Graph, name: &str) -> TensorId {
    g.find_tensor(name)
        .unwrap_or_else(|| panic!("no tensor `{name}`"))
}

fn node(g: &Graph, name: &str) -> NodeId {
    g.find_node(name)
        .unwrap_or_else(|| panic!("no node `{name}`"))
}

fn options(alignment: u64) -> PlanOptions {
    PlanOptions::default().with_alignment(alignment)
}

/// Plans `g`, checks the plan with the verifier, and checks the repro's point directly: `x`
/// stays live through the step of `cf`, so it never shares a byte with `t` (live from the
/// step before). Returns the plan.
fn plan_repro(g: &Graph, cf: &str, opts: &PlanOptions) -> Plan {
    let plan = plan_graph(g, opts).unwrap_or_else(|e| panic!("{e}"));
    verify_plan(g, &plan).unwrap_or_else(|e| panic!("{}", e.with_graph(g)));
    let buf = |t| plan.buffers.iter().find(|b| b.tensor == t).unwrap();
    let (x, t) = (buf(id(g, "x")), buf(id(g, "t")));
    let cf_step = plan
        .schedule
        .iter()
        .position(|&n| n == node(g, cf))
        .unwrap();
    assert!(
        x.last as usize >= cf_step,
        "x dies at {} before {cf} at {cf_step}",
        x.last
    );
    assert!(
        x.offset + x.bytes <= t.offset || t.offset + t.bytes <= x.offset,
        "x {}..{} and t {}..{} share bytes",
        x.offset,
        x.offset + x.bytes,
        t.offset,
        t.offset + t.bytes
    );
    assert_eq!(g.nodes()[node(g, cf)].implicit_inputs, vec![id(g, "x")]);
    plan
}

/// The workspace of `cf`: its bytes, after checking it is at `cf`'s step.
fn workspace(g: &Graph, plan: &Plan, cf: &str) -> u64 {
    let n = node(g, cf);
    let w: Vec<_> = plan.workspaces.iter().filter(|w| w.node == n).collect();
    assert_eq!(w.len(), 1, "{:?}", plan.workspaces);
    assert_eq!(plan.schedule[w[0].step as usize], n);
    w[0].bytes
}

/// A Loop body with formal inputs `i` (iteration), `c` (condition) and `v` (f32[1024]).
fn loop_body(nodes: Vec<NodeProto>, outputs: Vec<ValueInfoProto>) -> GraphProto {
    let formal = vec![
        vi("i", I64, &[]),
        vi("c", BOOL, &[]),
        vi("v", F32, &["1024"]),
    ];
    graph("body", formal, nodes, outputs)
}

/// A branch of an If: no formal inputs, one f32[1024] result.
fn branch(name: &str, nodes: Vec<NodeProto>, result: &str) -> GraphProto {
    graph(name, vec![], nodes, vec![vi(result, F32, &["1024"])])
}

fn if_node(cond: &str, out: &str, then: GraphProto, other: GraphProto) -> NodeProto {
    let node = with_graph(op("If", &[cond], &[out]), "then_branch", then);
    with_graph(node, "else_branch", other)
}

/// If on `cond` whose branches read `x`: then `Mul(x, x)`; else `Add(Sigmoid(x), Neg(x))`.
fn if_model() -> Vec<u8> {
    let then = branch("then", vec![op("Mul", &["x", "x"], &["y1"])], "y1");
    let other = branch(
        "else",
        vec![
            op("Sigmoid", &["x"], &["e1"]),
            op("Neg", &["x"], &["e2"]),
            op("Add", &["e1", "e2"], &["y2"]),
        ],
        "y2",
    );
    let cf = if_node("cond", "r", then, other);
    repro(vec![vi("cond", BOOL, &[])], vec![], cf, &["1024"])
}

#[test]
fn if_keeps_captured_value_live_and_sizes_its_workspace() {
    let g = load(&if_model());
    assert_eq!(g.nodes()[node(&g, "If_r")].bodies.len(), 2);
    let plan = plan_repro(&g, "If_r", &PlanOptions::default());
    // Then: one 4096-byte result (1024 f32). Else: `e1` and `e2` (4096 bytes each) are both
    // live when `Add` runs, and `y2` is written in place over one of them: 8192. The
    // workspace is the larger branch.
    assert_eq!(workspace(&g, &plan, "If_r"), 8192);
    let json = plan.to_json(&g);
    assert!(
        json.contains("\"workspaces\": [\n    {\"node\":\"If_r\",\"offset\":"),
        "{json}"
    );
}

#[test]
fn a_dropped_capture_is_caught_by_validation_and_a_short_life_by_the_verifier() {
    let g = load(&if_model());
    let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
    // The old import's view of the graph: the If lists no implicit input.
    let mut old = g.clone();
    old.nodes_mut().raw_mut()[2].implicit_inputs.clear();
    let err = old.validate().unwrap_err().to_string();
    assert!(
        err.contains("captures `x`, which is not among the node's implicit inputs"),
        "{err}"
    );
    // The old plan's view of `x`: dead after Relu.
    let mut short = plan.clone();
    let x = id(&g, "x");
    short
        .buffers
        .iter_mut()
        .find(|b| b.tensor == x)
        .unwrap()
        .last = 0;
    let err = verify_plan(&g, &short)
        .unwrap_err()
        .with_graph(&g)
        .to_string();
    assert!(
        err.contains("tensor `x` is captured by node `If_r` at step 2"),
        "{err}"
    );
    // A workspace over a live buffer.
    let mut clash = plan.clone();
    let t = plan
        .buffers
        .iter()
        .find(|b| b.tensor == id(&g, "t"))
        .unwrap()
        .offset;
    clash.workspaces[0].offset = t;
    let err = verify_plan(&g, &clash)
        .unwrap_err()
        .with_graph(&g)
        .to_string();
    assert!(err.contains("workspace of If_r"), "{err}");
}

#[test]
fn loop_keeps_captured_value_live_and_sizes_its_workspace() {
    // Loop 3 times over v (starting at a): v2 = Add(v, x); per iteration s = Mul(v2, x).
    let body = loop_body(
        vec![
            op("Add", &["v", "x"], &["v2"]),
            op("Mul", &["v2", "x"], &["s"]),
        ],
        vec![
            vi("c", BOOL, &[]),
            vi("v2", F32, &["1024"]),
            vi("s", F32, &["1024"]),
        ],
    );
    let cf = with_graph(op("Loop", &["m", "go", "a"], &["r", "ss"]), "body", body);
    let g = load(&repro(
        vec![],
        vec![scalar("m", I64, 3), scalar("go", BOOL, 1)],
        cf,
        &["1024"],
    ));
    let shape: Vec<_> = g.tensors()[id(&g, "ss")].static_dims().unwrap();
    assert_eq!(shape, vec![3, 1024], "scan outputs stack the trip count");
    let plan = plan_repro(&g, "Loop_r", &options(1));
    // Results only, all live to the body's end: the condition handed back (copied, 1 byte),
    // v2 and s (4096 bytes each; s cannot overwrite v2, a result).
    assert_eq!(workspace(&g, &plan, "Loop_r"), 1 + 4096 + 4096);
}

#[test]
fn scan_keeps_captured_value_live_and_sizes_its_workspace() {
    // Scan over the 4 rows of `b` with state h (starting at a): nh = Add(h, row);
    // per row y = Mul(nh, x).
    let body = graph(
        "body",
        vec![vi("h", F32, &["256"]), vi("row", F32, &["256"])],
        vec![
            op("Add", &["h", "row"], &["nh"]),
            op("Mul", &["nh", "x"], &["y"]),
        ],
        vec![vi("nh", F32, &["256"]), vi("y", F32, &["256"])],
    );
    let cf = with_int(
        with_graph(op("Scan", &["a", "b"], &["r", "ys"]), "body", body),
        "num_scan_inputs",
        1,
    );
    let g = load(&repro(
        vec![vi("b", F32, &["4", "256"])],
        vec![],
        cf,
        &["256"],
    ));
    assert_eq!(
        g.tensors()[id(&g, "ys")].static_dims().unwrap(),
        vec![4, 256]
    );
    let body = &g.nodes()[node(&g, "Scan_r")].bodies[0].graph;
    assert_eq!(
        body.tensors()[id(body, "row")].static_dims().unwrap(),
        vec![256],
        "one row per iteration"
    );
    let plan = plan_repro(&g, "Scan_r", &options(1));
    // Two 1024-byte results (256 f32), both live to the body's end.
    assert_eq!(workspace(&g, &plan, "Scan_r"), 2048);
}

/// A Loop whose body runs an If on the loop condition; the branches read the loop's `v` and
/// the outer-outer `x`.
fn nested_model() -> Vec<u8> {
    let then = branch("then", vec![op("Add", &["x", "v"], &["y1"])], "y1");
    let other = branch("else", vec![op("Sub", &["x", "v"], &["y2"])], "y2");
    let inner = if_node("c", "w", then, other);
    let body = loop_body(
        vec![inner],
        vec![vi("c", BOOL, &[]), vi("w", F32, &["1024"])],
    );
    let cf = with_graph(op("Loop", &["m", "go", "a"], &["r"]), "body", body);
    repro(
        vec![],
        vec![scalar("m", I64, 2), scalar("go", BOOL, 1)],
        cf,
        &["1024"],
    )
}

#[test]
fn nested_if_in_loop_captures_through_both_levels() {
    let g = load(&nested_model());
    let body = &g.nodes()[node(&g, "Loop_r")].bodies[0].graph;
    let inner = &body.nodes()[node(body, "If_w")];
    assert_eq!(inner.implicit_inputs, vec![id(body, "v"), id(body, "x")]);
    let plan = plan_repro(&g, "Loop_r", &options(1));
    // Inside the loop body, the If runs first with its result `w` (4096 bytes) and its own
    // workspace (one 4096-byte branch result) live together: 8192; then the condition copy
    // (1 byte) beside `w`. The Loop's workspace is that peak.
    assert_eq!(workspace(&g, &plan, "Loop_r"), 8192);
}

#[test]
fn a_body_that_cannot_be_sized_is_an_error_naming_the_node() {
    // Both branches make `y` of a custom op, typed [n] with `n` never bound; the If's own
    // result is declared [1024], so only the body lacks a size.
    let unsized_branch = |name: &str| {
        let mut g = branch(name, vec![op("Foo", &["x"], &["y"])], "y");
        g.node[0].domain = "my".into();
        g.output = vec![vi("y", F32, &["n"])];
        g
    };
    let cf = if_node("cond", "r", unsized_branch("then"), unsized_branch("else"));
    let mut model =
        ModelProto::decode(repro(vec![vi("cond", BOOL, &[])], vec![], cf, &["1024"]).as_slice())
            .unwrap();
    if let Some(g) = model.graph.as_mut() {
        g.value_info.push(vi("r", F32, &["1024"]));
    }
    let g = load(&model.encode_to_vec());
    let err = plan_graph(&g, &PlanOptions::default()).unwrap_err();
    assert!(
        matches!(err, PlanError::Body { node, .. } if g.nodes()[node].name == "If_r"),
        "{err:?}"
    );
    // The body's tensor is named by the body, not by the graph's tensor of its id.
    assert_eq!(
        err.with_graph(&g).to_string(),
        "cannot size the workspace of node `If_r` (body `then_branch`): tensor `y` needs a value for symbol `n`"
    );
    // The flag is the command line's to name.
    assert_eq!(
        memplan::flag_advice(&err).as_deref(),
        Some("pass e.g. --dim n=8")
    );
    // Bound, it plans and verifies.
    let opts = PlanOptions::default().with_bindings(g.bind(&[("n", 8)]).unwrap());
    let plan = plan_repro(&g, "If_r", &opts);
    assert_eq!(workspace(&g, &plan, "If_r"), 32);
}

#[test]
fn a_loop_carried_value_that_changes_shape_is_an_import_error() {
    let body = loop_body(
        vec![with_int(op("Concat", &["v", "x"], &["v2"]), "axis", 0)],
        vec![vi("c", BOOL, &[]), vi("v2", F32, &["2048"])],
    );
    let cf = with_graph(op("Loop", &["m", "go", "a"], &["r"]), "body", body);
    let err = import(
        &repro(
            vec![],
            vec![scalar("m", I64, 2), scalar("go", BOOL, 1)],
            cf,
            &["1024"],
        ),
        &ImportOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(err, OnnxError::Shape { ref node, .. } if node == "Loop_r"),
        "{err:?}"
    );
    assert!(err.to_string().contains("changes type"), "{err}");
}

#[test]
fn graph_with_bodies_round_trips_through_json() {
    let g = load(&nested_model());
    let text = g.to_json();
    let back = Graph::from_json(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back, g);
    assert_eq!(back.to_json(), text);
}

#[test]
fn cli_plans_and_checks_a_control_flow_model() {
    let dir = std::env::temp_dir().join(format!("memplan-cli-cf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("model.onnx");
    std::fs::write(&model, if_model()).unwrap();
    let run = |args: &[&str]| {
        let out = common::memplan(args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let m = model.to_str().unwrap();
    let text = run(&["plan", m, "--verify"]);
    assert!(text.contains("8.00 KiB for If `If_r` at step"), "{text}");
    assert_eq!(run(&["plan", m, "--verify"]), text, "deterministic");
    let json = run(&["plan", m, "--format", "json"]);
    assert!(json.contains("\"workspaces\""), "{json}");
    run(&["check", m]);
    let _ = std::fs::remove_dir_all(&dir);
}
