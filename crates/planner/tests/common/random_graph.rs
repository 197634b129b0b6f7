//! Random graphs from bytes, written to hit the risky corners of aliasing: views (Reshape,
//! Identity, same-dtype Cast), Slices and Splits (sub-byte dtypes too), broadcasting,
//! repeated inputs (`Mul(x, x)`), multi-output ops, graph outputs read again later, graph
//! inputs read late, training-mode BatchNormalization, and If nodes whose branches capture
//! outer values. Shared by the property test and
//! the cargo-fuzz target (`crates/planner/fuzz`); every byte string gives a valid graph.

use memplan_ir::{Attr, DType, Graph, GraphBuilder, TensorId, TensorKind};
use memplan_planner::{PlanOptions, ScheduleMode};

const DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::I4, DType::U8, DType::U4];

struct Bytes<'a>(&'a [u8], usize);

impl Bytes<'_> {
    fn next(&mut self) -> u8 {
        let b = self.0.get(self.1).copied().unwrap_or(0);
        self.1 += 1;
        b
    }
    fn below(&mut self, n: usize) -> usize {
        usize::from(self.next()) % n.max(1)
    }
    fn done(&self) -> bool {
        self.1 >= self.0.len()
    }
}

/// A 2-D value: its id, dtype and dims.
#[derive(Clone, Copy)]
struct Val {
    t: TensorId,
    dtype: DType,
    rows: i64,
    cols: i64,
}

/// A valid graph built from `bytes` (at most 40 nodes).
pub fn graph_from_bytes(bytes: &[u8]) -> Graph {
    let mut r = Bytes(bytes, 0);
    let mut g = GraphBuilder::new("random");
    let dtype = DTYPES[r.below(DTYPES.len())];
    let rows = 1 + r.below(4) as i64;
    let cols = 1 + r.below(9) as i64;
    let x = g.input("x", dtype, [rows, cols]);
    let mut vals = vec![Val {
        t: x,
        dtype,
        rows,
        cols,
    }];
    let mut n = 0usize;
    while !r.done() && n < 40 {
        n += 1;
        let v = vals[r.below(vals.len())];
        let shape = |rows: i64, cols: i64| [rows, cols];
        let new = |g: &mut GraphBuilder, name: String, rows: i64, cols: i64| Val {
            t: g.tensor(name, v.dtype, shape(rows, cols), TensorKind::Activation),
            dtype: v.dtype,
            rows,
            cols,
        };
        match r.below(13) {
            0 => {
                // Elementwise, or row-wise (a LayerNormalization reading its data as its
                // scale too, which must keep it from writing over that data).
                let t = match r.below(3) {
                    0 => g.op("Relu", &[v.t], v.dtype, shape(v.rows, v.cols)),
                    1 => g.op("Softmax", &[v.t], v.dtype, shape(v.rows, v.cols)),
                    _ => g.op(
                        "LayerNormalization",
                        &[v.t, v.t],
                        v.dtype,
                        shape(v.rows, v.cols),
                    ),
                };
                vals.push(Val { t, ..v });
            }
            1 => {
                // Repeated input.
                let t = g.op("Mul", &[v.t, v.t], v.dtype, shape(v.rows, v.cols));
                vals.push(Val { t, ..v });
            }
            2 => {
                // Broadcast: a row vector or a scalar against v, either operand order.
                let b = if r.below(2) == 0 { [1, v.cols] } else { [1, 1] };
                let w = g.input(format!("b{n}"), v.dtype, b);
                let ins = if r.below(2) == 0 { [v.t, w] } else { [w, v.t] };
                let t = g.op("Add", &ins, v.dtype, shape(v.rows, v.cols));
                vals.push(Val { t, ..v });
            }
            3 => {
                let t = g.op("Reshape", &[v.t], v.dtype, shape(v.cols, v.rows));
                vals.push(Val {
                    t,
                    rows: v.cols,
                    cols: v.rows,
                    ..v
                });
            }
            4 => {
                let op = if r.below(2) == 0 { "Identity" } else { "Cast" };
                let t = g.op(op, &[v.t], v.dtype, shape(v.rows, v.cols));
                vals.push(Val { t, ..v });
            }
            5 if v.rows > 1 || v.cols > 1 => {
                // Slice along either axis with constant bounds.
                let axis = if v.rows > 1 { r.below(2) } else { 1 };
                let dim = if axis == 0 { v.rows } else { v.cols };
                let s = r.below(dim as usize) as i64;
                let e = s + 1 + r.below((dim - s) as usize) as i64;
                let starts = g.int_constant(format!("s{n}"), &[s]);
                let ends = g.int_constant(format!("e{n}"), &[e]);
                let axes = g.int_constant(format!("a{n}"), &[axis as i64]);
                let (rr, cc) = if axis == 0 {
                    (e - s, v.cols)
                } else {
                    (v.rows, e - s)
                };
                let out = new(&mut g, format!("slice{n}"), rr, cc);
                g.node(
                    format!("slice{n}"),
                    "Slice",
                    &[Some(v.t), Some(starts), Some(ends), Some(axes)],
                    &[out.t],
                );
                vals.push(out);
            }
            6 if v.rows > 1 || v.cols > 1 => {
                // Split in two along either axis (sub-byte dtypes at odd elements too).
                let axis = if v.rows > 1 && v.cols > 1 {
                    r.below(2)
                } else if v.rows > 1 {
                    0
                } else {
                    1
                };
                let dim = if axis == 0 { v.rows } else { v.cols };
                let k = 1 + r.below((dim - 1) as usize) as i64;
                let (a, b) = if axis == 0 {
                    ((k, v.cols), (dim - k, v.cols))
                } else {
                    ((v.rows, k), (v.rows, dim - k))
                };
                let p = new(&mut g, format!("p{n}"), a.0, a.1);
                let q = new(&mut g, format!("q{n}"), b.0, b.1);
                g.node(format!("split{n}"), "Split", &[Some(v.t)], &[p.t, q.t]);
                g.attr("axis", Attr::Int(axis as i64));
                g.attr("split", Attr::Ints(vec![k, dim - k]));
                vals.push(p);
                vals.push(q);
            }
            7 => {
                let t = g.op("Transpose", &[v.t], v.dtype, shape(v.cols, v.rows));
                vals.push(Val {
                    t,
                    rows: v.cols,
                    cols: v.rows,
                    ..v
                });
            }
            8 => {
                // A multi-output opaque op.
                let a = new(&mut g, format!("m{n}a"), v.rows, v.cols);
                let b = new(&mut g, format!("m{n}b"), v.rows, v.cols);
                g.node(format!("multi{n}"), "TopK", &[Some(v.t)], &[a.t, b.t]);
                vals.push(a);
                vals.push(b);
            }
            9 => {
                // BatchNormalization, sometimes in training mode.
                let params: Vec<Option<TensorId>> = (0..4)
                    .map(|i| Some(g.weight(format!("bn{n}_{i}"), v.dtype, [v.cols])))
                    .collect();
                let out = new(&mut g, format!("bn{n}"), v.rows, v.cols);
                let mut ins = vec![Some(v.t)];
                ins.extend(params);
                g.node(format!("bn{n}"), "BatchNormalization", &ins, &[out.t]);
                g.attr("training_mode", Attr::Int(r.below(2) as i64));
                vals.push(out);
            }
            12 => {
                // Control flow: an If whose branches capture `v` (an implicit input that must
                // stay live until the If runs) and make temporaries (its workspace).
                let name = g.graph().tensors()[v.t].name.clone();
                let branch = |depth: usize| {
                    let mut b = GraphBuilder::new("branch");
                    let bx = b.input(name.clone(), v.dtype, shape(v.rows, v.cols));
                    let mut t = bx;
                    for _ in 0..=depth {
                        t = b.op("Sin", &[t], v.dtype, shape(v.rows, v.cols));
                    }
                    b.mark_output(t);
                    b.build().expect("a valid branch")
                };
                let cond = g.input(format!("cond{n}"), DType::Bool, [1]);
                let out = new(&mut g, format!("if{n}"), v.rows, v.cols);
                g.node(format!("if{n}"), "If", &[Some(cond)], &[out.t]);
                g.body("then_branch", branch(r.below(3)));
                g.body("else_branch", branch(r.below(3)));
                vals.push(out);
            }
            10 => {
                // Mark a value as a graph output; later nodes may still read it.
                let t = vals[r.below(vals.len())].t;
                if g.graph().tensors()[t].kind == TensorKind::Activation {
                    g.mark_output(t);
                }
            }
            _ => {
                // Two values of any shapes into one opaque op (a graph input read late), or a
                // real Concat along rows when their columns and dtypes agree (its inputs
                // may be written into its output, sub-byte rows at odd elements too).
                let w = vals[r.below(vals.len())];
                if w.dtype == v.dtype && w.cols == v.cols && r.below(2) == 0 {
                    let t = g.op(
                        "Concat",
                        &[v.t, w.t],
                        v.dtype,
                        shape(v.rows + w.rows, v.cols),
                    );
                    g.attr("axis", Attr::Int(0));
                    vals.push(Val {
                        t,
                        rows: v.rows + w.rows,
                        ..v
                    });
                    continue;
                }
                // One row, as the value is tracked (a Slice may read its axis 1).
                let t = g.op(
                    "Concat",
                    &[v.t, w.t],
                    v.dtype,
                    [1, v.rows * v.cols + w.rows * w.cols],
                );
                vals.push(Val {
                    t,
                    rows: 1,
                    cols: v.rows * v.cols + w.rows * w.cols,
                    ..v
                });
            }
        }
    }
    let last = vals.last().map_or(x, |v| v.t);
    if g.graph().tensors()[last].kind == TensorKind::Activation {
        g.mark_output(last);
    }
    g.build().expect("random graphs are valid by construction")
}

