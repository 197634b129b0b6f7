//! memplan's backward rules checked against PyTorch's gradient formulas (issue 36, item 2).
//!
//! For each op of the rule table (`crates/planner/src/step/rules.rs`), attribute case by
//! attribute case, this test derives a training step of a one-node forward graph, collects
//! what the backward nodes of each input's gradient read of the forward node (its inputs
//! `X_k` and outputs `Y_k`), and compares that with what PyTorch's formula for the same
//! gradient uses. The formulas are read from a vendored excerpt of PyTorch's
//! `derivatives.yaml` (`testdata/autograd/derivatives.yaml`, verbatim), with the facts about
//! PyTorch's `*_backward` functions that the formulas alone do not say (an argument read for
//! its shape only; the branch condition a function applies to the argument the formula may
//! bind to the forward's result) transcribed, with their sources, in
//! `testdata/autograd/backward_functions.tsv`. What the test states itself is only the map
//! from an ONNX op to an ATen function (which argument is which input or output, which
//! attribute is which scalar), and, where a PyTorch argument is no tensor of the ONNX node,
//! which tensors determine it (Pow's `result` from X and the exponent; a normalisation's
//! statistics from X).
//!
//! A gradient's reads are *enough* when some PyTorch formula for it, valid for the case,
//! uses only what memplan reads (or what that determines). A formula that binds the result
//! to an argument a function branches on is valid only where that branch condition gives
//! the same answer on the result as on the input, for every input: checked on sample points
//! with the ONNX definition of the forward op and the case's attributes. PyTorch's own
//! in-place `leaky_relu_` formula reads the result; with a negative slope its condition
//! `self > 0` holds on both sides (`leaky_relu(-1, -0.5) = 0.5`), so it is not valid there,
//! and a rule reading only Y fails (it did before issue 36).
//!
//! Ops with no ATen counterpart in `derivatives.yaml`, or whose PyTorch formula is a
//! composite that names none of the ONNX node's tensors, are listed in [`EXCUSED`] with the
//! reason; every op the table has a rule for must be in one list or the other.

use std::collections::{BTreeMap, BTreeSet};

use memplan_ir::{Attr, DType, Graph, GraphBuilder, TensorId, TensorKind};
use memplan_planner::{Checkpoint, Loss, Optimizer, PlanError, TrainingOptions, plan_training};

const DERIVATIVES: &str = include_str!("../../../testdata/autograd/derivatives.yaml");
const FUNCTIONS: &str = include_str!("../../../testdata/autograd/backward_functions.tsv");
const RULES: &str = include_str!("../src/step/rules.rs");

// ----------------------------------------------------------------------------------------
// derivatives.yaml

/// One entry: the function's tensor arguments and outputs, and its gradient formulas.
#[derive(Debug)]
struct Entry {
    /// The name with its overload (`clamp.Tensor`).
    name: String,
    /// Tensor argument names, in order.
    tensors: Vec<String>,
    /// Output names (`result`, or `result0`, `result1`... and the declared names).
    outputs: Vec<String>,
    /// `(inputs the formula computes, formula)`.
    formulas: Vec<(Vec<String>, String)>,
}

fn parse_entries(text: &str) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(sig) = line.strip_prefix("- name: ") else {
            continue;
        };
        let (name, rest) = sig.split_once('(').expect("a signature");
        let (args, ret) = rest.rsplit_once(") -> ").expect("a return type");
        let mut tensors = Vec::new();
        for arg in split_top(args, ',') {
            let arg = arg.trim().trim_start_matches("*, ").trim();
            if arg == "*" || arg.is_empty() {
                continue;
            }
            let decl = arg.split('=').next().unwrap_or(arg).trim();
            let (ty, name) = decl.rsplit_once(' ').unwrap_or(("", decl));
            if ty.starts_with("Tensor") {
                tensors.push(name.to_owned());
            }
        }
        let ret = ret.trim();
        let outputs: Vec<String> = if ret.starts_with('(') {
            let inner = ret.trim_start_matches('(').trim_end_matches(')');
            let parts = split_top(inner, ',');
            let mut names = Vec::new();
            for (k, p) in parts.iter().enumerate() {
                names.push(format!("result{k}"));
                if let Some((_, n)) = p.trim().split_once(' ') {
                    names.push(n.trim().to_owned());
                }
            }
            names
        } else {
            vec!["result".to_owned()]
        };
        let mut formulas = Vec::new();
        while let Some(next) = lines.peek() {
            if next.trim().is_empty() || next.starts_with("- name: ") {
                break;
            }
            let next = lines.next().unwrap_or_default();
            let body = next.trim();
            if body.starts_with('#') || body.ends_with(':') {
                // A comment, `dispatch:` or `Default:` (whose formulas follow, indented).
                continue;
            }
            if next.starts_with("    ") && !next.starts_with("      ") {
                // A dispatch key other than Default: its own formulas follow.
                continue;
            }
            let Some((key, value)) = body.split_once(": ") else {
                continue;
            };
            let inputs: Vec<String> = key.split(',').map(|k| k.trim().to_owned()).collect();
            if inputs.iter().any(|k| !tensors.contains(k)) {
                continue; // `result:`, `output_differentiability:`, forward-mode formulas
            }
            let value = value.trim().trim_matches('"').trim_matches('\'').to_owned();
            formulas.push((inputs, value));
        }
        out.insert(
            name.to_owned(),
            Entry {
                name: name.to_owned(),
                tensors,
                outputs,
                formulas,
            },
        );
    }
    out
}

/// Splits at `sep` outside brackets.
fn split_top(s: &str, sep: char) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut depth = 0i32;
    for c in s.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            _ => {}
        }
        if c == sep && depth == 0 {
            out.push(String::new());
        } else if let Some(last) = out.last_mut() {
            last.push(c);
        }
    }
    out
}

// ----------------------------------------------------------------------------------------
// backward_functions.tsv

#[derive(Clone, Debug, PartialEq)]
enum Use {
    Data,
    Shape,
    Eval,
    Scalar,
}

#[derive(Clone, Debug)]
struct Fact {
    use_: Use,
    /// Outputs of a joint call that read the argument (`None`: all).
    outputs: Option<Vec<usize>>,
    /// The branch condition on the argument, as `op operand` pairs joined by `|`.
    mask: Option<String>,
    /// The function's parameter names by position (those the file names).
    params: BTreeMap<usize, String>,
}

fn parse_facts(text: &str) -> BTreeMap<(String, usize), Fact> {
    let mut out: BTreeMap<(String, usize), Fact> = BTreeMap::new();
    let mut params: BTreeMap<String, BTreeMap<usize, String>> = BTreeMap::new();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split('\t').collect())
        .collect();
    for r in &rows {
        assert!(r.len() >= 7, "a row of 7 columns: {r:?}");
        params
            .entry(r[0].to_owned())
            .or_default()
            .insert(r[1].parse().expect("a position"), r[2].to_owned());
    }
    for r in rows {
        let use_ = match r[3] {
            "data" => Use::Data,
            "shape" => Use::Shape,
            "eval" => Use::Eval,
            "scalar" => Use::Scalar,
            other => panic!("use `{other}`"),
        };
        let outputs = (r[4] != "*").then(|| {
            r[4].split(',')
                .map(|o| o.parse().expect("an output"))
                .collect()
        });
        let mask = (r[5] != "-").then(|| r[5].to_owned());
        out.insert(
            (r[0].to_owned(), r[1].parse().expect("a position")),
            Fact {
                use_,
                outputs,
                mask,
                params: params[r[0]].clone(),
            },
        );
    }
    out
}

// ----------------------------------------------------------------------------------------
// What a formula uses

