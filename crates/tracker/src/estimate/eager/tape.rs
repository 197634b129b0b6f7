//! The tape: PyTorch eager execution and autograd, by bytes only.
//!
//! A program (see [`super::blocks`]) runs ops on the tape as the modelling code runs them.
//! Every tensor an op returns is a fresh storage or a view of one; a storage lives while
//! something holds it: a Python name ([`Tape::free`] releases one), an autograd node that
//! saved it (released when the node has run in the backward), a gradient buffer waiting for
//! its node, or a parameter's `.grad`. The live bytes are summed at every allocation; the
//! largest sum is the step's peak, with the phase it falls in.
//!
//! The backward runs the nodes in the reverse order of their creation, as PyTorch's engine
//! does on one device: a node whose output gradients have arrived allocates its
//! temporaries, then the gradient of each input (or passes an output gradient through,
//! as `add` and views do), frees the temporaries, its output gradients and its saved
//! tensors, and delivers each input gradient: cast to the input's dtype when they differ
//! (autograd's `validate_outputs`), stolen by a parameter without `.grad` or added into its
//! `.grad` in place, kept for the producer of a computed tensor, or added to a gradient
//! already waiting there, out of place (`old + new`: what PyTorch does with fake tensors,
//! and at most one tensor more than a device's in-place accumulation).
//!
//! Checkpointed regions (full and selective recomputation) keep only their inputs; when
//! the backward reaches a region, the region's own nodes that save nothing run as long as
//! no node that saves is reached (PyTorch's non-reentrant checkpoint recomputes at the
//! first unpacked saved tensor: residual adds, casts and views have run by then, and hold
//! their gradients through the recomputation); then [`Tape::backward`] hands the region
//! back to the caller, which runs its program again with saving on
//! ([`Tape::recompute_into`]), and the recomputed nodes run before the rest, their
//! gradients for the region's inputs going straight to the inputs.
//!
//! Sizes past `u64` set an overflow flag that [`Tape::overflowed`] reports; no arithmetic
//! wraps.

use memplan_ir::DType;

/// A tensor on the tape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct T(u32);

/// What a storage holds, for the breakdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// Parameters and buffers.
    Weight,
    /// A parameter's `.grad`.
    Gradient,
    /// Optimizer states and master weights.
    State,
    /// Everything else: activations, saved tensors, temporaries, loss, casts.
    Activation,
}

/// Where the step is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum StepPhase {
    /// Before the first op (the persistent state alone).
    Start,
    /// The forward pass through layer `layer` (`None`: embeddings and the final norm).
    Forward {
        /// The layer, when in one.
        layer: Option<u32>,
    },
    /// The output head and the loss.
    Loss,
    /// The backward pass through layer `layer` (`None`: the head, the embeddings).
    Backward {
        /// The layer, when in one.
        layer: Option<u32>,
    },
    /// The optimizer step.
    Optimizer,
}

impl StepPhase {
    /// `forward`, `loss`, `backward` or `optimizer` (`start` before anything ran).
    pub fn name(self) -> &'static str {
        match self {
            StepPhase::Start => "start",
            StepPhase::Forward { .. } => "forward",
            StepPhase::Loss => "loss",
            StepPhase::Backward { .. } => "backward",
            StepPhase::Optimizer => "optimizer",
        }
    }

    /// The layer, if the phase is inside one.
    pub fn layer(self) -> Option<u32> {
        match self {
            StepPhase::Forward { layer } | StepPhase::Backward { layer } => layer,
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
struct Tensor {
    storage: u32,
    elems: u64,
    dtype: DType,
    requires_grad: bool,
    /// The node that produced it, for computed tensors that require grad.
    producer: Option<u32>,
    /// The parameter it is, for leaves.
    param: Option<u32>,
}

#[derive(Clone, Debug)]
struct Storage {
    bytes: u64,
    refs: u32,
    class: Class,
}

/// How a node makes the gradient of one of its inputs.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Grad {
    /// A new tensor of the input's size, in `dtype`.
    New(DType),
    /// A new tensor of `elems` elements of `dtype` (a different size than the input:
    /// reduced later by delivery).
    Sized(u64, DType),
    /// Output gradient `k` itself (add, views, clones).
    Pass(usize),
    /// A view of output gradient `k` of the input's size (`cat`'s gradients are slices of
    /// its output's).
    Slice(usize),
}

#[derive(Clone, Debug, Default)]
struct Node {
    inputs: Vec<T>,
    grads: Vec<Grad>,
    temps: Vec<u64>,
    outputs: Vec<T>,
    saved: Vec<u32>,
    phase_layer: Option<u32>,
    /// A checkpointed region, standing for its recomputed nodes.
    region: Option<u32>,
    /// The inputs are listed in the order the node computes their gradients, the reverse
    /// of PyTorch's input order (`mul`): autograd conforms and delivers them in its own.
    reversed: bool,
    /// The op saves tensors for its backward (inside a region's first forward, where
    /// nothing is kept: whether it would), so running its backward unpacks them.
    saves: bool,
}

/// A checkpointed region.
#[derive(Clone, Debug)]
pub(crate) struct Region {
    /// Caller's tag (which layer, which part).
    pub tag: u32,
    /// The region's inputs (kept alive until it is recomputed).
    pub inputs: Vec<T>,
    /// Its outputs.
    pub outputs: Vec<T>,
    /// The nodes of its first forward (saving nothing): those the backward reaches before
    /// one that unpacks a saved tensor run before the recomputation, as PyTorch's
    /// non-reentrant checkpoint recomputes at the first unpack.
    first: Vec<Node>,
    /// Which of `first` ran before the recomputation.
    ran: Vec<bool>,
}

/// An allocation or a free, in order, for the allocator model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// Storage `id` of `bytes`.
    Alloc(u32, u64),
    /// Storage `id` released.
    Free(u32),
}

