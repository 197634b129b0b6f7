//! A tiny candle-like engine that hands its memory to memplan.
//!
//! The engine records ops as a model is built (`Model::matmul`, `Model::gelu`, ...), as
//! candle's tensors or burn's operation lists do; its graph is an op list with its own ids,
//! and no op is named as ONNX names it. memplan reads that list through
//! [`memplan::ir::GraphSource`]: the engine declares what each op may share (a reshape is a
//! view, a narrow a view at an offset, elementwise ops may write over a dead input, softmax
//! works row by row in place) and what scratch its matmul needs (a transposed copy of the
//! right operand). Then [`Runtime`] runs the plan in one buffer the engine owns, with the
//! model's input and output in the engine's own buffers, bound to the plan's caller-owned
//! tensors, and every kernel borrowing its inputs and outputs from the arena.
//!
//! [`Model::reference`] computes the same model with one fresh vector per tensor: the plan's
//! aliasing must not change a single bit of the result.

use std::borrow::Cow;

use memplan::ir::{DType, GraphSource, Imported, NodeDecl, TensorDecl, TensorKind};
use memplan::layout::{HostArena, Layout, LayoutOptions, Placement, as_elements, as_elements_mut};
use memplan::planner::{AliasKind, Plan, PlanOptions, plan_source, verify_plan};

/// A tensor of a [`Model`]: its position in the op list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct T(usize);

/// What made a tensor.
#[derive(Clone, Debug)]
enum Op {
    Input,
    Weight(Vec<f32>),
    /// `[m, k] x [k, n]`.
    MatMul(T, T),
    Add(T, T),
    Gelu(T),
    /// Row-wise softmax over the last dimension.
    Softmax(T),
    /// Rows `start..start + len` of a 2-D tensor.
    Narrow(T, usize),
    Reshape(T),
}

#[derive(Clone, Debug)]
struct Entry {
    name: String,
    op: Op,
    shape: Vec<usize>,
}

/// An engine's model: an op list, built in order.
#[derive(Clone, Debug, Default)]
pub struct Model {
    entries: Vec<Entry>,
    outputs: Vec<T>,
}

impl Model {
    fn push(&mut self, name: &str, op: Op, shape: Vec<usize>) -> T {
        self.entries.push(Entry {
            name: name.to_owned(),
            op,
            shape,
        });
        T(self.entries.len() - 1)
    }

    fn shape(&self, t: T) -> &[usize] {
        &self.entries[t.0].shape
    }

    /// A model input of `shape`.
    pub fn input(&mut self, name: &str, shape: &[usize]) -> T {
        self.push(name, Op::Input, shape.to_vec())
    }

    /// A weight with its values.
    pub fn weight(&mut self, name: &str, shape: &[usize], values: Vec<f32>) -> T {
        assert_eq!(values.len(), shape.iter().product::<usize>(), "{name}");
        self.push(name, Op::Weight(values), shape.to_vec())
    }

    /// `a @ b` for 2-D `a` and `b`.
    pub fn matmul(&mut self, name: &str, a: T, b: T) -> T {
        let (m, k, n) = (self.shape(a)[0], self.shape(a)[1], self.shape(b)[1]);
        assert_eq!(k, self.shape(b)[0], "{name}: inner dimensions");
        self.push(name, Op::MatMul(a, b), vec![m, n])
    }

    /// `a + b`, same shapes.
    pub fn add(&mut self, name: &str, a: T, b: T) -> T {
        assert_eq!(self.shape(a), self.shape(b), "{name}");
        let shape = self.shape(a).to_vec();
        self.push(name, Op::Add(a, b), shape)
    }

    /// GELU (tanh approximation), elementwise.
    pub fn gelu(&mut self, name: &str, a: T) -> T {
        let shape = self.shape(a).to_vec();
        self.push(name, Op::Gelu(a), shape)
    }

    /// Softmax over the last dimension.
    pub fn softmax(&mut self, name: &str, a: T) -> T {
        let shape = self.shape(a).to_vec();
        self.push(name, Op::Softmax(a), shape)
    }

    /// Rows `start..start + len` of 2-D `a`.
    pub fn narrow(&mut self, name: &str, a: T, start: usize, len: usize) -> T {
        let cols = self.shape(a)[1];
        assert!(start + len <= self.shape(a)[0], "{name}");
        self.push(name, Op::Narrow(a, start), vec![len, cols])
    }

    /// `a` with another shape of as many elements.
    pub fn reshape(&mut self, name: &str, a: T, shape: &[usize]) -> T {
        assert_eq!(
            shape.iter().product::<usize>(),
            self.shape(a).iter().product::<usize>(),
            "{name}"
        );
        self.push(name, Op::Reshape(a), shape.to_vec())
    }

