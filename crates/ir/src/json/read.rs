//! Reading: collects every problem it finds, each naming the tensor or node, then runs
//! [`Graph::validate`]; a graph that loads has validated.

use std::path::Path;

use serde_json::{Map, Value};

use super::LoadError;
use crate::dim::Expr;
use crate::dtype::DType;
use crate::graph::{Attr, Body, Graph, Node, Shape, Tensor, TensorKind};
use crate::validate::{ValidationError, ValidationErrors};

impl Graph {
    /// Reads a graph from a JSON file.
    pub fn load_json(path: &Path) -> Result<Graph, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
            path: path.to_owned(),
            source,
        })?;
        Graph::from_json(&text)
    }

    /// Parses a graph from JSON text and validates it.
    pub fn from_json(text: &str) -> Result<Graph, LoadError> {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            // serde_json's message ends with its own " at line L column C"; we say it once.
            let message = e.to_string();
            let message = message
                .rfind(" at line ")
                .map_or(message.as_str(), |i| &message[..i])
                .to_owned();
            LoadError::Syntax {
                line: e.line(),
                column: e.column(),
                message,
            }
        })?;
        let mut errors = Vec::new();
        let mut graph = Reader {
            errors: &mut errors,
            broken: Vec::new(),
        }
        .graph(&value);
        // Values captured two or more levels deep, passed on by every body in between.
        graph.complete_captures();
        if errors.is_empty() {
            // The errors carry the graph: its caller has none.
            return graph.validate().map(|()| graph).map_err(LoadError::Invalid);
        }
        // The reader's own problems are about the file's entries, by name.
        Err(LoadError::Invalid(ValidationErrors::new(errors)))
    }
}

struct Reader<'a> {
    errors: &'a mut Vec<ValidationError>,
    /// Names of tensors whose entry has an error already reported: a node naming one is
    /// dropped without a second error saying the tensor does not exist.
    broken: Vec<String>,
}

