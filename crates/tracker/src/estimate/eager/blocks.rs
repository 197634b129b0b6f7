//! The building blocks of the transformers modelling code, as the ops they run: norms,
//! rotary embeddings, attention (eager, SDPA with the kernel PyTorch picks on a GPU, flash),
//! MLPs and their activations, mixture-of-experts layers, dropout and the losses.
//!
//! Each block follows the Python of `transformers` 5 line by line: a name rebound releases
//! the old tensor ([`Eager::free`]), and what autograd saves is what the ops save. Where a
//! block differs between families (Llama's RMSNorm casts before the weight, OLMo 2's after,
//! Gemma's scales by `1 + w` in f32), the variant is an argument.

use memplan_ir::DType;

use super::ops::Eager;
use super::tape::{Grad, T};

/// The activation of an MLP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Activation {
    /// `silu`: saves its input.
    Silu,
    /// `gelu` (erf) or `gelu_pytorch_tanh`: one kernel that saves its input.
    Gelu,
    /// `gelu_new` (GPT-2): the tanh formula in Python, five tensors a call.
    GeluNew,
    /// `relu`: saves its output.
    Relu,
}

/// The normalisation layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NormKind {
    /// Llama's RMSNorm: f32 statistics, cast back, then `weight *`.
    Llama,
    /// OLMo 2's: `weight *` in f32, then cast back.
    Olmo,
    /// Gemma's: everything in f32 with `1 + weight`, then cast back.
    Gemma,
    /// `nn.LayerNorm`: one kernel saving its input and two f32 row statistics.
    Layer,
    /// Cohere's `CohereLayerNorm`: a LayerNorm without bias written out in f32 ops.
    Cohere,
    /// OLMo's `OlmoLayerNorm`: `F.layer_norm(x.to(f32), ..., None, None).to(x.dtype)`, no
    /// parameters (the weight handle is ignored).
    OlmoNoParams,
}

/// Which kernel attention runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// Scores materialised by `matmul` and `softmax` (transformers' `eager`).
    Eager,
    /// cuDNN attention (SDPA on sm90 with a recent cuDNN, 16-bit inputs).
    Cudnn,
    /// FlashAttention (SDPA's or `flash_attn`'s).
    Flash,
    /// Memory-efficient attention (SDPA: f32 inputs, masks, wide heads).
    Efficient,
    /// SDPA's math fallback: the eager computation inside the op.
    Math,
}

/// One attention call's shape and options.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttnCall {
    pub batch: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub seq: u64,
    pub head_dim: u64,
    pub v_head_dim: u64,
    /// A mask tensor is passed (eager always; SDPA when sliding past the window).
    pub mask: Option<T>,
    /// Dropout on the probabilities in training.
    pub dropout: bool,
    /// Gemma 2's tanh softcapping of the scores (eager).
    pub softcap: bool,
    /// Eager softmax in f32 (`dtype=torch.float32`; GPT-2 runs it in the input dtype).
    pub f32_softmax: bool,
    /// `repeat_kv` before the kernel (eager, or SDPA that cannot use `enable_gqa`).
    pub repeat_kv: bool,
    /// Whether q is laid out `[b, s, h, d]` in memory (the projections' views and what
    /// element-wise ops on them return).
    pub bshd: bool,
    /// Whether K and V are (a KV cache's `torch.cat` makes them `[b, h, s, d]`).
    pub kv_bshd: bool,
    /// Falcon's eager scores: scaled in place (`/=`) and still bound while the mask is
    /// added and the softmax runs.
    pub scores_held: bool,
    /// K and V are views expanded over the query heads (one key/value head repeated).
    pub expanded: bool,
    /// The inputs need gradients (training): the fused kernels then return their
    /// log-sum-exp (without, cuDNN and the efficient kernel return an empty one).
    pub grad: bool,
    /// gpt-oss's learned sinks (one per head), which its eager attention concatenates to
    /// the scores as one more key.
    pub sinks: Option<T>,
}

/// The rotary tables of one kind of layer: `cos`, `sin` (`[1, s, rotary_dim]`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rotary {
    pub cos: T,
    pub sin: T,
    pub dim: u64,
}

