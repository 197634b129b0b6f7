//! The optimizer step as `torch.optim` runs it, by what it allocates.
//!
//! States (`exp_avg`, `exp_avg_sq`; SGD's momentum buffer) have each parameter's shape in
//! the dtype of the tensor they update: f32 for f32 parameters and for the f32 master
//! weights of `--precision mixed`, 16-bit under `--precision pure`. The update itself:
//!
//! - `foreach` (`_multi_tensor_adam`): every update is in place but
//!   `exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)`, one new tensor per parameter,
//!   all alive until the update ends;
//! - `per-tensor` (`_single_tensor_adam`): `denom = (exp_avg_sq.sqrt() / c).add_(eps)` per
//!   parameter, two temporaries, the previous parameter's `denom` released when the name
//!   is rebound;
//! - `fused` (`_fused_adamw_`): in place, no temporaries; its step counts live on the
//!   device (one 512-byte block each), where the other kernels keep them on the host.
//!
//! `mixed` first casts each 16-bit gradient to f32 as its master's gradient and releases
//! the 16-bit one (one parameter at a time), steps the masters, and copies each back into
//! its 16-bit weight in place.

use memplan_ir::DType;

use super::models::Net;
use super::ops::Eager;
use super::tape::{Class, T};
use super::{Optimizer, OptimizerKernel, Precision, Setup};

/// The optimizer's persistent tensors.
#[derive(Debug)]
pub(crate) struct State {
    /// Per parameter (registration order): the master weight (mixed) and the state buffers.
    masters: Vec<Option<T>>,
    /// Bytes of states and masters.
    pub bytes: u64,
    /// The dtype the update runs in.
    dtype: DType,
}

impl State {
    /// The states of a steady-state step (they exist before it starts).
    pub(crate) fn new(e: &mut Eager<'_>, net: &Net, setup: &Setup) -> State {
        let mixed = setup.precision == Precision::Mixed;
        let dtype = match setup.precision {
            Precision::Pure => setup.dtype,
            _ => DType::F32,
        };
        let buffers = setup.optimizer.states();
        let mut masters = Vec::new();
        let mut bytes = 0u64;
        for &p in &net.params {
            let n = e.elems(p);
            let master = mixed.then(|| e.tape.persistent(n, DType::F32, Class::State, false));
            for _ in 0..buffers {
                e.tape.persistent(n, dtype, Class::State, false);
            }
            if setup.kernel == OptimizerKernel::Fused && buffers > 0 {
                e.tape.persistent(1, DType::F32, Class::State, false);
            }
            let one = e.tape.bytes(n, dtype);
            let per = e.tape.mul(one, buffers + u64::from(mixed));
            bytes = bytes.saturating_add(per);
            masters.push(master);
        }
        // Parameters without a gradient: masters only.
        for &p in &net.idle {
            if mixed {
                let n = e.elems(p);
                e.tape.persistent(n, DType::F32, Class::State, false);
                let one = e.tape.bytes(n, DType::F32);
                bytes = bytes.saturating_add(one);
            }
        }
        State {
            masters,
            bytes,
            dtype,
        }
    }

    /// One update of every parameter that has a gradient.
    pub(crate) fn step(&self, e: &mut Eager<'_>, net: &Net, setup: &Setup, _first: bool) {
        // The gradients the update reads: the parameters' own, or (mixed) f32 copies.
        let mut grads = Vec::new();
        for (i, &p) in net.params.iter().enumerate() {
            let Some(g) = e.tape.grad_of_param(p) else {
                grads.push(None);
                continue;
            };
            if let Some(m) = self.masters[i] {
                let n = e.elems(p);
                let g32 = e.tape.input(n, DType::F32);
                e.tape.mark(g32, Class::Gradient);
                e.tape.set_param_grad(p, None);
                let _ = (g, m);
                grads.push(Some(g32));
            } else {
                grads.push(Some(g));
            }
        }
        let adam = matches!(setup.optimizer, Optimizer::Adam | Optimizer::AdamW);
        if adam {
            match setup.kernel {
                OptimizerKernel::Fused => {}
                OptimizerKernel::Foreach => {
                    let mut sqrt = Vec::new();
                    for (i, g) in grads.iter().enumerate() {
                        if g.is_some() {
                            let n = e.elems(net.params[i]);
                            sqrt.push(e.tape.input(n, self.dtype));
                        }
                    }
                    for t in sqrt {
                        e.free(t);
                    }
                }
                OptimizerKernel::PerTensor => {
                    let mut previous: Option<T> = None;
                    for (i, g) in grads.iter().enumerate() {
                        if g.is_none() {
                            continue;
                        }
                        let n = e.elems(net.params[i]);
                        let root = e.tape.input(n, self.dtype);
                        let denom = e.tape.input(n, self.dtype);
                        e.free(root);
                        if let Some(prev) = previous.replace(denom) {
                            e.free(prev);
                        }
                    }
                    if let Some(prev) = previous {
                        e.free(prev);
                    }
                }
            }
        }
        // The masters' f32 gradients go with zero_grad.
        for (i, g) in grads.into_iter().enumerate() {
            if self.masters[i].is_some()
                && let Some(g) = g
            {
                e.free(g);
            }
        }
    }
}
