//! Symbolic dimensions: polynomials over shape symbols with integer coefficients.
//!
//! A dimension is a constant (`768`), a symbol (`batch`), or a sum of products of symbols
//! and integers (`12*batch`, `batch*seq`, `seq+1`). [`Expr`] keeps that polynomial in a
//! canonical form, so two equal polynomials compare equal and print the same:
//! terms are ordered by degree, highest first, then by their symbols' ids; the constant term
//! comes last; a coefficient of 1 is not printed. All arithmetic is checked: an overflow is
//! an [`ExprError`], never a wrap.
//!
//! Evaluation binds every symbol to a value ([`Bindings`]); a negative result is an error,
//! since a dimension or a size cannot be negative.

use std::fmt;

use smallvec::{SmallVec, smallvec};

use crate::ids::{IndexVec, SymbolId};

/// One monomial: `coeff * syms[0] * syms[1] * ...` (`syms` sorted, repeats allowed).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Term {
    coeff: i64,
    syms: SmallVec<[SymbolId; 2]>,
}

/// A polynomial over shape symbols with integer coefficients (`768`, `batch`, `12*batch`,
/// `seq+1`), in a canonical form, so two equal polynomials compare equal and print the same:
/// terms by degree, highest first, then by their symbols' ids, the constant last. All
/// arithmetic is checked: an overflow is an [`ExprError`], never a wrap.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Expr {
    /// Non-zero terms in canonical order; empty means 0.
    terms: SmallVec<[Term; 1]>,
}

/// What can go wrong building or evaluating an [`Expr`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExprError {
    /// A checked operation overflowed `i64` (or `u64` for sizes).
    #[error("arithmetic overflow")]
    Overflow,
    /// A symbol has no value in the bindings.
    #[error("symbol {0} has no value")]
    Unbound(SymbolId),
    /// The expression evaluated to a negative number.
    #[error("negative value {0}")]
    Negative(i64),
}

/// An error parsing a dimension string.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid dimension `{text}`: {reason}")]
#[non_exhaustive]
pub struct ParseExprError {
    /// The text that failed to parse.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

fn term_order(a: &Term, b: &Term) -> std::cmp::Ordering {
    b.syms
        .len()
        .cmp(&a.syms.len())
        .then_with(|| a.syms.cmp(&b.syms))
}

impl Expr {
    /// The constant `c`.
    pub fn constant(c: i64) -> Expr {
        if c == 0 {
            Expr {
                terms: SmallVec::new(),
            }
        } else {
            Expr {
                terms: smallvec![Term {
                    coeff: c,
                    syms: SmallVec::new()
                }],
            }
        }
    }

    /// The symbol `s`.
    pub fn symbol(s: SymbolId) -> Expr {
        Expr {
            terms: smallvec![Term {
                coeff: 1,
                syms: smallvec![s]
            }],
        }
    }

    /// The value if this expression has no symbols.
    pub fn as_constant(&self) -> Option<i64> {
        match self.terms.as_slice() {
            [] => Some(0),
            [t] if t.syms.is_empty() => Some(t.coeff),
            _ => None,
        }
    }

    /// Whether this expression has no symbols.
    pub fn is_constant(&self) -> bool {
        self.as_constant().is_some()
    }

