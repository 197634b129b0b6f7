//! Deriving a training step's graph from a forward graph.
//!
//! [`Base::new`] builds everything that does not depend on what is recomputed: the forward
//! in training mode, the loss, the backward nodes (from [`super::rules`]), gradient
//! accumulation, the weight gradients and the optimizer step, all in one graph's tensors,
//! with the backward and optimizer nodes kept aside in order. [`Base::materialize`] then
//! adds those nodes for one choice of kept tensors, inserting before each backward node the
//! recompute nodes it needs (a copy of the forward node that made a dropped tensor, reading
//! kept tensors or other recomputed copies).
//!
//! Tags on the nodes it makes (string and int-list attributes, kept in the graph so that the
//! verifier can check them): every backward node names its forward node in
//! [`ATTR_GRAD_OF`] and the forward inputs whose gradients it computes in [`ATTR_WRT`]; a
//! recompute node names the forward node it copies in [`ATTR_RECOMPUTE_OF`].

use memplan_ir::{
    Attr, Attrs, DType, Expr, Graph, IndexVec, Node, NodeId, Shape, Tensor, TensorId, TensorKind,
};

use super::{Loss, Phase, TrainingOptions, TrainingSummary, UnknownOps};
use crate::error::PlanError;
use crate::options::AttentionKernel;
use crate::plan::Plan;

/// Attribute of a backward node: the name of the forward node whose gradient it computes.
pub const ATTR_GRAD_OF: &str = "memplan.grad_of";
/// Attribute of a backward node: the positions of the forward node's inputs whose
/// gradients it writes.
pub const ATTR_WRT: &str = "memplan.wrt";
/// Attribute of a recompute node: the name of the forward node it runs again.
pub const ATTR_RECOMPUTE_OF: &str = "memplan.recompute_of";
/// Suffix of the output a fused `Attention` node gains in training: what its backward
/// reads besides the inputs and Y (the probabilities, or the per-row log-sum-exp).
pub(crate) const ATTENTION_STAT: &str = ".attention_saved";

/// The recompute-independent part of a training step.
#[derive(Clone, Debug)]
pub(crate) struct Base {
    /// Forward (training mode) and loss nodes; every tensor of the step.
    pub graph: Graph,
    /// Forward and loss nodes are ids `0..n_forward`.
    pub n_forward: usize,
    /// Backward and optimizer nodes, in order, with their phase.
    pub later: Vec<(Node, Phase)>,
    /// Per tensor: produced by a forward or loss node (so it may be dropped and recomputed).
    pub forward_made: IndexVec<TensorId, bool>,
    /// Per tensor: its producer among the forward and loss nodes.
    pub producer: IndexVec<TensorId, Option<NodeId>>,
    /// Forward-made tensors some backward node reads (the saved set before recomputation),
    /// in id order; not those computed from weights alone when the options fold them.
    pub saved: Vec<TensorId>,
    /// Per tensor: computed at load from frozen weights and constants alone, into the weight
    /// region (`PlanOptions::fold_weights`): kept whatever the backward reads, never saved
    /// in the arena nor recomputed.
    pub folded: IndexVec<TensorId, bool>,
    /// Trained parameters, their final gradients, and their optimizer state.
    pub params: Vec<Param>,
    /// Per later node: the forward position it belongs to (its forward node's id).
    pub later_pos: Vec<u32>,
    /// The loss's seed gradient (a constant, or the caller's input with `--loss none`).
    pub seed: TensorId,
    /// The forward and loss nodes' names.
    pub forward_names: std::collections::BTreeSet<String>,
}

/// A trained parameter.
#[derive(Clone, Debug)]
pub(crate) struct Param {
    pub tensor: TensorId,
    pub grad: TensorId,
    pub state: Vec<TensorId>,
}

/// One materialized step.
#[derive(Clone, Debug)]
pub(crate) struct Derived {
    pub graph: Graph,
    pub phases: IndexVec<NodeId, Phase>,
    /// Per node: the forward position it is attributed to.
    pub pos: IndexVec<NodeId, u32>,
    /// The recompute nodes.
    pub recompute: Vec<NodeId>,
}

/// Builds the backward: per forward node, the rule's nodes, and the gradient bookkeeping.
pub(crate) struct Emitter<'o> {
    pub g: Graph,
    options: &'o TrainingOptions,
    later: Vec<(Node, Phase)>,
    later_pos: Vec<u32>,
    /// The forward node whose backward is being emitted.
    pub cur: NodeId,
    /// Gradient of each output of `cur` (None: no gradient reaches it).
    pub dy: Vec<Option<TensorId>>,
    /// Whether each input of `cur` needs a gradient.
    pub need: Vec<bool>,
    /// Running gradient of each tensor, and whether it is a tensor made for it alone.
    acc: IndexVec<TensorId, Option<(TensorId, bool)>>,
    /// Contributions so far per tensor.
    count: IndexVec<TensorId, u32>,
    /// Trainable parameters.
    trainable: IndexVec<TensorId, bool>,
    serial: u64,
}

/// A tensor with no known value or element count.
fn tensor(name: String, dtype: DType, shape: Shape, kind: TensorKind) -> Tensor {
    Tensor::of_shape(name, dtype, shape, kind)
}

fn err(message: String) -> PlanError {
    PlanError::Training { reason: message }
}

fn float(dt: DType) -> bool {
    dt.is_float()
}