impl Reader<'_> {
    fn fail(&mut self, msg: String) {
        self.errors.push(ValidationError::Malformed(msg));
    }

    /// Reports every key of `obj` that is not in `known` (a misspelt key would otherwise be
    /// ignored silently), naming the closest known key when one is near.
    fn unknown_keys(&mut self, obj: &Map<String, Value>, known: &[&str], what: &str) {
        for key in obj.keys() {
            if known.contains(&key.as_str()) {
                continue;
            }
            let hint = known
                .iter()
                .map(|k| (edit_distance(k, key), *k))
                .filter(|&(d, k)| d <= 2.max(k.len() / 3))
                .min()
                .map_or_else(String::new, |(_, k)| format!(" (did you mean `{k}`?)"));
            self.fail(format!("{what}: unknown key `{key}`{hint}"));
        }
    }

    fn str_field<'v>(
        &mut self,
        obj: &'v Map<String, Value>,
        key: &str,
        what: &str,
    ) -> Option<&'v str> {
        match obj.get(key) {
            Some(Value::String(s)) => Some(s),
            Some(other) => {
                self.fail(format!(
                    "{what}: `{key}` must be a string, found {}",
                    kind_of(other)
                ));
                None
            }
            None => {
                self.fail(format!("{what}: missing `{key}`"));
                None
            }
        }
    }

    fn graph(&mut self, value: &Value) -> Graph {
        let mut g = Graph::default();
        let Some(top) = value.as_object() else {
            self.fail(format!(
                "the top level must be an object, found {}",
                kind_of(value)
            ));
            return g;
        };
        self.unknown_keys(top, GRAPH_KEYS, "graph");
        g.name = self
            .str_field(top, "name", "graph")
            .unwrap_or_default()
            .to_owned();
        for key in ["source", "license"] {
            match top.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) => g.set_metadata(key, s.clone()),
                Some(other) => self.fail(format!(
                    "graph: `{key}` must be a string, found {}",
                    kind_of(other)
                )),
            }
        }
        match top.get("batch") {
            None | Some(Value::Null) => {}
            Some(v) => match v.as_u64() {
                Some(b) => g.batch = Some(b),
                None => self.fail(format!(
                    "graph: `batch` must be a non-negative integer or null, found {v}"
                )),
            },
        }
        match top.get("symbols") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for (i, s) in items.iter().enumerate() {
                    match s.as_str() {
                        Some(name) if is_symbol_name(name) => {
                            if g.find_symbol(name).is_some() {
                                self.fail(format!("graph: symbol `{name}` is listed twice"));
                            }
                            g.symbol(name);
                        }
                        _ => self.fail(format!(
                            "graph: symbols[{i}] must be a symbol name, found {s}"
                        )),
                    }
                }
            }
            Some(other) => self.fail(format!(
                "graph: `symbols` must be a list, found {}",
                kind_of(other)
            )),
        }
        match top.get("symbol_bounds") {
            None | Some(Value::Null) => {}
            Some(Value::Object(bounds)) => {
                for (name, v) in bounds {
                    let what = format!("graph: symbol_bounds `{name}`");
                    let Some(s) = g.find_symbol(name) else {
                        self.fail(format!("{what}: not in the graph's `symbols` list"));
                        continue;
                    };
                    if let Some(e) = self.dim(&g, v, &what)
                        && !g.set_symbol_bound(s, e)
                    {
                        self.fail(format!(
                            "{what}: a bound may only use symbols listed before its own"
                        ));
                    }
                }
            }
            Some(other) => self.fail(format!(
                "graph: `symbol_bounds` must be an object, found {}",
                kind_of(other)
            )),
        }
        match top.get("symbol_broadcasts") {
            None | Some(Value::Null) => {}
            Some(Value::Object(rules)) => {
                for (name, v) in rules {
                    let what = format!("graph: symbol_broadcasts `{name}`");
                    let Some(s) = g.find_symbol(name) else {
                        self.fail(format!("{what}: not in the graph's `symbols` list"));
                        continue;
                    };
                    let Some([a, b]) = v.as_array().map(Vec::as_slice) else {
                        self.fail(format!("{what}: must be a list of two dims"));
                        continue;
                    };
                    let (a, b) = (self.dim(&g, a, &what), self.dim(&g, b, &what));
                    if let (Some(a), Some(b)) = (a, b)
                        && !g.set_symbol_broadcast(s, a, b)
                    {
                        self.fail(format!(
                            "{what}: its dims may only use symbols listed before its own, and it may have no bound"
                        ));
                    }
                }
            }
            Some(other) => self.fail(format!(
                "graph: `symbol_broadcasts` must be an object, found {}",
                kind_of(other)
            )),
        }
        match top.get("symbol_quotients") {
            None | Some(Value::Null) => {}
            Some(Value::Object(rules)) => {
                for (name, v) in rules {
                    let what = format!("graph: symbol_quotients `{name}`");
                    let Some(s) = g.find_symbol(name) else {
                        self.fail(format!("{what}: not in the graph's `symbols` list"));
                        continue;
                    };
                    let Some([num, den, round]) = v.as_array().map(Vec::as_slice) else {
                        self.fail(format!(
                            "{what}: must be a list of a dim, a divisor and \"floor\" or \"ceil\""
                        ));
                        continue;
                    };
                    let Some(den) = den.as_u64().filter(|&d| d >= 1) else {
                        self.fail(format!(
                            "{what}: the divisor must be an integer of 1 or more"
                        ));
                        continue;
                    };
                    let ceil = match round.as_str() {
                        Some("floor") => false,
                        Some("ceil") => true,
                        _ => {
                            self.fail(format!(
                                "{what}: the rounding must be \"floor\" or \"ceil\""
                            ));
                            continue;
                        }
                    };
                    let Some(num) = self.dim(&g, num, &what) else {
                        continue;
                    };
                    if !g.set_symbol_quotient(s, crate::Quotient { num, den, ceil }) {
                        self.fail(format!(
                            "{what}: its dim may only use symbols listed before its own, and it may have no bound and be no broadcast"
                        ));
                    }
                }
            }
            Some(other) => self.fail(format!(
                "graph: `symbol_quotients` must be an object, found {}",
                kind_of(other)
            )),
        }
        self.contents(&mut g, top);
        match top.get("outputs") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                let mut order = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    let id = item.as_str().and_then(|name| g.find_tensor(name));
                    match id {
                        Some(t) if g.tensor(t).kind == TensorKind::Output => order.push(t),
                        _ => self.fail(format!(
                            "graph: outputs[{i}] must name a tensor of kind output, found {item}"
                        )),
                    }
                }
                g.set_output_order(order);
            }
            Some(other) => self.fail(format!(
                "graph: `outputs` must be a list, found {}",
                kind_of(other)
            )),
        }
        g
    }

    /// One dimension or count: an integer, or an expression over the graph's symbols.
    fn dim(&mut self, g: &Graph, v: &Value, what: &str) -> Option<Expr> {
        match v {
            Value::Number(n) => match n.as_i64() {
                Some(c) => Some(Expr::constant(c)),
                None => {
                    self.fail(format!("{what}: {}", not_a_dim(n)));
                    None
                }
            },
            Value::String(s) => {
                let parsed = Expr::parse(s, |name| {
                    g.find_symbol(name).ok_or_else(|| {
                        format!("symbol `{name}` is not in the graph's `symbols` list")
                    })
                });
                match parsed {
                    Ok(e) => Some(e),
                    Err(e) => {
                        self.fail(format!("{what}: {e}"));
                        None
                    }
                }
            }
            other => {
                self.fail(format!(
                    "{what}: must be an integer or an expression, found {}",
                    kind_of(other)
                ));
                None
            }
        }
    }

    /// The tensors and nodes of `g` (a whole graph or a body).
    fn contents(&mut self, g: &mut Graph, top: &Map<String, Value>) {
        let before = self.errors.len();
        let tensors = self.list(top, "tensors");
        if self.errors.len() > before {
            // Without the tensor list every node reference would fail too: report the root
            // cause alone.
            return;
        }
        for (i, t) in tensors.iter().enumerate() {
            match self.tensor(g, i, t) {
                Some(t) => {
                    g.add_tensor(t);
                }
                None => {
                    if let Some(name) = t.get("name").and_then(Value::as_str) {
                        self.broken.push(name.to_owned());
                    }
                }
            }
        }
        let nodes = self.list(top, "nodes");
        for (i, n) in nodes.iter().enumerate() {
            if let Some(n) = self.node(g, i, n) {
                g.add_node(n);
            }
        }
    }

    /// One entry of a node's `bodies`: `{"attr": name, "graph": {name, tensors, nodes}}`. The
    /// body gets `outer`'s symbols; its problems are reported as [`ValidationError::Malformed`]
    /// naming the node and the body.
    fn body(&mut self, outer: &Graph, node: &str, v: &Value) -> Option<Body> {
        let what = format!("node `{node}`: a body");
        let Some(obj) = v.as_object() else {
            self.fail(format!("{what} must be an object, found {}", kind_of(v)));
            return None;
        };
        let attr = self.str_field(obj, "attr", &what)?.to_owned();
        let Some(Value::Object(top)) = obj.get("graph") else {
            self.fail(format!(
                "node `{node}`, body `{attr}`: `graph` must be an object"
            ));
            return None;
        };
        let mut inner = Vec::new();
        let mut reader = Reader {
            errors: &mut inner,
            broken: Vec::new(),
        };
        let name = reader
            .str_field(top, "name", "body graph")
            .unwrap_or_default();
        let mut graph = Graph::with_symbols_of(name, outer);
        reader.unknown_keys(top, BODY_KEYS, "body graph");
        reader.contents(&mut graph, top);
        let ok = inner.is_empty();
        // The reader's problems name the file's entries (the node is in no graph yet), so
        // the body's are said with the node's name here.
        self.errors.extend(
            inner
                .into_iter()
                .map(|e| ValidationError::Malformed(format!("node `{node}`, body `{attr}`: {e}"))),
        );
        ok.then_some(Body { attr, graph })
    }

    fn list<'v>(&mut self, top: &'v Map<String, Value>, key: &str) -> &'v [Value] {
        match top.get(key) {
            Some(Value::Array(items)) => items,
            Some(other) => {
                self.fail(format!(
                    "graph: `{key}` must be a list, found {}",
                    kind_of(other)
                ));
                &[]
            }
            None => {
                self.fail(format!("graph: missing `{key}`"));
                &[]
            }
        }
    }

    fn tensor(&mut self, g: &mut Graph, i: usize, v: &Value) -> Option<Tensor> {
        let Some(obj) = v.as_object() else {
            self.fail(format!(
                "tensors[{i}] must be an object, found {}",
                kind_of(v)
            ));
            return None;
        };
        let name = self
            .str_field(obj, "name", &format!("tensors[{i}]"))?
            .to_owned();
        let what = format!("tensor `{name}`");
        self.unknown_keys(obj, TENSOR_KEYS, &what);
        let dtype = self
            .str_field(obj, "dtype", &what)
            .and_then(|d| match d.parse::<DType>() {
                Ok(d) => Some(d),
                Err(e) => {
                    self.fail(format!("{what}: {e}"));
                    None
                }
            });
        let kind = self.str_field(obj, "kind", &what).and_then(|k| {
            let kind = TensorKind::from_name(k);
            if kind.is_none() {
                self.fail(format!(
                    "{what}: unknown kind `{k}` (expected input, output, weight, activation or state)"
                ));
            }
            kind
        });
        let shape = self.shape(g, obj, &what);
        let int_value = match obj.get("value") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => {
                let v: Option<Vec<i64>> = items.iter().map(Value::as_i64).collect();
                if v.is_none() {
                    self.fail(format!("{what}: `value` must be a list of integers"));
                }
                v
            }
            Some(other) => {
                self.fail(format!(
                    "{what}: `value` must be a list of integers, found {}",
                    kind_of(other)
                ));
                None
            }
        };
        let element_count = match obj.get("elements") {
            None | Some(Value::Null) => None,
            Some(v) => Some(self.dim(g, v, &format!("{what}: `elements`"))?),
        };
        let tensor = Tensor {
            name,
            dtype: dtype?,
            shape: shape?,
            kind: kind?,
            int_value,
            element_count,
        };
        match obj.get("bytes") {
            None | Some(Value::Null) => {}
            Some(b) => match b.as_u64() {
                None => self.fail(format!(
                    "{what}: `bytes` must be a non-negative integer, found {b}"
                )),
                Some(declared) if tensor.has_static_size() => {
                    if let Ok(computed) = tensor.static_bytes()
                        && computed != declared
                    {
                        self.errors.push(ValidationError::BytesMismatch {
                            tensor: tensor.name.clone(),
                            declared,
                            computed,
                        });
                    }
                }
                Some(_) => {}
            },
        }
        Some(tensor)
    }

    fn shape(&mut self, g: &mut Graph, obj: &Map<String, Value>, what: &str) -> Option<Shape> {
        let Some(Value::Array(dims)) = obj.get("shape") else {
            self.fail(format!("{what}: `shape` must be a list of dimensions"));
            return None;
        };
        let mut shape = Shape::new();
        let mut ok = true;
        for (d, dim) in dims.iter().enumerate() {
            match dim {
                Value::Number(n) => match n.as_i64() {
                    Some(v) => shape.push(Expr::constant(v)),
                    None => {
                        self.fail(format!("{what}: dimension {d} {}", not_a_dim(n)));
                        ok = false;
                    }
                },
                Value::String(s) => {
                    let symbols = &g.symbols();
                    let parsed = Expr::parse(s, |name| {
                        symbols
                            .iter_enumerated()
                            .find(|(_, x)| x.as_str() == name)
                            .map(|(id, _)| id)
                            .ok_or_else(|| {
                                format!("symbol `{name}` is not in the graph's `symbols` list")
                            })
                    });
                    match parsed {
                        Ok(e) => shape.push(e),
                        Err(e) => {
                            if e.reason.contains("not in the graph's") {
                                let sym = e.reason.split('`').nth(1).unwrap_or(s).to_owned();
                                self.errors.push(ValidationError::UnknownSymbol {
                                    tensor: what_name(what),
                                    symbol: sym,
                                });
                            } else {
                                self.fail(format!("{what}: dimension {d}: {e}"));
                            }
                            ok = false;
                        }
                    }
                }
                other => {
                    self.fail(format!(
                        "{what}: dimension {d} must be an integer or a symbol, found {}",
                        kind_of(other)
                    ));
                    ok = false;
                }
            }
        }
        ok.then_some(shape)
    }

    fn node(&mut self, g: &Graph, i: usize, v: &Value) -> Option<Node> {
        let Some(obj) = v.as_object() else {
            self.fail(format!(
                "nodes[{i}] must be an object, found {}",
                kind_of(v)
            ));
            return None;
        };
        let name = self
            .str_field(obj, "name", &format!("nodes[{i}]"))?
            .to_owned();
        let what = format!("node `{name}`");
        self.unknown_keys(obj, NODE_KEYS, &what);
        let op = self.str_field(obj, "op", &what).map(str::to_owned);
        let mut ok = true;
        let mut names =
            |key: &str, role: &'static str, this: &mut Self| -> Vec<Option<crate::TensorId>> {
                let Some(Value::Array(items)) = obj.get(key) else {
                    this.fail(format!("{what}: `{key}` must be a list of tensor names"));
                    ok = false;
                    return Vec::new();
                };
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    match item.as_str() {
                        Some("") if role == "reads" => out.push(None),
                        Some(t) => match g.find_tensor(t) {
                            Some(id) => out.push(Some(id)),
                            // Its own entry's error is reported already.
                            None if this.broken.iter().any(|b| b == t) => ok = false,
                            None => {
                                this.errors.push(ValidationError::Dangling {
                                    node: name.clone(),
                                    role,
                                    tensor: t.to_owned(),
                                });
                                ok = false;
                            }
                        },
                        None => {
                            this.fail(format!(
                                "{what}: `{key}` must hold tensor names, found {item}"
                            ));
                            ok = false;
                        }
                    }
                }
                out
            };
        let inputs = names("inputs", "reads", self);
        let outputs = names("outputs", "writes", self);
        let implicit_inputs = match obj.get("implicit_inputs") {
            None | Some(Value::Null) => Vec::new(),
            Some(_) => names("implicit_inputs", "captures", self)
                .into_iter()
                .flatten()
                .collect(),
        };
        let mut bodies = Vec::new();
        match obj.get("bodies") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for item in items {
                    match self.body(g, &name, item) {
                        Some(b) => bodies.push(b),
                        None => ok = false,
                    }
                }
            }
            Some(other) => {
                self.fail(format!(
                    "{what}: `bodies` must be a list, found {}",
                    kind_of(other)
                ));
                ok = false;
            }
        }
        let attrs = match obj.get("attrs") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(map)) => {
                let mut attrs = Vec::with_capacity(map.len());
                for (k, a) in map {
                    match attr(a) {
                        Some(a) => attrs.push((k.clone(), a)),
                        None => {
                            self.fail(format!("{what}: attribute `{k}` must be a number, a string or a list of numbers"));
                            ok = false;
                        }
                    }
                }
                attrs
            }
            Some(other) => {
                self.fail(format!(
                    "{what}: `attrs` must be an object, found {}",
                    kind_of(other)
                ));
                return None;
            }
        };
        let outputs = outputs.into_iter().flatten().collect();
        (ok).then_some(())?;
        Some(Node {
            name,
            op: op?,
            inputs,
            outputs,
            attrs,
            bodies,
            implicit_inputs,
        })
    }
}