    /// The symbols this expression mentions, sorted, without repeats.
    pub fn symbols(&self) -> Vec<SymbolId> {
        let mut out: Vec<SymbolId> = self
            .terms
            .iter()
            .flat_map(|t| t.syms.iter().copied())
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Whether a term mentioning one of `symbols` has a negative coefficient. Without one,
    /// the value never falls as those symbols grow (every symbol being at least 0), so a
    /// size at upper bounds of those symbols is at least the size at any smaller values.
    pub fn falls_with(&self, symbols: &[SymbolId]) -> bool {
        self.terms
            .iter()
            .any(|t| t.coeff < 0 && t.syms.iter().any(|s| symbols.contains(s)))
    }

    /// Builds the canonical form from arbitrary terms: sorts, merges equal monomials and drops
    /// zero terms.
    fn normalize(mut terms: Vec<Term>) -> Result<Expr, ExprError> {
        for t in &mut terms {
            t.syms.sort_unstable();
        }
        terms.sort_by(term_order);
        let mut out: SmallVec<[Term; 1]> = SmallVec::new();
        for t in terms {
            match out.last_mut() {
                Some(last) if last.syms == t.syms => {
                    last.coeff = last.coeff.checked_add(t.coeff).ok_or(ExprError::Overflow)?;
                }
                _ => out.push(t),
            }
        }
        out.retain(|t| t.coeff != 0);
        Ok(Expr { terms: out })
    }

    /// `self + other`.
    pub fn checked_add(&self, other: &Expr) -> Result<Expr, ExprError> {
        Expr::normalize(
            self.terms
                .iter()
                .chain(other.terms.iter())
                .cloned()
                .collect(),
        )
    }

    /// `self - other`.
    pub fn checked_sub(&self, other: &Expr) -> Result<Expr, ExprError> {
        let neg = other.checked_mul(&Expr::constant(-1))?;
        self.checked_add(&neg)
    }

    /// `self * other`.
    pub fn checked_mul(&self, other: &Expr) -> Result<Expr, ExprError> {
        let mut terms = Vec::with_capacity(self.terms.len() * other.terms.len());
        for a in &self.terms {
            for b in &other.terms {
                let coeff = a.coeff.checked_mul(b.coeff).ok_or(ExprError::Overflow)?;
                let mut syms = a.syms.clone();
                syms.extend(b.syms.iter().copied());
                terms.push(Term { coeff, syms });
            }
        }
        Expr::normalize(terms)
    }

    /// The constant term (0 when there is none).
    fn constant_term(&self) -> i64 {
        self.terms
            .iter()
            .find(|t| t.syms.is_empty())
            .map_or(0, |t| t.coeff)
    }

    /// The least value the expression takes over all values of its symbols, which are dims and
    /// so never negative: its constant term when every other term has a non-negative
    /// coefficient (the symbols at 0), `None` when it has no least value.
    pub fn min_value(&self) -> Option<i64> {
        self.terms
            .iter()
            .all(|t| t.syms.is_empty() || t.coeff > 0)
            .then(|| self.constant_term())
    }

    /// The greatest value the expression takes over all values of its symbols (never
    /// negative): its constant term when every other term has a negative coefficient, `None`
    /// when it has no greatest value.
    pub fn max_value(&self) -> Option<i64> {
        self.terms
            .iter()
            .all(|t| t.syms.is_empty() || t.coeff < 0)
            .then(|| self.constant_term())
    }

    /// The number of non-zero terms (0 for the constant 0). Importers use it to bound the
    /// size of expressions built from untrusted files.
    pub fn term_count(&self) -> usize {
        self.terms.len()
    }

    /// `self / divisor` when `divisor` is a single non-zero term (`12`, `batch`, `12*batch`)
    /// that divides every term of `self` exactly; `None` otherwise (no remainder is dropped).
    pub fn div_exact(&self, divisor: &Expr) -> Option<Expr> {
        let [d] = divisor.terms.as_slice() else {
            return None;
        };
        let mut terms = Vec::with_capacity(self.terms.len());
        for t in &self.terms {
            if t.coeff.checked_rem(d.coeff)? != 0 {
                return None;
            }
            let mut syms = t.syms.clone();
            for s in &d.syms {
                let pos = syms.iter().position(|x| x == s)?;
                syms.remove(pos);
            }
            terms.push(Term {
                coeff: t.coeff.checked_div(d.coeff)?,
                syms,
            });
        }
        Expr::normalize(terms).ok()
    }

    /// `(whole, rest)` with `self = d * whole + rest` and every coefficient of `rest` (its
    /// constant too) in `0..d`: each term's coefficient divided by `d` with a remainder that
    /// is never negative. `None` when `d` is not positive. So `floor(self / d)` is
    /// `whole + floor(rest / d)` (and the same for `ceil`) for every value of the symbols.
    pub fn div_rem_euclid(&self, d: i64) -> Option<(Expr, Expr)> {
        if d < 1 {
            return None;
        }
        let (mut whole, mut rest) = (Vec::new(), Vec::new());
        for t in &self.terms {
            whole.push(Term {
                coeff: t.coeff.div_euclid(d),
                syms: t.syms.clone(),
            });
            rest.push(Term {
                coeff: t.coeff.rem_euclid(d),
                syms: t.syms.clone(),
            });
        }
        Some((Expr::normalize(whole).ok()?, Expr::normalize(rest).ok()?))
    }

    /// `(k, rest)` with `self = k * s + rest` and `s` not in `rest`, when `s` appears in no
    /// term of degree above one (`k` is 0 when it does not appear at all).
    pub fn linear_in(&self, s: SymbolId) -> Option<(i64, Expr)> {
        let mut k = 0;
        let mut rest = Vec::with_capacity(self.terms.len());
        for t in &self.terms {
            if t.syms.as_slice() == [s] {
                k = t.coeff;
            } else if t.syms.contains(&s) {
                return None;
            } else {
                rest.push(t.clone());
            }
        }
        Some((k, Expr::normalize(rest).ok()?))
    }

    /// The value for these bindings, with checked arithmetic; negative results are errors.
    pub fn eval(&self, bindings: &Bindings) -> Result<u64, ExprError> {
        let v = self.eval_signed(bindings)?;
        u64::try_from(v).map_err(|_| ExprError::Negative(v))
    }

    /// The signed value for these bindings, with checked arithmetic.
    pub fn eval_signed(&self, bindings: &Bindings) -> Result<i64, ExprError> {
        let mut total: i64 = 0;
        for t in &self.terms {
            let mut v = t.coeff;
            for &s in &t.syms {
                let x = bindings.get(s).ok_or(ExprError::Unbound(s))?;
                let x = i64::try_from(x).map_err(|_| ExprError::Overflow)?;
                v = v.checked_mul(x).ok_or(ExprError::Overflow)?;
            }
            total = total.checked_add(v).ok_or(ExprError::Overflow)?;
        }
        Ok(total)
    }

    /// Parses `expr := term (("+"|"-") term)*`, `term := factor ("*" factor)*`,
    /// `factor := integer | symbol`, with no spaces. `resolve` maps a symbol name to its id
    /// (creating it or rejecting it, as the caller decides).
    pub fn parse(
        text: &str,
        mut resolve: impl FnMut(&str) -> Result<SymbolId, String>,
    ) -> Result<Expr, ParseExprError> {
        let fail = |reason: String| ParseExprError {
            text: text.to_owned(),
            reason,
        };
        if text.is_empty() {
            return Err(fail("empty".into()));
        }
        let mut terms = Vec::new();
        let mut rest = text;
        let mut sign = 1i64;
        if let Some(r) = rest.strip_prefix('-') {
            sign = -1;
            rest = r;
        }
        loop {
            let end = rest.find(['+', '-']).unwrap_or(rest.len());
            let (term_text, tail) = rest.split_at(end);
            let mut coeff = sign;
            let mut syms = SmallVec::new();
            for factor in term_text.split('*') {
                if factor.is_empty() {
                    return Err(fail("empty factor".into()));
                }
                if factor.bytes().all(|b| b.is_ascii_digit()) {
                    let n: i64 = factor
                        .parse()
                        .map_err(|_| fail(format!("`{factor}` is too large")))?;
                    coeff = coeff
                        .checked_mul(n)
                        .ok_or_else(|| fail("overflow".into()))?;
                } else if factor.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && factor
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    syms.push(resolve(factor).map_err(fail)?);
                } else {
                    return Err(fail(format!(
                        "`{factor}` is neither an integer nor a symbol name"
                    )));
                }
            }
            terms.push(Term { coeff, syms });
            match tail.as_bytes().first() {
                None => break,
                Some(b'+') => sign = 1,
                Some(_) => sign = -1,
            }
            rest = &tail[1..];
        }
        Expr::normalize(terms).map_err(|e| fail(e.to_string()))
    }