impl Emitter<'_> {
    /// A fresh name starting with `base`.
    fn name(&mut self, base: &str) -> String {
        if self.g.find_tensor(base).is_none() {
            return base.to_owned();
        }
        loop {
            self.serial += 1;
            let n = format!("{base}.{}", self.serial);
            if self.g.find_tensor(&n).is_none() {
                return n;
            }
        }
    }

    /// A new activation.
    pub fn tensor(&mut self, base: &str, dtype: DType, shape: Shape) -> TensorId {
        let name = self.name(base);
        self.g
            .add_tensor(tensor(name, dtype, shape, TensorKind::Activation))
    }

    /// A new activation with `like`'s dtype and shape.
    pub fn like(&mut self, base: &str, like: TensorId) -> TensorId {
        let t = self.g.tensor(like);
        let (dtype, shape) = (t.dtype, t.shape.clone());
        self.tensor(base, dtype, shape)
    }

    /// A small int64 constant (shape, axes, bounds).
    pub fn ints(&mut self, base: &str, values: &[i64]) -> TensorId {
        let name = self.name(base);
        let len = i64::try_from(values.len()).unwrap_or(i64::MAX);
        self.g.add_tensor(
            Tensor::of_shape(
                name,
                DType::I64,
                [Expr::constant(len)].into_iter().collect(),
                TensorKind::Weight,
            )
            .with_int_value(Some(values.to_vec())),
        )
    }

    /// Forward input `i` of the current node.
    /// Positions past the listed inputs are the node's implicit inputs (values its bodies
    /// capture), in order: only [`save_all`] asks for those.
    pub fn x(&self, i: usize) -> Option<TensorId> {
        let node = self.g.node(self.cur);
        match node.inputs.get(i) {
            Some(x) => *x,
            None => node.implicit_inputs.get(i - node.inputs.len()).copied(),
        }
    }

    /// Forward output `j` of the current node.
    pub fn y(&self, j: usize) -> Option<TensorId> {
        self.g.node(self.cur).outputs.get(j).copied()
    }

    /// Whether input `i` needs a gradient.
    pub fn needs(&self, i: usize) -> bool {
        self.need.get(i).copied().unwrap_or(false)
    }

    pub fn shape(&self, t: TensorId) -> &Shape {
        &self.g.tensor(t).shape
    }

    pub fn attr(&self, name: &str) -> Option<&Attr> {
        self.g.node(self.cur).attr(name)
    }

    /// A backward node of the current forward node, computing the gradients of its inputs
    /// `wrt`.
    pub fn emit(
        &mut self,
        op: &str,
        inputs: Vec<Option<TensorId>>,
        outputs: Vec<TensorId>,
        mut attrs: Attrs,
        wrt: &[usize],
    ) {
        let fwd = self.g.node(self.cur).name.clone();
        attrs.push((ATTR_GRAD_OF.to_owned(), Attr::Str(fwd.clone())));
        attrs.push((
            ATTR_WRT.to_owned(),
            Attr::Ints(wrt.iter().map(|&w| w as i64).collect()),
        ));
        self.serial += 1;
        let node = Node::new(
            format!("{fwd}/grad{}", self.serial),
            op.to_owned(),
            inputs,
            outputs,
        )
        .with_attrs(attrs);
        self.later.push((node, Phase::Backward));
        self.later_pos.push(self.cur.0);
    }

    /// The tensor to write the gradient of input `i` into (its shape and dtype).
    pub fn grad_out(&mut self, i: usize) -> Result<TensorId, PlanError> {
        let x = self
            .x(i)
            .ok_or_else(|| err(format!("input {i} of `{}` is absent", self.cur_name())))?;
        let base = format!("{}_grad", self.g.tensor(x).name);
        Ok(self.like(&base, x))
    }

    fn cur_name(&self) -> String {
        self.g.node(self.cur).name.clone()
    }

    /// Adds `grad` (of input `i`'s shape; `fresh` when made for this contribution alone) to
    /// the gradient of input `i`: the first contribution is taken as it is, later ones are
    /// summed in as they come (one running sum, never all partials at once).
    pub fn contribute(&mut self, i: usize, grad: TensorId, fresh: bool) -> Result<(), PlanError> {
        let Some(x) = self.x(i) else {
            return Ok(());
        };
        self.count[x] += 1;
        self.acc[x] = match self.acc[x] {
            None => Some((grad, fresh)),
            Some((prev, _)) => {
                let base = format!("{}_grad.sum", self.g.tensor(x).name);
                let sum = self.like(&base, x);
                self.emit(
                    "Add",
                    vec![Some(prev), Some(grad)],
                    vec![sum],
                    Attrs::new(),
                    &[i],
                );
                Some((sum, true))
            }
        };
        Ok(())
    }

    /// The gradient of `t` with `grad_shape`, summed down to `t`'s shape where it was
    /// broadcast; contributes it to input `i`. `grad` is fresh when made for this alone.
    pub fn contribute_reduced(
        &mut self,
        i: usize,
        grad: TensorId,
        fresh: bool,
    ) -> Result<(), PlanError> {
        let Some(x) = self.x(i) else { return Ok(()) };
        if self.shape(grad) == self.shape(x) && self.g.tensor(grad).dtype == self.g.tensor(x).dtype
        {
            return self.contribute(i, grad, fresh);
        }
        let out = self.grad_out(i)?;
        let (gs, xs) = (self.shape(grad).len(), self.shape(x).len());
        let axes: Vec<i64> = (0..gs as i64)
            .filter(|&a| {
                let a = a as usize;
                let offset = gs.saturating_sub(xs);
                a < offset || self.shape(x).get(a - offset) != self.shape(grad).get(a)
            })
            .collect();
        let axes_t = self.ints("reduce_axes", &axes);
        self.emit(
            "ReduceSum",
            vec![Some(grad), Some(axes_t)],
            vec![out],
            vec![("keepdims".to_owned(), Attr::Int(i64::from(gs == xs)))],
            &[i],
        );
        self.contribute(i, out, true)
    }

    /// The common unary case: one node `op` reading `inputs`, writing the gradient of
    /// input 0 (of its shape).
    pub fn unary(&mut self, op: &str, inputs: Vec<Option<TensorId>>) -> Result<(), PlanError> {
        if !self.needs(0) {
            return Ok(());
        }
        let out = self.grad_out(0)?;
        self.emit(op, inputs, vec![out], Attrs::new(), &[0]);
        self.contribute(0, out, true)
    }
}

/// Whether any name pattern matches.
/// The forward and loss nodes `0..n_forward` in the order their backward is derived: the
/// reverse forward order, or with `earliest_first` the reverse of readiness taking the
/// earliest ready node (a node is ready once every forward node reading its outputs, listed
/// or captured, is done).
fn backward_order(g: &Graph, n_forward: usize, earliest_first: bool) -> Vec<NodeId> {
    if !earliest_first {
        return (0..n_forward).rev().map(|i| NodeId(i as u32)).collect();
    }
    let producers = g.producers();
    let mut waiting = vec![0usize; n_forward];
    let mut feeds: Vec<Vec<usize>> = vec![Vec::new(); n_forward];
    for (n, node) in g.nodes().iter_enumerated().take(n_forward) {
        let mut from: Vec<usize> = node
            .present_inputs()
            .chain(node.implicit_inputs.iter().copied())
            .filter_map(|x| producers[x])
            .map(|p| p.0 as usize)
            .filter(|&p| p < n_forward && p != n.0 as usize)
            .collect();
        from.sort_unstable();
        from.dedup();
        for p in from {
            waiting[p] += 1;
            feeds[n.0 as usize].push(p);
        }
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..n_forward).filter(|&i| waiting[i] == 0).collect();
    let mut order = Vec::with_capacity(n_forward);
    while let Some(i) = ready.pop_first() {
        order.push(NodeId(i as u32));
        for &p in &feeds[i] {
            waiting[p] -= 1;
            if waiting[p] == 0 {
                ready.insert(p);
            }
        }
    }
    order
}

fn frozen(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| crate::state::name_matches(p, name))
}