/// The peak of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Peak {
    /// Bytes live at the peak, each storage rounded up to the caching allocator's 512-byte
    /// blocks (PyTorch's "allocated").
    pub bytes: u64,
    /// Where the peak falls.
    pub phase: StepPhase,
}

/// The tape.
#[derive(Debug)]
pub(crate) struct Tape {
    tensors: Vec<Tensor>,
    storages: Vec<Storage>,
    nodes: Vec<Node>,
    regions: Vec<Region>,
    grad_of: Vec<Option<T>>,
    param_grad: Vec<Option<T>>,
    /// Each parameter's gradients still to come in this backward (the uses of it that
    /// nodes recorded): autograd sums a parameter's gradients before `AccumulateGrad`
    /// makes the total its `.grad`, so the ones before the last are gradients in flight.
    param_uses: Vec<u32>,
    /// Live bytes (rounded to 512) in all, and of weights + gradients + states.
    live: u64,
    persistent: u64,
    peak: Peak,
    /// The largest `live - persistent` outside the optimizer step.
    activation_peak: u64,
    /// The largest live bytes of each phase: forward, loss, backward, optimizer.
    phase_peaks: [u64; 4],
    phase: StepPhase,
    /// Saving on (off inside a checkpointed region's first forward).
    saving: bool,
    grad_enabled: bool,
    overflow: bool,
    events: Option<Vec<Event>>,
    /// Regions opened and not yet closed: (tag, inputs, node count at the start).
    open: Vec<(u32, Vec<T>, usize)>,
    /// The backward's frames: the nodes still to run, innermost (a recomputed region)
    /// last.
    frames: Vec<Frame>,
    /// The recomputations under way: each fresh handle on a region input and the input it
    /// stands for (their gradients go straight to the input).
    fresh_inputs: Vec<(T, T)>,
    /// The recomputation under way stops after this node ([`Tape::recompute_begin`]).
    stop_after: Option<usize>,
    /// Past the early stop: allocations are empty.
    stopped: bool,
    /// TEMPORARY: a text trace.
    pub trace: Option<Vec<String>>,
    pub raw_live: u64,
    raw: Vec<u64>,
    /// The index of the first event of the measured step ([`Tape::reset_peak`]).
    step_start: usize,
}

/// Nodes `lo..next` still to run in the backward, newest first; for a recomputed region,
/// which one and the handles its recomputation started from.
#[derive(Clone, Debug)]
struct Frame {
    lo: usize,
    next: usize,
    region: Option<(usize, Vec<T>)>,
}

/// What [`Tape::backward`] needs from its caller.
#[derive(Clone, Debug)]
pub(crate) enum BackwardStep {
    /// The backward has finished.
    Done,
    /// Region `index` must be recomputed: run its program on the inputs
    /// [`Tape::region_inputs`] returns and call [`Tape::recompute_into`].
    Recompute(usize),
}

/// The caching allocator's block: every allocation is a multiple of 512 bytes.
pub(crate) fn round_block(bytes: u64) -> u64 {
    if bytes == 0 {
        0
    } else {
        bytes.div_ceil(512).saturating_mul(512)
    }
}

impl Tape {
    /// An empty tape; `events` records every allocation and free.
    pub(crate) fn new(events: bool) -> Tape {
        Tape {
            tensors: Vec::new(),
            storages: Vec::new(),
            nodes: Vec::new(),
            regions: Vec::new(),
            grad_of: Vec::new(),
            param_grad: Vec::new(),
            param_uses: Vec::new(),
            live: 0,
            persistent: 0,
            peak: Peak {
                bytes: 0,
                phase: StepPhase::Start,
            },
            activation_peak: 0,
            phase_peaks: [0; 4],
            phase: StepPhase::Start,
            saving: true,
            grad_enabled: true,
            overflow: false,
            events: events.then(Vec::new),
            open: Vec::new(),
            frames: Vec::new(),
            fresh_inputs: Vec::new(),
            stop_after: None,
            stopped: false,
            trace: None,
            raw_live: 0,
            raw: Vec::new(),
            step_start: 0,
        }
    }

    /// Whether a size passed `u64`.
    pub(crate) fn overflowed(&self) -> bool {
        self.overflow
    }

