//! Human byte sizes: parsing `24GiB`, `24GB`, `512MiB`, `1.5GiB` or plain `4096`, and
//! printing a byte count the way a person reads it.
//!
//! Parsing is exact: binary units (`KiB`, `MiB`, `GiB`, `TiB`, `PiB`) are powers of 1024,
//! decimal units (`kB`, `MB`, `GB`, `TB`, `PB`) powers of 1000, units are case-insensitive,
//! and a fraction must come to a whole number of bytes (`1.5KiB` is 1536; `0.1B` is an
//! error). Bare `k`/`M`/`G` are rejected as ambiguous. Arithmetic is checked: a size past
//! `u64::MAX` is an error, not a wrap.

/// Why a size string could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizeParseError {
    /// Nothing to parse.
    #[error("empty size (expected e.g. 24GiB, 24GB, 512MiB or a number of bytes)")]
    Empty,
    /// The number part is not a non-negative decimal number.
    #[error("`{0}` does not start with a number (expected e.g. 24GiB, 24GB, 512MiB or 4096)")]
    BadNumber(String),
    /// The unit is not one memplan knows.
    #[error(
        "unknown unit `{unit}` in `{input}` (expected B, kB, MB, GB, TB, PB, KiB, MiB, GiB, TiB or PiB)"
    )]
    BadUnit {
        /// The whole input.
        input: String,
        /// The unit as written.
        unit: String,
    },
    /// A bare `k`, `M`, `G`, `T` or `P`: decimal or binary?
    #[error(
        "unit `{unit}` in `{input}` is ambiguous: write {unit}iB (powers of 1024) or {unit}B (powers of 1000)"
    )]
    Ambiguous {
        /// The whole input.
        input: String,
        /// The unit as written.
        unit: String,
    },
    /// A fraction that is not a whole number of bytes.
    #[error("`{0}` is not a whole number of bytes")]
    Fractional(String),
    /// Larger than `u64::MAX` bytes.
    #[error("`{0}` is more than 2^64-1 bytes")]
    Overflow(String),
}

/// Parses a human size: `24GiB`, `24 GB`, `512MiB`, `1.5GiB`, `4096` or `4096B`.
///
/// ```
/// use memplan_tracker::parse_size;
/// assert_eq!(parse_size("24GiB"), Ok(24 << 30));
/// assert_eq!(parse_size("24GB"), Ok(24_000_000_000));
/// assert_eq!(parse_size("1.5KiB"), Ok(1536));
/// assert!(parse_size("24G").is_err()); // ambiguous
/// ```
pub fn parse_size(input: &str) -> Result<u64, SizeParseError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(SizeParseError::Empty);
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let number: String = number.chars().filter(|&c| c != '_').collect();
    let unit = unit.trim();
    if number.is_empty() {
        return Err(SizeParseError::BadNumber(s.to_owned()));
    }
    let multiplier: u128 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "pb" => 1_000_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        "pib" => 1 << 50,
        "k" | "m" | "g" | "t" | "p" => {
            return Err(SizeParseError::Ambiguous {
                input: s.to_owned(),
                unit: unit.to_ascii_uppercase(),
            });
        }
        _ => {
            return Err(SizeParseError::BadUnit {
                input: s.to_owned(),
                unit: unit.to_owned(),
            });
        }
    };
    let (whole, frac) = match number.split_once('.') {
        Some((w, f)) => (w, f),
        None => (number.as_str(), ""),
    };
    let digits_ok = |p: &str| p.chars().all(|c| c.is_ascii_digit());
    if (whole.is_empty() && frac.is_empty()) || !digits_ok(whole) || !digits_ok(frac) {
        return Err(SizeParseError::BadNumber(s.to_owned()));
    }
    let overflow = || SizeParseError::Overflow(s.to_owned());
    // value = (whole * 10^f + frac) * multiplier / 10^f, in u128 with checks.
    let mut scaled: u128 = 0;
    for c in whole.chars().chain(frac.chars()) {
        let digit = u128::from(c.to_digit(10).unwrap_or(0));
        scaled = scaled
            .checked_mul(10)
            .and_then(|v| v.checked_add(digit))
            .ok_or_else(overflow)?;
    }
    let denominator = 10u128
        .checked_pow(u32::try_from(frac.len()).map_err(|_| overflow())?)
        .ok_or_else(overflow)?;
    let numerator = scaled.checked_mul(multiplier).ok_or_else(overflow)?;
    if numerator % denominator != 0 {
        return Err(SizeParseError::Fractional(s.to_owned()));
    }
    u64::try_from(numerator / denominator).map_err(|_| overflow())
}

/// A byte count printed for people (`1.50 GiB`): [`memplan_ir::HumanBytes`], where every
/// crate of the workspace finds it.
pub use memplan_ir::HumanBytes;

/// A byte count with thousands separators: `6,738,415,616` ([`memplan_ir::Grouped`]).
pub fn group_digits(value: u64) -> String {
    memplan_ir::Grouped(value).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_size("24GiB"), Ok(25_769_803_776));
        assert_eq!(parse_size("24gib"), Ok(25_769_803_776));
        assert_eq!(parse_size("24GB"), Ok(24_000_000_000));
        assert_eq!(parse_size("512MiB"), Ok(536_870_912));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 4096 B "), Ok(4096));
        assert_eq!(parse_size("80 GiB"), Ok(80 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(1_610_612_736));
        assert_eq!(parse_size("0.5kB"), Ok(500));
        assert_eq!(parse_size("1_000"), Ok(1000));
        assert_eq!(parse_size("16EiB").ok(), None);
        assert_eq!(parse_size("15PiB"), Ok(15 << 50));
    }

    #[test]
    fn errors_name_the_problem() {
        assert_eq!(parse_size(""), Err(SizeParseError::Empty));
        assert!(matches!(
            parse_size("GiB"),
            Err(SizeParseError::BadNumber(_))
        ));
        assert!(matches!(
            parse_size("1.2.3GB"),
            Err(SizeParseError::BadNumber(_))
        ));
        assert!(matches!(
            parse_size("-1GB"),
            Err(SizeParseError::BadNumber(_))
        ));
        assert!(matches!(
            parse_size("24G"),
            Err(SizeParseError::Ambiguous { .. })
        ));
        assert!(matches!(
            parse_size("24 bytes"),
            Err(SizeParseError::BadUnit { .. })
        ));
        assert!(matches!(
            parse_size("0.1B"),
            Err(SizeParseError::Fractional(_))
        ));
        assert!(matches!(
            parse_size("18446744073709551616"),
            Err(SizeParseError::Overflow(_))
        ));
        assert!(matches!(
            parse_size("20000PiB"),
            Err(SizeParseError::Overflow(_))
        ));
        let msg = parse_size("24G").unwrap_err().to_string();
        assert!(msg.contains("GiB") && msg.contains("GB"), "{msg}");
    }

    #[test]
    fn printing() {
        assert_eq!(HumanBytes(0).to_string(), "0 B");
        assert_eq!(HumanBytes(1023).to_string(), "1023 B");
        assert_eq!(HumanBytes(1024).to_string(), "1.00 KiB");
        assert_eq!(HumanBytes(24 << 30).to_string(), "24.00 GiB");
        assert_eq!(HumanBytes(u64::MAX).to_string(), "16.00 EiB");
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(124_439_808), "124,439,808");
        assert_eq!(group_digits(6_738_415_616), "6,738,415,616");
    }
}