/// `forward` with each weight read both as a BatchNormalization's running statistic and as
/// something else split: the statistic reads a copy (`NAME~1`, ...), untrained, and the other
/// places keep the weight, trained. Exporters merge initializers of equal values: PyTorch's
/// give a freshly made BatchNorm's bias and running mean (zeros), or its scale and running
/// variance (ones), one initializer, and a parameter is never a running statistic. Other
/// merges (every fresh LayerNorm's ones across layers) cannot be told from a module really
/// applied twice (testdata/training/cnn_dense reuses one BatchNorm) and are left as they are.
fn untie(forward: &Graph) -> Graph {
    let mut g = forward.clone();
    let stat = |op: &str, i: usize| {
        matches!(op, "BatchNormalization" | "com.microsoft.BatchNormInternal") && (i == 3 || i == 4)
    };
    let mut elsewhere: IndexVec<TensorId, bool> = IndexVec::from_elem(false, g.tensors().len());
    for node in g.nodes().iter() {
        for (i, t) in node.inputs.iter().enumerate() {
            if let Some(t) = *t
                && !stat(&node.op, i)
            {
                elsewhere[t] = true;
            }
        }
    }
    for t in g.outputs() {
        elsewhere[t] = true;
    }
    let made = g.producers();
    let mut rewrites: Vec<(NodeId, usize, TensorId)> = Vec::new();
    for (n, node) in g.nodes().iter_enumerated() {
        for (i, t) in node.inputs.iter().enumerate() {
            let Some(t) = *t else { continue };
            if stat(&node.op, i)
                && elsewhere[t]
                && made[t].is_none()
                && g.tensor(t).kind.is_persistent()
            {
                rewrites.push((n, i, t));
            }
        }
    }
    let mut copies: IndexVec<TensorId, u32> = IndexVec::from_elem(0, g.tensors().len());
    for (n, i, t) in rewrites {
        let mut x = g.tensor(t).clone();
        let name = loop {
            copies[t] += 1;
            let name = format!("{}~{}", x.name, copies[t]);
            if g.find_tensor(&name).is_none() {
                break name;
            }
        };
        x.name = name;
        let copy = g.add_tensor(x);
        g.node_mut(n).inputs[i] = Some(copy);
    }
    g
}

impl Base {
    /// Derives the step of `forward` (see the module docs), its backward in reverse forward
    /// order (as eager autograd runs it).
    pub fn new(forward: &Graph, options: &TrainingOptions) -> Result<Base, PlanError> {
        Base::ordered(forward, options, false)
    }

    /// [`Base::new`], with `earliest_first`: the backward finishes one branch before it
    /// starts another, taking of the forward nodes whose readers' backward is done the
    /// earliest one (a branch the forward ran first, a bottom MLP before the embeddings it
    /// is concatenated with). Optimizer updates stay after the backward either way.
    pub fn ordered(
        forward: &Graph,
        options: &TrainingOptions,
        earliest_first: bool,
    ) -> Result<Base, PlanError> {
        forward.validate().map_err(PlanError::Invalid)?;
        if options.accumulate && options.fused_optimizer {
            return Err(PlanError::AccumulateWithFusedOptimizer);
        }
        // The engine's fused kernels first (`--fuse`), then the fusions ONNX Runtime's
        // training graph builder makes.
        let kernels = crate::PlanOptions {
            fuse: crate::Fusions {
                constants: false,
                ..options.plan.fuse
            },
            ..options.plan.clone()
        };
        let mut forward = crate::fuse::fuse_graph_for(forward, &kernels, true)?.graph;
        // The step derived from it is planned as it is: mark it with everything asked for
        // (what the `constants` fusion changes is decided before, on the forward).
        if !options.plan.fuse.is_none() {
            forward.set_metadata(crate::fuse::FUSED_MARK, options.plan.fuse.describe());
        }
        let mut g = super::fuse::fuse(untie(&forward), options.pointwise_fusion);
        g.name = format!("{}.train", forward.name);
        training_mode(&mut g, options.plan.attention);
        let n_model = g.nodes().len();

        // The loss.
        let output = g
            .outputs()
            .first()
            .copied()
            .ok_or_else(|| err(format!("graph `{}` has no output to train", forward.name)))?;
        let seed_of = add_loss(&mut g, output, options.loss)?;
        let n_forward = g.nodes().len();
        let (loss, seed) = seed_of;

        // Trainable parameters: float weights (and training state) of rank >= 1, but not a
        // BatchNormalization's running statistics, nor frozen ones.
        let mut stats: IndexVec<TensorId, bool> = IndexVec::from_elem(false, g.tensors().len());
        for node in g.nodes().iter() {
            if matches!(
                node.op.as_str(),
                "BatchNormalization" | "com.microsoft.BatchNormInternal"
            ) {
                for t in node.inputs.iter().skip(3).take(2).flatten() {
                    stats[*t] = true;
                }
            }
        }
        // A tensor some node computes (a weight folded from others, say) is no parameter, nor
        // one an importer made of a constant node.
        let made = g.producers();
        let mut constant: IndexVec<TensorId, bool> = IndexVec::from_elem(false, g.tensors().len());
        for name in g.constant_node_outputs() {
            if let Some(t) = g.find_tensor(name) {
                constant[t] = true;
            }
        }
        let trainable: IndexVec<TensorId, bool> = g
            .tensors()
            .iter_enumerated()
            .map(|(t, x)| {
                x.kind.is_persistent()
                    && made[t].is_none()
                    && float(x.dtype)
                    && !x.shape.is_empty()
                    && !stats[t]
                    && !constant[t]
                    && !frozen(&options.frozen, &x.name)
            })
            .collect();

        // Which tensors need a gradient: float, depending on a trainable parameter, and
        // reaching the loss.
        let n_t = g.tensors().len();
        let mut rg: IndexVec<TensorId, bool> = IndexVec::from_elem(false, n_t);
        for (t, &tr) in trainable.iter_enumerated() {
            rg[t] = tr;
        }
        // A weight only a body reads (a Loop's or If's captured value) counts as read by the
        // node: its outputs depend on it.
        for node in g.nodes().iter() {
            let any = node
                .present_inputs()
                .any(|x| rg[x] && float(g.tensor(x).dtype));
            for &y in &node.outputs {
                rg[y] = any && float(g.tensor(y).dtype);
            }
        }
        let mut reach: IndexVec<TensorId, bool> = IndexVec::from_elem(false, n_t);
        reach[loss] = true;
        for node in g.nodes().iter().rev() {
            if node.outputs.iter().any(|&y| reach[y]) {
                for x in node.present_inputs() {
                    if float(g.tensor(x).dtype) {
                        reach[x] = true;
                    }
                }
            }
        }
        let needs: IndexVec<TensorId, bool> =
            rg.iter_enumerated().map(|(t, &r)| r && reach[t]).collect();
        let trainable: IndexVec<TensorId, bool> = trainable
            .iter_enumerated()
            .map(|(t, &tr)| tr && needs[t])
            .collect();
        if !trainable.iter().any(|&t| t) {
            return Err(err(format!(
                "graph `{}` has no float weight that the loss depends on: nothing to train",
                forward.name
            )));
        }

        let mut e = Emitter {
            g,
            options,
            later: Vec::new(),
            later_pos: Vec::new(),
            cur: NodeId(0),
            dy: Vec::new(),
            need: Vec::new(),
            acc: IndexVec::from_elem(None, n_t),
            count: IndexVec::from_elem(0, n_t),
            trainable: trainable.clone(),
            serial: 0,
        };
        e.acc[loss] = Some((seed, false));

        // The last (lowest) forward node reading each parameter: its gradient is final once
        // that node's backward is done.
        let order = backward_order(&e.g, n_forward, earliest_first);
        let mut last_reader: IndexVec<TensorId, Option<NodeId>> = IndexVec::from_elem(None, n_t);
        for &n in &order {
            for x in e.g.node(n).present_inputs() {
                if trainable[x] {
                    last_reader[x] = Some(n);
                }
            }
        }
        let mut params: Vec<Param> = Vec::new();
        for &n in &order {
            let node = e.g.node(n).clone();
            let dy: Vec<Option<TensorId>> = node
                .outputs
                .iter()
                .map(|&y| e.acc.get(y).copied().flatten().map(|a| a.0))
                .collect();
            // Listed inputs, then implicit ones (see `Emitter::x`).
            let need: Vec<bool> = node
                .inputs
                .iter()
                .map(|x| x.is_some_and(|x| needs[x]))
                .chain(node.implicit_inputs.iter().map(|&x| needs[x]))
                .collect();
            if dy.iter().any(Option::is_some) && need.iter().any(|&b| b) {
                // A gradient for a value a body captures: no rule writes one (the rules know
                // the listed inputs only), so the node has no backward rule.
                let captured = need[node.inputs.len()..].iter().any(|&b| b);
                e.cur = n;
                e.dy = dy;
                e.need = need;
                let done = !captured && super::rules::backward(&mut e)?;
                if !done {
                    match options.unknown_ops {
                        UnknownOps::Refuse => {
                            // A node of the step's graph, which the caller does not hold.
                            return Err(PlanError::NoBackwardRule {
                                node: n,
                                op: node.op.clone(),
                            }
                            .found_in(|| e.g.clone()));
                        }
                        UnknownOps::SaveAll => save_all(&mut e)?,
                    }
                }
            }
            // Parameters whose gradient is now complete.
            let mut finished: Vec<TensorId> = node
                .present_inputs()
                .filter(|&x| last_reader[x] == Some(n) && e.acc[x].is_some())
                .collect();
            finished.sort_unstable();
            finished.dedup();
            for p in finished {
                let grad = finish_gradient(&mut e, p)?;
                let param = optimizer_state(&mut e, p, grad)?;
                if options.fused_optimizer {
                    push_updates(&mut e, std::slice::from_ref(&param), n.0)?;
                }
                params.push(param);
            }
        }
        // Parameters nothing reads get no gradient; params listed in id order.
        params.sort_by_key(|p| p.tensor);
        if !options.fused_optimizer {
            push_updates(&mut e, &params, 0)?;
        }
        // Trainable weights are training state: the optimizer updates them.
        for p in &params {
            e.g.set_kind(p.tensor, TensorKind::State);
        }

        let n_t = e.g.tensors().len();
        let mut forward_made: IndexVec<TensorId, bool> = IndexVec::from_elem(false, n_t);
        let mut producer: IndexVec<TensorId, Option<NodeId>> = IndexVec::from_elem(None, n_t);
        for (n, node) in e.g.nodes().iter_enumerated() {
            for &y in &node.outputs {
                forward_made[y] = true;
                producer[y] = Some(n);
            }
        }
        let folded = if options.plan.fold_weights {
            crate::folding::weight_derived(&e.g, &options.plan.op_table)
        } else {
            IndexVec::from_elem(false, n_t)
        };
        let mut saved: Vec<TensorId> = e
            .later
            .iter()
            .flat_map(|(n, _)| n.inputs.iter().flatten().copied())
            .filter(|&t| forward_made[t] && !folded[t])
            .collect();
        saved.sort_unstable();
        saved.dedup();
        let _ = n_model;
        let forward_names = e.g.nodes().iter().map(|n| n.name.clone()).collect();
        Ok(Base {
            graph: e.g,
            n_forward,
            later: e.later,
            forward_made,
            producer,
            saved,
            folded,
            params,
            later_pos: e.later_pos,
            seed,
            forward_names,
        })
    }