    /// The peak so far.
    pub(crate) fn peak(&self) -> Peak {
        self.peak
    }

    /// The largest activation bytes (live bytes that are not weights, gradients or
    /// optimizer state) outside the optimizer step.
    pub(crate) fn activation_peak(&self) -> u64 {
        self.activation_peak
    }

    /// The allocation and free events, if recorded.
    pub(crate) fn events(&self) -> &[Event] {
        self.events.as_deref().unwrap_or(&[])
    }

    /// Sets the phase the next allocations belong to.
    pub(crate) fn set_phase(&mut self, phase: StepPhase) {
        self.phase = phase;
    }

    /// Turns autograd recording on or off (`torch.no_grad()`).
    pub(crate) fn set_grad_enabled(&mut self, on: bool) {
        self.grad_enabled = on;
    }

    /// Each storage's bytes as asked for (not rounded to the allocator's blocks), by id.
    pub(crate) fn raw_sizes(&self) -> &[u64] {
        &self.raw
    }

    /// The index in [`Tape::events`] of the measured step's first event.
    pub(crate) fn step_start(&self) -> usize {
        self.step_start
    }

    /// Resets the peak to the live bytes (the start of the measured step).
    pub(crate) fn reset_peak(&mut self) {
        self.step_start = self.events().len();
        self.peak = Peak {
            bytes: self.live,
            phase: StepPhase::Start,
        };
        self.activation_peak = self.live - self.persistent;
        self.phase_peaks = [0; 4];
    }

    /// The largest live bytes of each phase since [`Tape::reset_peak`].
    pub(crate) fn phase_peaks(&self) -> super::PhasePeaks {
        let [forward, loss, backward, optimizer] = self.phase_peaks;
        super::PhasePeaks {
            forward,
            loss,
            backward,
            optimizer,
        }
    }

    /// `elems` elements of `dtype`, in bytes (overflow flagged).
    pub(crate) fn bytes(&mut self, elems: u64, dtype: DType) -> u64 {
        match dtype.bytes_for(elems) {
            Some(b) => b,
            None => {
                self.overflow = true;
                u64::MAX / 4
            }
        }
    }

    /// `a × b` (overflow flagged).
    pub(crate) fn mul(&mut self, a: u64, b: u64) -> u64 {
        match a.checked_mul(b) {
            Some(v) => v,
            None => {
                self.overflow = true;
                u64::MAX / 4
            }
        }
    }

    /// The product of `dims` (overflow flagged).
    pub(crate) fn prod(&mut self, dims: &[u64]) -> u64 {
        dims.iter().fold(1, |acc, &d| self.mul(acc, d))
    }

    fn new_storage(&mut self, bytes: u64, class: Class) -> u32 {
        // A recomputation past its early stop makes nothing.
        let bytes = if self.stopped { 0 } else { bytes };
        let id = self.storages.len() as u32;
        let rounded = round_block(bytes);
        self.storages.push(Storage {
            bytes: rounded,
            refs: 1,
            class,
        });
        if let Some(e) = &mut self.events {
            e.push(Event::Alloc(id, rounded));
        }
        self.raw.push(bytes);
        self.raw_live += bytes;
        if let Some(t) = &mut self.trace {
            t.push(format!(
                "  + {:>8} s{} [{:?}] live={}",
                bytes, id, self.phase, self.raw_live
            ));
        }
        self.live = self.live.checked_add(rounded).unwrap_or_else(|| {
            self.overflow = true;
            self.live
        });
        if class != Class::Activation {
            self.persistent = self.persistent.saturating_add(rounded);
        }
        if self.live > self.peak.bytes {
            self.peak = Peak {
                bytes: self.live,
                phase: self.phase,
            };
        }
        if self.phase != StepPhase::Optimizer {
            self.activation_peak = self.activation_peak.max(self.live - self.persistent);
        }
        let slot = match self.phase {
            StepPhase::Start | StepPhase::Forward { .. } => 0,
            StepPhase::Loss => 1,
            StepPhase::Backward { .. } => 2,
            StepPhase::Optimizer => 3,
        };
        self.phase_peaks[slot] = self.phase_peaks[slot].max(self.live);
        id
    }

    fn retain(&mut self, storage: u32) {
        self.storages[storage as usize].refs += 1;
    }

    fn release(&mut self, storage: u32) {
        let s = &mut self.storages[storage as usize];
        debug_assert!(s.refs > 0, "storage {storage} released twice");
        s.refs -= 1;
        if s.refs == 0 {
            let (bytes, class) = (s.bytes, s.class);
            self.live -= bytes;
            if class != Class::Activation {
                self.persistent -= bytes;
            }
            if let Some(e) = &mut self.events {
                e.push(Event::Free(storage));
            }
            self.raw_live -= self.raw[storage as usize];
            if let Some(t) = &mut self.trace {
                t.push(format!(
                    "  - {:>8} s{} live={}",
                    self.raw[storage as usize], storage, self.raw_live
                ));
            }
        }
    }

