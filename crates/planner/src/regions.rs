//! Regions: where each tensor's bytes live, how many there are, and how they are aligned.
//!
//! A tensor with bytes lives in exactly one place: the activation arena (activations, and
//! graph inputs and outputs unless the options leave them to the caller), the persistent
//! weight region (weights and constants, training state: parameters, gradient buffers,
//! optimizer moments, and, when the options fold them, the tensors computed from weights
//! alone at load: see `folding`), or the caller's memory. A tensor of zero bytes (an empty
//! tensor: a dim of 0) lives nowhere. Sizes are computed once per plan with checked
//! arithmetic; an unbound
//! symbol is an error naming the tensor and the symbol.

use memplan_ir::{Graph, IndexVec, TensorId, TensorKind};

use crate::error::PlanError;
use crate::options::PlanOptions;

/// The region a tensor's bytes live in: the same concept as `memplan_cuda_arena::Region`
/// (whose arena and weight regions are `Arena` and `Weights` here), plus the two places the
/// plan holds no bytes for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Region {
    /// In the activation arena, placed by the planner.
    Arena,
    /// In the persistent weight region.
    Weights,
    /// Provided by the caller (inputs or outputs the options leave out of the arena).
    Caller,
    /// Nowhere: the tensor has no bytes.
    Nowhere,
}

/// Per-tensor bytes, region and alignment for one binding of the symbols.
#[derive(Clone, Debug)]
pub(crate) struct Regions {
    /// Bytes of each tensor.
    pub bytes: IndexVec<TensorId, u64>,
    /// Where each tensor lives.
    pub region: IndexVec<TensorId, Region>,
    /// Offset alignment of each tensor (a power of two).
    pub align: IndexVec<TensorId, u64>,
}

impl Regions {
    /// Sizes and residences of every tensor of `graph` under `options`.
    pub fn new(graph: &Graph, options: &PlanOptions) -> Result<Regions, PlanError> {
        for align in
            std::iter::once(options.alignment).chain(options.dtype_alignment.iter().map(|d| d.1))
        {
            if !align.is_power_of_two() {
                return Err(PlanError::BadAlignment { align });
            }
        }
        let mut bytes = IndexVec::new();
        let mut region = IndexVec::new();
        let mut align = IndexVec::new();
        let derived = if options.fold_weights {
            crate::folding::weight_derived(graph, &options.op_table)
        } else {
            IndexVec::from_elem(false, graph.tensors().len())
        };
        for (id, t) in graph.tensors().iter_enumerated() {
            let b = t
                .bytes(&options.bindings)
                .map_err(|e| PlanError::no_size(graph, id, e))?;
            let r = match t.kind {
                _ if b == 0 => Region::Nowhere,
                TensorKind::Weight | TensorKind::State => Region::Weights,
                TensorKind::Activation if derived[id] => Region::Weights,
                TensorKind::Activation => Region::Arena,
                TensorKind::Input if options.inputs_in_arena => Region::Arena,
                TensorKind::Output if options.outputs_in_arena => Region::Arena,
                TensorKind::Input | TensorKind::Output => Region::Caller,
            };
            bytes.push(b);
            region.push(r);
            align.push(options.alignment_for(t.dtype));
        }
        Ok(Regions {
            bytes,
            region,
            align,
        })
    }

    /// Whether the arena holds `t`.
    pub fn in_arena(&self, t: TensorId) -> bool {
        self.region.get(t) == Some(&Region::Arena)
    }

    /// Bytes of `t`.
    pub fn bytes_of(&self, t: TensorId) -> u64 {
        self.bytes[t]
    }
}