    /// The step with the forward-made tensors `keep` says may be read as they are; any other
    /// one a backward node reads is recomputed right before (see the module docs).
    pub fn materialize(&self, keep: &IndexVec<TensorId, bool>) -> Result<Derived, PlanError> {
        let mut g = self.graph.clone();
        let mut phases: IndexVec<NodeId, Phase> =
            g.nodes().iter().map(|_| Phase::Forward).collect();
        let mut pos: IndexVec<NodeId, u32> =
            g.nodes().iter_enumerated().map(|(n, _)| n.0).collect();
        let mut copy: IndexVec<TensorId, Option<TensorId>> =
            IndexVec::from_elem(None, g.tensors().len());
        let mut recompute = Vec::new();
        for ((node, phase), &at) in self.later.iter().zip(&self.later_pos) {
            let mut node = node.clone();
            for slot in node.inputs.iter_mut() {
                let Some(t) = *slot else { continue };
                if self.forward_made[t] && !keep.get(t).copied().unwrap_or(true) {
                    let c = self.recompute(&mut g, &mut copy, keep, t, &mut |n, of| {
                        phases.push(Phase::Backward);
                        pos.push(of.0);
                        recompute.push(n);
                    })?;
                    *slot = Some(c);
                }
            }
            g.add_node(node);
            phases.push(*phase);
            pos.push(at);
        }
        Ok(Derived {
            graph: g,
            phases,
            pos,
            recompute,
        })
    }

    /// The copy of forward-made `t` for the backward, recomputing its producer (and,
    /// first, whatever dropped tensors that needs) unless done already.
    fn recompute(
        &self,
        g: &mut Graph,
        copy: &mut IndexVec<TensorId, Option<TensorId>>,
        keep: &IndexVec<TensorId, bool>,
        t: TensorId,
        added: &mut dyn FnMut(NodeId, NodeId),
    ) -> Result<TensorId, PlanError> {
        if let Some(c) = copy.get(t).copied().flatten() {
            return Ok(c);
        }
        let p = self.producer[t].ok_or_else(|| err(format!("tensor {t} has no producer")))?;
        let mut node = g.node(p).clone();
        // A normalisation's output whose statistics are kept is made again by an
        // element-wise apply of its input and those statistics, not by normalising again.
        if let Some((op, inputs, stats)) = super::cut::normalization_apply(&node)
            && node.outputs.first() == Some(&t)
            && stats.iter().all(|&o| {
                node.outputs
                    .get(o)
                    .is_some_and(|&s| keep.get(s).copied().unwrap_or(true))
            })
        {
            let reads: Vec<Option<TensorId>> = inputs
                .iter()
                .map(|&i| node.inputs.get(i).copied().flatten())
                .chain(stats.iter().map(|&o| node.outputs.get(o).copied()))
                .collect();
            node.op = op.to_owned();
            node.inputs = reads;
            node.outputs = vec![t];
            node.attrs.retain(|(k, _)| {
                matches!(k.as_str(), "epsilon" | "axis" | "stash_type" | "num_groups")
            });
        }
        for slot in node.inputs.iter_mut() {
            let Some(x) = *slot else { continue };
            if self.forward_made[x] && !keep.get(x).copied().unwrap_or(true) {
                *slot = Some(self.recompute(g, copy, keep, x, added)?);
            }
        }
        let mut outputs = Vec::with_capacity(node.outputs.len());
        for &o in &node.outputs {
            let mut copied = g.tensor(o).clone();
            copied.name = format!("{}/recompute", copied.name);
            while g.find_tensor(&copied.name).is_some() {
                copied.name.push('_');
            }
            copied.kind = TensorKind::Activation;
            let c = g.add_tensor(copied);
            while copy.len() <= c.0 as usize {
                copy.push(None);
            }
            copy[o] = Some(c);
            outputs.push(c);
        }
        node.attrs
            .push((ATTR_RECOMPUTE_OF.to_owned(), Attr::Str(node.name.clone())));
        // Node names of the step are the forward's, `<forward>/grad<k>` and these; only a
        // forward node could already have the name.
        let mut name = format!("{}/recompute", node.name);
        while self.forward_names.contains(&name) {
            name.push('_');
        }
        node.name = name;
        node.outputs = outputs;
        let n = g.add_node(node);
        added(n, p);
        copy.get(t)
            .copied()
            .flatten()
            .ok_or_else(|| err(format!("tensor {t} was not recomputed")))
    }
}