    fn push_tensor(&mut self, t: Tensor) -> T {
        let id = T(self.tensors.len() as u32);
        self.tensors.push(t);
        self.grad_of.push(None);
        id
    }

    /// A new tensor of `elems` elements of `dtype` that needs no gradient (input ids,
    /// pixels, masks, position tables).
    pub(crate) fn input(&mut self, elems: u64, dtype: DType) -> T {
        self.input_class(elems, dtype, Class::Activation)
    }

    /// [`Tape::input`] counted as `class`.
    pub(crate) fn input_class(&mut self, elems: u64, dtype: DType, class: Class) -> T {
        let bytes = self.bytes(elems, dtype);
        let storage = self.new_storage(bytes, class);
        self.push_tensor(Tensor {
            storage,
            elems,
            dtype,
            requires_grad: false,
            producer: None,
            param: None,
        })
    }

    /// A persistent tensor of `class` (a parameter when `trained`).
    pub(crate) fn persistent(
        &mut self,
        elems: u64,
        dtype: DType,
        class: Class,
        trained: bool,
    ) -> T {
        let bytes = self.bytes(elems, dtype);
        let storage = self.new_storage(bytes, class);
        let param = trained.then(|| {
            self.param_grad.push(None);
            self.param_uses.push(0);
            (self.param_grad.len() - 1) as u32
        });
        self.push_tensor(Tensor {
            storage,
            elems,
            dtype,
            requires_grad: trained,
            producer: None,
            param,
        })
    }

    /// Elements of `t`.
    pub(crate) fn elems(&self, t: T) -> u64 {
        self.tensors[t.0 as usize].elems
    }

    /// Dtype of `t`.
    pub(crate) fn dtype(&self, t: T) -> DType {
        self.tensors[t.0 as usize].dtype
    }

    /// Whether `t` requires a gradient.
    pub(crate) fn requires_grad(&self, t: T) -> bool {
        self.tensors[t.0 as usize].requires_grad
    }

    /// Releases one Python reference to `t`.
    pub(crate) fn free(&mut self, t: T) {
        let s = self.tensors[t.0 as usize].storage;
        self.release(s);
    }

    /// Another Python name for `t` (the same tensor).
    pub(crate) fn keep(&mut self, t: T) -> T {
        let s = self.tensors[t.0 as usize].storage;
        self.retain(s);
        t
    }

    /// The `.grad` of parameter tensor `p`, if any.
    pub(crate) fn grad_of_param(&self, p: T) -> Option<T> {
        let i = self.tensors[p.0 as usize].param?;
        self.param_grad[i as usize]
    }

    /// Clears every parameter's `.grad` (`zero_grad(set_to_none=True)`).
    pub(crate) fn zero_grad(&mut self) {
        for i in 0..self.param_grad.len() {
            if let Some(g) = self.param_grad[i].take() {
                self.free(g);
            }
        }
    }

    /// Sets parameter `p`'s `.grad` to `g` (taking the reference), releasing any old one.
    pub(crate) fn set_param_grad(&mut self, p: T, g: Option<T>) {
        let Some(i) = self.tensors[p.0 as usize].param else {
            return;
        };
        if let Some(old) = std::mem::replace(&mut self.param_grad[i as usize], g) {
            self.free(old);
        }
        if let Some(g) = g {
            let s = self.tensors[g.0 as usize].storage;
            self.set_class(s, Class::Gradient);
        }
    }

    fn set_class(&mut self, storage: u32, class: Class) {
        let s = &mut self.storages[storage as usize];
        if s.class == class {
            return;
        }
        let (old, bytes) = (s.class, s.bytes);
        s.class = class;
        if s.refs > 0 {
            if old == Class::Activation && class != Class::Activation {
                self.persistent += bytes;
            } else if old != Class::Activation && class == Class::Activation {
                self.persistent -= bytes;
            }
        }
    }

    /// Marks `t`'s storage as `class` from now on.
    pub(crate) fn mark(&mut self, t: T, class: Class) {
        let s = self.tensors[t.0 as usize].storage;
        self.set_class(s, class);
    }

    /// A view of `t` (same storage): `view`, `reshape` of a contiguous tensor, `transpose`,
    /// `expand`, `unsqueeze`, slices. Its gradient passes through to `t`.
    pub(crate) fn view(&mut self, t: T, elems: u64) -> T {
        let grad = if elems == self.tensors[t.0 as usize].elems {
            Grad::Pass(0)
        } else {
            // A slice's or an expansion's gradient is a new tensor of the input's size.
            Grad::New(self.tensors[t.0 as usize].dtype)
        };
        self.view_with(t, elems, grad)
    }

    /// A new handle on `t`'s storage whose backward makes `grad`: a view, or the result of
    /// an in-place op (`x /= s`: a new gradient `grad / s`).
    pub(crate) fn view_with(&mut self, t: T, elems: u64, grad: Grad) -> T {
        let src = self.tensors[t.0 as usize].clone();
        self.retain(src.storage);
        let v = self.push_tensor(Tensor {
            elems,
            producer: None,
            param: None,
            ..src
        });
        if src.requires_grad && self.grad_enabled {
            self.tensors[v.0 as usize].requires_grad = true;
            self.add_node(vec![t], vec![grad], Vec::new(), vec![v], Vec::new());
        }
        v
    }

