//! The bytes a buffer occupies, as the verifier judges them: one range, or for a strided
//! Concat part one run per row of the Concat's output (see `rules::concat_slot`).
//!
//! [`Span::meets`] says whether two spans share a byte: exactly for two ranges, a range and
//! runs, or runs with the same stride and count (the parts of one Concat); by their extents
//! otherwise, which can only over-report.

/// `rows` runs of `run` bytes, the first at `start`, each `stride` after the last; one range
/// when `rows` is 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Span {
    pub start: u64,
    pub run: u64,
    pub rows: u64,
    pub stride: u64,
}

impl Span {
    /// The range `[start, start + bytes)`.
    pub fn range(start: u64, bytes: u64) -> Span {
        Span {
            start,
            run: bytes,
            rows: 1,
            stride: bytes,
        }
    }

    /// Whether it is more than one run.
    pub fn strided(&self) -> bool {
        self.rows > 1
    }

    /// One past its last byte (saturating).
    pub fn end(&self) -> u64 {
        let last_row = self.rows.saturating_sub(1).saturating_mul(self.stride);
        self.start.saturating_add(last_row).saturating_add(self.run)
    }

    /// Whether the two share a byte.
    pub fn meets(&self, other: &Span) -> bool {
        if self.run == 0 || other.run == 0 {
            return false;
        }
        match (self.strided(), other.strided()) {
            (false, false) => self.start < other.end() && other.start < self.end(),
            (true, false) => self.meets_range(other.start, other.end()),
            (false, true) => other.meets_range(self.start, self.end()),
            (true, true) if self.stride == other.stride && self.rows == other.rows => {
                // Runs r1 and r2 meet when (r1 - r2) * stride lies strictly between
                // other.start - self.start - self.run and other.start - self.start + other.run.
                let t = i128::from(self.stride.max(1));
                let lo = i128::from(other.start) - i128::from(self.start) - i128::from(self.run);
                let hi = i128::from(other.start) - i128::from(self.start) + i128::from(other.run);
                let d_lo = lo.div_euclid(t) + 1;
                let d_hi = (hi - 1).div_euclid(t);
                let most = i128::from(self.rows) - 1;
                d_lo.max(-most) <= d_hi.min(most)
            }
            (true, true) => self.start < other.end() && other.start < self.end(),
        }
    }

    /// Whether a run meets the range `[a, b)`.
    fn meets_range(&self, a: u64, b: u64) -> bool {
        if b <= self.start {
            return false;
        }
        let (s, l, t) = (
            i128::from(self.start),
            i128::from(self.run),
            i128::from(self.stride.max(1)),
        );
        let (a, b) = (i128::from(a), i128::from(b));
        // Row r meets it when s + r*t < b and a < s + r*t + l.
        let r_lo = if a >= s + l {
            (a - s - l).div_euclid(t) + 1
        } else {
            0
        };
        let r_hi = (b - s - 1).div_euclid(t);
        r_lo <= r_hi.min(i128::from(self.rows) - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(start: u64, run: u64) -> Span {
        Span {
            start,
            run,
            rows: 3,
            stride: 100,
        }
    }

    #[test]
    fn runs_meet_exactly_what_they_cover() {
        // Rows at 10..30, 110..130, 210..230.
        let a = runs(10, 20);
        assert_eq!(a.end(), 230);
        assert!(!a.meets(&Span::range(30, 80)), "between the first two rows");
        assert!(a.meets(&Span::range(129, 1)));
        assert!(!a.meets(&Span::range(230, 5)));
        assert!(!a.meets(&Span::range(0, 10)));
        // The other parts of the same Concat: side by side, never meeting.
        assert!(!a.meets(&runs(30, 70)));
        assert!(!a.meets(&runs(0, 10)));
        assert!(a.meets(&runs(29, 2)));
        // Shifted by a row: they meet.
        assert!(a.meets(&runs(110, 5)));
        assert!(!a.meets(&runs(310, 5)) || runs(310, 5).end() > 300);
    }
}
