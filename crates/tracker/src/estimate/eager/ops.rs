//! PyTorch ops as the tape sees them: what each allocates in the forward, what autograd
//! saves for its backward (by `derivatives.yaml`: an input is saved only when the other
//! input's gradient needs it), and what its backward allocates (temporaries, then each
//! input's gradient, in the order PyTorch's formulas compute them).
//!
//! [`Eager`] adds what sits above the dispatcher: CUDA autocast (`--precision amp`), which
//! casts the inputs of matrix products to the 16-bit dtype (leaf weights once per forward,
//! through its cache, kept until autocast exits), runs reductions and `pow`/`rsqrt` in f32
//! and leaves every other op in its inputs' promoted dtype.
//!
//! Shapes are element counts; a tensor's layout matters in one place, the 3-d `bmm` view a
//! 4-d `matmul` takes of its inputs (a copy when the memory is not `[b·h, s, d]`-ordered),
//! and the blocks pass it explicitly.

use memplan_ir::DType;

use super::tape::{Grad, T, Tape};

/// The tape with autocast.
pub(crate) struct Eager<'t> {
    /// The tape.
    pub tape: &'t mut Tape,
    /// Autocast's 16-bit dtype while autocast is on.
    pub amp: Option<DType>,
    /// Autocast's cache of weight casts: (weight, cast), kept until [`Eager::autocast_exit`].
    cache: Vec<(T, T)>,
    /// The KV cache an inference forward fills.
    pub kv: Vec<T>,
    /// Tensors a module keeps for its caller to release (BERT's attention context).
    pub held: Vec<T>,
}

/// Promotion of two float dtypes: the wider one (f32 over 16-bit).
pub(crate) fn promote(a: DType, b: DType) -> DType {
    let bits = |d: DType| d.bits().unwrap_or(0);
    if bits(a) >= bits(b) { a } else { b }
}

