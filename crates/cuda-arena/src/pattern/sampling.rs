//! The options of a check: how much of each read to check ([`Sampling`]), and what to
//! leave alone or refuse ([`CheckOptions`]).

/// How much of each read to check.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Sampling {
    /// Every byte of every read.
    #[default]
    Full,
    /// The first and last `block` bytes of every read, plus every `block`-byte block whose
    /// address is a multiple of `stride`. Writes are always whole, so a clobber shows unless
    /// it is smaller than `stride` and lies strictly inside the victim.
    Sampled {
        /// Bytes per checked block.
        block: u64,
        /// Distance between checked blocks.
        stride: u64,
    },
}

impl Sampling {
    /// The ranges of `[offset, offset + bytes)` to check, in address order, disjoint.
    pub(super) fn ranges(self, offset: u64, bytes: u64) -> Vec<(u64, u64)> {
        let end = offset.saturating_add(bytes);
        let Sampling::Sampled { block, stride } = self else {
            return vec![(offset, bytes)];
        };
        let (block, stride) = (block.max(1), stride.max(block.max(1)));
        if bytes <= block.saturating_mul(2) || bytes <= stride {
            return vec![(offset, bytes)];
        }
        let mut out: Vec<(u64, u64)> = vec![(offset, block)];
        let mut a = offset.div_ceil(stride).saturating_mul(stride);
        while a < end.saturating_sub(block) {
            out.push((a, block));
            a = a.saturating_add(stride);
        }
        out.push((end - block, block));
        // Merge overlaps, keeping address order.
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(out.len());
        for (s, n) in out {
            match merged.last_mut() {
                Some((ps, pn)) if *ps + *pn >= s => *pn = (*pn).max(s + n - *ps),
                _ => merged.push((s, n)),
            }
        }
        merged
    }
}

/// Options of the pattern check.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckOptions {
    /// How much of each read to check.
    pub sampling: Sampling,
    /// Leave the weight and half regions alone: no weight is written or checked, so their
    /// memory is never touched (a zeroed allocation costs no pages). Activations live in
    /// their own region, so no activation write can reach a weight; the plan verifier checks
    /// that weights do not overlap each other.
    pub skip_weights: bool,
    /// Refuse what the check cannot confirm (aliases made by `OpRule::Custom` ops) instead of
    /// trusting it.
    pub strict: bool,
    /// The pattern salt; `None` takes the memory's next one (see [`Salts`](super::Salts)).
    pub salt: Option<u64>,
}

impl CheckOptions {
    /// These options checking `sampling` of each read.
    pub fn with_sampling(mut self, sampling: Sampling) -> CheckOptions {
        self.sampling = sampling;
        self
    }

    /// These options leaving the weight and half regions alone (see
    /// [`CheckOptions::skip_weights`]).
    pub fn with_skip_weights(mut self, skip: bool) -> CheckOptions {
        self.skip_weights = skip;
        self
    }

    /// These options refusing what the check cannot confirm (see [`CheckOptions::strict`]).
    pub fn with_strict(mut self, strict: bool) -> CheckOptions {
        self.strict = strict;
        self
    }

    /// These options with the pattern salt `salt`.
    pub fn with_salt(mut self, salt: u64) -> CheckOptions {
        self.salt = Some(salt);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampled_ranges_cover_ends_and_strides() {
        let s = Sampling::Sampled {
            block: 16,
            stride: 1000,
        };
        assert_eq!(s.ranges(10, 20), vec![(10, 20)]);
        assert_eq!(
            s.ranges(0, 3000),
            vec![(0, 16), (1000, 16), (2000, 16), (2984, 16)]
        );
        assert_eq!(s.ranges(990, 1100), vec![(990, 26), (2000, 16), (2074, 16)]);
        assert_eq!(Sampling::Full.ranges(5, 7), vec![(5, 7)]);
    }
}