    /// Marks `t` as a model output.
    pub fn output(&mut self, t: T) {
        self.outputs.push(t);
    }

    fn elements(&self, t: T) -> usize {
        self.shape(t).iter().product()
    }

    /// The model computed with one fresh vector per tensor: the result the plan must give.
    pub fn reference(&self, input: &[f32]) -> Vec<Vec<f32>> {
        let mut values: Vec<Vec<f32>> = Vec::with_capacity(self.entries.len());
        for (i, e) in self.entries.iter().enumerate() {
            let v = match &e.op {
                Op::Input => input.to_vec(),
                Op::Weight(w) => w.clone(),
                Op::MatMul(a, b) => {
                    let (m, k, n) = (self.shape(*a)[0], self.shape(*a)[1], self.shape(*b)[1]);
                    let mut out = vec![0.0; m * n];
                    let mut bt = vec![0.0; k * n];
                    transpose(&values[b.0], k, n, &mut bt);
                    matmul(&values[a.0], &bt, m, k, n, &mut out);
                    out
                }
                Op::Add(a, b) => values[a.0]
                    .iter()
                    .zip(&values[b.0])
                    .map(|(x, y)| x + y)
                    .collect(),
                Op::Gelu(a) => values[a.0].iter().map(|&x| gelu(x)).collect(),
                Op::Softmax(a) => {
                    let mut v = values[a.0].clone();
                    softmax_rows(&mut v, *e.shape.last().unwrap_or(&1));
                    v
                }
                Op::Narrow(a, start) => {
                    let cols = e.shape[1];
                    values[a.0][start * cols..(start + e.shape[0]) * cols].to_vec()
                }
                Op::Reshape(a) => values[a.0].clone(),
            };
            debug_assert_eq!(v.len(), self.elements(T(i)));
            values.push(v);
        }
        self.outputs.iter().map(|o| values[o.0].clone()).collect()
    }
}

/// memplan reads the model through this: tensors, and nodes in the order they were built.
impl GraphSource for Model {
    type Tensor = T;
    type Node = T;

    fn name(&self) -> Cow<'_, str> {
        "model".into()
    }

    fn tensors(&self) -> impl Iterator<Item = T> + '_ {
        (0..self.entries.len()).map(T)
    }

    fn tensor(&self, t: T) -> TensorDecl<'_> {
        let e = &self.entries[t.0];
        let kind = match e.op {
            Op::Input => TensorKind::Input,
            Op::Weight(_) => TensorKind::Weight,
            _ if self.outputs.contains(&t) => TensorKind::Output,
            _ => TensorKind::Activation,
        };
        TensorDecl::new(
            e.name.as_str(),
            DType::F32,
            e.shape.iter().map(|&d| d as u64),
            kind,
        )
    }

    fn nodes(&self) -> impl Iterator<Item = T> + '_ {
        self.tensors()
            .filter(|t| !matches!(self.entries[t.0].op, Op::Input | Op::Weight(_)))
    }

    fn node(&self, t: T) -> NodeDecl<'_, T> {
        let e = &self.entries[t.0];
        let name = e.name.as_str();
        match e.op {
            // Scratch: the kernel transposes its right operand first.
            Op::MatMul(a, b) => {
                NodeDecl::new(name, "matmul", [a, b], [t]).with_scratch(4 * self.elements(b) as u64)
            }
            Op::Add(a, b) => NodeDecl::new(name, "add", [a, b], [t]).in_place(0, &[0, 1]),
            Op::Gelu(a) => NodeDecl::new(name, "gelu", [a], [t]).in_place(0, &[0]),
            Op::Softmax(a) => NodeDecl::new(name, "softmax", [a], [t]).in_place(0, &[0]),
            Op::Narrow(a, start) => {
                let offset = 4 * start * self.shape(a)[1];
                NodeDecl::new(name, "narrow", [a], [t]).view(0, 0, offset as u64)
            }
            Op::Reshape(a) => NodeDecl::new(name, "reshape", [a], [t]).view(0, 0, 0),
            Op::Input | Op::Weight(_) => unreachable!("inputs and weights are not nodes"),
        }
    }
}

