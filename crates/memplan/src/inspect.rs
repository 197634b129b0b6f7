//! `memplan inspect`: what a graph holds — nodes, tensors, bytes by kind, the largest
//! tensors and an op histogram. On a symbolic graph, sizes that depend on symbols are shown
//! as formulas (`3072*batch*seq`), and the bounds of data-dependent symbols are listed;
//! `--dim` binds symbols to numbers. A byte sum that does not fit 64 bits is an error (exit
//! 2), as in `memplan plan`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use memplan_ir::{Bindings, Expr, Graph, SizeError, TensorKind};

use crate::{Context, Result, bail, group_digits, size};

/// The text report of `memplan inspect`, listing the `top` largest tensors.
pub fn text(graph: &Graph, top: usize) -> Result<String> {
    let summary = Summary::new(graph)?;
    Ok(report(graph, &summary, top))
}

/// The JSON of `memplan inspect --format json`, listing the `top` largest tensors.
pub fn json_value(graph: &Graph, top: usize) -> Result<serde_json::Value> {
    let summary = Summary::new(graph)?;
    Ok(json(graph, &summary, top))
}

/// [`json_value`] as the command writes it: indented, with a final newline.
pub fn json_text(graph: &Graph, top: usize) -> Result<String> {
    let mut t = serde_json::to_string_pretty(&json_value(graph, top)?)?;
    t.push('\n');
    Ok(t)
}

const KINDS: [TensorKind; 4] = [
    TensorKind::Input,
    TensorKind::Output,
    TensorKind::Activation,
    TensorKind::Weight,
];

/// The value every symbol takes when symbolic tensors are ranked by size.
const RANK_AT: u64 = 1000;

/// A tensor's size: bytes, or a formula in the symbols.
#[derive(Clone, Debug)]
enum Size {
    Bytes(u64),
    Formula(Expr),
}

/// The figures of the report, computed once with checked arithmetic.
struct Summary {
    sizes: Vec<Size>,
    /// Per kind: the fixed bytes, the symbolic bytes as a formula, the symbolic count.
    by_kind: Vec<(TensorKind, u64, Expr, usize)>,
    symbols: Vec<String>,
    /// Tensor indexes, largest first (symbolic ones ranked at [`RANK_AT`]).
    largest: Vec<usize>,
}

fn bytes_formula(t: &memplan_ir::Tensor) -> Result<Expr> {
    let elements = t
        .elements_expr()
        .with_context(|| format!("tensor `{}`: its element count overflows", t.name))?;
    let bits = t
        .dtype
        .bits()
        .with_context(|| format!("tensor `{}`: dtype {} has no fixed size", t.name, t.dtype))?;
    if bits % 8 == 0 {
        elements
            .checked_mul(&Expr::constant(i64::from(bits / 8)))
            .with_context(|| format!("tensor `{}`: its size overflows", t.name))
    } else {
        // Sub-byte types: the formula counts bits / 8 rounded up, shown as elements*bits/8.
        Ok(elements)
    }
}

impl Summary {
    fn new(graph: &Graph) -> Result<Summary> {
        let mut sizes = Vec::with_capacity(graph.tensors().len());
        for t in graph.tensors().iter() {
            sizes.push(match t.static_bytes() {
                Ok(b) => Size::Bytes(b),
                Err(SizeError::Unbound(_)) => Size::Formula(bytes_formula(t)?),
                Err(SizeError::Overflow) => bail!(
                    "tensor `{}` is larger than 2^64 bytes (shape overflow); bind smaller --dim values",
                    t.name
                ),
                Err(e) => bail!("tensor `{}`: {e}", t.name),
            });
        }
        let mut by_kind = Vec::new();
        // Training state is listed only where a graph has some.
        let state = graph
            .tensors()
            .iter()
            .any(|t| t.kind == TensorKind::State)
            .then_some(TensorKind::State);
        for kind in KINDS.into_iter().chain(state) {
            let (mut fixed, mut formula, mut symbolic) = (0u64, Expr::constant(0), 0usize);
            for (t, s) in graph.tensors().iter().zip(&sizes) {
                if t.kind != kind {
                    continue;
                }
                match s {
                    Size::Bytes(b) => {
                        fixed = fixed.checked_add(*b).with_context(|| {
                            format!("the {} bytes add up past 2^64", kind.name())
                        })?;
                    }
                    Size::Formula(e) => {
                        formula = formula.checked_add(e).with_context(|| {
                            format!("the {} bytes add up past 2^64", kind.name())
                        })?;
                        symbolic += 1;
                    }
                }
            }
            by_kind.push((kind, fixed, formula, symbolic));
        }
        let mut symbols: Vec<String> = graph
            .tensors()
            .iter()
            .flat_map(|t| t.shape.iter().flat_map(|d| d.symbols()))
            .filter_map(|s| graph.symbols().get(s).cloned())
            .collect();
        symbols.sort_unstable();
        symbols.dedup();
        let mut at = Bindings::new();
        for (id, _) in graph.symbols().iter_enumerated() {
            at.set(id, RANK_AT);
        }
        let rank = |s: &Size| match s {
            Size::Bytes(b) => u128::from(*b),
            Size::Formula(e) => e.eval(&at).map_or(u128::MAX, u128::from),
        };
        let mut largest: Vec<usize> = graph
            .tensors()
            .iter()
            .enumerate()
            .filter(|(_, t)| !matches!(t.kind, TensorKind::Weight | TensorKind::State))
            .map(|(i, _)| i)
            .collect();
        largest.sort_by(|&a, &b| rank(&sizes[b]).cmp(&rank(&sizes[a])).then(a.cmp(&b)));
        Ok(Summary {
            sizes,
            by_kind,
            symbols,
            largest,
        })
    }
}