/// The keys a graph object may have.
const GRAPH_KEYS: &[&str] = &[
    "name",
    "source",
    "license",
    "batch",
    "symbols",
    "symbol_bounds",
    "symbol_broadcasts",
    "symbol_quotients",
    "outputs",
    "tensors",
    "nodes",
];
/// The keys a body graph may have.
const BODY_KEYS: &[&str] = &["name", "tensors", "nodes"];
/// The keys a tensor may have.
const TENSOR_KEYS: &[&str] = &[
    "name", "dtype", "shape", "bytes", "elements", "kind", "value",
];
/// The keys a node may have.
const NODE_KEYS: &[&str] = &[
    "name",
    "op",
    "inputs",
    "outputs",
    "attrs",
    "implicit_inputs",
    "bodies",
];

/// The Levenshtein distance of two short strings (for "did you mean").
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            let next = (prev + cost).min(row[j] + 1).min(row[j + 1] + 1);
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// Why a JSON number is no dimension: a fraction, or an integer past `i64` (which the JSON
/// parser keeps only as a float, so its digits are not repeated back).
fn not_a_dim(n: &serde_json::Number) -> String {
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() >= 9.2e18 => {
            "is too large: a dimension is at most 2^63-1 (9,223,372,036,854,775,807)".to_owned()
        }
        _ => format!("({n}) is not an integer"),
    }
}