impl Derived {
    /// The breakdown of this step planned as `plan`.
    pub fn summary(
        &self,
        base: &Base,
        options: &TrainingOptions,
        plan: &Plan,
        choice: &super::recompute::Choice,
    ) -> Result<TrainingSummary, PlanError> {
        let g = &self.graph;
        let b = &options.plan.bindings;
        let bytes = |t: TensorId| -> Result<u64, PlanError> {
            g.tensor(t).bytes(b).map_err(|e| PlanError::Size {
                tensor: t,
                reason: e,
            })
        };
        let sum = |list: &mut dyn Iterator<Item = TensorId>| -> Result<u64, PlanError> {
            let mut s: u64 = 0;
            for t in list {
                s = s.checked_add(bytes(t)?).ok_or(PlanError::Overflow {
                    what: "summing the step's tensors".to_owned(),
                })?;
            }
            Ok(s)
        };
        let n_forward = base.n_forward;
        let mut saved: Vec<TensorId> = g
            .nodes()
            .iter()
            .skip(n_forward)
            .flat_map(|n| n.inputs.iter().flatten().copied())
            .filter(|&t| {
                base.forward_made.get(t).copied().unwrap_or(false)
                    && !base.folded.get(t).copied().unwrap_or(false)
            })
            .chain(
                // Forward inputs the backward reads are saved too.
                g.nodes()
                    .iter()
                    .skip(n_forward)
                    .flat_map(|n| n.inputs.iter().flatten().copied())
                    .filter(|&t| g.tensor(t).kind == TensorKind::Input && t != base.seed),
            )
            .collect();
        saved.sort_unstable();
        saved.dedup();
        let saved_bytes = sum(&mut saved.iter().copied())?;
        let all_gradient_bytes = sum(&mut base.params.iter().map(|p| p.grad))?;
        let gradient_bytes = if options.accumulate {
            all_gradient_bytes
        } else {
            0
        };
        let optimizer_state_bytes = sum(&mut base.params.iter().flat_map(|p| p.state.clone()))?;
        let weight_bytes = sum(&mut g
            .tensors()
            .iter_enumerated()
            .filter(|(t, x)| {
                x.kind == TensorKind::Weight || base.params.iter().any(|p| p.tensor == *t)
            })
            .map(|(t, _)| t))?;
        let mut parameter_elements: u64 = 0;
        for p in &base.params {
            let n = g
                .tensor(p.tensor)
                .elements(b)
                .map_err(|e| PlanError::Size {
                    tensor: p.tensor,
                    reason: e,
                })?;
            parameter_elements = parameter_elements.saturating_add(n);
        }
        let mut recompute_flops: u64 = 0;
        for &n in &self.recompute {
            recompute_flops =
                recompute_flops.saturating_add(super::flops::node_flops(g, g.node(n), b));
        }
        let mut forward_flops: u64 = 0;
        for node in g.nodes().iter().take(n_forward) {
            forward_flops = forward_flops.saturating_add(super::flops::node_flops(g, node, b));
        }
        Ok(TrainingSummary {
            optimizer: options.optimizer,
            loss: options.loss,
            fused_optimizer: options.fused_optimizer,
            accumulate: options.accumulate,
            optimizer_kernel: options.optimizer_kernel,
            checkpoint: options.checkpoint.describe(),
            checkpoints: choice.checkpoints.clone(),
            cheap_recompute: choice.cheap,
            parameters: base.params.iter().map(|p| p.tensor).collect(),
            parameter_elements,
            saved,
            saved_bytes,
            weight_bytes,
            gradient_bytes,
            all_gradient_bytes,
            optimizer_state_bytes,
            persistent_bytes: plan.weight_bytes,
            recompute: super::RecomputeCost {
                nodes: self.recompute.len() as u64,
                flops: recompute_flops,
                forward_flops,
            },
            phases: self.phases.clone(),
        })
    }
}

