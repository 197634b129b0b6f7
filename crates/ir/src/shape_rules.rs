//! Declared output shapes against the op's own shape rule at one binding of the symbols
//! (issue 36).
//!
//! Validation ([`Graph::validate`]) compares what an op declares with what its inputs make
//! symbolically, and lets pass what may agree at run time: `Slice(a[1, n], starts=-2,
//! ends=1000)` declared `[1, 2]` is right for every `n >= 2`. At a binding the dims are
//! numbers and the op's rule gives the output exactly; there `n = 1` makes `[1, 1]`, and a
//! plan that trusted the declaration would give the slice a byte range its op never makes.
//! [`Graph::shape_conflicts`] evaluates the rule of the ops whose outputs follow from their
//! input shapes and constant parameters, and lists every output declared otherwise:
//!
//! - element-wise ops (ONNX multidirectional broadcasting; dims that do not broadcast are a
//!   conflict too), the ops element-wise in their first input, the row-wise normalisations
//!   and Softmax-like ops: output 0 the broadcast (or first input's) dims, compared by element
//!   count (a rank written otherwise with the same count is left alone, as validation does);
//! - Slice with constant `starts`, `ends`, `axes`, `steps` (attributes or constant inputs):
//!   ONNX's clamping, negative indices and steps;
//! - Concat (the sum along the axis), Split (the `split` sizes, or `num_outputs` equal
//!   chunks, the last smaller), Transpose (the dims permuted);
//! - Reshape, Flatten, Squeeze, Unsqueeze, Identity: the input's element count;
//! - Conv, MaxPool, AveragePool, LpPool (`auto_pad` NOTSET or VALID, floor mode): a window
//!   that comes out less than one element wide along a spatial axis (`floor((in + pads -
//!   dilation·(kernel - 1) - 1) / stride) + 1 < 1`) is refused outright, whatever the
//!   declaration, as PyTorch refuses it ("Output size is too small"): planning it as empty
//!   would hide a model that cannot run at that binding.
//!
//! These are the ops whose declared shapes memplan's memory rules rest on (views, in-place
//! writes, Concat parts and Split chunks): other ops' declarations size their own buffers
//! and are taken as given (the test graphs use ops such as MatMul and Conv as stand-ins of
//! any shape).
//!
//! Only what the binding decides is compared: a dim that does not evaluate (an unbound or
//! data-dependent symbol) or a parameter that is no constant skips the op. Bodies are left to
//! their own check (their graphs share the bindings).

use std::fmt;

use crate::axis_index;
use crate::dim::Bindings;
use crate::graph::{Graph, Node};
use crate::ids::{NodeId, SymbolId, TensorId};
use crate::semantics::{ELEMENTWISE_FIRST_OPS, ELEMENTWISE_OPS, ROW_WISE_OPS};

/// An output whose declared shape is not what its op makes at a binding.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShapeConflict {
    /// The node.
    pub node: NodeId,
    /// The output tensor.
    pub output: TensorId,
    /// What is wrong.
    pub kind: ConflictKind,
}

/// How a declared shape contradicts the op.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConflictKind {
    /// The op makes other dims (or another element count) than declared.
    Dims {
        /// The declared dims at the binding.
        declared: Vec<u64>,
        /// What the op makes.
        made: Vec<u64>,
    },
    /// A convolution or pooling window that comes out less than one element wide along a
    /// spatial axis (PyTorch refuses it: "Output size is too small").
    EmptyWindow {
        /// The spatial axis (of the output).
        axis: usize,
        /// The input's extent along it.
        input: u64,
    },
}

impl fmt::Display for ConflictKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims = |d: &[u64]| {
            format!(
                "[{}]",
                d.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
            )
        };
        match self {
            ConflictKind::Dims { declared, made } => write!(
                f,
                "is declared {} but the op makes {} at this binding",
                dims(declared),
                dims(made)
            ),
            ConflictKind::EmptyWindow { axis, input } => write!(
                f,
                "would be less than one element wide along axis {axis} (input {input} wide): the window does not fit, and PyTorch refuses it (output size too small)"
            ),
        }
    }
}

