//! Planning an engine's own op list through `GraphSource`: generated op lists with views at
//! offsets, in-place writes, scratch and mutated inputs, every plan checked by the
//! verifier under both schedules, and the declared aliasing used where it pays.

use std::borrow::Cow;

use memplan_ir::{DType, Dim, GraphSource, NodeDecl, TensorDecl, TensorKind};
use memplan_planner::{AliasKind, PlanOptions, ScheduleMode, plan_source, verify_plan};

/// One op of a candle-like list: each makes tensor `i` (its position) from earlier ones.
#[derive(Clone, Debug)]
enum Op {
    Input,
    Weight,
    /// An opaque op of two inputs (a matmul), with scratch.
    Mix(usize, usize),
    /// Elementwise over one input, may write over it.
    Unary(usize),
    /// The first half of an input (a view at offset 0), or the second (at half its bytes).
    Half(usize, bool),
    /// Appends into a cache input it writes in place (the cache stays live), then reads it.
    Append(usize, usize),
}

struct OpList {
    ops: Vec<(Op, u64)>,
    outputs: Vec<usize>,
}

impl GraphSource for OpList {
    type Tensor = usize;
    type Node = usize;
    fn name(&self) -> Cow<'_, str> {
        "ops".into()
    }
    fn tensors(&self) -> impl Iterator<Item = usize> + '_ {
        0..self.ops.len()
    }
    fn tensor(&self, t: usize) -> TensorDecl<'_> {
        let (op, elems) = &self.ops[t];
        let kind = match op {
            Op::Input => TensorKind::Input,
            Op::Weight => TensorKind::Weight,
            _ if self.outputs.contains(&t) => TensorKind::Output,
            _ => TensorKind::Activation,
        };
        TensorDecl::new(format!("t{t}"), DType::F32, [*elems], kind)
    }
    fn nodes(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.ops.len()).filter(|&t| !matches!(self.ops[t].0, Op::Input | Op::Weight))
    }
    fn node(&self, t: usize) -> NodeDecl<'_, usize> {
        let name = format!("op{t}");
        match self.ops[t].0 {
            Op::Mix(a, b) => NodeDecl::new(name, "mix", [a, b], [t]).with_scratch(256),
            Op::Unary(a) => NodeDecl::new(name, "unary", [a], [t]).in_place(0, &[0]),
            Op::Half(a, second) => {
                let offset = if second { self.ops[t].1 * 4 } else { 0 };
                NodeDecl::new(name, "half", [a], [t]).view(0, 0, offset)
            }
            Op::Append(cache, x) => NodeDecl::new(name, "append", [cache, x], [t]).mutating(&[0]),
            Op::Input | Op::Weight => unreachable!("not a node"),
        }
    }
}

/// A deterministic op list of `n` ops from `seed`.
fn generate(seed: u64, n: usize) -> OpList {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = |m: usize| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) as usize) % m.max(1)
    };
    let width = 64u64;
    let mut ops: Vec<(Op, u64)> = vec![(Op::Input, width), (Op::Weight, width), (Op::Input, width)];
    while ops.len() < n {
        let pick = |k: usize| ops.len() - 1 - k.min(ops.len() - 1);
        let a = pick(next(4));
        let b = pick(next(6));
        let ea = ops[a].1;
        let op = match next(5) {
            0 => (Op::Mix(a, b), width),
            1 => (Op::Unary(a), ea),
            2 if ea.is_multiple_of(2) && ea > 2 => (Op::Half(a, next(2) == 1), ea / 2),
            3 if matches!(ops[a].0, Op::Input) => (Op::Append(a, b), ops[b].1),
            _ => (Op::Mix(a, b), width / 2 + (next(3) as u64) * 16),
        };
        ops.push(op);
    }
    let last = ops.len() - 1;
    OpList {
        ops,
        outputs: vec![last],
    }
}

#[test]
fn generated_op_lists_plan_and_verify() {
    let mut aliased = [0usize; 3];
    for seed in 0..40 {
        let list = generate(seed, 12 + (seed as usize % 20));
        for schedule in [ScheduleMode::Given, ScheduleMode::Memory] {
            let options = PlanOptions::default().with_schedule(schedule);
            let (ids, plan) =
                plan_source(&list, &options).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            verify_plan(ids.graph(), &plan)
                .unwrap_or_else(|e| panic!("seed {seed} {schedule:?}: {e}"));
            for b in &plan.buffers {
                match b.alias_kind() {
                    Some(AliasKind::View) => aliased[0] += 1,
                    Some(AliasKind::InPlace) => aliased[1] += 1,
                    _ => {}
                }
            }
            // Every op of the list is a node, and every tensor maps back.
            for t in 0..list.ops.len() {
                let id = ids.tensor_id(t).unwrap();
                assert_eq!(ids.tensor_of(id), Some(t));
            }
            aliased[2] += plan
                .buffers
                .iter()
                .filter(|b| ids.tensor_of(b.tensor).is_none())
                .count();
        }
    }
    let [views, inplace, scratch] = aliased;
    assert!(views > 20 && inplace > 20 && scratch > 50, "{aliased:?}");
}