/// Rewrites the forward into training mode: BatchNormalization computes batch statistics
/// (as ONNX Runtime's `BatchNormInternal`, which also outputs the saved mean and inverse
/// standard deviation), LayerNormalization and its relatives output their statistics,
/// Dropout its mask, MaxPool its indices, SoftmaxCrossEntropyLoss its log-probabilities, a
/// fused `Attention` what its `kernel`'s backward reads (see `rules::attention`).
fn training_mode(g: &mut Graph, kernel: AttentionKernel) {
    for n in 0..g.nodes().len() {
        let id = NodeId(n as u32);
        let node = g.node(id).clone();
        let Some(&y) = node.outputs.first() else {
            continue;
        };
        let Some(x) = node.inputs.first().copied().flatten() else {
            continue;
        };
        let (xd, xs) = (g.tensor(x).dtype, g.tensor(x).shape.clone());
        let add = |g: &mut Graph, suffix: &str, dtype: DType, shape: Shape| -> TensorId {
            let mut name = format!("{}{suffix}", g.tensor(y).name);
            while g.find_tensor(&name).is_some() {
                name.push('_');
            }
            g.add_tensor(tensor(name, dtype, shape, TensorKind::Activation))
        };
        match node.op.as_str() {
            "BatchNormalization" => {
                let c: Shape = xs.iter().skip(1).take(1).cloned().collect();
                let sd = node
                    .inputs
                    .get(3)
                    .copied()
                    .flatten()
                    .map_or(xd, |m| g.tensor(m).dtype);
                // An export in training mode already has the running statistics' outputs
                // (opset 14 on: Y, running mean, running variance): they are kept.
                let mut outputs = vec![y];
                for (k, suffix) in [
                    ".running_mean",
                    ".running_var",
                    ".saved_mean",
                    ".saved_inv_std",
                ]
                .into_iter()
                .enumerate()
                {
                    let t = match node.outputs.get(k + 1) {
                        Some(&t) if k < 2 => t,
                        _ => add(g, suffix, sd, c.clone()),
                    };
                    outputs.push(t);
                }
                let n = g.node_mut(id);
                n.op = "com.microsoft.BatchNormInternal".to_owned();
                n.outputs = outputs;
                n.attrs.retain(|(k, _)| k != "training_mode");
                n.attrs.push(("training_mode".to_owned(), Attr::Int(1)));
            }
            "LayerNormalization"
            | "SimplifiedLayerNormalization"
            | "RMSNormalization"
            | "com.microsoft.SimplifiedLayerNormalization" => {
                let rank = xs.len() as i64;
                let axis = node.attr("axis").and_then(Attr::as_int).unwrap_or(-1);
                let axis = if axis < 0 { axis + rank } else { axis }.clamp(0, rank) as usize;
                let stats = memplan_ir::ones_from(&xs, axis);
                let stash = DType::F32;
                // LayerNormalization: Y, Mean, InvStdDev; the simplified forms: Y, InvStdDev.
                let want = if node.op == "LayerNormalization" {
                    3
                } else {
                    2
                };
                let mut outputs = node.outputs.clone();
                while outputs.len() < want {
                    let suffix = if outputs.len() == 1 && want == 3 {
                        ".mean"
                    } else {
                        ".inv_std"
                    };
                    outputs.push(add(g, suffix, stash, stats.clone()));
                }
                g.node_mut(id).outputs = outputs;
            }
            // Y, and the mean and inverse std-dev of each (sample, group) (InstanceNorm: of
            // each (sample, channel)), as PyTorch's `native_group_norm` saves them.
            "GroupNormalization" | "InstanceNormalization"
                if node.outputs.len() == 1 && xs.len() >= 2 =>
            {
                let per = if node.op == "GroupNormalization" {
                    match node.attr("num_groups").and_then(Attr::as_int) {
                        Some(k) => Expr::constant(k),
                        None => continue,
                    }
                } else {
                    xs[1].clone()
                };
                let stats: Shape = [xs[0].clone(), per].into_iter().collect();
                let mean = add(g, ".mean", DType::F32, stats.clone());
                let inv_std = add(g, ".inv_std", DType::F32, stats);
                g.node_mut(id).outputs.extend([mean, inv_std]);
            }
            "Dropout" if node.outputs.len() < 2 => {
                let shape = g.tensor(y).shape.clone();
                let m = add(g, ".mask", DType::Bool, shape);
                g.node_mut(id).outputs.push(m);
            }
            "MaxPool" if node.outputs.len() < 2 => {
                let shape = g.tensor(y).shape.clone();
                let m = add(g, ".indices", DType::I64, shape);
                g.node_mut(id).outputs.push(m);
            }
            "LSTM" | "GRU" => {
                // ONNX Runtime's LSTMTraining and GRUTraining also output what the gradient
                // reads: every step's cell state and gates ([seq, dirs, batch, k * hidden]).
                let hidden = node.attr("hidden_size").and_then(Attr::as_int).unwrap_or(1);
                let dirs = match node.attr("direction") {
                    Some(Attr::Str(d)) if d == "bidirectional" => 2,
                    _ => 1,
                };
                let batch_first = node.attr("layout").and_then(Attr::as_int) == Some(1);
                let (seq, batch) = match xs.as_slice() {
                    [a, b, _] if batch_first => (b.clone(), a.clone()),
                    [a, b, _] => (a.clone(), b.clone()),
                    _ => continue,
                };
                let gates = |k: i64| -> Shape {
                    [
                        seq.clone(),
                        Expr::constant(dirs),
                        batch.clone(),
                        Expr::constant(hidden.saturating_mul(k)),
                    ]
                    .into_iter()
                    .collect()
                };
                let extra: Vec<(&str, Shape)> = if node.op == "LSTM" {
                    vec![(".all_cell_states", gates(1)), (".iofc", gates(4))]
                } else {
                    vec![(".zrh", gates(3))]
                };
                for (suffix, shape) in extra {
                    let t = add(g, suffix, xd, shape);
                    g.node_mut(id).outputs.push(t);
                }
            }
            "com.microsoft.SkipLayerNormalization" if node.outputs.len() < 4 => {
                let stats: Shape = xs
                    .iter()
                    .enumerate()
                    .map(|(i, d)| {
                        if i + 1 < xs.len() {
                            d.clone()
                        } else {
                            Expr::constant(1)
                        }
                    })
                    .collect();
                let mut outputs = node.outputs.clone();
                while outputs.len() < 4 {
                    let (suffix, dtype, shape) = match outputs.len() {
                        1 => (".mean", DType::F32, stats.clone()),
                        2 => (".inv_std", DType::F32, stats.clone()),
                        _ => (".sum", xd, xs.clone()),
                    };
                    outputs.push(add(g, suffix, dtype, shape));
                }
                g.node_mut(id).outputs = outputs;
            }
            "Attention" => {
                // Q: [batch, heads, q, size], or [batch, q, heads * size] with
                // `q_num_heads`; K likewise; the past key [batch, kv_heads, past, size].
                let dim = |t: Option<TensorId>, d: usize| -> Option<Expr> {
                    g.tensor(t?).shape.get(d).cloned()
                };
                let k = node.inputs.get(1).copied().flatten();
                let past = node.inputs.get(4).copied().flatten();
                let (heads, q_len, new) = if xs.len() == 4 {
                    (dim(Some(x), 1), dim(Some(x), 2), dim(k, 2))
                } else {
                    let h = node.attr("q_num_heads").and_then(Attr::as_int);
                    (h.map(Expr::constant), dim(Some(x), 1), dim(k, 1))
                };
                let kv_len = match (new, past) {
                    (Some(n), Some(p)) => dim(Some(p), 2).and_then(|p| p.checked_add(&n).ok()),
                    (n, None) => n,
                    (None, Some(_)) => None,
                };
                let (Some(batch), Some(heads), Some(q_len), Some(kv_len)) =
                    (xs.first().cloned(), heads, q_len, kv_len)
                else {
                    continue;
                };
                let (dtype, shape): (DType, Shape) = match kernel {
                    AttentionKernel::Eager => (
                        node.attr("softmax_precision")
                            .and_then(Attr::as_int)
                            .and_then(float_of_code)
                            .unwrap_or(xd),
                        [batch, heads, q_len, kv_len].into_iter().collect(),
                    ),
                    AttentionKernel::Flash => {
                        (DType::F32, [batch, heads, q_len].into_iter().collect())
                    }
                };
                let t = add(g, ATTENTION_STAT, dtype, shape);
                g.node_mut(id).outputs.push(t);
            }
            "memplan.Attention" => {
                // The fused kernel's output with its value axis (`dv_axis`) holding the keys
                // (`kv_axis` of K) is as large as its scores; without that axis, its rows.
                let axis = |name: &str| {
                    node.attr(name)
                        .and_then(Attr::as_int)
                        .and_then(|a| usize::try_from(a).ok())
                };
                let (Some(dv), Some(kv), Some(k)) = (
                    axis("dv_axis"),
                    axis("kv_axis"),
                    node.inputs.get(1).copied().flatten(),
                ) else {
                    continue;
                };
                let (Some(keys), ys) = (g.tensor(k).shape.get(kv).cloned(), &g.tensor(y).shape)
                else {
                    continue;
                };
                if dv >= ys.len() {
                    continue;
                }
                let (dtype, shape): (DType, Shape) = match kernel {
                    AttentionKernel::Eager => {
                        let mut s = ys.clone();
                        s[dv] = keys;
                        let dtype = node
                            .attr("score_dtype")
                            .and_then(Attr::as_int)
                            .and_then(float_of_code)
                            .unwrap_or(xd);
                        (dtype, s)
                    }
                    AttentionKernel::Flash => {
                        let s: Shape = ys
                            .iter()
                            .enumerate()
                            .filter(|&(a, _)| a != dv)
                            .map(|(_, d)| d.clone())
                            .collect();
                        (DType::F32, s)
                    }
                };
                let t = add(g, ATTENTION_STAT, dtype, shape);
                g.node_mut(id).outputs.push(t);
            }
            "SoftmaxCrossEntropyLoss" if node.outputs.len() < 2 => {
                let lp = add(g, ".log_prob", xd, xs);
                g.node_mut(id).outputs.push(lp);
            }
            _ => {}
        }
    }
}