/// Methods that read a tensor's metadata, not its elements.
const METADATA: &[&str] = &[
    "sym_sizes",
    "sizes",
    "sym_size",
    "size",
    "scalar_type",
    "options",
    "sym_numel",
    "numel",
    "sym_strides",
    "strides",
    "layout",
    "dim",
    "is_complex",
    "dtype",
    "device",
];

/// A use of one of the entry's tensors (or outputs) by a formula.
#[derive(Clone, Debug)]
struct Usage {
    name: String,
    /// The function and parameter receiving it directly, with a branch condition.
    masked: Option<(String, String, BTreeMap<String, String>)>,
}

fn tokens(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphanumeric() || c == '_' {
            let mut j = i;
            while j < chars.len()
                && (chars[j].is_ascii_alphanumeric()
                    || chars[j] == '_'
                    || (chars[j] == ':' && chars.get(j + 1) == Some(&':'))
                    || (chars[j] == ':' && j > 0 && chars[j - 1] == ':'))
            {
                j += 1;
            }
            out.push(chars[i..j].iter().collect());
            i = j;
        } else if c == '-' && chars.get(i + 1) == Some(&'>') {
            out.push("->".to_owned());
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else {
            out.push(c.to_string());
            i += 1;
        }
    }
    out
}

/// The tensors of `entry` the formula uses for the gradient of the input at `output` (its
/// position in the formula's key), as data; metadata uses and uses a joint call makes for
/// other outputs left out. `training`: a batch norm's running statistics are not read.
fn uses(
    entry: &Entry,
    formula: &str,
    output: usize,
    facts: &BTreeMap<(String, usize), Fact>,
) -> Vec<Usage> {
    let t = tokens(formula);
    let tracked: BTreeSet<&str> = entry
        .tensors
        .iter()
        .chain(&entry.outputs)
        .map(String::as_str)
        .collect();
    // Per open bracket: the function called (for a call) and the argument index so far,
    // with each argument's tokens (to read a mask's operands).
    let mut stack: Vec<(Option<String>, usize, Vec<Vec<String>>)> = Vec::new();
    let mut found = Vec::new();
    let mut pending: Vec<(usize, usize)> = Vec::new(); // (token index, stack depth)
    for (i, tok) in t.iter().enumerate() {
        let closes = matches!(tok.as_str(), ")" | "]" | "}" | ",");
        if !closes
            && let Some((_, _, args)) = stack.last_mut()
            && let Some(a) = args.last_mut()
        {
            a.push(tok.clone());
        }
        match tok.as_str() {
            "(" | "[" | "{" => {
                let callee = (tok == "(")
                    .then(|| i.checked_sub(1).map(|p| t[p].clone()))
                    .flatten()
                    .filter(|c| {
                        c.chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                    });
                let callee = callee.map(|c| c.rsplit("::").next().unwrap_or(&c).to_owned());
                stack.push((callee, 0, vec![Vec::new()]));
            }
            ")" | "]" | "}" => {
                let (callee, _, args) = stack.pop().expect("balanced");
                if let Some((_, _, outer)) = stack.last_mut()
                    && let Some(a) = outer.last_mut()
                {
                    a.push(tok.clone());
                }
                // Resolve the uses that were direct arguments of this call.
                let depth = stack.len() + 1;
                let mine: Vec<(usize, usize)> = pending
                    .iter()
                    .copied()
                    .filter(|&(_, d)| d == depth)
                    .collect();
                pending.retain(|&(_, d)| d != depth);
                for (ti, _) in mine {
                    let arg = arg_index_of(&t, ti, i);
                    let fact = callee.as_ref().and_then(|c| facts.get(&(c.clone(), arg)));
                    match fact {
                        Some(f) if f.use_ != Use::Data => {}
                        Some(f) if f.outputs.as_ref().is_some_and(|o| !o.contains(&output)) => {}
                        Some(f) => {
                            let masked = f.mask.as_ref().map(|m| {
                                let operands: BTreeMap<String, String> = f
                                    .params
                                    .iter()
                                    .filter_map(|(&p, name)| {
                                        Some((name.clone(), args.get(p)?.concat()))
                                    })
                                    .collect();
                                (callee.clone().unwrap_or_default(), m.clone(), operands)
                            });
                            found.push(Usage {
                                name: t[ti].clone(),
                                masked,
                            });
                        }
                        None => found.push(Usage {
                            name: t[ti].clone(),
                            masked: None,
                        }),
                    }
                }
            }
            "," => {
                if let Some((_, k, args)) = stack.last_mut() {
                    *k += 1;
                    args.push(Vec::new());
                }
            }
            name if tracked.contains(name) => {
                let before = i.checked_sub(1).map(|p| t[p].as_str());
                let after = t.get(i + 1).map(String::as_str);
                // `x.method` or a field: a method of the tensor, not the tensor passed.
                if matches!(before, Some(".") | Some("->")) {
                    continue;
                }
                if matches!(after, Some(".") | Some("->"))
                    && t.get(i + 2).is_some_and(|m| METADATA.contains(&m.as_str()))
                {
                    continue;
                }
                pending.push((i, stack.len()));
            }
            _ => {}
        }
    }
    for (ti, _) in pending {
        found.push(Usage {
            name: t[ti].clone(),
            masked: None,
        });
    }
    found
}

/// The argument index of the token at `ti` within the call whose closing bracket is at
/// `close`: commas at the call's own depth between its opening bracket and `ti`.
fn arg_index_of(t: &[String], ti: usize, close: usize) -> usize {
    // Walk back from `close` to the matching open bracket.
    let mut depth = 0i32;
    let mut open = 0;
    for j in (0..close).rev() {
        match t[j].as_str() {
            ")" | "]" | "}" => depth += 1,
            "(" | "[" | "{" if depth == 0 => {
                open = j;
                break;
            }
            "(" | "[" | "{" => depth -= 1,
            _ => {}
        }
    }
    let mut depth = 0i32;
    let mut k = 0;
    for tok in &t[open + 1..ti] {
        match tok.as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => depth -= 1,
            "," if depth == 0 => k += 1,
            _ => {}
        }
    }
    k
}

// ----------------------------------------------------------------------------------------
// The cases

/// A tensor of the ONNX node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    In(usize),
    Out(usize),
}
use Role::{In, Out};

/// An input of the probe's node.
#[derive(Clone)]
enum Spec {
    /// A trained f32 parameter of this shape.
    P(Vec<i64>),
    /// An i64 constant.
    I(Vec<i64>, Vec<i64>),
    /// A bool graph input.
    B(Vec<i64>),
}