    /// `t.add_(other)` (same size): a new handle on `t`'s storage whose backward passes
    /// the output's gradient to `t` and to `other`; nothing saved.
    pub(crate) fn add_in_place(&mut self, t: T, other: T) -> T {
        let src = self.tensors[t.0 as usize].clone();
        self.retain(src.storage);
        let v = self.push_tensor(Tensor {
            producer: None,
            param: None,
            ..src
        });
        let edges: Vec<T> = [t, other]
            .into_iter()
            .filter(|&i| self.tensors[i.0 as usize].requires_grad)
            .collect();
        if self.grad_enabled && !edges.is_empty() {
            self.tensors[v.0 as usize].requires_grad = true;
            let grads = vec![Grad::Pass(0); edges.len()];
            self.add_node(edges, grads, Vec::new(), vec![v], Vec::new());
        }
        v
    }

    /// Runs an op: `inputs` → new `outputs` (elements, dtype); saves `saved` (indices into
    /// `inputs`, then `outputs` numbered after the inputs) when autograd records it;
    /// `grads` gives, for each input that requires grad, how its gradient is made;
    /// `temps` are the backward's temporaries in bytes.
    pub(crate) fn op(
        &mut self,
        inputs: &[T],
        outputs: &[(u64, DType)],
        saved: &[usize],
        grads: &[Grad],
        temps: &[u64],
    ) -> Vec<T> {
        let record = self.grad_enabled
            && inputs
                .iter()
                .any(|&t| self.tensors[t.0 as usize].requires_grad);
        let mut outs = Vec::with_capacity(outputs.len());
        for &(elems, dtype) in outputs {
            let bytes = self.bytes(elems, dtype);
            let storage = self.new_storage(bytes, Class::Activation);
            outs.push(self.push_tensor(Tensor {
                storage,
                elems,
                dtype,
                requires_grad: record && dtype.is_float(),
                producer: None,
                param: None,
            }));
        }
        if record {
            let mut edges = Vec::new();
            let mut edge_grads = Vec::new();
            for (i, &t) in inputs.iter().enumerate() {
                if self.tensors[t.0 as usize].requires_grad {
                    edges.push(t);
                    edge_grads.push(grads.get(i).copied().unwrap_or(Grad::New(self.dtype(t))));
                }
            }
            let mut keep = Vec::new();
            if self.saving {
                for &k in saved {
                    let t = if k < inputs.len() {
                        inputs[k]
                    } else {
                        outs[k - inputs.len()]
                    };
                    let s = self.tensors[t.0 as usize].storage;
                    self.retain(s);
                    keep.push(s);
                }
            }
            self.add_node(edges, edge_grads, temps.to_vec(), outs.clone(), keep);
            if let Some(node) = self.nodes.last_mut() {
                node.saves = !saved.is_empty();
            }
            if self.stop_after == Some(self.nodes.len() - 1) {
                self.stopped = true;
            }
        }
        outs
    }

    fn add_node(
        &mut self,
        inputs: Vec<T>,
        grads: Vec<Grad>,
        temps: Vec<u64>,
        outputs: Vec<T>,
        saved: Vec<u32>,
    ) {
        let id = self.nodes.len() as u32;
        for &o in &outputs {
            self.tensors[o.0 as usize].producer = Some(id);
        }
        self.count_uses(&inputs, true);
        self.nodes.push(Node {
            inputs,
            grads,
            temps,
            outputs,
            saved,
            phase_layer: self.phase.layer(),
            region: None,
            reversed: false,
            saves: false,
        });
    }

    /// Counts (or uncounts) the parameter uses among a node's `inputs`.
    fn count_uses(&mut self, inputs: &[T], add: bool) {
        for &t in inputs {
            if let Some(p) = self.tensors[t.0 as usize].param {
                let u = &mut self.param_uses[p as usize];
                *u = if add {
                    u.saturating_add(1)
                } else {
                    u.saturating_sub(1)
                };
            }
        }
    }

    /// Whether the gradient now reaching parameter `p` is its last in this backward.
    fn last_use(&self, p: u32) -> bool {
        self.param_uses[p as usize] <= 1
    }

    /// Opens a checkpointed region over `inputs`: the ops until [`Tape::end_region`] save
    /// nothing; the region keeps its inputs.
    pub(crate) fn begin_region(&mut self, tag: u32, inputs: &[T]) {
        for &t in inputs {
            let s = self.tensors[t.0 as usize].storage;
            self.retain(s);
        }
        self.open.push((tag, inputs.to_vec(), self.nodes.len()));
        self.saving = false;
    }