/// The float dtype of an ONNX element type code (`softmax_precision`).
fn float_of_code(code: i64) -> Option<DType> {
    match code {
        1 => Some(DType::F32),
        10 => Some(DType::F16),
        11 => Some(DType::F64),
        16 => Some(DType::BF16),
        _ => None,
    }
}

/// Adds the loss on `output`; returns the loss tensor and its seed gradient.
fn add_loss(
    g: &mut Graph,
    output: TensorId,
    loss: Loss,
) -> Result<(TensorId, TensorId), PlanError> {
    let out = g.tensor(output).clone();
    let fresh = |g: &Graph, base: String| {
        let mut name = base;
        while g.find_tensor(&name).is_some() {
            name.push('_');
        }
        name
    };
    let act = |g: &mut Graph, name: String, dtype: DType, shape: Shape, kind: TensorKind| {
        let name = fresh(g, name);
        g.add_tensor(tensor(name, dtype, shape, kind))
    };
    let node = |name: &str, op: &str, inputs: Vec<Option<TensorId>>, outputs: Vec<TensorId>| {
        Node::new(name.to_owned(), op.to_owned(), inputs, outputs)
    };
    let seed = |g: &mut Graph, loss: TensorId| {
        let t = g.tensor(loss).clone();
        act(
            g,
            format!("{}_grad", t.name),
            t.dtype,
            t.shape,
            TensorKind::Weight,
        )
    };
    match loss {
        Loss::None => {
            // The output's gradient is the caller's.
            let s = act(
                g,
                format!("{}_grad", out.name),
                out.dtype,
                out.shape.clone(),
                TensorKind::Input,
            );
            Ok((output, s))
        }
        Loss::CrossEntropy => {
            if out.shape.len() < 2 || !float(out.dtype) {
                // A tensor of the step's graph, which the caller does not hold.
                return Err(PlanError::LossNeedsScores {
                    output,
                    dtype: out.dtype,
                    rank: out.shape.len(),
                }
                .found_in(|| g.clone()));
            }
            g.set_kind(output, TensorKind::Activation);
            let labels_shape: Shape = out
                .shape
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != 1)
                .map(|(_, d)| d.clone())
                .collect();
            let labels = act(
                g,
                "labels".to_owned(),
                DType::I64,
                labels_shape,
                TensorKind::Input,
            );
            let l = act(
                g,
                "loss".to_owned(),
                out.dtype,
                Shape::new(),
                TensorKind::Output,
            );
            let lp = act(
                g,
                "log_prob".to_owned(),
                out.dtype,
                out.shape.clone(),
                TensorKind::Activation,
            );
            let mut n = node(
                "loss/SoftmaxCrossEntropyLoss",
                "SoftmaxCrossEntropyLoss",
                vec![Some(output), Some(labels)],
                vec![l, lp],
            );
            n.attrs
                .push(("reduction".to_owned(), Attr::Str("mean".to_owned())));
            g.add_node(n);
            let s = seed(g, l);
            Ok((l, s))
        }
        Loss::Mse => {
            g.set_kind(output, TensorKind::Activation);
            let like_out = |g: &mut Graph, name: &str, kind: TensorKind| {
                act(g, name.to_owned(), out.dtype, out.shape.clone(), kind)
            };
            let target = like_out(g, "target", TensorKind::Input);
            let diff = like_out(g, "loss/diff", TensorKind::Activation);
            let sq = like_out(g, "loss/square", TensorKind::Activation);
            let l = act(
                g,
                "loss".to_owned(),
                out.dtype,
                Shape::new(),
                TensorKind::Output,
            );
            g.add_node(node(
                "loss/Sub",
                "Sub",
                vec![Some(output), Some(target)],
                vec![diff],
            ));
            g.add_node(node(
                "loss/Mul",
                "Mul",
                vec![Some(diff), Some(diff)],
                vec![sq],
            ));
            let mut n = node("loss/ReduceMean", "ReduceMean", vec![Some(sq)], vec![l]);
            n.attrs.push(("keepdims".to_owned(), Attr::Int(0)));
            g.add_node(n);
            let s = seed(g, l);
            Ok((l, s))
        }
    }
}

/// The backward of an op without a rule (asked for with [`UnknownOps::SaveAll`]): one node
/// reading every input (values its bodies capture too), output and output gradient, writing
/// each needed input gradient.
fn save_all(e: &mut Emitter<'_>) -> Result<(), PlanError> {
    let node = e.g.node(e.cur).clone();
    let mut inputs: Vec<Option<TensorId>> = e.dy.clone();
    inputs.extend(node.inputs.iter().copied());
    inputs.extend(node.outputs.iter().map(|&o| Some(o)));
    inputs.extend(node.implicit_inputs.iter().map(|&x| Some(x)));
    let mut outputs = Vec::new();
    let mut wrt = Vec::new();
    for i in 0..node.inputs.len() + node.implicit_inputs.len() {
        if e.needs(i) {
            outputs.push(e.grad_out(i)?);
            wrt.push(i);
        }
    }
    let op = format!("memplan.{}Grad", node.op);
    e.emit(&op, inputs, outputs.clone(), Attrs::new(), &wrt);
    for (&i, &o) in wrt.iter().zip(&outputs) {
        e.contribute(i, o, true)?;
    }
    Ok(())
}

/// Makes parameter `p`'s running gradient its final one: in the persistent gradient region
/// (training state) when gradients accumulate, else the arena tensor the backward made, live
/// until its update.
fn finish_gradient(e: &mut Emitter<'_>, p: TensorId) -> Result<TensorId, PlanError> {
    let (grad, fresh) = e.acc[p].ok_or_else(|| err(format!("parameter {p} has no gradient")))?;
    if !e.options.accumulate {
        return Ok(grad);
    }
    if fresh {
        e.g.set_kind(grad, TensorKind::State);
        return Ok(grad);
    }
    // Shared with another gradient: copied into the gradient region.
    let base = format!("{}_grad", e.g.tensor(p).name);
    let out = e.like(&base, p);
    e.g.set_kind(out, TensorKind::State);
    let prev = e.cur;
    e.emit("Identity", vec![Some(grad)], vec![out], Attrs::new(), &[]);
    e.cur = prev;
    Ok(out)
}