impl Graph {
    /// Every output of this graph's nodes whose declared shape its op's rule contradicts at
    /// `bindings` (see the module docs), in node order. A declared dim that mentions one of
    /// `varying` (symbols whose value the data decides at run time, planned at a bound: the
    /// runtime's dim is what the op makes, whatever value the binding gives them), or a
    /// symbol a broadcast or quotient rule derives from one, is not compared; nor is an
    /// element count that mentions one.
    pub fn shape_conflicts(&self, bindings: &Bindings, varying: &[SymbolId]) -> Vec<ShapeConflict> {
        let mut moving: Vec<SymbolId> = varying.to_vec();
        loop {
            let before = moving.len();
            let mentions =
                |e: &crate::dim::Expr, m: &[SymbolId]| e.symbols().iter().any(|s| m.contains(s));
            for (s, a, b) in self.symbol_broadcasts() {
                if !moving.contains(s) && (mentions(a, &moving) || mentions(b, &moving)) {
                    moving.push(*s);
                }
            }
            for (s, q) in self.symbol_quotients() {
                if !moving.contains(s) && mentions(&q.num, &moving) {
                    moving.push(*s);
                }
            }
            if moving.len() == before {
                break;
            }
        }
        let mut out = Vec::new();
        for (id, node) in self.nodes().iter_enumerated() {
            let at = At {
                graph: self,
                node,
                bindings,
                moving: &moving,
            };
            for (j, kind) in at.conflicts() {
                if let Some(&output) = node.outputs.get(j) {
                    out.push(ShapeConflict {
                        node: id,
                        output,
                        kind,
                    });
                }
            }
        }
        out
    }
}

/// One node at one binding.
struct At<'a> {
    graph: &'a Graph,
    node: &'a Node,
    bindings: &'a Bindings,
    /// Symbols whose dims follow the data (not compared).
    moving: &'a [SymbolId],
}