impl<'t> Eager<'t> {
    /// The tape, autocast off.
    pub(crate) fn new(tape: &'t mut Tape) -> Eager<'t> {
        Eager {
            tape,
            amp: None,
            cache: Vec::new(),
            kv: Vec::new(),
            held: Vec::new(),
        }
    }

    /// Enters autocast to `dtype`.
    pub(crate) fn autocast_enter(&mut self, dtype: DType) {
        self.amp = Some(dtype);
    }

    /// Leaves autocast: its weight casts are released (the backward's saved references
    /// keep the ones still needed).
    pub(crate) fn autocast_exit(&mut self) {
        self.amp = None;
        for (_, cast) in std::mem::take(&mut self.cache) {
            self.tape.free(cast);
        }
    }

    /// Takes the autocast cache out (a checkpoint recomputation runs with its own).
    pub(crate) fn take_cache(&mut self) -> Vec<(T, T)> {
        std::mem::take(&mut self.cache)
    }

    /// Puts a cache back.
    pub(crate) fn restore_cache(&mut self, cache: Vec<(T, T)>) {
        self.cache = cache;
    }

    pub(crate) fn dtype(&self, t: T) -> DType {
        self.tape.dtype(t)
    }

    pub(crate) fn elems(&self, t: T) -> u64 {
        self.tape.elems(t)
    }

    pub(crate) fn free(&mut self, t: T) {
        self.tape.free(t);
    }

    pub(crate) fn keep(&mut self, t: T) -> T {
        self.tape.keep(t)
    }

    /// A view with a different element count (a slice, an expansion).
    pub(crate) fn view_sized(&mut self, t: T, elems: u64) -> T {
        self.tape.view(t, elems)
    }

    /// `t.to(dtype)`: a copy (none when already `dtype`, then a new name for `t`).
    pub(crate) fn to(&mut self, t: T, dtype: DType) -> T {
        if self.dtype(t) == dtype {
            return self.keep(t);
        }
        let e = self.elems(t);
        let d = self.dtype(t);
        self.tape.op(&[t], &[(e, dtype)], &[], &[Grad::New(d)], &[])[0]
    }

    /// A copy in the same dtype (`contiguous()` of a non-contiguous tensor, `clone`).
    pub(crate) fn copy(&mut self, t: T) -> T {
        let e = self.elems(t);
        let d = self.dtype(t);
        self.tape.op(&[t], &[(e, d)], &[], &[Grad::Pass(0)], &[])[0]
    }

    /// Autocast's cast of a matrix product's input (weights through the cache); a new name
    /// for `t` when no cast applies.
    fn cast_in(&mut self, t: T, weight: bool) -> T {
        let Some(target) = self.amp else {
            return self.keep(t);
        };
        if self.dtype(t) == target || !self.dtype(t).is_float() {
            return self.keep(t);
        }
        if weight {
            if let Some(&(_, c)) = self.cache.iter().find(|(w, _)| *w == t) {
                return self.keep(c);
            }
            let c = self.to(t, target);
            let c2 = self.keep(c);
            self.cache.push((t, c2));
            return c;
        }
        self.to(t, target)
    }

    /// Autocast's f32 cast (`pow`, `rsqrt`, `layer_norm`, losses).
    fn cast_f32(&mut self, t: T) -> T {
        if self.amp.is_some() && self.dtype(t) != DType::F32 && self.dtype(t).is_float() {
            self.to(t, DType::F32)
        } else {
            self.keep(t)
        }
    }

    /// `F.linear(x, w, b)` for `x` of `rows × in` elements and `w` of `out × in`: `mm` (or
    /// `addmm` with a bias) on the 2-d view. Saves `x` for `w`'s gradient and `w` for `x`'s.
    /// The backward makes `w`'s gradient, then `x`'s, then the bias's (a row sum).
    pub(crate) fn linear(&mut self, x: T, w: T, b: Option<T>, out_features: u64) -> T {
        let rows = self.rows_for(x, w, out_features);
        self.linear_rows(x, w, b, out_features, rows)
    }

    /// The rows of `x` for a `w` of `out_features` rows.
    fn rows_for(&self, x: T, w: T, out_features: u64) -> u64 {
        let in_features = self.elems(w) / out_features.max(1);
        self.elems(x) / in_features.max(1)
    }

    /// [`Eager::linear`] with the row count given (a zero-width input still has rows).
    pub(crate) fn linear_rows(
        &mut self,
        x: T,
        w: T,
        b: Option<T>,
        out_features: u64,
        rows: u64,
    ) -> T {
        self.project(x, w, b, out_features, rows, false)
    }

    /// A convolution whose kernel covers its stride (ViT's patch projection), as a linear
    /// over the patches, except that `ConvolutionBackward` saves the input and the weight
    /// whichever need a gradient: under autocast the weight's cast lives until the backward
    /// reaches it.
    pub(crate) fn patch_conv(&mut self, x: T, w: T, b: Option<T>, out_features: u64) -> T {
        let rows = self.rows_for(x, w, out_features);
        self.project(x, w, b, out_features, rows, true)
    }

    fn project(
        &mut self,
        x: T,
        w: T,
        b: Option<T>,
        out_features: u64,
        rows: u64,
        save_both: bool,
    ) -> T {
        let xc = self.cast_in(x, false);
        let wc = self.cast_in(w, true);
        let bc = b.map(|b| self.cast_in(b, true));
        let out_elems = self.tape.mul(rows, out_features);
        let dtype = self.dtype(xc);
        let (xg, wg) = (self.tape.requires_grad(xc), self.tape.requires_grad(wc));
        let mut saved = Vec::new();
        if wg || save_both {
            saved.push(1); // x, for the weight's gradient
        }
        if xg || save_both {
            saved.push(0); // w, for the input's gradient
        }
        let mut inputs = vec![wc, xc];
        let mut grads = vec![Grad::New(self.dtype(wc)), Grad::New(dtype)];
        if let Some(bc) = bc {
            inputs.push(bc);
            grads.push(Grad::New(self.dtype(bc)));
        }
        let y = self
            .tape
            .op(&inputs, &[(out_elems, dtype)], &saved, &grads, &[])[0];
        self.free(xc);
        self.free(wc);
        if let Some(bc) = bc {
            self.free(bc);
        }
        y
    }

    /// An element-wise op of one input with output dtype `out`; `save_in`/`save_out`: what
    /// its backward reads (silu, gelu: the input; tanh, sigmoid, exp: the output). The
    /// backward allocates the input's gradient.
    pub(crate) fn unary(&mut self, x: T, out: DType, save_in: bool, save_out: bool) -> T {
        let e = self.elems(x);
        let mut saved = Vec::new();
        if save_in {
            saved.push(0);
        }
        if save_out {
            saved.push(1);
        }
        let d = self.dtype(x);
        self.tape
            .op(&[x], &[(e, out)], &saved, &[Grad::New(d)], &[])[0]
    }

    /// `x * scalar` (or `/`, `+ scalar`): nothing saved, the backward allocates `grad * s`
    /// (`scaled`) or passes the gradient (`+ scalar`).
    pub(crate) fn scalar(&mut self, x: T, scaled: bool) -> T {
        let e = self.elems(x);
        let d = self.dtype(x);
        let g = if scaled { Grad::New(d) } else { Grad::Pass(0) };
        self.tape.op(&[x], &[(e, d)], &[], &[g], &[])[0]
    }

    /// `a * b` with broadcasting (the output has the larger element count, the promoted
    /// dtype). Saves `b` for `a`'s gradient and `a` for `b`'s. The backward computes the
    /// gradient of `b` then of `a`, each the output's size, then sums a broadcast one down.
    pub(crate) fn mul(&mut self, a: T, b: T) -> T {
        let (ea, eb) = (self.elems(a), self.elems(b));
        let e = ea.max(eb);
        let d = promote(self.dtype(a), self.dtype(b));
        let (ag, bg) = (self.tape.requires_grad(a), self.tape.requires_grad(b));
        let mut saved = Vec::new();
        if bg {
            saved.push(0);
        }
        if ag {
            saved.push(1);
        }
        // Inputs listed b first: the generated `MulBackward0::apply` computes `other`'s
        // gradient before `self`'s; the engine's `validate_outputs` then reduces and casts
        // them in input order, `self`'s first, while both are live (a reversed node).
        let out = self.tape.op(
            &[b, a],
            &[(e, d)],
            &saved.iter().map(|&i| 1 - i).collect::<Vec<_>>(),
            &[Grad::Sized(e, d), Grad::Sized(e, d)],
            &[],
        )[0];
        self.tape.reverse_inputs_of(out);
        out
    }

    /// `a + b` (or `-`) with broadcasting and promotion: nothing saved; the gradient passes
    /// to both (summed down or cast by delivery where an input is smaller or narrower).
    pub(crate) fn add(&mut self, a: T, b: T) -> T {
        let e = self.elems(a).max(self.elems(b));
        let d = promote(self.dtype(a), self.dtype(b));
        self.tape.op(
            &[a, b],
            &[(e, d)],
            &[],
            &[Grad::Pass(0), Grad::Pass(0)],
            &[],
        )[0]
    }

    /// `x.pow(2)`: saves `x`; the backward computes `x.pow(1)`, `2 ·` that and `grad ·` that.
    pub(crate) fn square(&mut self, x: T) -> T {
        let xc = self.cast_f32(x);
        let e = self.elems(xc);
        let d = self.dtype(xc);
        let b = self.tape.bytes(e, d);
        let y = self
            .tape
            .op(&[xc], &[(e, d)], &[0], &[Grad::New(d)], &[b, b])[0];
        self.free(xc);
        y
    }

    /// `x.mean(-1, keepdim=True)` over rows of `width`: nothing saved; the backward expands
    /// and divides (one tensor of `x`'s size).
    pub(crate) fn mean_last(&mut self, x: T, width: u64) -> T {
        let e = self.elems(x) / width.max(1);
        let d = self.dtype(x);
        self.tape.op(&[x], &[(e, d)], &[], &[Grad::New(d)], &[])[0]
    }

    /// `x.sum(dim)` reducing `x` to `elems`: nothing saved; the backward expands (a view
    /// that its consumer may copy: counted as a new tensor of `x`'s size).
    pub(crate) fn sum_to(&mut self, x: T, elems: u64, dtype: DType) -> T {
        let d = self.dtype(x);
        self.tape
            .op(&[x], &[(elems, dtype)], &[], &[Grad::New(d)], &[])[0]
    }

    /// `torch.rsqrt(x)`: saves the output.
    pub(crate) fn rsqrt(&mut self, x: T) -> T {
        let xc = self.cast_f32(x);
        let d = self.dtype(xc);
        let e = self.elems(xc);
        let b = self.tape.bytes(e, d);
        let y = self
            .tape
            .op(&[xc], &[(e, d)], &[1], &[Grad::New(d)], &[b, b])[0];
        self.free(xc);
        y
    }

    /// `nn.functional.softmax(x, dtype=dtype)` (or `log_softmax`): the input cast to `dtype`
    /// first when it differs, the output saved; the backward allocates the input's gradient.
    pub(crate) fn softmax(&mut self, x: T, dtype: DType) -> T {
        let xc = self.to(x, dtype);
        let e = self.elems(xc);
        let y = self
            .tape
            .op(&[xc], &[(e, dtype)], &[1], &[Grad::New(dtype)], &[])[0];
        self.free(xc);
        y
    }

    /// A batched matrix product `a @ b` (4-d `matmul` → `bmm`) with output of `out`
    /// elements; `copy_a`/`copy_b`: whether the 3-d view needs a copy (memory not in
    /// `[b·h, m, k]` order). Saves both (the copies when made); the backward makes `a`'s
    /// gradient then `b`'s.
    pub(crate) fn bmm(&mut self, a: T, b: T, out: u64, copy_a: bool, copy_b: bool) -> T {
        let ac0 = self.cast_in(a, false);
        let bc0 = self.cast_in(b, false);
        let ac = if copy_a {
            self.copy(ac0)
        } else {
            self.keep(ac0)
        };
        let bc = if copy_b {
            self.copy(bc0)
        } else {
            self.keep(bc0)
        };
        self.free(ac0);
        self.free(bc0);
        let d = self.dtype(ac);
        let (ag, bg) = (self.tape.requires_grad(ac), self.tape.requires_grad(bc));
        let mut saved = Vec::new();
        if bg {
            saved.push(0);
        }
        if ag {
            saved.push(1);
        }
        let y = self.tape.op(
            &[ac, bc],
            &[(out, d)],
            &saved,
            &[Grad::New(d), Grad::New(self.dtype(bc))],
            &[],
        )[0];
        self.free(ac);
        self.free(bc);
        y
    }

    /// `torch.cat` of `parts` (`elems` in all): nothing saved; the backward's gradients are
    /// slices of the output's (views).
    pub(crate) fn cat(&mut self, parts: &[T]) -> T {
        let e = parts.iter().map(|&p| self.elems(p)).sum::<u64>();
        let d = parts
            .iter()
            .map(|&p| self.dtype(p))
            .fold(self.dtype(parts[0]), promote);
        let g: Vec<Grad> = parts.iter().map(|_| Grad::Slice(0)).collect();
        self.tape.op(parts, &[(e, d)], &[], &g, &[])[0]
    }
}