    /// Renders the expression with symbol names from `names`.
    pub fn display<'a>(&'a self, names: &'a IndexVec<SymbolId, String>) -> impl fmt::Display + 'a {
        ExprDisplay { expr: self, names }
    }
}

impl fmt::Debug for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_expr(self, f, &|f, s| write!(f, "{s}"))
    }
}

struct ExprDisplay<'a> {
    expr: &'a Expr,
    names: &'a IndexVec<SymbolId, String>,
}

impl fmt::Display for ExprDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_expr(self.expr, f, &|f, s| match self.names.get(s) {
            Some(name) => f.write_str(name),
            None => write!(f, "{s}"),
        })
    }
}

fn write_expr(
    expr: &Expr,
    f: &mut fmt::Formatter<'_>,
    sym: &dyn Fn(&mut fmt::Formatter<'_>, SymbolId) -> fmt::Result,
) -> fmt::Result {
    if expr.terms.is_empty() {
        return f.write_str("0");
    }
    for (i, t) in expr.terms.iter().enumerate() {
        let mut coeff = t.coeff;
        if i > 0 {
            f.write_str(if coeff < 0 { "-" } else { "+" })?;
            coeff = coeff.saturating_abs();
        } else if coeff < 0 && coeff != -1 || (coeff == -1 && t.syms.is_empty()) {
            // Written below as a plain negative number.
        } else if coeff == -1 {
            f.write_str("-")?;
            coeff = 1;
        }
        let mut first = true;
        if coeff != 1 || t.syms.is_empty() {
            write!(f, "{coeff}")?;
            first = false;
        }
        for &s in &t.syms {
            if !first {
                f.write_str("*")?;
            }
            sym(f, s)?;
            first = false;
        }
    }
    Ok(())
}

impl From<i64> for Expr {
    fn from(c: i64) -> Expr {
        Expr::constant(c)
    }
}

/// Values for shape symbols.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bindings {
    values: Vec<Option<u64>>,
}