    /// Closes the innermost region, whose results are `outputs`: its nodes are replaced by
    /// one node that recomputes them.
    pub(crate) fn end_region(&mut self, outputs: &[T]) {
        let Some((tag, inputs, start)) = self.open.pop() else {
            return;
        };
        self.saving = self.open.is_empty();
        // The region's own nodes saved nothing; they move to the region (the outputs'
        // producer becomes the region node), their parameter uses uncounted until they run.
        let first = self.nodes.split_off(start);
        for node in &first {
            self.count_uses(&node.inputs, false);
        }
        let region = self.regions.len() as u32;
        self.regions.push(Region {
            tag,
            inputs: inputs.clone(),
            outputs: outputs.to_vec(),
            first,
            ran: Vec::new(),
        });
        let edges: Vec<T> = inputs
            .iter()
            .copied()
            .filter(|&t| self.tensors[t.0 as usize].requires_grad)
            .collect();
        let id = self.nodes.len() as u32;
        for &o in outputs {
            self.tensors[o.0 as usize].producer = Some(id);
            self.tensors[o.0 as usize].requires_grad = true;
        }
        let grads = edges.iter().map(|&t| Grad::New(self.dtype(t))).collect();
        self.nodes.push(Node {
            inputs: edges,
            grads,
            temps: Vec::new(),
            outputs: outputs.to_vec(),
            saved: Vec::new(),
            phase_layer: self.phase.layer(),
            region: Some(region),
            reversed: false,
            saves: true,
        });
    }

    /// A region's tag and inputs.
    pub(crate) fn region(&self, index: usize) -> &Region {
        &self.regions[index]
    }

    /// Fresh handles on region `index`'s inputs for its recomputation (views: detached
    /// copies that require grad, as checkpoint's recomputation sees them).
    pub(crate) fn region_inputs(&mut self, index: usize) -> Vec<T> {
        let inputs = self.regions[index].inputs.clone();
        inputs
            .into_iter()
            .map(|t| {
                let src = self.tensors[t.0 as usize].clone();
                self.retain(src.storage);
                let fresh = self.push_tensor(Tensor {
                    producer: None,
                    param: None,
                    ..src
                });
                self.fresh_inputs.push((fresh, t));
                fresh
            })
            .collect()
    }

    /// Starts recording the recomputation of region `index` (its nodes are run next). As
    /// PyTorch's non-reentrant checkpoint stops recomputing once the last saved tensor is
    /// made again (early stop), the ops after the twin of the region's last node that saves
    /// allocate nothing.
    pub(crate) fn recompute_begin(&mut self, index: usize) -> usize {
        let start = self.nodes.len();
        match self.regions[index].first.iter().rposition(|n| n.saves) {
            Some(last) => self.stop_after = Some(start + last),
            None => self.stopped = true,
        }
        start
    }

    /// Ends the recomputation of region `index` started at node `start`: `recomputed` are
    /// its outputs (recomputed) and `fresh` the handles [`Tape::region_inputs`] gave. The
    /// waiting output gradients move to the recomputed outputs; the nodes from `start` on run
    /// next, and the gradients of `fresh` then go to the region's inputs.
    pub(crate) fn recompute_into(
        &mut self,
        index: usize,
        start: usize,
        fresh: &[T],
        recomputed: &[T],
    ) {
        self.stop_after = None;
        self.stopped = false;
        let outputs = self.regions[index].outputs.clone();
        for (o, r) in outputs.iter().zip(recomputed) {
            if let Some(g) = self.grad_of[o.0 as usize].take() {
                self.grad_of[r.0 as usize] = Some(g);
            }
        }
        // The gradients the nodes run before the recomputation left inside the region move
        // to the recomputed tensors, node by node (the same program made both; a selective
        // region's first forward may end in one view more, which has no twin), and those
        // nodes' recomputed twins do not run again.
        let first = std::mem::take(&mut self.regions[index].first);
        let ran = std::mem::take(&mut self.regions[index].ran);
        for (i, node) in first.iter().enumerate() {
            let Some(twin) = self.nodes.get(start + i) else {
                break;
            };
            let twin_outputs = twin.outputs.clone();
            for (o, r) in node.outputs.iter().zip(twin_outputs) {
                if let Some(g) = self.grad_of[o.0 as usize].take() {
                    self.grad_of[r.0 as usize] = Some(g);
                }
            }
            if ran.get(i).copied().unwrap_or(false) {
                let inputs = std::mem::take(&mut self.nodes[start + i].inputs);
                self.count_uses(&inputs, false);
                self.nodes[start + i].outputs.clear();
            }
        }
        // Only the recomputed nodes hold the recomputed outputs now.
        for &r in recomputed {
            self.free(r);
        }
        self.frames.push(Frame {
            lo: start,
            next: self.nodes.len(),
            region: Some((index, fresh.to_vec())),
        });
    }

    /// Starts the backward from the scalar `loss` (its gradient, a one, is allocated).
    pub(crate) fn backward_start(&mut self, loss: T) {
        let one = self.input(1, self.dtype(loss));
        self.grad_of[loss.0 as usize] = Some(one);
        self.frames.push(Frame {
            lo: 0,
            next: self.nodes.len(),
            region: None,
        });
    }