fn formula(graph: &Graph, e: &Expr) -> String {
    e.display(graph.symbols()).to_string()
}

/// A tensor's shape as written in the graph: `[batch, 12, seq, seq]`.
pub fn shape(graph: &Graph, t: &memplan_ir::Tensor) -> String {
    let dims: Vec<String> = t
        .shape
        .iter()
        .map(|d| d.display(graph.symbols()).to_string())
        .collect();
    format!("[{}]", dims.join(", "))
}

/// The text report, deterministic for a given graph.
fn report(graph: &Graph, s: &Summary, top: usize) -> String {
    let mut out = String::new();
    let count = |k: TensorKind| graph.tensors().iter().filter(|t| t.kind == k).count();
    let _ = writeln!(out, "graph {}", graph.name);
    let n = |k: usize, one: &str, many: &str| {
        format!(
            "{} {}",
            group_digits(k as u64),
            if k == 1 { one } else { many }
        )
    };
    let _ = writeln!(
        out,
        "  {}, {}: {}, {}, {}, {}",
        n(graph.nodes().len(), "node", "nodes"),
        n(graph.tensors().len(), "tensor", "tensors"),
        n(count(TensorKind::Input), "input", "inputs"),
        n(count(TensorKind::Output), "output", "outputs"),
        n(count(TensorKind::Activation), "activation", "activations"),
        n(count(TensorKind::Weight), "weight", "weights"),
    );
    let state = count(TensorKind::State);
    if state > 0 {
        let _ = writeln!(out, "  {state} training-state tensors (persistent)");
    }
    // The broadcast and divided dims follow from these, and are listed on their own below.
    let free: Vec<&str> = s
        .symbols
        .iter()
        .map(String::as_str)
        .filter(|n| !graph.find_symbol(n).is_some_and(|id| graph.is_derived(id)))
        .collect();
    if !free.is_empty() {
        let _ = writeln!(
            out,
            "  symbols: {} (sizes below are formulas in them; bind with --dim NAME=VALUE)",
            free.join(", ")
        );
    }
    if !graph.symbol_bounds().is_empty() {
        let bounds: Vec<String> = graph
            .symbol_bounds()
            .iter()
            .map(|(s, e)| {
                let name = graph.symbols().get(*s).map_or("?", String::as_str);
                format!("{name} <= {}", e.display(graph.symbols()))
            })
            .collect();
        let _ = writeln!(
            out,
            "  data-dependent sizes with a bound (plan --bound plans at them): {}",
            bounds.join(", ")
        );
    }

    if !graph.symbol_broadcasts().is_empty() {
        let rules: Vec<String> = graph
            .symbol_broadcasts()
            .iter()
            .map(|(s, a, b)| {
                let name = graph.symbols().get(*s).map_or("?", String::as_str);
                format!(
                    "{name} = broadcast({}, {})",
                    a.display(graph.symbols()),
                    b.display(graph.symbols())
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "  broadcast dims (binding their two dims sets them, and checks that they broadcast): {}",
            rules.join(", ")
        );
    }

    if !graph.symbol_quotients().is_empty() {
        let rules: Vec<String> = graph
            .symbol_quotients()
            .iter()
            .map(|(s, q)| {
                let name = graph.symbols().get(*s).map_or("?", String::as_str);
                format!("{name} = {}", q.display(graph.symbols()))
            })
            .collect();
        let _ = writeln!(
            out,
            "  divided dims (strided windows over unknown dims; binding their dim sets them): {}",
            rules.join(", ")
        );
    }

    let _ = writeln!(out, "\nbytes by kind");
    for (kind, fixed, f, symbolic) in &s.by_kind {
        let mut line = format!(
            "  {:<11} {:>12}  {:>20} B",
            kind.name(),
            size(*fixed),
            group_digits(*fixed)
        );
        if *symbolic > 0 {
            let _ = write!(
                line,
                "  + {} B ({symbolic} symbolic tensor{})",
                formula(graph, f),
                if *symbolic == 1 { "" } else { "s" }
            );
        }
        let _ = writeln!(out, "{line}");
    }

    let shown = top.min(s.largest.len());
    let _ = writeln!(
        out,
        "\nlargest non-weight tensors{}",
        if s.symbols.is_empty() {
            String::new()
        } else {
            format!(" (symbolic ones ranked as if every symbol were {RANK_AT})")
        }
    );
    for &i in s.largest.iter().take(shown) {
        let t = &graph.tensors().as_slice()[i];
        let bytes = match &s.sizes[i] {
            Size::Bytes(b) => format!("{:>12}", size(*b)),
            Size::Formula(e) => format!("{:>12}", format!("{} B", formula(graph, e))),
        };
        let _ = writeln!(
            out,
            "  {bytes}  {:<10} {} {} {}",
            t.kind.name(),
            t.dtype,
            shape(graph, t),
            t.name
        );
    }

    let ops = op_counts(graph);
    let _ = writeln!(out, "\nops ({} types)", ops.len());
    for (op, n) in ops {
        let _ = writeln!(out, "  {n:>6}  {op}");
    }
    out
}

fn op_counts(graph: &Graph) -> Vec<(&str, usize)> {
    let mut ops: BTreeMap<&str, usize> = BTreeMap::new();
    for n in graph.nodes().iter() {
        *ops.entry(n.op.as_str()).or_default() += 1;
    }
    let mut ops: Vec<(&str, usize)> = ops.into_iter().collect();
    ops.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    ops
}

/// The JSON report: exact bytes, formulas as text.
fn json(graph: &Graph, s: &Summary, top: usize) -> serde_json::Value {
    let size_json = |sz: &Size| match sz {
        Size::Bytes(b) => serde_json::json!({ "bytes": b }),
        Size::Formula(e) => serde_json::json!({ "bytes_formula": formula(graph, e) }),
    };
    let kinds: Vec<serde_json::Value> = s
        .by_kind
        .iter()
        .map(|(kind, fixed, f, symbolic)| {
            let mut v = serde_json::json!({
                "kind": kind.name(),
                "tensors": graph.tensors().iter().filter(|t| t.kind == *kind).count(),
                "bytes": fixed,
            });
            if *symbolic > 0
                && let Some(map) = v.as_object_mut()
            {
                map.insert("symbolic_tensors".to_owned(), serde_json::json!(symbolic));
                map.insert(
                    "symbolic_bytes_formula".to_owned(),
                    serde_json::json!(formula(graph, f)),
                );
            }
            v
        })
        .collect();
    let largest: Vec<serde_json::Value> = s
        .largest
        .iter()
        .take(top)
        .map(|&i| {
            let t = &graph.tensors().as_slice()[i];
            // The shape as the graph format writes it: an integer per constant dim, the
            // expression as a string per symbolic one.
            let dims: Vec<serde_json::Value> = t
                .shape
                .iter()
                .map(|d| match d.as_constant() {
                    Some(c) => serde_json::json!(c),
                    None => serde_json::json!(d.display(graph.symbols()).to_string()),
                })
                .collect();
            let mut v = serde_json::json!({
                "name": t.name,
                "kind": t.kind.name(),
                "dtype": t.dtype.to_string(),
                "shape": dims,
            });
            if let (Some(map), serde_json::Value::Object(extra)) =
                (v.as_object_mut(), size_json(&s.sizes[i]))
            {
                map.extend(extra);
            }
            v
        })
        .collect();
    let ops: Vec<serde_json::Value> = op_counts(graph)
        .into_iter()
        .map(|(op, n)| serde_json::json!({ "op": op, "count": n }))
        .collect();
    let mut v = serde_json::json!({
        "graph": graph.name,
        "nodes": graph.nodes().len(),
        "tensors": graph.tensors().len(),
        "symbols": s.symbols,
        "bytes_by_kind": kinds,
        "largest": largest,
        "ops": ops,
    });
    if !graph.symbol_broadcasts().is_empty()
        && let Some(map) = v.as_object_mut()
    {
        let rules: serde_json::Map<String, serde_json::Value> = graph
            .symbol_broadcasts()
            .iter()
            .map(|(sym, a, b)| {
                (
                    graph.symbols().get(*sym).cloned().unwrap_or_default(),
                    serde_json::json!([formula(graph, a), formula(graph, b)]),
                )
            })
            .collect();
        map.insert(
            "symbol_broadcasts".to_owned(),
            serde_json::Value::Object(rules),
        );
    }
    if !graph.symbol_quotients().is_empty()
        && let Some(map) = v.as_object_mut()
    {
        let rules: serde_json::Map<String, serde_json::Value> = graph
            .symbol_quotients()
            .iter()
            .map(|(sym, q)| {
                let round = if q.ceil { "ceil" } else { "floor" };
                (
                    graph.symbols().get(*sym).cloned().unwrap_or_default(),
                    serde_json::json!([formula(graph, &q.num), q.den, round]),
                )
            })
            .collect();
        map.insert(
            "symbol_quotients".to_owned(),
            serde_json::Value::Object(rules),
        );
    }
    v
}