/// `n` bytes of a fixed pseudo-random stream (a linear congruential generator), advancing
/// `state`: deterministic graphs for tests that loop instead of shrinking.
pub fn bytes(state: &mut u64, n: usize) -> Vec<u8> {
    (0..n)
        .map(|_| {
            *state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (*state >> 56) as u8
        })
        .collect()
}

/// Every option set the mutation tests plan with: the defaults; the memory-aware schedule at
/// alignment 64; no aliasing at alignment 1.
pub fn option_sets() -> [PlanOptions; 3] {
    [
        PlanOptions::default(),
        PlanOptions::default()
            .with_schedule(ScheduleMode::Memory)
            .with_alignment(64),
        PlanOptions::default().without_aliasing().with_alignment(1),
    ]
}

/// Planning options from one byte: every combination of views, in-place, in-place over
/// inputs, caller-owned inputs and outputs, three alignments and both schedules.
pub fn options_from_byte(b: u8) -> PlanOptions {
    let bit = |i: u8| b & (1 << i) != 0;
    PlanOptions::default()
        .with_views(!bit(0))
        .with_inplace(!bit(1))
        .with_inplace_over_inputs(bit(2))
        .with_inputs_in_arena(!bit(3))
        .with_outputs_in_arena(!bit(4))
        .with_alignment([1, 64, 256, 256][usize::from((b >> 5) & 3)])
        .with_schedule(if bit(7) {
            ScheduleMode::Memory
        } else {
            ScheduleMode::Given
        })
}