    /// Runs the backward until it ends or needs a region recomputed.
    pub(crate) fn backward(&mut self) -> BackwardStep {
        loop {
            let Some(frame) = self.frames.last_mut() else {
                return BackwardStep::Done;
            };
            if frame.next == frame.lo {
                let frame = self.frames.pop().expect("a frame");
                if let Some((region, fresh)) = frame.region {
                    self.finish_region(region, &fresh);
                } else {
                    // Nodes never reached keep their saved tensors until the graph goes.
                    for n in 0..self.nodes.len() {
                        let saved = std::mem::take(&mut self.nodes[n].saved);
                        for s in saved {
                            self.release(s);
                        }
                    }
                    // Every `.grad` is final now.
                    for p in 0..self.param_grad.len() {
                        self.param_uses[p] = 0;
                        if let Some(g) = self.param_grad[p] {
                            self.mark(g, Class::Gradient);
                        }
                    }
                }
                continue;
            }
            frame.next -= 1;
            let n = frame.next;
            let waiting = self.nodes[n]
                .outputs
                .iter()
                .any(|o| self.grad_of[o.0 as usize].is_some());
            if !waiting {
                continue;
            }
            if let Some(region) = self.nodes[n].region {
                self.phase = StepPhase::Backward {
                    layer: self.nodes[n].phase_layer,
                };
                self.run_before_recompute(region as usize);
                return BackwardStep::Recompute(region as usize);
            }
            // A node runs once: its record leaves the tape (no copy of its lists).
            let mut node = std::mem::take(&mut self.nodes[n]);
            let saved = std::mem::take(&mut node.saved);
            self.run_node(&node, saved);
        }
    }

    /// Runs region `region`'s first-forward nodes the backward reaches before one that
    /// saves (whose unpacking makes PyTorch recompute): residual adds, casts, views,
    /// reductions' gradients, newest first.
    fn run_before_recompute(&mut self, region: usize) {
        let count = self.regions[region].first.len();
        let mut ran = vec![false; count];
        for (i, done) in ran.iter_mut().enumerate().rev() {
            let node = &self.regions[region].first[i];
            let waiting = node
                .outputs
                .iter()
                .any(|o| self.grad_of[o.0 as usize].is_some());
            if !waiting {
                continue;
            }
            if node.saves || node.region.is_some() {
                break;
            }
            let node = node.clone();
            self.count_uses(&node.inputs, true);
            self.run_node(&node, Vec::new());
            *done = true;
        }
        self.regions[region].ran = ran;
    }

    /// After a region's recomputed nodes ran: its fresh inputs go (their gradients went to
    /// its inputs as they came).
    fn finish_region(&mut self, region: usize, fresh: &[T]) {
        let inputs = self.regions[region].inputs.clone();
        self.fresh_inputs.retain(|(f, _)| !fresh.contains(f));
        for (&f, &x) in fresh.iter().zip(&inputs) {
            if let Some(g) = self.grad_of[f.0 as usize].take() {
                let g = self.conform(x, g);
                self.deliver(x, g);
            }
            self.free(f);
        }
        for &x in &inputs {
            self.free(x);
        }
    }

    /// Runs `node`'s backward; `saved` are its saved storages (released once it has run).
    fn run_node(&mut self, node: &Node, saved: Vec<u32>) {
        self.phase = StepPhase::Backward {
            layer: node.phase_layer,
        };
        let out_grads: Vec<Option<T>> = node
            .outputs
            .iter()
            .map(|o| self.grad_of[o.0 as usize].take())
            .collect();
        let mut temps = Vec::with_capacity(node.temps.len());
        for &bytes in &node.temps {
            temps.push(self.new_storage(bytes, Class::Activation));
        }
        let mut produced = Vec::with_capacity(node.inputs.len());
        for (&x, &how) in node.inputs.iter().zip(&node.grads) {
            let g = match how {
                Grad::Pass(k) => match out_grads.get(k).copied().flatten() {
                    Some(g) => self.keep(g),
                    None => self.fresh_like(x, self.dtype(x)),
                },
                Grad::Slice(k) => match out_grads.get(k).copied().flatten() {
                    Some(g) => {
                        let (e, d) = (self.elems(x), self.dtype(g));
                        self.tape_view(g, e, d)
                    }
                    None => self.fresh_like(x, self.dtype(x)),
                },
                Grad::New(dtype) => {
                    // A parameter's first gradient becomes its `.grad` as it is: counted as
                    // a gradient from the start (as the ground truth classifies it).
                    let stolen = self.tensors[x.0 as usize]
                        .param
                        .is_some_and(|p| self.param_grad[p as usize].is_none() && self.last_use(p))
                        && dtype == self.dtype(x);
                    let class = if stolen {
                        Class::Gradient
                    } else {
                        Class::Activation
                    };
                    let elems = self.elems(x);
                    self.input_class(elems, dtype, class)
                }
                Grad::Sized(elems, dtype) => self.input(elems, dtype),
            };
            produced.push(g);
        }
        for s in temps {
            self.release(s);
        }
        // The engine's `validate_outputs` runs before the node's output gradients and saved
        // tensors go (`call_function` holds the gradients until it returns, and
        // `release_variables` comes after it): each gradient reduced to its input's size and
        // cast to its dtype while they are still live.
        let mut pairs: Vec<(T, T)> = node.inputs.iter().copied().zip(produced).collect();
        if node.reversed {
            pairs.reverse();
        }
        let pairs: Vec<(T, T)> = pairs
            .into_iter()
            .map(|(x, g)| (x, self.conform(x, g)))
            .collect();
        for g in out_grads.into_iter().flatten() {
            self.free(g);
        }
        for s in saved {
            self.release(s);
        }
        for (x, g) in pairs {
            self.deliver(x, g);
        }
    }

