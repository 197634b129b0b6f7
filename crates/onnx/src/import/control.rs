//! Control flow: the graphs a node runs (If's branches, Loop's and Scan's `body`, and the
//! graph attributes of any other op), imported into [`Body`] graphs.
//!
//! A body's formal inputs take their types from the node where ONNX defines them (Loop: the
//! iteration number, the condition and the carried values; Scan: the states and one slice of
//! each scanned input), else from the types the body declares. Names the body does not define
//! resolve in the enclosing scopes and become its inputs ([`Importer::resolve`]); the node
//! lists those outer values as implicit inputs, and so does every enclosing node, since each
//! enclosing body captures them in turn. A result that no body node makes (an input, a
//! captured value or a constant handed straight back) is copied by an `Identity` node, so
//! every body result is a body output of its own. The node's outputs are inferred from the
//! bodies: If's from the branch its condition picks when that is known at import, else from
//! both branches (a dim where they differ is data-dependent, at most the larger); Loop's and
//! Scan's from the final carried values and the stacked per-iteration results. A carried value
//! whose shape changes from one iteration to the next has no size to plan for, and is an error
//! naming the node.

use std::collections::HashMap;

use memplan_ir::{Body, DType, Expr, Graph, Node, Shape, TensorId, TensorKind};

use super::{Importer, Scope, declared_types, is_default_domain};
use crate::error::OnnxError;
use crate::infer::{Dim, InferError, Output, norm_axis};
use crate::proto::{GraphProto, NodeProto};
use crate::value::Value;

/// A node's bodies, the outer values they read, and its outputs as the bodies give them.
pub(super) struct Bodies {
    pub(super) bodies: Vec<Body>,
    pub(super) implicit_inputs: Vec<TensorId>,
    /// `Some` for If, Loop and Scan: their outputs inferred from the bodies.
    pub(super) outputs: Option<Result<Vec<Output>, InferError>>,
}

/// One imported body: the graph, and the dtype, shape and known value of each result in ONNX
/// order.
struct Imported {
    body: Body,
    results: Vec<(DType, Shape)>,
    values: Vec<Option<Value>>,
}