/// The ONNX definition of a forward op, at one element, given the case's scalars.
type Forward = fn(f64, &[(&'static str, f64)]) -> f64;

/// One attribute case of one op.
struct Case {
    label: String,
    op: &'static str,
    attrs: Vec<(&'static str, Attr)>,
    inputs: Vec<Spec>,
    /// The node's outputs (dtype f32 unless an i64 for indices).
    outputs: Vec<(DType, Vec<i64>)>,
    /// The ATen entries that compute the same gradients (the first the out-of-place one).
    aten: Vec<&'static str>,
    /// ONNX input position → the ATen argument whose gradient it is.
    wrt: Vec<(usize, &'static str)>,
    /// ATen argument or output → the alternative sets of the node's tensors that determine
    /// it.
    binds: Vec<(&'static str, Vec<Vec<Role>>)>,
    /// ATen scalar arguments, from the ONNX attributes.
    scalars: Vec<(&'static str, f64)>,
    /// The ONNX definition of the forward op (for branch conditions on its result).
    forward: Option<Forward>,
}

fn sq() -> Vec<i64> {
    vec![4, 8]
}

fn case(op: &'static str, aten: &'static str) -> Case {
    Case {
        label: op.to_owned(),
        op,
        attrs: Vec::new(),
        inputs: vec![Spec::P(sq())],
        outputs: vec![(DType::F32, sq())],
        aten: vec![aten],
        wrt: vec![(0, "self")],
        binds: vec![("self", vec![vec![In(0)]]), ("result", vec![vec![Out(0)]])],
        scalars: Vec::new(),
        forward: None,
    }
}

impl Case {
    fn label(mut self, l: impl Into<String>) -> Case {
        self.label = l.into();
        self
    }
    fn attr(mut self, k: &'static str, v: Attr) -> Case {
        self.attrs.push((k, v));
        self
    }
    fn inputs(mut self, s: Vec<Spec>) -> Case {
        self.inputs = s;
        self
    }
    fn outputs(mut self, o: Vec<Vec<i64>>) -> Case {
        self.outputs = o.into_iter().map(|s| (DType::F32, s)).collect();
        self
    }
    fn output_i64(mut self, k: usize) -> Case {
        self.outputs[k].0 = DType::I64;
        self
    }
    fn also(mut self, aten: &'static str) -> Case {
        self.aten.push(aten);
        self
    }
    fn wrt(mut self, w: Vec<(usize, &'static str)>) -> Case {
        self.wrt = w;
        self
    }
    fn bind(mut self, name: &'static str, alternatives: Vec<Vec<Role>>) -> Case {
        self.binds.retain(|(n, _)| *n != name);
        self.binds.push((name, alternatives));
        self
    }
    /// ATen argument `names[k]` is input `k`, and each one's gradient is compared.
    fn args(mut self, names: &[&'static str]) -> Case {
        self.wrt = names.iter().copied().enumerate().collect();
        for (k, &n) in names.iter().enumerate() {
            self = self.bind(n, vec![vec![In(k)]]);
        }
        self
    }
    /// A reduction over axis 1 of `[4, 8]`, dims kept.
    fn over_axis_1(self) -> Case {
        self.attr("axes", Attr::Ints(vec![1]))
            .attr("keepdims", Attr::Int(1))
            .outputs(vec![vec![4, 1]])
    }
    fn scalar(mut self, name: &'static str, v: f64) -> Case {
        self.scalars.push((name, v));
        self
    }
    fn forward(mut self, f: Forward) -> Case {
        self.forward = Some(f);
        self
    }
}

fn scalar(s: &[(&'static str, f64)], name: &str) -> f64 {
    s.iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("scalar `{name}`"))
}

/// ONNX Relu.
fn relu(x: f64, _: &[(&'static str, f64)]) -> f64 {
    x.max(0.0)
}

/// ONNX LeakyRelu: `x` where `x >= 0`, else `alpha * x`.
fn leaky_relu(x: f64, s: &[(&'static str, f64)]) -> f64 {
    if x >= 0.0 {
        x
    } else {
        scalar(s, "negative_slope") * x
    }
}

/// ONNX Elu: `x` where `x >= 0`, else `alpha * (exp(x) - 1)` (scale and input scale 1).
fn elu(x: f64, s: &[(&'static str, f64)]) -> f64 {
    if x >= 0.0 {
        x
    } else {
        scalar(s, "alpha") * (x.exp() - 1.0)
    }
}

/// The attribute cases, op by op.
fn cases() -> Vec<Case> {
    let f = |v: f64| Attr::Float(v);
    let mut c = Vec::new();
    // Activations whose gradient PyTorch writes from the input or the output.
    for (op, aten) in [
        ("Tanh", "tanh"),
        ("Sigmoid", "sigmoid"),
        ("Exp", "exp"),
        ("Sqrt", "sqrt"),
        ("Log", "log"),
        ("Reciprocal", "reciprocal"),
        ("Erf", "erf"),
        ("Sin", "sin"),
        ("Cos", "cos"),
        ("Tan", "tan"),
        ("Abs", "abs"),
        ("Asin", "asin"),
        ("Acos", "acos"),
        ("Atan", "atan"),
        ("Sinh", "sinh"),
        ("Cosh", "cosh"),
        ("Asinh", "asinh"),
        ("Acosh", "acosh"),
        ("Atanh", "atanh"),
        ("HardSigmoid", "hardsigmoid"),
        ("HardSwish", "hardswish"),
        ("Mish", "mish"),
        ("Softplus", "softplus"),
        ("Neg", "neg"),
        ("Floor", "floor"),
        ("Ceil", "ceil"),
        ("Round", "round"),
        ("Sign", "sign"),
        ("Identity", "view"),
    ] {
        c.push(case(op, aten));
    }
    c.push(case("Relu", "relu").forward(relu));
    for alpha in [0.01, 0.2, 0.0, -0.5, -2.0] {
        c.push(
            case("LeakyRelu", "leaky_relu")
                .label(format!("LeakyRelu alpha={alpha}"))
                .attr("alpha", f(alpha))
                .also("leaky_relu_")
                .scalar("negative_slope", alpha)
                .forward(leaky_relu),
        );
    }
    for alpha in [1.0, 0.5, -1.0] {
        c.push(
            case("Elu", "elu")
                .label(format!("Elu alpha={alpha}"))
                .attr("alpha", f(alpha))
                .also("elu_")
                .scalar("alpha", alpha)
                .forward(elu),
        );
    }
    // Selu and Celu are PyTorch composites of elu (scale, input_scale): out of place.
    c.push(case("Selu", "elu"));
    c.push(case("Celu", "elu").attr("alpha", f(2.0)));
    for approximate in ["none", "tanh"] {
        c.push(
            case("Gelu", "gelu")
                .label(format!("Gelu approximate={approximate}"))
                .attr("approximate", Attr::Str(approximate.to_owned())),
        );
    }
    c.push(case("com.microsoft.Gelu", "gelu"));
    c.push(case("com.microsoft.FastGelu", "gelu").label("FastGelu (tanh GELU)"));
    // x * sigmoid(alpha x) = silu(alpha x) / alpha: silu's argument is alpha x.
    for op in ["Swish", "QuickGelu", "com.microsoft.QuickGelu"] {
        c.push(case(op, "silu").attr("alpha", f(1.702)));
    }
    c.push(
        case("ThresholdedRelu", "threshold")
            .attr("alpha", f(1.0))
            .also("threshold_"),
    );
    // Shrink: hardshrink with bias 0, softshrink with bias = lambd; both from the input.
    c.push(case("Shrink", "hardshrink").attr("lambd", f(0.5)));
    c.push(
        case("Shrink", "softshrink")
            .label("Shrink bias=lambd")
            .attr("lambd", f(0.5))
            .attr("bias", f(0.5)),
    );
    // Clip: bounds as attributes (opset 6: clamp) or as inputs (opset 11: clamp.Tensor,
    // whose self gradient reads the bounds).
    c.push(
        case("Clip", "clamp")
            .label("Clip min/max attributes")
            .attr("min", f(-1.0))
            .attr("max", f(1.0)),
    );
    c.push(
        case("Clip", "clamp.Tensor")
            .label("Clip min/max inputs")
            .inputs(vec![Spec::P(sq()), Spec::P(vec![1]), Spec::P(vec![1])])
            .wrt(vec![(0, "self"), (1, "min"), (2, "max")])
            .bind("min", vec![vec![In(1)]])
            .bind("max", vec![vec![In(2)]]),
    );
    c.push(
        case("Clip", "clamp.Tensor")
            .label("Clip min input only")
            .inputs(vec![Spec::P(sq()), Spec::P(vec![1])])
            .wrt(vec![(0, "self"), (1, "min")])
            .bind("min", vec![vec![In(1)]])
            .bind("max", vec![]),
    );
    for (op, aten) in [("Softmax", "_softmax"), ("LogSoftmax", "_log_softmax")] {
        for axis in [-1, 0] {
            c.push(
                case(op, aten)
                    .label(format!("{op} axis={axis}"))
                    .attr("axis", Attr::Int(axis)),
            );
        }
    }
    // Binary element-wise ops.
    let two = || vec![Spec::P(sq()), Spec::P(sq())];
    let xy =
        |a: &'static str, b: &'static str| vec![(a, vec![vec![In(0)]]), (b, vec![vec![In(1)]])];
    for (op, aten, other) in [
        ("Add", "add.Tensor", "other"),
        ("Sub", "sub.Tensor", "other"),
        ("Mul", "mul.Tensor", "other"),
        ("Div", "div.Tensor", "other"),
        ("Sum", "add.Tensor", "other"),
        ("Mean", "add.Tensor", "other"),
    ] {
        let mut k = case(op, aten)
            .inputs(two())
            .wrt(vec![(0, "self"), (1, other)]);
        for (n, r) in xy("self", other) {
            k = k.bind(n, r);
        }
        c.push(k);
    }
    // Pow's exponent gradient reads the result, which X and the exponent determine.
    c.push(
        case("Pow", "pow.Tensor_Tensor")
            .inputs(two())
            .wrt(vec![(0, "self"), (1, "exponent")])
            .bind("exponent", vec![vec![In(1)]])
            .bind("result", vec![vec![Out(0)], vec![In(0), In(1)]]),
    );
    c.push(
        case("PRelu", "_prelu_kernel")
            .inputs(vec![Spec::P(sq()), Spec::P(vec![8])])
            .wrt(vec![(0, "self"), (1, "weight")])
            .bind("weight", vec![vec![In(1)]]),
    );
    // A fused bias: GELU of X + bias, whose argument X and the bias determine.
    c.push(
        case("com.microsoft.BiasGelu", "gelu")
            .inputs(vec![Spec::P(sq()), Spec::P(vec![8])])
            .wrt(vec![(0, "self"), (1, "self")])
            .bind("self", vec![vec![In(0), In(1)]]),
    );
    c.push(
        case("com.microsoft.FastGelu", "gelu")
            .label("FastGelu with bias")
            .inputs(vec![Spec::P(sq()), Spec::P(vec![8])])
            .wrt(vec![(0, "self"), (1, "self")])
            .bind("self", vec![vec![In(0), In(1)]]),
    );
    c.push(
        case("Where", "where.self")
            .inputs(vec![Spec::B(sq()), Spec::P(sq()), Spec::P(sq())])
            .wrt(vec![(1, "self"), (2, "other")])
            .bind("condition", vec![vec![In(0)]])
            .bind("self", vec![vec![In(1)]])
            .bind("other", vec![vec![In(2)]]),
    );
    // Products.
    for op in ["MatMul", "com.microsoft.FusedMatMul"] {
        c.push(
            case(op, "mm")
                .inputs(vec![Spec::P(vec![4, 8]), Spec::P(vec![8, 4])])
                .outputs(vec![vec![4, 4]])
                .wrt(vec![(0, "self"), (1, "mat2")])
                .bind("mat2", vec![vec![In(1)]]),
        );
    }
    for (ta, tb) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
        let a = if ta == 1 { vec![8, 4] } else { vec![4, 8] };
        let b = if tb == 1 { vec![4, 8] } else { vec![8, 4] };
        c.push(
            case("Gemm", "addmm")
                .label(format!("Gemm transA={ta} transB={tb}"))
                .attr("transA", Attr::Int(ta))
                .attr("transB", Attr::Int(tb))
                .inputs(vec![Spec::P(a), Spec::P(b), Spec::P(vec![4])])
                .outputs(vec![vec![4, 4]])
                .wrt(vec![(0, "mat1"), (1, "mat2"), (2, "self")])
                .bind("self", vec![vec![In(2)]])
                .bind("mat1", vec![vec![In(0)]])
                .bind("mat2", vec![vec![In(1)]]),
        );
    }
    // A convolution (3 channels from 2, 3x3) and its transpose; ONNX's node lists X, W, B.
    for (op, x, w, y) in [
        ("Conv", [1, 2, 5, 5], [3, 2, 3, 3], [1, 3, 3, 3]),
        ("ConvTranspose", [1, 2, 3, 3], [2, 3, 3, 3], [1, 3, 5, 5]),
    ] {
        c.push(
            case(op, "convolution")
                .inputs(vec![
                    Spec::P(x.to_vec()),
                    Spec::P(w.to_vec()),
                    Spec::P(vec![3]),
                ])
                .outputs(vec![y.to_vec()])
                .args(&["input", "weight", "bias"]),
        );
    }
    // Normalisations: the statistics are outputs of the training forward, or X determines
    // them.
    c.push(
        case("LayerNormalization", "native_layer_norm")
            .attr("axis", Attr::Int(-1))
            .inputs(vec![Spec::P(sq()), Spec::P(vec![8]), Spec::P(vec![8])])
            .args(&["input", "weight", "bias"])
            .bind("result1", vec![vec![Out(1)], vec![In(0)]])
            .bind("result2", vec![vec![Out(2)], vec![In(0)]]),
    );
    for op in [
        "SimplifiedLayerNormalization",
        "RMSNormalization",
        "com.microsoft.SimplifiedLayerNormalization",
    ] {
        c.push(
            case(op, "_fused_rms_norm")
                .attr("axis", Attr::Int(-1))
                .inputs(vec![Spec::P(sq()), Spec::P(vec![8])])
                .args(&["input", "weight"])
                .bind("result1", vec![vec![Out(1)], vec![In(0)]]),
        );
    }
    let bn_inputs = || {
        vec![
            Spec::P(vec![2, 3, 4, 4]),
            Spec::P(vec![3]),
            Spec::P(vec![3]),
            Spec::P(vec![3]),
            Spec::P(vec![3]),
        ]
    };
    for op in ["BatchNormalization", "com.microsoft.BatchNormInternal"] {
        let mut k = case(op, "native_batch_norm")
            .inputs(bn_inputs())
            .args(&["input", "weight", "bias"])
            .bind("running_mean", vec![vec![In(3)]])
            .bind("running_var", vec![vec![In(4)]])
            .bind("result1", vec![vec![Out(3)], vec![In(0)]])
            .bind("result2", vec![vec![Out(4)], vec![In(0)]]);
        // ONNX's node has Y alone (inference export); the training forward makes it
        // BatchNormInternal with the running and saved statistics (outputs 1 to 4).
        k = k.outputs(vec![vec![2, 3, 4, 4]]);
        if op == "com.microsoft.BatchNormInternal" {
            k = k.outputs(vec![vec![2, 3, 4, 4], vec![3], vec![3], vec![3], vec![3]]);
        }
        c.push(k);
    }
    for (op, shape, channels) in [
        ("InstanceNormalization", vec![2, 3, 4], 3),
        ("GroupNormalization", vec![2, 4, 3], 4),
    ] {
        let mut k = case(op, "native_group_norm")
            .inputs(vec![
                Spec::P(shape.clone()),
                Spec::P(vec![channels]),
                Spec::P(vec![channels]),
            ])
            .outputs(vec![shape])
            .args(&["input", "weight", "bias"])
            .bind("result1", vec![vec![In(0)]])
            .bind("result2", vec![vec![In(0)]]);
        if op == "GroupNormalization" {
            k = k.attr("num_groups", Attr::Int(2));
        }
        c.push(k);
    }
    c.push(
        // One output, as an inference export has it: the training forward adds the mask.
        case("Dropout", "native_dropout")
            .args(&["input"])
            .bind("result1", vec![vec![Out(1)]]),
    );
    // Pools.
    c.push(
        case("MaxPool", "max_pool2d_with_indices")
            .attr("kernel_shape", Attr::Ints(vec![2, 2]))
            .attr("strides", Attr::Ints(vec![2, 2]))
            .inputs(vec![Spec::P(vec![1, 2, 4, 4])])
            .outputs(vec![vec![1, 2, 2, 2], vec![1, 2, 2, 2]])
            .output_i64(1)
            .bind("result1", vec![vec![Out(1)]]),
    );
    c.push(
        case("AveragePool", "avg_pool2d")
            .attr("kernel_shape", Attr::Ints(vec![2, 2]))
            .attr("strides", Attr::Ints(vec![2, 2]))
            .inputs(vec![Spec::P(vec![1, 2, 4, 4])])
            .outputs(vec![vec![1, 2, 2, 2]]),
    );
    c.push(
        case("GlobalAveragePool", "mean.dim")
            .inputs(vec![Spec::P(vec![1, 2, 4, 4])])
            .outputs(vec![vec![1, 2, 1, 1]]),
    );
    for (op, aten) in [
        ("GlobalMaxPool", "amax"),
        ("GlobalLpPool", "norm.ScalarOpt_dim"),
    ] {
        c.push(
            case(op, aten)
                .inputs(vec![Spec::P(vec![1, 2, 4, 4])])
                .outputs(vec![vec![1, 2, 1, 1]])
                .bind("result", vec![vec![Out(0)], vec![In(0)]]),
        );
    }
    // Reductions over axis 1.
    for (op, aten) in [
        ("ReduceSum", "sum.dim_IntList"),
        ("ReduceMean", "mean.dim"),
        ("ReduceMax", "amax"),
        ("ReduceMin", "amin"),
        ("ReduceProd", "prod.dim_int"),
        ("ReduceL2", "norm.ScalarOpt_dim"),
        ("ReduceL1", "norm.ScalarOpt_dim"),
        ("ReduceLogSumExp", "logsumexp"),
    ] {
        c.push(
            case(op, aten)
                .over_axis_1()
                .bind("result", vec![vec![Out(0)], vec![In(0)]]),
        );
    }
    // log(sum(X)): log's argument is the sum, which X (summed again) or Y (its exp)
    // determines.
    c.push(
        case("ReduceLogSum", "log")
            .over_axis_1()
            .bind("self", vec![vec![Out(0)], vec![In(0)]]),
    );
    // sum(X * X): the product's gradient reads X.
    c.push(
        case("ReduceSumSquare", "mul.Tensor")
            .over_axis_1()
            .bind("other", vec![vec![In(0)]]),
    );
    c.push(case("CumSum", "cumsum").inputs(vec![Spec::P(sq()), Spec::I(vec![1], vec![1])]));
    // Moves and selections: their gradients read no element of the forward.
    c.push(case("Transpose", "permute").outputs(vec![vec![8, 4]]));
    for op in ["Reshape", "Flatten"] {
        let mut k = case(op, "view").outputs(vec![vec![32]]);
        if op == "Reshape" {
            k = k.inputs(vec![Spec::P(sq()), Spec::I(vec![1], vec![32])]);
        } else {
            k = k.attr("axis", Attr::Int(0)).outputs(vec![vec![1, 32]]);
        }
        c.push(k);
    }
    c.push(
        case("Squeeze", "view")
            .inputs(vec![Spec::P(vec![1, 8]), Spec::I(vec![1], vec![0])])
            .outputs(vec![vec![8]]),
    );
    c.push(
        case("Unsqueeze", "view")
            .inputs(vec![Spec::P(vec![8]), Spec::I(vec![1], vec![0])])
            .outputs(vec![vec![1, 8]]),
    );
    c.push(
        case("Cast", "_to_copy")
            .attr("to", Attr::Int(10))
            .outputs(vec![sq()]),
    );
    c.push(
        case("CastLike", "_to_copy")
            .inputs(vec![Spec::P(sq()), Spec::P(vec![1])])
            .wrt(vec![(0, "self")]),
    );
    c.push(
        case("Slice", "slice.Tensor")
            .inputs(vec![
                Spec::P(sq()),
                Spec::I(vec![1], vec![0]),
                Spec::I(vec![1], vec![4]),
                Spec::I(vec![1], vec![1]),
            ])
            .outputs(vec![vec![4, 4]]),
    );
    c.push(
        case("Pad", "constant_pad_nd")
            .inputs(vec![Spec::P(sq()), Spec::I(vec![4], vec![0, 1, 0, 1])])
            .outputs(vec![vec![4, 10]]),
    );
    c.push(
        case("Tile", "repeat")
            .inputs(vec![Spec::P(sq()), Spec::I(vec![2], vec![2, 1])])
            .outputs(vec![vec![8, 8]]),
    );
    c.push(
        case("Expand", "expand").inputs(vec![Spec::P(vec![1, 8]), Spec::I(vec![2], vec![4, 8])]),
    );
    for op in ["Resize", "Upsample"] {
        c.push(
            case(op, "upsample_nearest2d")
                .inputs(vec![Spec::P(vec![1, 2, 4, 4])])
                .outputs(vec![vec![1, 2, 8, 8]]),
        );
    }
    c.push(
        case("DepthToSpace", "pixel_shuffle")
            .attr("blocksize", Attr::Int(2))
            .inputs(vec![Spec::P(vec![1, 4, 2, 2])])
            .outputs(vec![vec![1, 1, 4, 4]]),
    );
    c.push(
        case("SpaceToDepth", "pixel_unshuffle")
            .attr("blocksize", Attr::Int(2))
            .inputs(vec![Spec::P(vec![1, 1, 4, 4])])
            .outputs(vec![vec![1, 4, 2, 2]]),
    );
    for upper in [0, 1] {
        c.push(
            case("Trilu", if upper == 1 { "triu" } else { "tril" })
                .label(format!("Trilu upper={upper}"))
                .attr("upper", Attr::Int(upper)),
        );
    }
    c.push(
        case("Concat", "cat")
            .attr("axis", Attr::Int(0))
            .inputs(vec![Spec::P(sq()), Spec::P(sq())])
            .outputs(vec![vec![8, 8]])
            .wrt(vec![(0, "tensors"), (1, "tensors")])
            .bind("tensors", vec![vec![In(0), In(1)]]),
    );
    c.push(
        case("Split", "split.Tensor")
            .attr("axis", Attr::Int(0))
            .inputs(vec![Spec::P(vec![8, 8])])
            .outputs(vec![vec![4, 8], vec![4, 8]])
            .bind("result0", vec![vec![Out(0)]])
            .bind("result1", vec![vec![Out(1)]]),
    );
    // Gathers and scatters: the indices.
    c.push(
        case("Gather", "index_select")
            .attr("axis", Attr::Int(0))
            .inputs(vec![Spec::P(vec![5, 8]), Spec::I(vec![3], vec![0, 2, 4])])
            .outputs(vec![vec![3, 8]])
            .bind("index", vec![vec![In(1)]]),
    );
    c.push(
        case("GatherElements", "gather")
            .attr("axis", Attr::Int(0))
            .inputs(vec![Spec::P(sq()), Spec::I(vec![4, 8], vec![0; 32])])
            .bind("index", vec![vec![In(1)]]),
    );
    c.push(
        case("GatherND", "index.Tensor")
            .inputs(vec![Spec::P(sq()), Spec::I(vec![2, 1], vec![0, 2])])
            .outputs(vec![vec![2, 8]])
            .bind("indices", vec![vec![In(1)]]),
    );
    c.push(
        case("TopK", "topk")
            .attr("axis", Attr::Int(1))
            .inputs(vec![Spec::P(sq()), Spec::I(vec![1], vec![2])])
            .outputs(vec![vec![4, 2], vec![4, 2]])
            .output_i64(1)
            .bind("indices", vec![vec![Out(1)]])
            .bind("result1", vec![vec![Out(1)]]),
    );
    c.push(
        case("ScatterElements", "scatter.src")
            .attr("axis", Attr::Int(0))
            .inputs(vec![
                Spec::P(sq()),
                Spec::I(vec![4, 8], vec![0; 32]),
                Spec::P(sq()),
            ])
            .wrt(vec![(0, "self"), (2, "src")])
            .bind("index", vec![vec![In(1)]])
            .bind("src", vec![vec![In(2)]]),
    );
    c.push(
        case("ScatterElements", "scatter_add")
            .label("ScatterElements reduction=add")
            .attr("axis", Attr::Int(0))
            .attr("reduction", Attr::Str("add".to_owned()))
            .inputs(vec![
                Spec::P(sq()),
                Spec::I(vec![4, 8], vec![0; 32]),
                Spec::P(sq()),
            ])
            .wrt(vec![(0, "self"), (2, "src")])
            .bind("index", vec![vec![In(1)]])
            .bind("src", vec![vec![In(2)]]),
    );
    // ScatterND writes rows as scatter writes elements: data's gradient clears them,
    // the updates' gathers them, both at the indices.
    c.push(
        case("ScatterND", "scatter.src")
            .inputs(vec![
                Spec::P(sq()),
                Spec::I(vec![2, 1], vec![0, 2]),
                Spec::P(vec![2, 8]),
            ])
            .wrt(vec![(0, "self"), (2, "src")])
            .bind("index", vec![vec![In(1)]])
            .bind("src", vec![vec![In(2)]]),
    );
    c.push(
        case("NegativeLogLikelihoodLoss", "nll_loss_forward")
            .inputs(vec![
                Spec::P(vec![4, 5]),
                Spec::I(vec![4], vec![0, 1, 2, 3]),
            ])
            .outputs(vec![vec![]])
            .bind("target", vec![vec![In(1)]])
            .bind("weight", vec![])
            // The total weight: the count of (non-ignored) targets, or the sum of their
            // weights: the target and the weight determine it.
            .bind("total_weight", vec![vec![In(1)]])
            .bind("result1", vec![vec![In(1)]]),
    );
    c
}

/// Ops of the rule table compared with no ATen formula here, and why.
const EXCUSED: &[(&str, &str)] = &[
    // memplan's own fused kernels (`--fuse`, and the training step's element-wise regions):
    // no ATen op has their formula; each is the composite of ops compared above, and
    // `tests/fuse.rs` and `plan_step.rs` check what each saves.
    (
        "memplan.Attention",
        "a fused attention kernel: its backward reads Q, K, V, the mask and the kernel's saved statistics (the output and log-sum-exp for flash, as _scaled_dot_product_flash_attention_backward; the probabilities for eager, as the matmul/softmax composite)",
    ),
    (
        "memplan.BiasAct",
        "act(X + bias): the activation's formula reads its input, which X and the bias determine; memplan reads both",
    ),
    (
        "memplan.ConvAdd",
        "Conv + residual: convolution_backward reads the input and weight, the residual's gradient is dY",
    ),
    ("memplan.ConvTransposeAdd", "as memplan.ConvAdd"),
    (
        "memplan.GemmAdd",
        "a product + residual: mm's formula reads both factors, the residual's gradient is dY",
    ),
    ("memplan.MatMulAdd", "as memplan.GemmAdd"),
    (
        "memplan.Pointwise",
        "a fused element-wise region of one input: every part's formula reads values X determines, and the region reads X",
    ),
    (
        "Max",
        "PyTorch's maximum splits dY between tied inputs, which needs both inputs; ONNX Runtime's kernel (memplan's model) gives dY to each input equal to the output, which reads that input and the output",
    ),
    ("Min", "as Max"),
    (
        "Softsign",
        "a PyTorch composite (x / (1 + |x|)) with no derivatives.yaml entry; each part's gradient reads x, which memplan reads",
    ),
    (
        "LpNormalization",
        "a PyTorch composite (x / ‖x‖); each part's gradient reads x or ‖x‖, which X determines, and memplan reads X",
    ),
    (
        "LRN",
        "a PyTorch composite (x / (k + α·avg_pool(x²))^β); its parts' gradients read x and the normaliser, which X determines; memplan reads X and Y",
    ),
    (
        "Einsum",
        "a PyTorch composite of permutes and bmm; each operand's gradient reads the other operands, as memplan's rule",
    ),
    (
        "Attention",
        "no single ATen entry for ONNX's Attention: the eager kernel is a composite (its gradient reads Q, K, V and the probabilities, as memplan's eager rule); the flash entry `_scaled_dot_product_flash_attention` reads query, key, value, output and logsumexp, as memplan's flash rule",
    ),
    (
        "RotaryEmbedding",
        "no ATen op: a composite of products with the cos and sin caches; X's gradient rotates dY back with the caches, as memplan's rule",
    ),
    ("com.microsoft.RotaryEmbedding", "as RotaryEmbedding"),
    (
        "LSTM",
        "cuDNN's fused RNN (`_cudnn_rnn`): its backward reads the input, the weights, the outputs and the reserve space of gates; memplan's rule reads every input and output and the saved gates",
    ),
    ("GRU", "as LSTM"),
    ("RNN", "as LSTM"),
    (
        "SoftmaxCrossEntropyLoss",
        "a PyTorch composite (log_softmax, then nll_loss): log_softmax's gradient reads its result (output 1 of the training forward), nll_loss's the target and the weight, as memplan's rule",
    ),
    (
        "com.microsoft.SkipLayerNormalization",
        "layer normalisation of a sum (input + skip + bias) the training forward outputs (output 3): native_layer_norm of that sum, which memplan's rule reads with gamma and the statistics",
    ),
];

// ----------------------------------------------------------------------------------------
// memplan's side

/// The forward graph of a case: one node `probe` over trained parameters and constants,
/// its outputs graph outputs.
fn probe_graph(c: &Case, dtype: DType) -> Graph {
    let mut b = GraphBuilder::new("probe");
    let mut inputs = Vec::new();
    let mut constants = Vec::new();
    for (k, s) in c.inputs.iter().enumerate() {
        inputs.push(match s {
            Spec::P(shape) => Some(b.weight(format!("x{k}"), dtype, shape.as_slice())),
            Spec::I(shape, values) => {
                let t = b.tensor(
                    format!("x{k}"),
                    DType::I64,
                    shape.as_slice(),
                    TensorKind::Weight,
                );
                constants.push((t, values.clone()));
                Some(t)
            }
            Spec::B(shape) => Some(b.input(format!("x{k}"), DType::Bool, shape.as_slice())),
        });
    }
    let outputs: Vec<TensorId> = c
        .outputs
        .iter()
        .enumerate()
        .map(|(k, (dt, shape))| {
            let dt = if *dt == DType::F32 { dtype } else { *dt };
            b.tensor(format!("y{k}"), dt, shape.as_slice(), TensorKind::Output)
        })
        .collect();
    b.node("probe", c.op, &inputs, &outputs);
    for (k, v) in &c.attrs {
        b.attr(k, v.clone());
    }
    for &y in &outputs {
        b.mark_output(y);
    }
    let mut g = b.build_unchecked();
    for (t, values) in constants {
        g.set_int_value(t, Some(values));
    }
    g
}

/// What the backward nodes of input `i`'s gradient read of the forward node `probe`.
fn memplan_reads(step: &Graph, i: usize) -> BTreeSet<Role> {
    let fwd = step.find_node("probe").expect("the forward node");
    let node = step.node(fwd);
    let mut out = BTreeSet::new();
    for n in step.nodes().iter() {
        let of = matches!(n.attr("memplan.grad_of"), Some(Attr::Str(s)) if s == "probe");
        let wrt = matches!(n.attr("memplan.wrt"), Some(Attr::Ints(w)) if w.contains(&(i as i64)));
        if !(of && wrt) {
            continue;
        }
        for t in n.present_inputs() {
            for (k, x) in node.inputs.iter().enumerate() {
                if *x == Some(t) {
                    out.insert(In(k));
                }
            }
            for (k, &y) in node.outputs.iter().enumerate() {
                if y == t {
                    out.insert(Out(k));
                }
            }
        }
    }
    out
}

fn derive(c: &Case, dtype: DType) -> Result<Graph, PlanError> {
    let options = TrainingOptions::default()
        .with_optimizer(Optimizer::Sgd)
        .with_loss(Loss::None)
        .with_checkpoint(Checkpoint::None);
    plan_training(&probe_graph(c, dtype), &options).map(|s| s.graph)
}

// ----------------------------------------------------------------------------------------
// The comparison

/// Evaluates a branch condition (`> 0`, `<= threshold`, `<= min_val | >= max_val`) at `v`,
/// operands bound by `args` (the call's argument text) and the case's scalars.
fn holds(mask: &str, v: f64, args: &BTreeMap<String, String>, c: &Case) -> bool {
    mask.split('|').any(|part| {
        let part = part.trim();
        let (op, operand) = part.split_once(' ').expect("`op operand`");
        let operand = operand.trim();
        let text = args.get(operand).map_or(operand, String::as_str);
        let x: f64 = text.parse().unwrap_or_else(|_| {
            c.scalars
                .iter()
                .find(|(n, _)| *n == text)
                .map(|(_, v)| *v)
                .unwrap_or_else(|| panic!("{}: no value for `{text}` in `{mask}`", c.label))
        });
        match op {
            ">" => v > x,
            ">=" => v >= x,
            "<" => v < x,
            "<=" => v <= x,
            _ => panic!("condition `{part}`"),
        }
    })
}

/// Whether a branch condition on the result decides as the same condition on the input,
/// for every input (sample points around 0 and 1, in f64 and rounded to f32).
fn result_tells_input(mask: &str, args: &BTreeMap<String, String>, c: &Case) -> bool {
    let forward = c
        .forward
        .unwrap_or_else(|| panic!("{}: a formula branches on the result; no forward", c.label));
    let samples = [
        -100.0, -3.0, -1.0, -0.5, -1e-3, -1e-30, 0.0, 1e-30, 1e-3, 0.5, 1.0, 3.0, 100.0,
    ];
    samples.iter().all(|&x: &f64| {
        let y = forward(x, &c.scalars);
        let y32 = f64::from(y as f32);
        holds(mask, y, args, c) == holds(mask, x, args, c)
            && holds(mask, y32, args, c) == holds(mask, f64::from(x as f32), args, c)
    })
}

/// Whether `reads` determine the ATen tensor `name` (some alternative inside them).
fn determined(c: &Case, name: &str, reads: &BTreeSet<Role>) -> Result<bool, String> {
    let Some((_, alternatives)) = c.binds.iter().find(|(n, _)| *n == name) else {
        return Err(format!("{}: ATen tensor `{name}` is not bound", c.label));
    };
    // An absent optional tensor (no alternatives) is no read.
    Ok(alternatives.is_empty()
        || alternatives
            .iter()
            .any(|alt| alt.iter().all(|r| reads.contains(r))))
}

/// Why memplan's reads of the gradient of ATen argument `arg` are not enough, or `None`.
fn check_gradient(
    c: &Case,
    entries: &BTreeMap<String, Entry>,
    facts: &BTreeMap<(String, usize), Fact>,
    arg: &str,
    reads: &BTreeSet<Role>,
) -> Option<String> {
    let mut tried = Vec::new();
    for aten in &c.aten {
        let entry = entries
            .get(*aten)
            .unwrap_or_else(|| panic!("{}: `{aten}` is not in derivatives.yaml", c.label));
        let Some((keys, formula)) = entry
            .formulas
            .iter()
            .find(|(keys, _)| keys.iter().any(|k| k == arg))
        else {
            panic!("{}: `{}` has no formula for `{arg}`", c.label, entry.name);
        };
        let output = keys.iter().position(|k| k == arg).unwrap_or(0);
        let mut problems = Vec::new();
        for u in uses(entry, formula, output, facts) {
            let is_result = entry.outputs.contains(&u.name);
            if let (true, Some((function, mask, args))) = (is_result, &u.masked)
                && !result_tells_input(mask, args, c)
            {
                problems.push(format!(
                    "`{function}` branches on `{mask}` of the result, which differs from the input's here"
                ));
                continue;
            }
            match determined(c, &u.name, reads) {
                Ok(true) => {}
                Ok(false) => problems.push(format!("uses `{}`", u.name)),
                Err(e) => panic!("{e}"),
            }
        }
        if problems.is_empty() {
            return None;
        }
        tried.push(format!("{}: {}", entry.name, problems.join(", ")));
    }
    Some(tried.join("; "))
}

#[test]
fn the_vendored_formulas_parse() {
    let entries = parse_entries(DERIVATIVES);
    assert!(entries.len() >= 90, "{}", entries.len());
    let leaky = &entries["leaky_relu_"];
    assert_eq!(leaky.tensors, ["self"]);
    assert_eq!(
        leaky.formulas,
        [(
            vec!["self".to_owned()],
            "leaky_relu_backward(grad, result, negative_slope, true)".to_owned()
        )]
    );
    let facts = parse_facts(FUNCTIONS);
    let u = uses(leaky, &leaky.formulas[0].1, 0, &facts);
    assert_eq!(u.len(), 1);
    assert_eq!(u[0].name, "result");
    assert_eq!(
        u[0].masked.as_ref().map(|m| m.1.as_str()),
        Some("> 0"),
        "{u:?}"
    );
    // Metadata and per-output uses.
    let sum = &entries["sum.dim_IntList"];
    assert!(
        uses(sum, &sum.formulas[0].1, 0, &facts).is_empty(),
        "{sum:?}"
    );
    let conv = &entries["convolution"];
    let names = |o| {
        uses(conv, &conv.formulas[0].1, o, &facts)
            .into_iter()
            .map(|u| u.name)
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(names(0), BTreeSet::from(["weight".to_owned()]));
    assert_eq!(names(1), BTreeSet::from(["input".to_owned()]));
    assert!(names(2).is_empty());
    let bn = &entries["native_batch_norm"];
    let bn_uses: BTreeSet<String> = uses(bn, &bn.formulas[0].1, 0, &facts)
        .into_iter()
        .map(|u| u.name)
        .collect();
    assert_eq!(
        bn_uses,
        ["input", "weight", "result1", "result2"]
            .map(str::to_owned)
            .into()
    );
}

/// The check itself: a rule reading only Y for LeakyRelu with a negative slope is refused
/// (issue 36's rule), with a positive one accepted; reading X is accepted either way.
#[test]
fn the_check_refuses_a_leaky_relu_rule_reading_only_the_output() {
    let entries = parse_entries(DERIVATIVES);
    let facts = parse_facts(FUNCTIONS);
    let only_y = BTreeSet::from([Out(0)]);
    let only_x = BTreeSet::from([In(0)]);
    for c in cases().iter().filter(|c| c.op == "LeakyRelu") {
        let alpha = scalar(&c.scalars, "negative_slope");
        let y = check_gradient(c, &entries, &facts, "self", &only_y);
        assert_eq!(y.is_some(), alpha < 0.0, "{}: {y:?}", c.label);
        assert!(check_gradient(c, &entries, &facts, "self", &only_x).is_none());
    }
    // Relu reading Y: PyTorch's own formula (`threshold_backward(grad, result, 0)`).
    let relu = cases().into_iter().find(|c| c.op == "Relu").unwrap();
    assert!(check_gradient(&relu, &entries, &facts, "self", &only_y).is_none());
    // Elu reading only Y would be refused for a negative alpha.
    for c in cases().iter().filter(|c| c.op == "Elu") {
        let alpha = scalar(&c.scalars, "alpha");
        let y = check_gradient(c, &entries, &facts, "self", &only_y);
        assert_eq!(y.is_some(), alpha < 0.0, "{}: {y:?}", c.label);
    }
}

#[test]
fn every_backward_rule_reads_what_pytorchs_formula_needs() {
    let entries = parse_entries(DERIVATIVES);
    let facts = parse_facts(FUNCTIONS);
    let mut failures = Vec::new();
    let mut compared = 0;
    // Each case in each float dtype a parameter can have: no rule may depend on it.
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for c in cases() {
            let step = derive(&c, dtype).unwrap_or_else(|e| panic!("{} {dtype}: {e}", c.label));
            for &(i, arg) in &c.wrt {
                let reads = memplan_reads(&step, i);
                compared += 1;
                if let Some(why) = check_gradient(&c, &entries, &facts, arg, &reads) {
                    failures.push(format!(
                        "{} ({dtype}) input {i} ({arg}): memplan reads {reads:?}; {why}",
                        c.label
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(compared >= 450, "{compared}");
}

/// Every forward op the rule table has a rule for (a string literal of `rules.rs` that
/// derives a backward) is compared above or excused with a reason.
#[test]
fn every_op_of_the_table_is_compared_or_excused() {
    let compared: BTreeSet<&str> = cases().iter().map(|c| c.op).collect();
    let excused: BTreeSet<&str> = EXCUSED.iter().map(|(op, _)| *op).collect();
    let mut missing = Vec::new();
    for literal in RULES.split('"').skip(1).step_by(2) {
        let name = literal.rsplit('.').next().unwrap_or(literal);
        let looks_like_op = name.starts_with(|c: char| c.is_ascii_uppercase())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !looks_like_op || compared.contains(literal) || excused.contains(literal) {
            continue;
        }
        if has_rule(literal) {
            missing.push(literal.to_owned());
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "ops with a backward rule that are neither compared with PyTorch nor excused: {missing:?}"
    );
}

/// Whether the table has a rule for `op`: a node of it over three f32 parameters derives.
fn has_rule(op: &str) -> bool {
    let mut b = GraphBuilder::new("has_rule");
    let xs: Vec<Option<TensorId>> = (0..3)
        .map(|k| Some(b.weight(format!("x{k}"), DType::F32, [4, 8])))
        .collect();
    let y = b.tensor("y", DType::F32, [4, 8], TensorKind::Output);
    b.node("probe", op, &xs, &[y]);
    b.mark_output(y);
    let options = TrainingOptions::default()
        .with_loss(Loss::None)
        .with_checkpoint(Checkpoint::None);
    // The node is the step graph's: the error comes in `InGraph`.
    !plan_training(&b.build_unchecked(), &options)
        .is_err_and(|e| matches!(e.inner(), PlanError::NoBackwardRule { .. }))
}

/// A LeakyRelu with a negative slope keeps its input for the backward, and is not written
/// over it: a step of three such layers saves one activation a layer more than with a
/// positive slope (issue 36: `saved_bytes` was short by one activation a layer, and the
/// backward read only the output).
#[test]
fn a_leaky_relu_with_a_negative_slope_saves_its_input() {
    let step = |alpha: f64| {
        let mut b = GraphBuilder::new("leaky");
        let mut h = b.input("x", DType::F32, [8, 64]);
        for layer in 0..3 {
            let w = b.weight(format!("w{layer}"), DType::F32, [64, 64]);
            let m = b.op("MatMul", &[h, w], DType::F32, [8, 64]);
            h = b.op("LeakyRelu", &[m], DType::F32, [8, 64]);
            b.attr("alpha", Attr::Float(alpha));
        }
        b.mark_output(h);
        let options = TrainingOptions::default()
            .with_loss(Loss::Mse)
            .with_checkpoint(Checkpoint::None);
        let s = plan_training(&b.build().unwrap(), &options).unwrap();
        memplan_planner::verify_plan(&s.graph, &s.plan).unwrap();
        s
    };
    let positive = step(0.01);
    let negative = step(-0.5);
    // Each LeakyRelu's input (a MatMul output) is saved with a negative slope only, and
    // then no LeakyRelu is written over its input.
    for (s, keeps) in [(&positive, false), (&negative, true)] {
        let mut inputs = 0;
        for node in s.graph.nodes().iter() {
            if node.op != "LeakyRelu" {
                continue;
            }
            let Some(m) = node.inputs[0] else { continue };
            inputs += 1;
            assert_eq!(s.summary.saved.contains(&m), keeps, "{}", node.name);
            let in_place = matches!(
                s.plan.buffer(node.outputs[0]).and_then(|b| b.alias),
                Some(memplan_planner::Alias::InPlace { .. })
            );
            assert!(!(keeps && in_place), "{}", node.name);
        }
        assert_eq!(inputs, 3);
    }
    assert!(negative.summary.saved_bytes > positive.summary.saved_bytes);
}

/// The verifier's own statement agrees: a step whose LeakyRelu(-0.5) backward reads the
/// output in place of the input (the rule before issue 36) is refused.
#[test]
fn the_verifier_refuses_a_negative_slope_backward_reading_only_the_output() {
    let mut b = GraphBuilder::new("leaky");
    let x = b.input("x", DType::F32, [8, 64]);
    let w = b.weight("w", DType::F32, [64, 64]);
    let m = b.op("MatMul", &[x, w], DType::F32, [8, 64]);
    let y = b.op("LeakyRelu", &[m], DType::F32, [8, 64]);
    b.attr("alpha", Attr::Float(-0.5));
    b.mark_output(y);
    let options = TrainingOptions::default()
        .with_loss(Loss::Mse)
        .with_checkpoint(Checkpoint::None);
    let s = plan_training(&b.build().unwrap(), &options).unwrap();
    memplan_planner::verify_plan(&s.graph, &s.plan).unwrap();
    let mut graph = s.graph.clone();
    let grad = graph
        .nodes()
        .iter_enumerated()
        .find(|(_, n)| n.op == "com.microsoft.LeakyReluGrad")
        .map(|(id, _)| id)
        .expect("the backward node");
    let node = graph.node_mut(grad);
    assert!(node.inputs.contains(&Some(m)), "{node:?}");
    for i in &mut node.inputs {
        if *i == Some(m) {
            *i = Some(y);
        }
    }
    let problems = match memplan_planner::verify_plan(&graph, &s.plan) {
        Ok(()) => Vec::new(),
        Err(v) => v.0,
    };
    assert!(
        problems.iter().any(|p| matches!(
            p,
            memplan_planner::PlanViolation::BackwardMissesSaved { tensor, .. } if *tensor == m
        )),
        "{problems:?}"
    );
}
