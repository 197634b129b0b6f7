//! Exact byte counts for people: `1,034,752`, digits grouped by thousands.

use std::fmt;

/// Displays an integer with its digits grouped by thousands (`1,034,752`), as every human
/// report of memplan writes exact byte counts and offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grouped(pub u64);

impl fmt::Display for Grouped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = self.0.to_string();
        let mut out = String::with_capacity(digits.len() + digits.len() / 3);
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        f.pad(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_by_thousands() {
        assert_eq!(Grouped(0).to_string(), "0");
        assert_eq!(Grouped(999).to_string(), "999");
        assert_eq!(Grouped(1000).to_string(), "1,000");
        assert_eq!(Grouped(1_034_752).to_string(), "1,034,752");
        assert_eq!(Grouped(u64::MAX).to_string(), "18,446,744,073,709,551,615");
        assert_eq!(format!("{:>7}", Grouped(1234)), "  1,234");
    }
}
