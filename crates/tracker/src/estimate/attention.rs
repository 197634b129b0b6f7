//! Memory of one attention call: Q, K, V, the `O(seq_q × seq_kv)` score matrix, the output,
//! and the fused (flash) variant that never materialises the scores.
//!
//! Eager attention computes `S = Q·Kᵀ` (`batch × heads × seq_q × seq_kv`), `P = softmax(S)`
//! and `O = P·V`. Three moments can be the peak of a forward pass that keeps nothing for a
//! backward pass: `Q·Kᵀ` (Q, K, V and S live), the softmax (V and S, and P unless the softmax
//! writes over S) and `P·V` (V, P and O). An arena runtime runs the softmax row-wise in place
//! (as memplan's plans and cuDNN-style kernels do), so the eager peak is
//! `max(q + k + v + scores, v + scores + output)`; a framework that keeps S and P apart (or
//! keeps P for the backward pass) holds `v + 2 × scores` at the softmax. The fused variant keeps
//! only Q, K, V, the output and one `f32` log-sum-exp per row (`batch × heads × seq_q`),
//! which the backward pass needs.

use memplan_ir::DType;

use super::{EstimateError, WorkloadFault, elements_bytes, product, sum};

/// The shape of one attention call. Grouped-query attention has fewer `kv_heads` than
/// `heads`; multi-query has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    /// Batch size.
    pub batch: u64,
    /// Query heads.
    pub heads: u64,
    /// Key/value heads (divides `heads`).
    pub kv_heads: u64,
    /// Query positions.
    pub seq_q: u64,
    /// Key/value positions (the context, for decoding with a cache).
    pub seq_kv: u64,
    /// Width of one head.
    pub head_dim: u64,
    /// Element type of Q, K, V, scores and output.
    pub dtype: DType,
}

/// Bytes of each buffer of one attention call, from [`AttentionShape::memory`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttentionMemory {
    /// Q: `batch × heads × seq_q × head_dim`.
    pub q: u64,
    /// K: `batch × kv_heads × seq_kv × head_dim`.
    pub k: u64,
    /// V: the same as K.
    pub v: u64,
    /// One score matrix `batch × heads × seq_q × seq_kv` (eager attention holds two: the
    /// scores and their softmax).
    pub scores: u64,
    /// The output: the same as Q.
    pub output: u64,
    /// The fused variant's per-row log-sum-exp, `f32`: `batch × heads × seq_q × 4`.
    pub logsumexp: u64,
    /// Peak of eager attention in a forward pass with the softmax written over the scores:
    /// `max(q + k + v + scores, v + scores + output)`.
    pub eager_peak: u64,
    /// Peak of eager attention when the softmax has an output of its own:
    /// `max(q + k + v + scores, v + 2 × scores, v + scores + output)`.
    pub eager_out_of_place_peak: u64,
    /// Peak of fused attention: `q + k + v + output + logsumexp`.
    pub flash_peak: u64,
}

impl AttentionShape {
    /// The bytes of every buffer and both peaks, checked.
    ///
    /// ```
    /// use memplan_ir::DType;
    /// use memplan_tracker::estimate::AttentionShape;
    /// let shape = AttentionShape {
    ///     batch: 1, heads: 32, kv_heads: 8, seq_q: 4096, seq_kv: 4096, head_dim: 128,
    ///     dtype: DType::BF16,
    /// };
    /// let m = shape.memory().unwrap();
    /// assert_eq!(m.scores, 32 * 4096 * 4096 * 2); // 1 GiB of scores per layer
    /// assert!(m.flash_peak < m.scores);
    /// ```
    pub fn memory(&self) -> Result<AttentionMemory, EstimateError> {
        if self.heads == 0 || self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            return Err(EstimateError::Invalid(WorkloadFault::Heads {
                heads: self.heads,
                kv_heads: self.kv_heads,
            }));
        }
        let what = "attention memory";
        let bytes = |dims: &[u64]| -> Result<u64, EstimateError> {
            elements_bytes(product(dims, what)?, self.dtype, what)
        };
        let q = bytes(&[self.batch, self.heads, self.seq_q, self.head_dim])?;
        let k = bytes(&[self.batch, self.kv_heads, self.seq_kv, self.head_dim])?;
        let scores = bytes(&[self.batch, self.heads, self.seq_q, self.seq_kv])?;
        let output = q;
        let logsumexp = product(&[self.batch, self.heads, self.seq_q, 4], what)?;
        let eager_peak = sum(&[q, k, k, scores], what)?.max(sum(&[k, scores, output], what)?);
        let eager_out_of_place_peak = eager_peak.max(sum(&[k, scores, scores], what)?);
        Ok(AttentionMemory {
            q,
            k,
            v: k,
            scores,
            output,
            logsumexp,
            eager_peak,
            eager_out_of_place_peak,
            flash_peak: sum(&[q, k, k, output, logsumexp], what)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(seq: u64) -> AttentionShape {
        AttentionShape {
            batch: 2,
            heads: 12,
            kv_heads: 12,
            seq_q: seq,
            seq_kv: seq,
            head_dim: 64,
            dtype: DType::F16,
        }
    }

    #[test]
    fn scores_grow_quadratically_and_flash_linearly() {
        let a = shape(1024).memory().unwrap();
        let b = shape(2048).memory().unwrap();
        assert_eq!(a.q, 2 * 12 * 1024 * 64 * 2);
        assert_eq!(a.scores, 2 * 12 * 1024 * 1024 * 2);
        assert_eq!(b.scores, 4 * a.scores);
        assert_eq!(b.flash_peak, 2 * a.flash_peak);
        assert_eq!(a.eager_peak, a.q + a.k + a.v + a.scores);
        assert_eq!(a.eager_out_of_place_peak, a.v + 2 * a.scores);
        assert_eq!(a.flash_peak, a.q + a.k + a.v + a.output + 2 * 12 * 1024 * 4);
    }

    #[test]
    fn grouped_query_attention_shrinks_k_and_v_only() {
        let mut s = shape(512);
        s.kv_heads = 4;
        let gqa = s.memory().unwrap();
        let mha = shape(512).memory().unwrap();
        assert_eq!(gqa.k * 3, mha.k);
        assert_eq!(gqa.q, mha.q);
        assert_eq!(gqa.scores, mha.scores);
        s.kv_heads = 5;
        assert!(matches!(s.memory(), Err(EstimateError::Invalid(_))));
    }

    #[test]
    fn short_queries_peak_on_the_projections() {
        // One query over a short context: scores are tiny, so Q, K and V decide.
        let s = AttentionShape {
            seq_q: 1,
            seq_kv: 8,
            head_dim: 128,
            ..shape(1)
        };
        let m = s.memory().unwrap();
        assert!(m.output > m.scores);
        assert_eq!(m.eager_peak, m.q + m.k + m.v + m.scores);
    }

    #[test]
    fn overflow_is_an_error() {
        let s = AttentionShape {
            batch: 1 << 20,
            seq_q: 1 << 20,
            seq_kv: 1 << 20,
            ..shape(1)
        };
        assert!(matches!(s.memory(), Err(EstimateError::Overflow { .. })));
    }
}