/// The optimizer state of parameter `p`: its buffers, f32 when the parameter is 16-bit
/// (with an f32 master weight, last).
fn optimizer_state(e: &mut Emitter<'_>, p: TensorId, grad: TensorId) -> Result<Param, PlanError> {
    let t = e.g.tensor(p).clone();
    let sixteen = t.dtype.is_float() && t.dtype.bits().is_some_and(|b| b <= 16);
    let master = sixteen && e.options.master_weights;
    let dtype = if master { DType::F32 } else { t.dtype };
    let mut state = Vec::new();
    for buffer in e.options.optimizer.state_buffers() {
        let name = e.name(&format!("{}.{buffer}", t.name));
        state.push(e.g.add_tensor(tensor(name, dtype, t.shape.clone(), TensorKind::State)));
    }
    if master {
        let name = e.name(&format!("{}.master", t.name));
        state.push(e.g.add_tensor(tensor(name, DType::F32, t.shape.clone(), TensorKind::State)));
    }
    let _ = e.trainable.get(p);
    Ok(Param {
        tensor: p,
        grad,
        state,
    })
}

/// The op of an update that reads a denominator made beforehand (Adam and AdamW under the
/// `foreach` and `per-tensor` kernels): weight, gradient, denominator, then the state.
pub(crate) const ADAM_UPDATE: &str = "memplan.AdamUpdate";
/// `sqrt(exp_avg_sq)` of every parameter it reads, back to back in one new tensor.
pub(crate) const ADAM_SQRT: &str = "memplan.AdamSqrt";
/// The per-tensor kernel's `sqrt / bias_correction2_sqrt` into a new tensor (the `+ eps`
/// after it is in place).
pub(crate) const ADAM_DENOM: &str = "memplan.AdamDenom";

/// A node of the optimizer phase.
fn optimizer_node(
    name: String,
    op: &str,
    inputs: Vec<Option<TensorId>>,
    outputs: Vec<TensorId>,
) -> Node {
    Node::new(name, op.to_owned(), inputs, outputs)
}

/// A 1-D tensor holding the elements of every tensor of `of` back to back, of `dtype`.
fn flat_of(
    e: &mut Emitter<'_>,
    base: &str,
    of: &[TensorId],
    dtype: DType,
) -> Result<TensorId, PlanError> {
    let overflow = || PlanError::Overflow {
        what: format!("sizing `{base}`"),
    };
    let mut total = Expr::constant(0);
    for &t in of {
        let mut n = Expr::constant(1);
        for d in e.g.tensor(t).shape.iter() {
            n = n.checked_mul(d).map_err(|_| overflow())?;
        }
        total = total.checked_add(&n).map_err(|_| overflow())?;
    }
    Ok(e.tensor(base, dtype, [total].into_iter().collect()))
}

/// Queues the updates of `params`, at forward position `pos`, as the options' optimizer
/// kernel runs them (see [`super::OptimizerKernel`]): one in-place update per parameter,
/// after, for Adam and AdamW, the denominators the `foreach` kernel makes for every parameter
/// of a dtype at once (one group per dtype, in the order the parameters come) or the
/// `per-tensor` kernel for each parameter just before its update.
fn push_updates(e: &mut Emitter<'_>, params: &[Param], pos: u32) -> Result<(), PlanError> {
    use super::{Optimizer, OptimizerKernel};
    let adam = matches!(e.options.optimizer, Optimizer::Adam | Optimizer::AdamW);
    let kernel = if adam {
        e.options.optimizer_kernel
    } else {
        OptimizerKernel::Fused
    };
    let queue = |e: &mut Emitter<'_>, mut node: Node| {
        // Node names are unique: a forward node or an earlier one may have taken this one.
        while e.g.find_node(&node.name).is_some()
            || e.later.iter().any(|(n, _)| n.name == node.name)
        {
            node.name.push('_');
        }
        e.later.push((node, Phase::Optimizer));
        e.later_pos.push(pos);
    };
    let update = |e: &Emitter<'_>, p: &Param, denom: Option<TensorId>| {
        let name = format!("{}/update", e.g.tensor(p.tensor).name);
        let mut inputs = vec![Some(p.tensor), Some(p.grad)];
        let op = match denom {
            Some(d) => {
                inputs.push(Some(d));
                ADAM_UPDATE
            }
            None => e.options.optimizer.op(),
        };
        inputs.extend(p.state.iter().map(|&s| Some(s)));
        optimizer_node(name, op, inputs, Vec::new())
    };
    // exp_avg_sq: Adam's second state buffer.
    let second = |p: &Param| {
        p.state
            .get(1)
            .copied()
            .ok_or_else(|| err("an Adam parameter without its second moment".to_owned()))
    };
    match kernel {
        OptimizerKernel::Fused => {
            for p in params {
                let node = update(e, p, None);
                queue(e, node);
            }
        }
        OptimizerKernel::PerTensor => {
            for p in params {
                let v = second(p)?;
                let dtype = e.g.tensor(v).dtype;
                let pname = e.g.tensor(p.tensor).name.clone();
                let s = flat_of(e, &format!("{pname}.sqrt"), &[v], dtype)?;
                queue(
                    e,
                    optimizer_node(format!("{pname}/sqrt"), ADAM_SQRT, vec![Some(v)], vec![s]),
                );
                let d = flat_of(e, &format!("{pname}.denom"), &[v], dtype)?;
                queue(
                    e,
                    optimizer_node(format!("{pname}/denom"), ADAM_DENOM, vec![Some(s)], vec![d]),
                );
                let node = update(e, p, Some(d));
                queue(e, node);
            }
        }
        OptimizerKernel::Foreach => {
            // Groups by the moments' dtype, in the order of their first parameter.
            let mut groups: Vec<(DType, Vec<&Param>)> = Vec::new();
            for p in params {
                let dtype = e.g.tensor(second(p)?).dtype;
                match groups.iter_mut().find(|(d, _)| *d == dtype) {
                    Some((_, g)) => g.push(p),
                    None => groups.push((dtype, vec![p])),
                }
            }
            for (dtype, group) in groups {
                let vs: Vec<TensorId> =
                    group.iter().map(|p| second(p)).collect::<Result<_, _>>()?;
                let base = if group.len() == 1 {
                    e.g.tensor(group[0].tensor).name.clone()
                } else {
                    format!("optimizer.foreach.{}", dtype.name())
                };
                let s = flat_of(e, &format!("{base}.sqrt"), &vs, dtype)?;
                let name = format!("{base}/sqrt");
                queue(
                    e,
                    optimizer_node(
                        name,
                        ADAM_SQRT,
                        vs.iter().map(|&v| Some(v)).collect(),
                        vec![s],
                    ),
                );
                for p in group {
                    let node = update(e, p, Some(s));
                    queue(e, node);
                }
            }
        }
    }
    Ok(())
}