/// Why a model could not be planned or run.
#[derive(Debug)]
pub enum Error {
    /// memplan's answer.
    Memplan(String),
    /// The engine's own input was wrong.
    Input(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Memplan(e) | Error::Input(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for Error {}

fn mp(e: impl std::fmt::Display) -> Error {
    Error::Memplan(e.to_string())
}

/// A model planned for memory: the plan, its layout, and the id map.
#[derive(Debug)]
pub struct Runtime {
    model: Model,
    ids: Imported<T, T>,
    plan: Plan,
    layout: Layout,
}

impl Runtime {
    /// Plans `model`, its input and outputs left in the engine's own buffers.
    pub fn new(model: Model) -> Result<Runtime, Error> {
        let options = PlanOptions::default()
            .with_inputs_in_arena(false)
            .with_outputs_in_arena(false);
        let (ids, plan) = plan_source(&model, &options).map_err(mp)?;
        verify_plan(ids.graph(), &plan).map_err(mp)?;
        let layout = Layout::new(ids.graph(), &plan, &LayoutOptions::default()).map_err(mp)?;
        Ok(Runtime {
            model,
            ids,
            plan,
            layout,
        })
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    fn id(&self, t: T) -> Result<memplan::ir::TensorId, Error> {
        self.ids
            .tensor_id(t)
            .ok_or_else(|| Error::Memplan(format!("{t:?} is not in the plan")))
    }

    /// One line per tensor: where the plan puts it.
    pub fn describe(&self) -> Vec<String> {
        self.model
            .tensors()
            .filter_map(|t| {
                let id = self.ids.tensor_id(t)?;
                let place = self.layout.placement(id)?.describe();
                Some(format!("{:<10} {place}", self.model.entries[t.0].name))
            })
            .collect()
    }

    /// Runs the model on `input` in `memory`, a buffer the engine owns of at least
    /// [`Layout::buffer_bytes`] bytes aligned to [`Layout::buffer_alignment`]; the input and
    /// outputs live in the engine's own buffers, bound to the plan's caller-owned tensors.
    pub fn run(&self, memory: &mut [u8], input: &[f32]) -> Result<Vec<Vec<f32>>, Error> {
        let mut arena = HostArena::over(self.layout.clone(), memory).map_err(mp)?;
        // The engine's own input and output buffers (its I/O staging memory).
        let mut io: Vec<(memplan::ir::TensorId, Vec<u8>)> = Vec::new();
        for (id, bytes, _) in self.layout.caller_tensors() {
            io.push((id, vec![0u8; bytes as usize + 4]));
        }
        for (id, buf) in &mut io {
            let len = self
                .layout
                .caller_tensors()
                .find(|c| c.0 == *id)
                .map_or(0, |c| c.1);
            arena.bind(*id, aligned(buf, len as usize, 4)).map_err(mp)?;
        }
        // Load: weights into the weight region, the input into its buffer.
        for (i, e) in self.model.entries.iter().enumerate() {
            match &e.op {
                Op::Weight(w) => arena.upload(self.id(T(i))?, w).map_err(mp)?,
                Op::Input if input.len() == self.model.elements(T(i)) => {
                    arena.upload(self.id(T(i))?, input).map_err(mp)?;
                }
                Op::Input => {
                    return Err(Error::Input(format!(
                        "input `{}` has {} values",
                        e.name,
                        input.len()
                    )));
                }
                _ => {}
            }
        }
        // Run the nodes in the plan's order.
        for &node in &self.plan.schedule {
            let t = self
                .ids
                .node_of(node)
                .ok_or_else(|| Error::Memplan(format!("node {node} is not the engine's")))?;
            self.step(&mut arena, t)?;
        }
        self.model
            .outputs
            .iter()
            .map(|&o| arena.download::<f32>(self.id(o)?).map_err(mp))
            .collect()
    }

    /// Runs the op that makes `t`, as the plan placed it: a view is already there, an
    /// in-place op computes over its output, any other reads its inputs into its output.
    fn step(&self, arena: &mut HostArena<&mut [u8]>, t: T) -> Result<(), Error> {
        let out = self.id(t)?;
        let e = &self.model.entries[t.0];
        let alias = match self.layout.placement(out) {
            Some(Placement::Region(slot)) => slot.alias.zip(slot.alias_of),
            _ => None,
        };
        let in_place_over =
            |x: T| -> Result<bool, Error> { Ok(alias == Some((AliasKind::InPlace, self.id(x)?))) };
        match e.op {
            Op::Input | Op::Weight(_) => {}
            Op::Reshape(a) | Op::Narrow(a, _) if matches!(alias, Some((AliasKind::View, p)) if p == self.id(a)?) =>
                {}
            Op::Reshape(a) | Op::Narrow(a, _) => {
                let start = match e.op {
                    Op::Narrow(_, s) => s * e.shape[1],
                    _ => 0,
                };
                let (r, mut w) = arena
                    .split_typed::<f32>(&[self.id(a)?], &[out])
                    .map_err(mp)?;
                let n = w[0].len();
                w[0].copy_from_slice(&r[0][start..start + n]);
            }
            Op::Gelu(a) | Op::Softmax(a) => {
                let cols = *e.shape.last().unwrap_or(&1);
                let f = |v: &mut [f32]| match e.op {
                    Op::Gelu(_) => v.iter_mut().for_each(|x| *x = gelu(*x)),
                    _ => softmax_rows(v, cols),
                };
                if in_place_over(a)? {
                    f(arena.view_mut::<f32>(out).map_err(mp)?);
                } else {
                    let (r, mut w) = arena
                        .split_typed::<f32>(&[self.id(a)?], &[out])
                        .map_err(mp)?;
                    w[0].copy_from_slice(r[0]);
                    f(w[0]);
                }
            }
            Op::Add(a, b) => {
                let other = if in_place_over(a)? {
                    Some(b)
                } else if in_place_over(b)? {
                    Some(a)
                } else {
                    None
                };
                match other {
                    Some(o) => {
                        let (r, mut w) = arena
                            .split_typed::<f32>(&[self.id(o)?], &[out])
                            .map_err(mp)?;
                        w[0].iter_mut().zip(r[0]).for_each(|(x, y)| *x += y);
                    }
                    None => {
                        let (r, mut w) = arena
                            .split_typed::<f32>(&[self.id(a)?, self.id(b)?], &[out])
                            .map_err(mp)?;
                        for ((x, y), z) in r[0].iter().zip(r[1]).zip(w[0].iter_mut()) {
                            *z = x + y;
                        }
                    }
                }
            }
            Op::MatMul(a, b) => {
                // The scratch is bytes (a kernel's workspace); the kernel uses it as `f32`s.
                let scratch = self
                    .ids
                    .scratch(t)
                    .ok_or_else(|| Error::Memplan(format!("{} has no scratch", e.name)))?;
                let (m, k, n) = (self.model.shape(a)[0], self.model.shape(a)[1], e.shape[1]);
                let mut s = arena
                    .split(&[self.id(a)?, self.id(b)?], &[out, scratch])
                    .map_err(mp)?;
                let [o, bt] = &mut s.writes[..] else {
                    return Err(Error::Memplan("two writes asked, two given".into()));
                };
                let bt =
                    as_elements_mut::<f32>(bt).ok_or_else(|| Error::Memplan("scratch".into()))?;
                transpose(f32s(s.reads[1])?, k, n, bt);
                let o = as_elements_mut::<f32>(o).ok_or_else(|| Error::Memplan("output".into()))?;
                matmul(f32s(s.reads[0])?, bt, m, k, n, o);
            }
        }
        Ok(())
    }
}

/// Bytes as the `f32`s a kernel reads.
fn f32s(b: &[u8]) -> Result<&[f32], Error> {
    as_elements::<f32>(b).ok_or_else(|| Error::Memplan("not a whole number of f32s".into()))
}

/// `len` bytes of `buf` from its first byte aligned to `align`.
pub fn aligned(buf: &mut [u8], len: usize, align: usize) -> &mut [u8] {
    let pad = buf.as_ptr().align_offset(align);
    &mut buf[pad..pad + len]
}

fn transpose(b: &[f32], k: usize, n: usize, out: &mut [f32]) {
    for i in 0..k {
        for j in 0..n {
            out[j * k + i] = b[i * n + j];
        }
    }
}

fn matmul(a: &[f32], bt: &[f32], m: usize, k: usize, n: usize, out: &mut [f32]) {
    for i in 0..m {
        for j in 0..n {
            let row = &a[i * k..(i + 1) * k];
            let col = &bt[j * k..(j + 1) * k];
            out[i * n + j] = row.iter().zip(col).map(|(x, y)| x * y).sum();
        }
    }
}

fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + (0.797_884_6 * (x + 0.044_715 * x * x * x)).tanh())
}

fn softmax_rows(v: &mut [f32], cols: usize) {
    for row in v.chunks_mut(cols.max(1)) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        for x in row.iter_mut() {
            *x = (*x - max).exp();
            sum += *x;
        }
        row.iter_mut().for_each(|x| *x /= sum);
    }
}

/// A small transformer-like block: `softmax(gelu(x W1) W2 + x)`, its first rows, flattened.
pub fn block(seq: usize, d: usize, hidden: usize, seed: u32) -> Model {
    let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    let mut values = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                ((state >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.2
            })
            .collect()
    };
    let mut m = Model::default();
    let x = m.input("x", &[seq, d]);
    let w1 = m.weight("w1", &[d, hidden], values(d * hidden));
    let w2 = m.weight("w2", &[hidden, d], values(hidden * d));
    let h = m.matmul("up", x, w1);
    let g = m.gelu("gelu", h);
    let o = m.matmul("down", g, w2);
    let r = m.add("residual", o, x);
    let s = m.softmax("softmax", r);
    let first = m.narrow("first", s, 0, seq / 2);
    let last = m.narrow("last", s, seq / 2, seq - seq / 2);
    let flat = m.reshape("flat", last, &[(seq - seq / 2) * d]);
    let sum = m.add("sum", first, first);
    m.output(flat);
    m.output(sum);
    m
}