impl<'m> Importer<'m, '_> {
    /// Imports the graph attributes of `node` (named `name`, of op type `op`, reading `inputs`).
    pub(super) fn bodies(
        &mut self,
        name: &str,
        op: &str,
        node: &'m NodeProto,
        inputs: &[Option<TensorId>],
    ) -> Result<Bodies, OnnxError> {
        let graphs: Vec<(&str, &'m GraphProto)> = node
            .attribute
            .iter()
            .flat_map(|a| {
                a.g.iter()
                    .chain(&a.graphs)
                    .map(move |g| (a.name.as_str(), g))
            })
            .collect();
        if graphs.is_empty() {
            return Ok(Bodies {
                bodies: Vec::new(),
                implicit_inputs: Vec::new(),
                outputs: None,
            });
        }
        let control = is_default_domain(&node.domain) && matches!(op, "If" | "Loop" | "Scan");
        let formal = if control {
            self.formal_inputs(node, inputs)
        } else {
            Vec::new()
        };
        let mut imported = Vec::with_capacity(graphs.len());
        let mut captured: Vec<String> = Vec::new();
        for (attr, g) in graphs {
            let wrap = |e: OnnxError| OnnxError::Body {
                node: name.to_owned(),
                op: op.to_owned(),
                attr: attr.to_owned(),
                error: Box::new(e),
            };
            let (one, names) = self.import_body(name, attr, g, &formal).map_err(wrap)?;
            // Symbols the body made are this graph's too (same ids: the body started from a
            // copy of this graph's table); the main graph hands its table to every body at
            // the end.
            let known = self.graph.symbols().len();
            for s in one.body.graph.symbols().iter().skip(known) {
                self.graph.symbol(s);
            }
            for (s, bound) in one.body.graph.symbol_bounds() {
                self.graph.set_symbol_bound(*s, bound.clone());
            }
            for (s, a, b) in one.body.graph.symbol_broadcasts() {
                self.graph.set_symbol_broadcast(*s, a.clone(), b.clone());
            }
            for (s, q) in one.body.graph.symbol_quotients() {
                self.graph.set_symbol_quotient(*s, q.clone());
            }
            captured.extend(names);
            imported.push(one);
        }
        let mut implicit_inputs = Vec::with_capacity(captured.len());
        for c in &captured {
            // Found in this graph or an enclosing one when the body read it.
            if let Some(id) = self.resolve(c) {
                implicit_inputs.push(id);
            }
        }
        implicit_inputs.sort_unstable();
        implicit_inputs.dedup();
        let outputs = if control {
            Some(self.control_outputs(name, op, node, inputs, &imported)?)
        } else {
            None
        };
        Ok(Bodies {
            bodies: imported.into_iter().map(|i| i.body).collect(),
            implicit_inputs,
            outputs,
        })
    }

    fn tensor_type(&self, id: Option<TensorId>) -> Option<(DType, Shape)> {
        let t = self.graph.tensors().get(id?)?;
        Some((t.dtype, t.shape.clone()))
    }

    /// The types ONNX gives a body's formal inputs, by position (`None`: the body's own
    /// declaration decides).
    fn formal_inputs(
        &self,
        node: &NodeProto,
        inputs: &[Option<TensorId>],
    ) -> Vec<Option<(DType, Shape)>> {
        let input = |i: usize| self.tensor_type(inputs.get(i).copied().flatten());
        match node.op_type.as_str() {
            "Loop" => {
                let mut formal = vec![
                    Some((DType::I64, Shape::new())),
                    Some((DType::Bool, Shape::new())),
                ];
                formal.extend((2..inputs.len()).map(input));
                formal
            }
            "Scan" if self.opset >= 9 => {
                let scanned = scan_count(node, inputs.len());
                let states = inputs.len() - scanned;
                let axes = int_list(node, "scan_input_axes");
                let mut formal: Vec<_> = (0..states).map(input).collect();
                for j in 0..scanned {
                    let axis = axes.get(j).copied().unwrap_or(0);
                    formal.push(input(states + j).and_then(|(dtype, mut shape)| {
                        let a = norm_axis(axis, shape.len()).ok()?;
                        shape.remove(a);
                        Some((dtype, shape))
                    }));
                }
                formal
            }
            // Opset 8: input 0 is `sequence_lens`; states and scanned inputs carry a batch
            // dim first, and scanned inputs their sequence dim second.
            "Scan" => {
                let scanned = scan_count(node, inputs.len().saturating_sub(1));
                let states = inputs.len().saturating_sub(1 + scanned);
                let drop = |i: usize, n: usize| {
                    input(i).and_then(|(dtype, shape)| {
                        (shape.len() >= n).then(|| (dtype, shape.iter().skip(n).cloned().collect()))
                    })
                };
                (0..states)
                    .map(|i| drop(1 + i, 1))
                    .chain((0..scanned).map(|j| drop(1 + states + j, 2)))
                    .collect()
            }
            _ => Vec::new(),
        }
    }

    /// Imports one body graph; returns it and the outer names it captured.
    fn import_body(
        &self,
        node: &str,
        attr: &str,
        g: &'m GraphProto,
        formal: &[Option<(DType, Shape)>],
    ) -> Result<(Imported, Vec<String>), OnnxError> {
        let mut outer = self.outer.clone();
        outer.push(Scope {
            graph: &self.graph,
            values: &self.values,
        });
        let name = if g.name.is_empty() {
            format!("{node}.{attr}")
        } else {
            g.name.clone()
        };
        let graph = Graph::with_symbols_of(name, &self.graph);
        let mut im = Importer {
            graph,
            values: Vec::new(),
            bounds: Vec::new(),
            alongs: Vec::new(),
            cumsums: HashMap::new(),
            declared: declared_types(g, self.infer_all),
            outputs: g.output.iter().map(|o| o.name.as_str()).collect(),
            opset: self.opset,
            infer_all: self.infer_all,
            outer,
            captured: Vec::new(),
        };
        for (i, vi) in g.input.iter().enumerate() {
            match formal.get(i).cloned().flatten() {
                Some((dtype, shape)) => {
                    im.add(&vi.name, dtype, shape, TensorKind::Input, None)?;
                }
                None => im.graph_input(vi)?,
            }
        }
        im.contents(g)?;
        let mut results: Vec<TensorId> = Vec::with_capacity(g.output.len());
        for (k, o) in g.output.iter().enumerate() {
            let id = im
                .resolve(&o.name)
                .ok_or_else(|| OnnxError::MissingOutput(o.name.clone()))?;
            let own = im.graph.tensors().get(id).map(|t| t.kind) == Some(TensorKind::Output);
            let id = if own && !results.contains(&id) {
                id
            } else {
                im.result_copy(id, k)?
            };
            results.push(id);
        }
        let values = results
            .iter()
            .map(|id| im.values.get(id.0 as usize).cloned().flatten())
            .collect();
        let results = results
            .into_iter()
            .filter_map(|id| im.tensor_type(Some(id)))
            .collect();
        let body = Body::new(attr.to_owned(), im.graph);
        Ok((
            Imported {
                body,
                results,
                values,
            },
            im.captured,
        ))
    }

    /// A body output of its own for a result no body node makes: `Identity` of it.
    fn result_copy(&mut self, id: TensorId, k: usize) -> Result<TensorId, OnnxError> {
        let (name, dtype, shape) = match self.graph.tensors().get(id) {
            Some(t) => (format!("{}__result{k}", t.name), t.dtype, t.shape.clone()),
            None => return Err(OnnxError::MissingOutput(id.to_string())),
        };
        let value = self.values.get(id.0 as usize).cloned().flatten();
        let out = self.add(&name, dtype, shape, TensorKind::Output, value)?;
        self.graph
            .add_node(Node::new(name, "Identity", vec![Some(id)], vec![out]));
        Ok(out)
    }

    /// The outputs of an If, Loop or Scan from its bodies. A Loop or Scan whose carried value
    /// changes shape is an error; what cannot be inferred is an `Err` reason, for a declared
    /// type to settle.
    fn control_outputs(
        &mut self,
        name: &str,
        op: &str,
        node: &NodeProto,
        inputs: &[Option<TensorId>],
        imported: &[Imported],
    ) -> Result<Result<Vec<Output>, InferError>, OnnxError> {
        let body = |attr: &str| imported.iter().find(|i| i.body.attr == attr);
        let out = |(dtype, shape): &(DType, Shape)| Output::new(*dtype, shape.clone());
        match op {
            "If" => {
                let (then, other) = match (body("then_branch"), body("else_branch")) {
                    (Some(then), Some(other)) => (then, other),
                    (None, _) => return Ok(Err(InferError::missing_attr("then_branch"))),
                    (_, None) => return Ok(Err(InferError::missing_attr("else_branch"))),
                };
                // A condition known at import (a rank or a flag compared with a constant)
                // decides the branch: the outputs are that branch's, values included.
                let cond = inputs.first().copied().flatten();
                let known =
                    cond.and_then(|id| self.values.get(id.0 as usize)?.as_ref()?.const_ints());
                if let Some(&[c]) = known.as_deref() {
                    let taken = if c != 0 { then } else { other };
                    return Ok(Ok(taken
                        .results
                        .iter()
                        .zip(&taken.values)
                        .map(|((dtype, shape), v)| {
                            Output::with_value(*dtype, shape.clone(), v.clone())
                        })
                        .collect()));
                }
                if then.results == other.results {
                    return Ok(Ok(then.results.iter().map(out).collect()));
                }
                // Branches of different shapes: the condition (data) picks one, so each dim
                // that differs is data-dependent, at most the larger of the two.
                let same_ranks = then.results.len() == other.results.len()
                    && then
                        .results
                        .iter()
                        .zip(&other.results)
                        .all(|(a, b)| a.0 == b.0 && a.1.len() == b.1.len());
                if !same_ranks {
                    return Ok(Err(InferError::Branches {
                        then: then.results.clone(),
                        other: other.results.clone(),
                    }));
                }
                let mut outputs = Vec::with_capacity(then.results.len());
                for ((dtype, a), (_, b)) in then.results.iter().zip(&other.results) {
                    let mut dims = Vec::with_capacity(a.len());
                    for (x, y) in a.iter().zip(b) {
                        dims.push(if x == y {
                            Dim::Known(x.clone())
                        } else {
                            let bound = match (x.as_constant(), y.as_constant()) {
                                (Some(p), Some(q)) => Some(Expr::constant(p.max(q))),
                                // Dims are not negative: their sum bounds both.
                                _ => crate::infer::add(x, y).ok(),
                            };
                            Dim::Data(bound)
                        });
                    }
                    outputs.push(Output::with_dims(*dtype, dims));
                }
                Ok(Ok(outputs))
            }
            "Scan" if self.opset < 9 => {
                let Some(b) = body("body") else {
                    return Ok(Err(InferError::missing_attr("body")));
                };
                let scanned = scan_count(node, inputs.len().saturating_sub(1));
                let states = inputs.len().saturating_sub(1 + scanned);
                let first = self.tensor_type(inputs.get(1 + states).copied().flatten());
                let Some((batch, seq)) =
                    first.and_then(|(_, s)| Some((s.first()?.clone(), s.get(1)?.clone())))
                else {
                    return Ok(Err(InferError::NoScanInput { rank: 2 }));
                };
                let mut outputs = Vec::with_capacity(b.results.len());
                for (k, (dtype, shape)) in b.results.iter().enumerate() {
                    let mut s = shape.clone();
                    if k < states {
                        let start = self.tensor_type(inputs.get(1 + k).copied().flatten());
                        let start =
                            start.map(|(d, s)| (d, s.iter().skip(1).cloned().collect::<Shape>()));
                        if start.is_some_and(|st| st != (*dtype, shape.clone())) {
                            return Ok(Err(InferError::ScanState { index: k }));
                        }
                    } else {
                        s.insert(0, seq.clone());
                    }
                    s.insert(0, batch.clone());
                    outputs.push(Output::new(*dtype, s));
                }
                Ok(Ok(outputs))
            }
            "Loop" | "Scan" => {
                let Some(b) = body("body") else {
                    return Ok(Err(InferError::missing_attr("body")));
                };
                let loop_ = op == "Loop";
                let (carried, first_result) = if loop_ {
                    (inputs.len().saturating_sub(2), 1)
                } else {
                    (inputs.len() - scan_count(node, inputs.len()), 0)
                };
                let first_in = if loop_ { 2 } else { 0 };
                for i in 0..carried {
                    let start = self.tensor_type(inputs.get(first_in + i).copied().flatten());
                    let end = b.results.get(first_result + i);
                    if let (Some(start), Some(end)) = (start, end)
                        && start != *end
                    {
                        return Err(OnnxError::Shape {
                            node: name.to_owned(),
                            op: op.to_owned(),
                            tensor: node.output.get(i).cloned().unwrap_or_default(),
                            reason: Box::new(InferError::Carried {
                                index: i,
                                from: Box::new(start),
                                to: Box::new(end.clone()),
                            }),
                        });
                    }
                }
                let finals = b.results.iter().skip(first_result).take(carried);
                let mut outputs: Vec<Output> = finals.map(out).collect();
                let stacked = b.results.iter().skip(first_result + carried);
                let axes = int_list(node, "scan_output_axes");
                for (k, (dtype, shape)) in stacked.enumerate() {
                    let count = if loop_ {
                        self.trip_count(inputs.first().copied().flatten())
                    } else {
                        self.scan_length(node, inputs)
                    };
                    let count = match count {
                        Ok(c) => Dim::Known(c),
                        // A Loop whose trip count only the data decides (a while loop):
                        // the stacked results' length is a data-dependent dim.
                        Err(_) if loop_ => Dim::Data(None),
                        Err(reason) => return Ok(Err(reason)),
                    };
                    let axis = if loop_ {
                        0
                    } else {
                        let a = axes.get(k).copied().unwrap_or(0);
                        match norm_axis(a, shape.len() + 1) {
                            Ok(a) => a,
                            Err(reason) => return Ok(Err(reason)),
                        }
                    };
                    let mut dims: Vec<Dim> = shape.iter().cloned().map(Dim::Known).collect();
                    dims.insert(axis, count);
                    outputs.push(Output::with_dims(*dtype, dims));
                }
                Ok(Ok(outputs))
            }
            _ => Ok(Err(InferError::NoBodyRule { op: op.to_owned() })),
        }
    }

    /// A Loop's trip count `M`, when its value is known.
    fn trip_count(&self, m: Option<TensorId>) -> Result<Expr, InferError> {
        let value = m.and_then(|id| self.values.get(id.0 as usize)?.as_ref());
        match value.and_then(Value::ints) {
            Some([count]) => Ok(count.clone()),
            _ => Err(InferError::TripCount),
        }
    }

    /// A Scan's sequence length: the first scanned input's length along its scan axis.
    fn scan_length(
        &self,
        node: &NodeProto,
        inputs: &[Option<TensorId>],
    ) -> Result<Expr, InferError> {
        let first = inputs.len() - scan_count(node, inputs.len());
        let axis = int_list(node, "scan_input_axes")
            .first()
            .copied()
            .unwrap_or(0);
        let (_, shape) = self
            .tensor_type(inputs.get(first).copied().flatten())
            .ok_or(InferError::NoScanInput { rank: 1 })?;
        let a = norm_axis(axis, shape.len())?;
        shape.get(a).cloned().ok_or(InferError::Axis {
            axis,
            rank: shape.len(),
        })
    }
}

/// How many of a Scan's `n` inputs are scanned (`num_scan_inputs`, at most `n`).
fn scan_count(node: &NodeProto, n: usize) -> usize {
    let attrs = crate::attrs::NodeAttrs(node);
    usize::try_from(attrs.int_or("num_scan_inputs", 0))
        .unwrap_or(0)
        .min(n)
}

fn int_list(node: &NodeProto, attr: &str) -> Vec<i64> {
    crate::attrs::NodeAttrs(node)
        .ints(attr)
        .map(<[i64]>::to_vec)
        .unwrap_or_default()
}