    /// Marks the node that made `out` as listing its inputs in the reverse of PyTorch's
    /// order (see `Node::reversed`).
    pub(crate) fn reverse_inputs_of(&mut self, out: T) {
        if let Some(n) = self.tensors[out.0 as usize].producer {
            self.nodes[n as usize].reversed = true;
        }
    }

    /// `g` reduced to `x`'s size and cast to its dtype where they differ (a new tensor, `g`
    /// released), as autograd's `validate_outputs` does.
    fn conform(&mut self, x: T, g: T) -> T {
        let (xe, xd) = (self.elems(x), self.dtype(x));
        if self.elems(g) != xe || self.dtype(g) != xd {
            let cast = self.input(xe, xd);
            self.free(g);
            cast
        } else {
            g
        }
    }

    /// A handle on `g`'s storage with `elems` elements of `dtype`.
    fn tape_view(&mut self, g: T, elems: u64, dtype: DType) -> T {
        let storage = self.tensors[g.0 as usize].storage;
        self.retain(storage);
        self.push_tensor(Tensor {
            storage,
            elems,
            dtype,
            requires_grad: false,
            producer: None,
            param: None,
        })
    }

    fn fresh_like(&mut self, x: T, dtype: DType) -> T {
        let elems = self.elems(x);
        self.input(elems, dtype)
    }

    /// Hands gradient `g` (of `x`'s size and dtype: [`Tape::conform`]) to `x`: to its
    /// parameter's `.grad`, its producer's buffer, or added to a waiting gradient.
    fn deliver(&mut self, x: T, g: T) {
        let (xe, xd) = (self.elems(x), self.dtype(x));
        if let Some(p) = self.tensors[x.0 as usize].param {
            let class = if self.last_use(p) {
                Class::Gradient
            } else {
                Class::Activation
            };
            let u = &mut self.param_uses[p as usize];
            *u = u.saturating_sub(1);
            match self.param_grad[p as usize] {
                None => {
                    let s = self.tensors[g.0 as usize].storage;
                    // A view into a larger gradient (ViT's class token at batch 1: its slice
                    // of the embeddings' gradient, which the expansion passes on unreduced)
                    // is a tensor of its own, contiguous, that AccumulateGrad steals: the
                    // whole storage stays alive as the `.grad`.
                    let own = round_block(self.bytes(xe, xd));
                    let view = self.storages[s as usize].bytes > own;
                    if self.storages[s as usize].refs > 1 && !view {
                        // Shared (a passed-through gradient): AccumulateGrad clones it.
                        let copy = self.input_class(xe, xd, class);
                        self.free(g);
                        self.param_grad[p as usize] = Some(copy);
                    } else {
                        self.param_grad[p as usize] = Some(g);
                        self.set_class(s, class);
                    }
                }
                Some(old) => {
                    // `grad + new` into a new tensor: what fake tensors do (a device adds in
                    // place), one parameter's size more at this moment.
                    let sum = self.input_class(xe, xd, class);
                    self.free(old);
                    self.free(g);
                    self.param_grad[p as usize] = Some(sum);
                }
            }
            return;
        }
        if self.tensors[x.0 as usize].producer.is_none() {
            // A fresh region input: its gradient goes on to the input it stands for, as
            // PyTorch's non-reentrant checkpoint runs the forward's own nodes (the input's
            // gradient accumulates as its uses' gradients come).
            if let Some(&(_, input)) = self.fresh_inputs.iter().find(|(f, _)| *f == x) {
                let g = self.conform(input, g);
                self.deliver(input, g);
                return;
            }
            match self.grad_of[x.0 as usize].take() {
                None => self.grad_of[x.0 as usize] = Some(g),
                Some(old) => {
                    let sum = self.input(xe, xd);
                    self.free(old);
                    self.free(g);
                    self.grad_of[x.0 as usize] = Some(sum);
                }
            }
            return;
        }
        match self.grad_of[x.0 as usize].take() {
            None => self.grad_of[x.0 as usize] = Some(g),
            Some(old) => {
                let sum = self.input(xe, xd);
                self.free(old);
                self.free(g);
                self.grad_of[x.0 as usize] = Some(sum);
            }
        }
    }
}