impl At<'_> {
    fn dims_of(&self, t: TensorId) -> Option<Vec<u64>> {
        let tensor = self.graph.tensors().get(t)?;
        tensor
            .shape
            .iter()
            .map(|d| d.eval(self.bindings).ok())
            .collect()
    }

    /// The dims of every present input (`None` when one does not evaluate).
    fn present(&self) -> Option<Vec<Vec<u64>>> {
        self.node
            .inputs
            .iter()
            .flatten()
            .map(|&t| self.dims_of(t))
            .collect()
    }

    fn input(&self, i: usize) -> Option<Vec<u64>> {
        self.dims_of(self.node.inputs.get(i).copied().flatten()?)
    }

    fn output(&self, j: usize) -> Option<Vec<u64>> {
        self.dims_of(*self.node.outputs.get(j)?)
    }

    fn ints(&self, name: &str, pos: usize) -> Option<Vec<i64>> {
        if let Some(a) = self.node.attr(name) {
            return a.as_ints().map(<[i64]>::to_vec);
        }
        let t = self.node.inputs.get(pos).copied().flatten()?;
        self.graph.tensors().get(t)?.int_value.clone()
    }

    fn int(&self, name: &str) -> Option<i64> {
        self.node.attr(name).and_then(|a| a.as_int())
    }

    /// `(output position, conflict)` for each output the rule contradicts.
    fn conflicts(&self) -> Vec<(usize, ConflictKind)> {
        let op = self.node.op.as_str();
        let mut out = Vec::new();
        let mut compare = |j: usize, made: Vec<u64>, by_count: bool| {
            let Some(declared) = self.output(j) else {
                return;
            };
            // Which declared dims follow the data.
            let free: Vec<bool> = self
                .node
                .outputs
                .get(j)
                .and_then(|&t| self.graph.tensors().get(t))
                .map(|t| {
                    t.shape
                        .iter()
                        .map(|d| d.symbols().iter().any(|s| self.moving.contains(s)))
                        .collect()
                })
                .unwrap_or_default();
            let count = |d: &[u64]| d.iter().try_fold(1u64, |a, &b| a.checked_mul(b));
            let same = if by_count {
                free.iter().any(|&f| f) || count(&declared) == count(&made)
            } else {
                declared.len() == made.len()
                    && declared
                        .iter()
                        .zip(&made)
                        .zip(free.iter().chain(std::iter::repeat(&false)))
                        .all(|((d, m), &f)| f || d == m)
            };
            if !same {
                out.push((j, ConflictKind::Dims { declared, made }));
            }
        };
        let present = self.node.inputs.iter().flatten().count();
        let first_only = ELEMENTWISE_FIRST_OPS.contains(&op)
            || ROW_WISE_OPS.contains(&op)
            || op == "BatchNormalization"
            || (ELEMENTWISE_OPS.contains(&op) && present == 1);
        if first_only {
            if let Some(x) = self.input(0) {
                compare(0, x, true);
            }
            return out;
        }
        if ELEMENTWISE_OPS.contains(&op) {
            // Inputs that do not broadcast are no shape this rule can state: left alone, as
            // validation leaves them.
            if let Some(made) = self.broadcast() {
                compare(0, made, true);
            }
            return out;
        }
        match op {
            "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" | "Identity" => {
                if let Some(x) = self.input(0) {
                    compare(0, x, true);
                }
            }
            "Transpose" => {
                if let Some(x) = self.input(0) {
                    let perm: Vec<i64> = self
                        .node
                        .attr("perm")
                        .and_then(|a| a.as_ints())
                        .map_or_else(|| (0..x.len() as i64).rev().collect(), <[i64]>::to_vec);
                    let made: Option<Vec<u64>> = perm
                        .iter()
                        .map(|&p| x.get(usize::try_from(p).ok()?).copied())
                        .collect();
                    if let Some(made) = made.filter(|m| m.len() == x.len()) {
                        compare(0, made, false);
                    }
                }
            }
            "Slice" => {
                if let Some(made) = self.slice() {
                    compare(0, made, false);
                }
            }
            "Concat" => {
                if let Some(made) = self.concat() {
                    compare(0, made, false);
                }
            }
            "Split" => {
                for (j, made) in self.split().into_iter().enumerate() {
                    compare(j, made, false);
                }
            }
            "Conv" | "MaxPool" | "AveragePool" | "LpPool" => {
                if let Some(Err(kind)) = self.window() {
                    return vec![(0, kind)];
                }
            }
            _ => {}
        }
        out
    }

    /// ONNX multidirectional broadcasting of the present inputs (`None` when they do not
    /// broadcast).
    fn broadcast(&self) -> Option<Vec<u64>> {
        let shapes = self.present()?;
        let rank = shapes.iter().map(Vec::len).max()?;
        let mut made = vec![1u64; rank];
        for s in &shapes {
            let pad = rank - s.len();
            for (k, &d) in s.iter().enumerate() {
                let m = &mut made[pad + k];
                if d == *m || d == 1 {
                    continue;
                }
                if *m == 1 {
                    *m = d;
                } else {
                    return None;
                }
            }
        }
        Some(made)
    }

    fn slice(&self) -> Option<Vec<u64>> {
        let x = self.input(0)?;
        let starts = self.ints("starts", 1)?;
        let ends = self.ints("ends", 2)?;
        let given = |name: &str, pos: usize| {
            self.node.attr(name).is_some() || self.node.inputs.get(pos).copied().flatten().is_some()
        };
        let axes = match self.ints("axes", 3) {
            Some(a) => a,
            None if given("axes", 3) => return None,
            None => (0..starts.len() as i64).collect(),
        };
        let steps = match self.ints("steps", 4) {
            Some(s) => s,
            None if given("steps", 4) => return None,
            None => vec![1; starts.len()],
        };
        if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
            return None;
        }
        let mut made = x.clone();
        for k in 0..starts.len() {
            let a = axis_index(axes[k], x.len())?;
            let dim = i64::try_from(x[a]).ok()?;
            let step = steps[k];
            if step == 0 {
                return None;
            }
            let clamp = |v: i64, lo: i64, hi: i64| v.max(lo).min(hi);
            let norm = |v: i64| if v < 0 { v.saturating_add(dim) } else { v };
            let (s, e) = if step > 0 {
                (clamp(norm(starts[k]), 0, dim), clamp(norm(ends[k]), 0, dim))
            } else {
                (
                    clamp(norm(starts[k]), 0, dim - 1),
                    clamp(norm(ends[k]), -1, dim - 1),
                )
            };
            let n = if step > 0 {
                if e > s { (e - s + step - 1) / step } else { 0 }
            } else if s > e {
                (s - e + (-step) - 1) / (-step)
            } else {
                0
            };
            made[a] = u64::try_from(n).ok()?;
        }
        Some(made)
    }

    fn concat(&self) -> Option<Vec<u64>> {
        let inputs = self.present()?;
        let first = inputs.first()?;
        let a = axis_index(self.int("axis")?, first.len())?;
        let mut made = first.clone();
        made[a] = inputs
            .iter()
            .try_fold(0u64, |s, d| s.checked_add(*d.get(a)?))?;
        Some(made)
    }

    fn split(&self) -> Vec<Vec<u64>> {
        let Some(x) = self.input(0) else {
            return Vec::new();
        };
        let Some(a) = axis_index(self.int("axis").unwrap_or(0), x.len()) else {
            return Vec::new();
        };
        let n = self.node.outputs.len() as u64;
        let sizes: Vec<u64> = match self.ints("split", 1) {
            Some(s) => match s.iter().map(|&v| u64::try_from(v).ok()).collect() {
                Some(s) => s,
                None => return Vec::new(),
            },
            None if self.node.inputs.get(1).copied().flatten().is_some() => return Vec::new(),
            None if n == 0 => return Vec::new(),
            None => {
                let chunk = x[a].div_ceil(n);
                (0..n)
                    .map(|k| chunk.min(x[a].saturating_sub(k * chunk)))
                    .collect()
            }
        };
        sizes
            .into_iter()
            .map(|s| {
                let mut d = x.clone();
                d[a] = s;
                d
            })
            .collect()
    }

    /// A convolution's or pooling's output dims (NCHW...), floor mode, explicit or no pads.
    fn window(&self) -> Option<Result<Vec<u64>, ConflictKind>> {
        let x = self.input(0)?;
        if x.len() < 3 {
            return None;
        }
        let spatial = x.len() - 2;
        let pad = self.node.attr("auto_pad").and_then(|a| match a {
            crate::graph::Attr::Str(s) => Some(s.as_str()),
            _ => None,
        });
        if !matches!(pad, None | Some("NOTSET") | Some("VALID")) {
            return None;
        }
        if self.int("ceil_mode").unwrap_or(0) != 0 {
            return None;
        }
        let conv = self.node.op == "Conv";
        let kernel: Vec<u64> = match self.ints("kernel_shape", usize::MAX) {
            Some(k) => k
                .iter()
                .map(|&v| u64::try_from(v).ok())
                .collect::<Option<_>>()?,
            None if conv => self.input(1)?.get(2..)?.to_vec(),
            None => return None,
        };
        if kernel.len() != spatial {
            return None;
        }
        let ones = vec![1i64; spatial];
        let strides = self
            .ints("strides", usize::MAX)
            .unwrap_or_else(|| ones.clone());
        let dilations = self.ints("dilations", usize::MAX).unwrap_or(ones);
        let pads = if pad == Some("VALID") {
            vec![0; 2 * spatial]
        } else {
            self.ints("pads", usize::MAX)
                .unwrap_or(vec![0; 2 * spatial])
        };
        if strides.len() != spatial || dilations.len() != spatial || pads.len() != 2 * spatial {
            return None;
        }
        let channels = if conv {
            self.input(1)?.first().copied()?
        } else {
            x[1]
        };
        let mut made = vec![x[0], channels];
        for i in 0..spatial {
            let input = i64::try_from(x[i + 2]).ok()?;
            let k = i64::try_from(kernel[i]).ok()?;
            let (s, d) = (strides[i], dilations[i]);
            if s <= 0 || d <= 0 {
                return None;
            }
            let span = input
                .checked_add(pads[i])?
                .checked_add(pads[i + spatial])?
                .checked_sub(d.checked_mul(k.checked_sub(1)?)?)?
                .checked_sub(1)?;
            let n = span.div_euclid(s) + 1;
            if n < 1 {
                return Some(Err(ConflictKind::EmptyWindow {
                    axis: i + 2,
                    input: x[i + 2],
                }));
            }
            made.push(u64::try_from(n).ok()?);
        }
        Some(Ok(made))
    }
}