impl Eager<'_> {
    /// `nn.Dropout(p)` in training: `native_dropout` returns the output and a one-byte mask
    /// per element, and saves the mask.
    pub(crate) fn dropout(&mut self, x: T) -> T {
        let e = self.elems(x);
        let d = self.dtype(x);
        let outs = self.tape.op(
            &[x],
            &[(e, d), (e, DType::Bool)],
            &[2],
            &[Grad::New(d)],
            &[],
        );
        self.free(outs[1]);
        outs[0]
    }

    /// A norm over rows of `width` (`weight`, `bias` its parameters).
    pub(crate) fn norm(
        &mut self,
        kind: NormKind,
        x: T,
        weight: T,
        bias: Option<T>,
        width: u64,
    ) -> T {
        match kind {
            NormKind::Layer => self.layer_norm(x, weight, bias, width),
            NormKind::Cohere => self.cohere_norm(x, weight, width),
            NormKind::OlmoNoParams => self.olmo_layer_norm(x, width),
            _ => self.rms_norm(kind, x, weight, width),
        }
    }

    fn rms_norm(&mut self, kind: NormKind, x: T, weight: T, width: u64) -> T {
        let input = self.dtype(x);
        // `hidden_states = hidden_states.to(torch.float32)` (Gemma: `x.float()`).
        let xf = self.to(x, DType::F32);
        let sq = self.square(xf);
        let var = self.mean_last(sq, width);
        self.free(sq);
        let ve = self.scalar(var, false);
        let r = self.rsqrt(ve);
        self.free(ve);
        let n = self.mul(xf, r);
        self.free(r);
        self.free(xf);
        let out = match kind {
            NormKind::Olmo => {
                // `(self.weight * hidden_states).to(input_dtype)`
                let y = self.mul(weight, n);
                let out = self.to(y, input);
                self.free(y);
                out
            }
            NormKind::Gemma => {
                // `output * (1.0 + self.weight.float())`, then `.type_as(x)`.
                self.free(var);
                let wf = self.to(weight, DType::F32);
                let w1 = self.scalar(wf, false);
                self.free(wf);
                let y = self.mul(n, w1);
                self.free(w1);
                self.free(n);
                let out = self.to(y, input);
                self.free(y);
                return out;
            }
            _ => {
                // `self.weight * hidden_states.to(input_dtype)`
                let nd = self.to(n, input);
                let out = self.mul(weight, nd);
                self.free(nd);
                out
            }
        };
        // The function's locals go at its return.
        self.free(n);
        self.free(var);
        out
    }

    /// `CohereLayerNorm.forward`: `h = x.to(f32)`, `mean = h.mean(-1)`,
    /// `variance = (h - mean).pow(2).mean(-1)`, `h = (h - mean) * rsqrt(variance + eps)`,
    /// `h = weight.to(f32) * h`, `h.to(input_dtype)`; each rebinding drops the previous
    /// value once the new one exists, `mean` and `variance` go at the return.
    fn cohere_norm(&mut self, x: T, weight: T, width: u64) -> T {
        let input = self.dtype(x);
        let xf = self.to(x, DType::F32);
        let mean = self.mean_last(xf, width);
        let d1 = self.add(xf, mean);
        let sq = self.square(d1);
        self.free(d1);
        let var = self.mean_last(sq, width);
        self.free(sq);
        let d2 = self.add(xf, mean);
        let ve = self.scalar(var, false);
        let r = self.rsqrt(ve);
        self.free(ve);
        let h = self.mul(d2, r);
        self.free(d2);
        self.free(r);
        self.free(xf);
        let wf = self.to(weight, DType::F32);
        let y = self.mul(wf, h);
        self.free(wf);
        self.free(h);
        let out = self.to(y, input);
        self.free(y);
        self.free(mean);
        self.free(var);
        out
    }

    /// `OlmoLayerNorm.forward`: the f32 copy, one `native_layer_norm` without weight or bias
    /// (saving its input and the two row statistics), the cast back.
    fn olmo_layer_norm(&mut self, x: T, width: u64) -> T {
        let input = self.dtype(x);
        let xf = self.to(x, DType::F32);
        let e = self.elems(xf);
        let rows = e / width.max(1);
        let outs = self.tape.op(
            &[xf],
            &[(e, DType::F32), (rows, DType::F32), (rows, DType::F32)],
            &[0, 2, 3],
            &[Grad::New(DType::F32)],
            &[],
        );
        self.free(xf);
        self.free(outs[1]);
        self.free(outs[2]);
        let out = self.to(outs[0], input);
        self.free(outs[0]);
        out
    }

    fn layer_norm(&mut self, x: T, weight: T, bias: Option<T>, width: u64) -> T {
        // Autocast runs layer_norm in f32.
        let xc = if self.amp.is_some() {
            self.to(x, DType::F32)
        } else {
            self.keep(x)
        };
        let e = self.elems(xc);
        let d = self.dtype(xc);
        let rows = e / width.max(1);
        let stat = if d == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let mut inputs = vec![xc, weight];
        let mut grads = vec![Grad::New(d), Grad::New(self.dtype(weight))];
        if let Some(b) = bias {
            inputs.push(b);
            grads.push(Grad::New(self.dtype(b)));
        }
        let n = inputs.len();
        // Saves the input, the weight, the bias and the two statistics.
        let saved: Vec<usize> = (0..n).chain([n + 1, n + 2]).collect();
        let outs = self.tape.op(
            &inputs,
            &[(e, d), (rows, stat), (rows, stat)],
            &saved,
            &grads,
            &[],
        );
        self.free(xc);
        self.free(outs[1]);
        self.free(outs[2]);
        outs[0]
    }

    /// `apply_rotary_pos_emb` on one of q or k (`x`, `[b, h, s, d]`), over its first
    /// `rotary.dim` channels (GPT-NeoX's partial rotary slices and concatenates the rest
    /// back): `x * cos + rotate_half(x) * sin`. Saves `cos` and `sin` (shared).
    pub(crate) fn rotary(&mut self, x: T, rotary: &Rotary, head_dim: u64, split: bool) -> T {
        let (out, rotated) = self.rotary_parts(x, rotary, head_dim, split, false);
        debug_assert!(rotated.is_none());
        out
    }

    /// [`Eager::rotary`], with `hold`: the rotated part is returned beside the result
    /// instead of being released (Phi rotates in its attention's forward, where
    /// `query_rot` stays bound until the forward returns).
    pub(crate) fn rotary_parts(
        &mut self,
        x: T,
        rotary: &Rotary,
        head_dim: u64,
        split: bool,
        hold: bool,
    ) -> (T, Option<T>) {
        let e = self.elems(x);
        let part = e / head_dim.max(1) * rotary.dim;
        // `split`: the model slices the rotary part off and concatenates the rest back even
        // when the rest is empty (GPT-NeoX, Phi-3): a copy.
        let partial = rotary.dim < head_dim || split;
        let xr = if partial {
            self.view_sized(x, part)
        } else {
            self.keep(x)
        };
        let a = self.mul(xr, rotary.cos);
        let half = self.view_sized(xr, part / 2);
        let neg = self.unary(half, self.dtype(xr), false, false);
        self.free(half);
        let half2 = self.view_sized(xr, part / 2);
        let rot = self.cat(&[neg, half2]);
        self.free(neg);
        self.free(half2);
        let b = self.mul(rot, rotary.sin);
        self.free(rot);
        let y = self.add(a, b);
        self.free(a);
        self.free(b);
        self.free(xr);
        if partial {
            let pass = self.view_sized(x, e - part);
            let out = self.cat(&[y, pass]);
            self.free(pass);
            if hold {
                return (out, Some(y));
            }
            self.free(y);
            (out, None)
        } else {
            (y, None)
        }
    }

    /// ERNIE 4.5's rotation of one of q or k (`x`, `[b, h, s, d]`, kept):
    /// `(x.float() * cos) + (rotate_half(x).float() * sin)` with f32 tables, where
    /// `rotate_half` is `stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)` in `x`'s
    /// dtype. Each f32 copy goes once its product is made (the products save the tables);
    /// the result is f32.
    pub(crate) fn rotary_f32(&mut self, x: T, cos: T, sin: T) -> T {
        let n = self.elems(x);
        let dt = self.dtype(x);
        let xf = self.to(x, DType::F32);
        let a = self.mul(xf, cos);
        self.free(xf);
        let odd = self.view_sized(x, n / 2);
        let neg = self.unary(odd, dt, false, false);
        self.free(odd);
        let even = self.view_sized(x, n / 2);
        let rot = self.cat(&[neg, even]);
        self.free(neg);
        self.free(even);
        let rf = self.to(rot, DType::F32);
        self.free(rot);
        let b = self.mul(rf, sin);
        self.free(rf);
        let y = self.add(a, b);
        self.free(a);
        self.free(b);
        y
    }

    /// gpt-oss's `_apply_rotary_emb` on one of q or k (`x`, `[b, h, s, d]`) with its
    /// half-width tables (`[1, s, d / 2]`): `chunk(x, 2)`, `first * cos - second * sin`,
    /// `second * cos + first * sin`, concatenated (contiguous `[b, h, s, d]`). Each product
    /// saves the table (shared); the halves are views of `x`.
    pub(crate) fn rotary_halves(&mut self, x: T, rotary: &Rotary) -> T {
        let half = self.elems(x) / 2;
        let first = self.view_sized(x, half);
        let second = self.view_sized(x, half);
        // `first_ = first * cos - second * sin`, then `second_ = second * cos + first * sin`.
        let mut halves = [first, second];
        for (slot, (a, b)) in halves.iter_mut().zip([(first, second), (second, first)]) {
            let p1 = self.mul(a, rotary.cos);
            let p2 = self.mul(b, rotary.sin);
            *slot = self.add(p1, p2);
            self.free(p1);
            self.free(p2);
        }
        let out = self.cat(&halves);
        for t in [halves[0], halves[1], first, second] {
            self.free(t);
        }
        out
    }

    /// The SDPA kernel PyTorch's dispatcher picks on a CUDA device of compute capability 9.0
    /// (`sdp_utils.cpp`, cuDNN first where it prefers it), for 16-bit or f32 inputs.
    pub(crate) fn sdpa_kernel(&self, call: &AttnCall, dtype: DType) -> Kernel {
        let half = matches!(dtype, DType::F16 | DType::BF16);
        let (dq, dv) = (call.head_dim, call.v_head_dim);
        let cudnn = half
            && dq <= 256
            && dv <= 256
            && dq.is_multiple_of(8)
            && dv.is_multiple_of(8)
            && call.seq != 1
            && (dq <= 128 && dv <= 128 || dq == 256 && dv == 256 || (dq, dv) == (192, 128));
        if cudnn {
            return Kernel::Cudnn;
        }
        if half && call.mask.is_none() && dq == dv && dq <= 256 {
            return Kernel::Flash;
        }
        // The efficient kernel takes as many key/value heads as query heads (grouped heads
        // reach it only repeated).
        let align = if half { 8 } else { 4 };
        let heads = call.repeat_kv || call.kv_heads == call.heads;
        if dq.is_multiple_of(align) && dv.is_multiple_of(align) && heads {
            return Kernel::Efficient;
        }
        Kernel::Math
    }

    /// One attention call on `q` `[b, h, s, d]` and `k`, `v` `[b, kv, s, d]` with `kernel`;
    /// returns the output `[b, s, h·d_v]` as the modelling code hands it to the output
    /// projection (after `transpose(1, 2).contiguous()` and a reshape), and for eager
    /// attention the probabilities it also returns (`attn_weights`, which the decoder layer
    /// holds until it returns).
    pub(crate) fn attention(
        &mut self,
        q: T,
        k: T,
        v: T,
        call: &AttnCall,
        kernel: Kernel,
    ) -> (T, Option<T>) {
        let AttnCall {
            batch: b,
            heads: h,
            kv_heads: kvh,
            seq: s,
            head_dim: d,
            v_head_dim: dv,
            ..
        } = *call;
        let groups = (h / kvh.max(1)).max(1);
        // repeat_kv: `expand` then `reshape`, a contiguous copy of every head's K and V; with
        // one key/value head the reshape is a view (stride 0 over the heads), which `bmm`
        // then copies for its own 3-d view.
        let (k, v, expanded) = if call.repeat_kv && groups > 1 && kvh == 1 && kernel == Kernel::Math
        {
            // SDPA's math path broadcasts the one head inside its `matmul`s.
            (self.keep(k), self.keep(v), true)
        } else if call.repeat_kv && groups > 1 && kvh == 1 {
            let (ek, ev) = (self.elems(k), self.elems(v));
            let (ekg, evg) = (self.tape.mul(ek, groups), self.tape.mul(ev, groups));
            (self.view_sized(k, ekg), self.view_sized(v, evg), true)
        } else if call.repeat_kv && groups > 1 {
            let kr = self.repeat(k, groups);
            let vr = self.repeat(v, groups);
            (kr, vr, false)
        } else {
            (self.keep(k), self.keep(v), false)
        };
        let call = &AttnCall { expanded, ..*call };
        let out = match kernel {
            Kernel::Eager => self.eager_core(q, k, v, call, kernel),
            Kernel::Math => (self.math_core(q, k, v, call), None),
            _ => (self.fused_core(q, k, v, call, kernel), None),
        };
        self.free(k);
        self.free(v);
        let _ = (b, h, s, d, dv);
        match out {
            (o, Some(p)) if kernel == Kernel::Eager => (o, Some(p)),
            (o, _) => (o, None),
        }
    }

    fn repeat(&mut self, x: T, groups: u64) -> T {
        let e = self.elems(x);
        let ex = self.tape.mul(e, groups);
        let view = self.view_sized(x, ex);
        let c = self.copy(view);
        self.free(view);
        c
    }

    fn eager_core(&mut self, q: T, k: T, v: T, call: &AttnCall, kernel: Kernel) -> (T, Option<T>) {
        if let Some(sinks) = call.sinks {
            return self.sinks_core(q, k, v, call, sinks);
        }
        let AttnCall {
            batch: b,
            heads: h,
            seq: s,
            v_head_dim: dv,
            ..
        } = *call;
        let scores = self.tape.prod(&[b, h, s, s]);
        // The 3-d views `bmm` takes: a copy when the memory is not `[b·h, s, d]`-ordered
        // (q and an unrepeated k laid out `[b, s, h, d]` with more than one sequence).
        let copy_q = call.bshd && b > 1;
        let groups = (h / call.kv_heads.max(1)).max(1);
        // An expanded K (stride 0 over the heads) folds into `[b·h, s, d]` as a view with one
        // sequence; with more, `reshape` copies it.
        let copy_k =
            (call.expanded && b > 1) || (call.kv_bshd && b > 1 && !(call.repeat_kv && groups > 1));
        let w0 = self.bmm(q, k, scores, copy_q, copy_k);
        if call.scores_held {
            // `scores /= √d` in place; `softmax(scores + mask)` while `scores` is bound.
            let e = self.elems(w0);
            let d = self.dtype(w0);
            let w = self.tape.view_with(w0, e, Grad::New(d));
            self.free(w0);
            let m = match call.mask {
                Some(mask) => self.add(w, mask),
                None => self.keep(w),
            };
            // `softmax(..., dtype=hidden_states.dtype)`: the attention's input is a
            // LayerNorm's output, which autocast runs in f32.
            let p = self.softmax(m, if self.amp.is_some() { DType::F32 } else { d });
            self.free(m);
            self.free(w);
            let p = if call.dropout {
                let pd = self.dropout(p);
                self.free(p);
                pd
            } else {
                p
            };
            let out_elems = self.tape.prod(&[b, h, s, dv]);
            let copy_v = (call.expanded && b > 1) || (call.kv_bshd && b > 1 && groups == 1);
            let o = self.bmm(p, v, out_elems, false, copy_v);
            let c = self.copy(o);
            self.free(o);
            return (c, Some(p));
        }
        let mut w = self.scalar(w0, true);
        self.free(w0);
        if call.softcap {
            let a = self.scalar(w, true);
            self.free(w);
            let t = self.unary(a, self.dtype(a), false, true);
            self.free(a);
            w = self.scalar(t, true);
            self.free(t);
        }
        if let Some(mask) = call.mask {
            let m = self.add(w, mask);
            self.free(w);
            w = m;
        }
        let in_dtype = self.dtype(q);
        let p = if call.f32_softmax || kernel == Kernel::Math {
            // `attn_weights = softmax(attn_weights, dtype=f32).to(query.dtype)`: the old
            // name goes once the new value is bound.
            let pf = self.softmax(w, DType::F32);
            let p = self.to(pf, in_dtype);
            self.free(pf);
            self.free(w);
            p
        } else {
            // Autocast runs `softmax` in f32 (GPT-2 and BERT call it without a dtype).
            let d = if self.amp.is_some() {
                DType::F32
            } else {
                self.dtype(w)
            };
            let p = self.softmax(w, d);
            self.free(w);
            p
        };
        let p = if call.dropout {
            let pd = self.dropout(p);
            self.free(p);
            pd
        } else {
            p
        };
        let out_elems = self.tape.prod(&[b, h, s, dv]);
        let o = self.bmm(
            p,
            v,
            out_elems,
            false,
            (call.expanded && b > 1) || (call.kv_bshd && b > 1 && groups == 1),
        );
        // `transpose(1, 2).contiguous()`: a copy.
        let c = self.copy(o);
        self.free(o);
        // The probabilities are returned with the output.
        (c, Some(p))
    }

    /// gpt-oss's `eager_attention_forward` on q and k that its rotation left contiguous
    /// (`torch.cat`): the scaled scores plus the mask (that name bound until the
    /// probabilities are cast), each head's sink concatenated as one more key column
    /// (`cat` of the scores and the sinks' expanded view), the row maximum subtracted
    /// (`max` over the last dimension returns int64 indices, which autograd saves), the
    /// softmax over `s + 1` keys in that dtype (saved; its input stays bound until the
    /// function returns), the sink column sliced off (a view) and cast to V's dtype
    /// (`.to`, a copy only where the dtypes differ), `P·V`, the contiguous copy. Returns
    /// the output and the probabilities it hands back (`attn_weights`).
    fn sinks_core(&mut self, q: T, k: T, v: T, call: &AttnCall, sinks: T) -> (T, Option<T>) {
        let AttnCall {
            batch: b,
            heads: h,
            seq: s,
            v_head_dim: dv,
            ..
        } = *call;
        let groups = (h / call.kv_heads.max(1)).max(1);
        let scores = self.tape.prod(&[b, h, s, s]);
        // q and k come from `cat` (`[b, h, s, d]`); an expanded single head folds into the
        // 3-d view only with one sequence.
        let w0 = self.bmm(q, k, scores, false, call.expanded && b > 1);
        let mut w = self.scalar(w0, true);
        self.free(w0);
        if let Some(mask) = call.mask {
            let m = self.add(w, mask);
            self.free(w);
            w = m;
        }
        let rows = self.tape.prod(&[b, h, s]);
        let sink_view = self.view_sized(sinks, rows);
        let combined = self.cat(&[w, sink_view]);
        self.free(sink_view);
        let d = self.dtype(combined);
        let max = self.tape.op(
            &[combined],
            &[(rows, d), (rows, DType::I64)],
            &[2],
            &[Grad::New(d)],
            &[],
        );
        let shifted = self.add(combined, max[0]);
        self.free(combined);
        self.free(max[0]);
        self.free(max[1]);
        let probs = self.softmax(shifted, d);
        let kept = self.view_sized(probs, scores);
        let kept = if call.dropout {
            let pd = self.dropout(kept);
            self.free(kept);
            pd
        } else {
            kept
        };
        let weights = self.to(kept, self.dtype(v));
        self.free(kept);
        self.free(w);
        let out_elems = self.tape.prod(&[b, h, s, dv]);
        let copy_v = (call.expanded && b > 1) || (call.kv_bshd && b > 1 && groups == 1);
        let o = self.bmm(weights, v, out_elems, false, copy_v);
        // `transpose(1, 2).contiguous()`: a copy.
        let c = self.copy(o);
        self.free(o);
        self.free(shifted);
        self.free(probs);
        (c, Some(weights))
    }

    /// SDPA's math fallback (`_scaled_dot_product_attention_math`): 16-bit inputs upcast to
    /// f32 (the upcasts and the scaled query live until it returns), the causal mask built
    /// as an f32 `[s, s]` tensor, grouped heads repeated (`enable_gqa`), kᵀ scaled, the f32
    /// scores, the mask added (out of place on fake tensors), `_safe_softmax`, the
    /// probabilities cast back (its second result), then `P·V` cast back; transformers'
    /// contiguous copy of the output follows. One key/value head broadcast by `matmul` is
    /// copied at the query heads' size when the batch makes the 3-d view impossible.
    fn math_core(&mut self, q: T, k: T, v: T, call: &AttnCall) -> T {
        let AttnCall {
            batch: b,
            heads: h,
            seq: s,
            v_head_dim: dv,
            ..
        } = *call;
        let origin = self.dtype(q);
        let qa = self.to(q, DType::F32);
        let ka = self.to(k, DType::F32);
        let va = self.to(v, DType::F32);
        let qs = self.scalar(qa, true);
        let mask = match call.mask {
            Some(m) => {
                let e = self.tape.prod(&[b, s, s]);
                self.tape.op(&[m], &[(e, origin)], &[], &[], &[])[0]
            }
            None => {
                let ss = self.tape.mul(s, s);
                self.tape.input(ss, DType::F32)
            }
        };
        let groups = (h / call.kv_heads.max(1)).max(1);
        let (ke, ve) = if groups > 1 && !call.repeat_kv {
            (self.repeat(ka, groups), self.repeat(va, groups))
        } else {
            (self.keep(ka), self.keep(va))
        };
        let kt = self.scalar(ke, true);
        // One broadcast key/value head: `matmul` expands it (a copy past one sequence).
        let widen = |e: &mut Self, t: T| {
            if call.expanded {
                let n = e.tape.mul(e.elems(t), groups);
                e.view_sized(t, n)
            } else {
                e.keep(t)
            }
        };
        let kx = widen(self, kt);
        self.free(kt);
        let scores = self.tape.prod(&[b, h, s, s]);
        let copy_q = call.bshd && b > 1;
        let copy_kv = call.expanded && b > 1;
        let a0 = self.bmm(qs, kx, scores, copy_q, copy_kv);
        self.free(kx);
        let a1 = self.add(a0, mask);
        self.free(a0);
        self.free(mask);
        let p = self.softmax(a1, DType::F32);
        self.free(a1);
        let p = if call.dropout {
            let pd = self.dropout(p);
            self.free(p);
            pd
        } else {
            p
        };
        let returned = (origin != DType::F32).then(|| self.to(p, origin));
        let vx = widen(self, ve);
        let out_elems = self.tape.prod(&[b, h, s, dv]);
        let o = self.bmm(p, vx, out_elems, false, copy_kv);
        self.free(vx);
        let oc = self.to(o, origin);
        self.free(o);
        for t in [p, qs, ke, ve, va, ka, qa] {
            self.free(t);
        }
        if let Some(r) = returned {
            self.free(r);
        }
        // transformers' `transpose(1, 2).contiguous()`.
        let c = self.copy(oc);
        self.free(oc);
        c
    }

    fn fused_core(&mut self, q: T, k: T, v: T, call: &AttnCall, kernel: Kernel) -> T {
        let AttnCall {
            batch: b,
            heads: h,
            seq: s,
            head_dim: d,
            v_head_dim: dv,
            ..
        } = *call;
        let dtype = self.dtype(q);
        // transformers' flash path pads a narrower value to the query's head width
        // (`F.pad`: a new tensor, which the kernel saves; its backward is a new tensor of the
        // value's size), so the kernel's output is that wide too.
        let padded = kernel == Kernel::Flash && dv != d && dv > 0;
        let v = if padded {
            let n = self.elems(v) / dv * d;
            let vd = self.dtype(v);
            self.tape.op(&[v], &[(n, vd)], &[], &[Grad::New(vd)], &[])[0]
        } else {
            self.keep(v)
        };
        // Autocast casts the kernel's inputs to 16 bits.
        let (qc, kc, vc) = if let Some(a) = self.amp {
            (self.to(q, a), self.to(k, a), self.to(v, a))
        } else {
            (self.keep(q), self.keep(k), self.keep(v))
        };
        self.free(v);
        let dtype = if self.amp.is_some() {
            self.dtype(qc)
        } else {
            dtype
        };
        // The boolean mask (`[1, 1, s, s]` expanded over the batch) converted to the query's
        // dtype, one per call: `zeros_like` in the dtype, then `masked_fill_` with its
        // `logical_not` (a transient boolean copy).
        let bias = call.mask.map(|m| {
            let e = self.tape.prod(&[b, s, s]);
            let bias = self.tape.op(&[m], &[(e, dtype)], &[], &[], &[])[0];
            let not = self.tape.input(e, DType::Bool);
            self.free(not);
            if kernel == Kernel::Efficient && !s.is_multiple_of(16) {
                // Padded to a multiple of 16 keys, then sliced back.
                let padded = self.tape.mul(e / s.max(1), s.div_ceil(16) * 16);
                let p = self.tape.op(&[bias], &[(padded, dtype)], &[], &[], &[])[0];
                self.free(bias);
                p
            } else {
                bias
            }
        });
        let rows = self.tape.prod(&[b, h, s]);
        let lse = match kernel {
            Kernel::Efficient | Kernel::Cudnn if !call.grad => 0,
            Kernel::Efficient => self.tape.prod(&[b, h, s.div_ceil(32) * 32]),
            _ => rows,
        };
        let out = self.tape.prod(&[b, h, s, if padded { d } else { dv }]);
        let mut inputs = vec![qc, kc, vc];
        if let Some(bias) = bias {
            inputs.push(bias);
        }
        let n = inputs.len();
        // Saves q, k, v, the bias, the output and the log-sum-exp (and the RNG state).
        let saved: Vec<usize> = (0..n).chain([n, n + 1]).collect();
        let grads = [
            Grad::New(self.dtype(qc)),
            Grad::New(self.dtype(kc)),
            Grad::New(self.dtype(vc)),
            Grad::New(dtype),
        ];
        let outs = self.tape.op(
            &inputs,
            &[
                (out, dtype),
                (lse, DType::F32),
                (1, DType::I64),
                (1, DType::I64),
            ],
            &saved,
            &grads[..n],
            &[],
        );
        self.free(qc);
        self.free(kc);
        self.free(vc);
        if let Some(bias) = bias {
            self.free(bias);
        }
        self.free(outs[1]);
        self.free(outs[2]);
        self.free(outs[3]);
        // The output is laid out `[b, s, h, d]` when q was (flash and cuDNN follow q; the
        // efficient kernel always writes it so): `transpose(1, 2).contiguous()` is free then.
        let free_transpose = call.bshd || kernel == Kernel::Efficient;
        if padded {
            // `out[..., :v_head_dim]` made contiguous by the reshape: a copy of the value's
            // width, whose backward (`slice_backward`) makes a gradient of the padded width.
            let n = self.tape.prod(&[b, h, s, dv]);
            let c = self
                .tape
                .op(&[outs[0]], &[(n, dtype)], &[], &[Grad::New(dtype)], &[])[0];
            self.free(outs[0]);
            c
        } else if free_transpose {
            outs[0]
        } else {
            let c = self.copy(outs[0]);
            self.free(outs[0]);
            c
        }
    }

    /// The MLP activation of `x`.
    pub(crate) fn activation(&mut self, x: T, act: Activation) -> T {
        let d = self.dtype(x);
        match act {
            Activation::Silu | Activation::Gelu => self.unary(x, d, true, false),
            Activation::Relu => self.unary(x, d, false, true),
            Activation::GeluNew => {
                // 0.5 * x * (1 + tanh(c * (x + 0.044715 * x ** 3)))
                // `torch.pow` runs in f32 under autocast (its cast saved for the backward),
                // and everything after it promotes to f32.
                let t1 = self.scalar(x, true);
                let p = self.square(x);
                let t2 = self.scalar(p, true);
                self.free(p);
                let t3 = self.add(x, t2);
                self.free(t2);
                let t4 = self.scalar(t3, true);
                self.free(t3);
                let t5 = self.unary(t4, self.dtype(t4), false, true);
                self.free(t4);
                let t6 = self.scalar(t5, false);
                self.free(t5);
                let out = self.mul(t1, t6);
                self.free(t1);
                self.free(t6);
                out
            }
        }
    }

    /// `cross_entropy(logits.float().view(-1, vocab), labels)` as transformers' loss runs
    /// it: the f32 copy, `log_softmax` (saved), `nll_loss`. Returns the scalar loss; the
    /// caller releases `logits`.
    pub(crate) fn cross_entropy(&mut self, logits: T, rows: u64, labels: T) -> T {
        let lf = self.to(logits, DType::F32);
        let e = self.elems(lf);
        // The shifted labels: `pad` then a contiguous slice.
        let shifted = self.tape.input(rows + rows / rows.max(1), DType::I64);
        let ls = self.tape.op(
            &[lf],
            &[(e, DType::F32)],
            &[1],
            &[Grad::New(DType::F32)],
            &[],
        )[0];
        self.free(lf);
        // nll_loss saves its input (the log-softmax), the target and the total weight; its
        // backward allocates the gradient of the log-probabilities.
        let outs = self.tape.op(
            &[ls, shifted],
            &[(1, DType::F32), (1, DType::F32)],
            &[0, 1, 3],
            &[Grad::New(DType::F32)],
            &[],
        );
        self.free(ls);
        self.free(outs[1]);
        let _ = labels;
        self.free(shifted);
        outs[0]
    }
}