fn what_name(what: &str) -> String {
    what.split('`').nth(1).unwrap_or(what).to_owned()
}

fn is_symbol_name(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn attr(v: &Value) -> Option<Attr> {
    Some(match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) if !n.is_f64() => Attr::Int(i),
            _ => Attr::Float(n.as_f64()?),
        },
        Value::String(s) => Attr::Str(s.clone()),
        Value::Array(items) => {
            if items.iter().all(|x| x.as_i64().is_some() && !x.is_f64()) {
                Attr::Ints(items.iter().filter_map(Value::as_i64).collect())
            } else {
                Attr::Floats(
                    items
                        .iter()
                        .map(Value::as_f64)
                        .collect::<Option<Vec<_>>>()?,
                )
            }
        }
        _ => return None,
    })
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_key_is_reported_once_with_a_hint() {
        let text = r#"{"name": "g", "tensorz": [], "nodes": [
            {"name": "n", "op": "Relu", "inputs": ["x"], "outputs": ["y"], "attrs": {}}]}"#;
        let Err(LoadError::Invalid(ValidationErrors { errors, .. })) = Graph::from_json(text)
        else {
            panic!("a graph without tensors loaded");
        };
        let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            messages,
            [
                "graph: unknown key `tensorz` (did you mean `tensors`?)",
                "graph: missing `tensors`"
            ]
        );
    }

    #[test]
    fn unknown_tensor_and_node_keys_are_errors() {
        let text = r#"{"name": "g", "tensors": [
            {"name": "x", "dtype": "f32", "shape": [1], "kind": "input", "shap": [2]}],
            "nodes": []}"#;
        let Err(LoadError::Invalid(ValidationErrors { errors, .. })) = Graph::from_json(text)
        else {
            panic!("an unknown key was ignored");
        };
        assert_eq!(
            errors[0].to_string(),
            "tensor `x`: unknown key `shap` (did you mean `shape`?)"
        );
    }
}
