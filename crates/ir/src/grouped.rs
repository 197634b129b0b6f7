//! Byte counts for people, the one home of their formats: [`Grouped`] (`1,034,752`, digits
//! grouped by thousands), [`HumanBytes`] (`1.50 GiB`) and [`ExactBytes`], the two together
//! (`1.50 GiB (1,610,612,736 bytes)`), as every report of memplan writes an exact size.

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

/// A byte count printed for people, binary units with two decimals (`1.50 GiB`), exact
/// bytes below 1 KiB (`512 B`).
///
/// ```
/// use memplan_ir::HumanBytes;
/// assert_eq!(HumanBytes(512).to_string(), "512 B");
/// assert_eq!(HumanBytes(3 << 29).to_string(), "1.50 GiB");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanBytes(pub u64);

impl fmt::Display for HumanBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
        let bytes = self.0;
        if bytes < 1024 {
            return write!(f, "{bytes} B");
        }
        let mut unit = 0;
        let mut scale: u128 = 1024;
        while unit + 1 < UNITS.len() && u128::from(bytes) >= scale * 1024 {
            scale *= 1024;
            unit += 1;
        }
        // Two decimals, rounded half up, in integer arithmetic (deterministic everywhere).
        let hundredths = (u128::from(bytes) * 100 + scale / 2) / scale;
        write!(
            f,
            "{}.{:02} {}",
            hundredths / 100,
            hundredths % 100,
            UNITS[unit]
        )
    }
}

/// A byte count in human units, then exactly with its digits grouped:
/// `1.50 GiB (1,610,612,736 bytes)`, `512 B (512 bytes)`. Every "X (N bytes)" memplan prints
/// is this.
///
/// ```
/// use memplan_ir::ExactBytes;
/// assert_eq!(ExactBytes(3 << 29).to_string(), "1.50 GiB (1,610,612,736 bytes)");
/// assert_eq!(ExactBytes(512).to_string(), "512 B (512 bytes)");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ExactBytes(pub u64);

impl fmt::Display for ExactBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} bytes)", HumanBytes(self.0), Grouped(self.0))
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

    #[test]
    fn exact_bytes_says_both() {
        let text = ExactBytes(8_871_424).to_string();
        assert_eq!(text, "8.46 MiB (8,871,424 bytes)");
        assert_eq!(ExactBytes(1535).to_string(), "1.50 KiB (1,535 bytes)");
    }
}