/// A mutated input keeps its bytes: nothing is written in place over the cache while it is
/// live, though the declared rule would allow the unary op to.
#[test]
fn a_mutated_input_lends_no_bytes() {
    let list = OpList {
        ops: vec![
            (Op::Input, 64),
            (Op::Input, 64),
            (Op::Append(0, 1), 64),
            (Op::Unary(0), 64),
            (Op::Mix(2, 3), 64),
        ],
        outputs: vec![4],
    };
    let options = PlanOptions::default().with_inplace_over_inputs(true);
    let (ids, plan) = plan_source(&list, &options).unwrap();
    verify_plan(ids.graph(), &plan).unwrap();
    let unary = plan.buffer(ids.tensor_id(3).unwrap()).unwrap();
    assert_eq!(unary.alias, None, "{unary:?}");
    // Without the mutation the same op list writes the unary op over the cache input.
    let mut plain = list;
    plain.ops[2].0 = Op::Mix(0, 1);
    let (ids, plan) = plan_source(&plain, &options).unwrap();
    let unary = plan.buffer(ids.tensor_id(3).unwrap()).unwrap();
    assert_eq!(unary.alias_kind(), Some(AliasKind::InPlace));
}

/// `hidden = relu(x)`, `out = reshape(hidden)`, both of `batch` rows: symbolic shapes.
struct Symbolic;

impl GraphSource for Symbolic {
    type Tensor = u8;
    type Node = u8;
    fn name(&self) -> Cow<'_, str> {
        "symbolic".into()
    }
    fn tensors(&self) -> impl Iterator<Item = u8> + '_ {
        0..3
    }
    fn tensor(&self, t: u8) -> TensorDecl<'_> {
        let (name, kind) = [
            ("x", TensorKind::Input),
            ("hidden", TensorKind::Activation),
            ("out", TensorKind::Output),
        ][t as usize];
        TensorDecl::new(name, DType::F32, [Dim::from("batch"), Dim::Fixed(16)], kind)
    }
    fn nodes(&self) -> impl Iterator<Item = u8> + '_ {
        1..3
    }
    fn node(&self, n: u8) -> NodeDecl<'_, u8> {
        match n {
            1 => NodeDecl::new("relu", "relu", [0], [1]).in_place(0, &[0]),
            _ => NodeDecl::new("flatten", "reshape", [1], [2]).view(0, 0, 0),
        }
    }
}

/// The imported graph is the engine's, which the caller never holds: a planning error
/// carries it and names the engine's tensor; the symbols are bound by name on the imported
/// graph, planned once per binding.
#[test]
fn symbols_are_bound_on_the_imported_graph_and_errors_name_the_engine_s_tensors() {
    use memplan_ir::GraphError;
    use memplan_planner::{PlanError, SourceError, plan_imported};
    let err = plan_source(&Symbolic, &PlanOptions::default()).unwrap_err();
    let SourceError::Plan(plan_err @ PlanError::InGraph { .. }) = &err else {
        panic!("{err:?}")
    };
    assert!(
        matches!(plan_err.inner(), PlanError::UnboundSymbol { .. }),
        "{err:?}"
    );
    assert!(plan_err.entities().is_empty());
    assert_eq!(
        err.to_string(),
        "tensor `x` needs a value for symbol `batch`"
    );
    let imported = memplan_ir::import(&Symbolic).unwrap();
    for batch in [1, 3, 64] {
        let options = PlanOptions::default()
            .with_bindings(imported.graph().bind(&[("batch", batch)]).unwrap());
        let plan = plan_imported(&imported, &options).unwrap();
        verify_plan(imported.graph(), &plan).unwrap();
        let out = plan.buffer(imported.tensor_id(2).unwrap()).unwrap();
        assert_eq!(out.bytes, batch * 16 * 4);
        // The engine's declarations hold at every binding: the reshape is a view.
        assert_eq!(out.alias_kind(), Some(AliasKind::View));
    }
}