impl Bindings {
    /// No symbol bound.
    pub fn new() -> Bindings {
        Bindings::default()
    }

    /// Binds `symbol` to `value`, replacing any earlier value.
    pub fn set(&mut self, symbol: SymbolId, value: u64) {
        let i = symbol.index();
        if self.values.len() <= i {
            self.values.resize(i + 1, None);
        }
        self.values[i] = Some(value);
    }

    /// Builder form of [`Bindings::set`].
    pub fn with(mut self, symbol: SymbolId, value: u64) -> Bindings {
        self.set(symbol, value);
        self
    }

    /// The value of `symbol`, if bound.
    pub fn get(&self, symbol: SymbolId) -> Option<u64> {
        self.values.get(symbol.index()).copied().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> IndexVec<SymbolId, String> {
        ["batch", "seq"].into_iter().map(String::from).collect()
    }

    fn parse(s: &str) -> Expr {
        let names = names();
        Expr::parse(s, |n| {
            names
                .iter_enumerated()
                .find(|(_, x)| *x == n)
                .map(|(id, _)| id)
                .ok_or(format!("unknown `{n}`"))
        })
        .unwrap()
    }

    #[test]
    fn division_with_remainder_splits_every_coefficient() {
        let show = |e: &Expr| e.display(&names()).to_string();
        let (w, r) = parse("5*batch*seq-3*seq+7").div_rem_euclid(2).unwrap();
        assert_eq!(
            (show(&w), show(&r)),
            ("2*batch*seq-2*seq+3".into(), "batch*seq+seq+1".into())
        );
        let (w, r) = parse("seq-1").div_rem_euclid(4).unwrap();
        assert_eq!((show(&w), show(&r)), ("-1".into(), "seq+3".into()));
        assert!(parse("seq").div_rem_euclid(0).is_none());
        let seq = SymbolId::new(1);
        let (k, rest) = parse("3*seq+batch+2").linear_in(seq).unwrap();
        assert_eq!((k, show(&rest)), (3, "batch+2".into()));
        assert_eq!(parse("batch").linear_in(seq), Some((0, parse("batch"))));
        assert_eq!(parse("batch*seq+seq").linear_in(seq), None);
    }

    #[test]
    fn corpus_strings_round_trip() {
        let names = names();
        for s in [
            "batch",
            "seq",
            "12*batch",
            "batch*seq",
            "seq+1",
            "768",
            "0",
            "seq-1",
            "2*batch*seq+3*seq+7",
        ] {
            assert_eq!(parse(s).display(&names).to_string(), s);
        }
    }

    #[test]
    fn canonical_form_merges_terms() {
        let names = names();
        assert_eq!(parse("seq*batch").display(&names).to_string(), "batch*seq");
        assert_eq!(parse("1+seq").display(&names).to_string(), "seq+1");
        assert_eq!(parse("batch+batch").display(&names).to_string(), "2*batch");
        assert_eq!(parse("batch-batch"), Expr::constant(0));
    }

    #[test]
    fn eval_with_bindings() {
        let b = Bindings::new().with(SymbolId(0), 8).with(SymbolId(1), 128);
        assert_eq!(parse("batch*seq").eval(&b), Ok(1024));
        assert_eq!(parse("seq+1").eval(&b), Ok(129));
        assert_eq!(
            parse("seq").eval(&Bindings::new()),
            Err(ExprError::Unbound(SymbolId(1)))
        );
        let small = Bindings::new().with(SymbolId(1), 0);
        assert_eq!(parse("seq-1").eval(&small), Err(ExprError::Negative(-1)));
    }

    #[test]
    fn exact_division_by_a_monomial() {
        let names = names();
        let q = |a: &str, b: &str| {
            parse(a)
                .div_exact(&parse(b))
                .map(|e| e.display(&names).to_string())
        };
        assert_eq!(q("12*batch", "batch").as_deref(), Some("12"));
        assert_eq!(
            q("12*batch*seq+24*seq", "12*seq").as_deref(),
            Some("batch+2")
        );
        assert_eq!(q("768", "3").as_deref(), Some("256"));
        assert_eq!(q("7", "2"), None);
        assert_eq!(q("batch", "seq"), None);
        assert_eq!(q("batch", "batch+1"), None);
        assert_eq!(q("batch", "0"), None);
        assert_eq!(parse("2*batch*seq+seq+1").term_count(), 3);
        assert_eq!(Expr::constant(0).term_count(), 0);
    }

    #[test]
    fn overflow_is_an_error() {
        let big = Expr::constant(i64::MAX);
        assert_eq!(
            big.checked_mul(&Expr::constant(2)),
            Err(ExprError::Overflow)
        );
        let b = Bindings::new().with(SymbolId(0), u64::MAX);
        assert_eq!(parse("batch").eval(&b), Err(ExprError::Overflow));
        let b = Bindings::new().with(SymbolId(0), 1 << 40);
        assert_eq!(parse("batch*batch").eval(&b), Err(ExprError::Overflow));
    }

    #[test]
    fn bad_strings_are_rejected() {
        let names = names();
        let resolve = |n: &str| {
            names
                .iter_enumerated()
                .find(|(_, x)| *x == n)
                .map(|(id, _)| id)
                .ok_or(format!("unknown symbol `{n}`"))
        };
        for s in [
            "",
            "+",
            "batch*",
            "2**batch",
            "b@tch",
            "batch+",
            "99999999999999999999",
            "heads",
        ] {
            assert!(Expr::parse(s, resolve).is_err(), "{s}");
        }
    }

    #[test]
    fn least_and_greatest_values_over_dims() {
        assert_eq!(parse("seq+1").min_value(), Some(1));
        assert_eq!(parse("2*batch*seq").min_value(), Some(0));
        assert_eq!(parse("seq-1").min_value(), Some(-1));
        assert_eq!(parse("seq-1").max_value(), None);
        assert_eq!(parse("768").min_value(), Some(768));
        assert_eq!(parse("768").max_value(), Some(768));
        let neg = parse("seq").checked_mul(&Expr::constant(-1)).unwrap();
        assert_eq!(
            neg.checked_sub(&Expr::constant(1)).unwrap().max_value(),
            Some(-1)
        );
        assert_eq!(neg.min_value(), None);
    }
}
