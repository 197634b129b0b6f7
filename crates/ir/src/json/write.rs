//! Writing: the corpus layout exactly, a header with one key per line, then one tensor or
//! node per line in compact JSON, strings escaped to ASCII and floats in shortest
//! round-trip form (Python's `repr`), so that a corpus file read and written again is
//! byte-for-byte the same.

use std::fmt::Write as _;

use crate::dim::Expr;
use crate::graph::{Attr, Graph, Node, Tensor};

impl Graph {
    /// The graph as JSON text in the corpus layout.
    pub fn to_json(&self) -> String {
        let mut out =
            String::with_capacity(128 * (self.tensors().len() + self.nodes().len()) + 512);
        out.push_str("{\n");
        let _ = writeln!(out, "  \"name\": {},", json_str(&self.name));
        for key in ["source", "license"] {
            let value = self
                .metadata_value(key)
                .map_or_else(|| "null".to_owned(), json_str);
            let _ = writeln!(out, "  \"{key}\": {value},");
        }
        let _ = writeln!(
            out,
            "  \"batch\": {},",
            self.batch
                .map_or_else(|| "null".to_owned(), |b| b.to_string())
        );
        if !self.symbols().is_empty() {
            let names: Vec<String> = self.symbols().iter().map(|s| json_str(s)).collect();
            let _ = writeln!(out, "  \"symbols\": [{}],", names.join(", "));
        }
        if !self.symbol_bounds().is_empty() {
            let bounds: Vec<String> = self
                .symbol_bounds()
                .iter()
                .map(|(s, e)| {
                    let name = self.symbols().get(*s).map_or("?", String::as_str);
                    format!("{}: {}", json_str(name), dim_json(e, self.symbols()))
                })
                .collect();
            let _ = writeln!(out, "  \"symbol_bounds\": {{{}}},", bounds.join(", "));
        }
        if !self.symbol_broadcasts().is_empty() {
            let rules: Vec<String> = self
                .symbol_broadcasts()
                .iter()
                .map(|(s, a, b)| {
                    let name = self.symbols().get(*s).map_or("?", String::as_str);
                    format!(
                        "{}: [{}, {}]",
                        json_str(name),
                        dim_json(a, self.symbols()),
                        dim_json(b, self.symbols())
                    )
                })
                .collect();
            let _ = writeln!(out, "  \"symbol_broadcasts\": {{{}}},", rules.join(", "));
        }
        if !self.symbol_quotients().is_empty() {
            let rules: Vec<String> = self
                .symbol_quotients()
                .iter()
                .map(|(s, q)| {
                    let name = self.symbols().get(*s).map_or("?", String::as_str);
                    let round = if q.ceil { "ceil" } else { "floor" };
                    format!(
                        "{}: [{}, {}, \"{round}\"]",
                        json_str(name),
                        dim_json(&q.num, self.symbols()),
                        q.den
                    )
                })
                .collect();
            let _ = writeln!(out, "  \"symbol_quotients\": {{{}}},", rules.join(", "));
        }
        if self.has_output_order() {
            let names: Vec<String> = self
                .outputs()
                .iter()
                .map(|&t| json_str(&self.tensor(t).name))
                .collect();
            let _ = writeln!(out, "  \"outputs\": [{}],", names.join(", "));
        }
        out.push_str("  \"tensors\": [\n");
        for (i, t) in self.tensors().iter().enumerate() {
            out.push_str("    ");
            self.write_tensor(&mut out, t);
            out.push_str(if i + 1 < self.tensors().len() {
                ",\n"
            } else {
                "\n"
            });
        }
        out.push_str("  ],\n  \"nodes\": [\n");
        for (i, n) in self.nodes().iter().enumerate() {
            out.push_str("    ");
            self.write_node(&mut out, n);
            out.push_str(if i + 1 < self.nodes().len() {
                ",\n"
            } else {
                "\n"
            });
        }
        out.push_str("  ]\n}\n");
        out
    }

    fn write_tensor(&self, out: &mut String, t: &Tensor) {
        let _ = write!(
            out,
            "{{\"name\":{},\"dtype\":{},\"shape\":[",
            json_str(&t.name),
            json_str(t.dtype.name())
        );
        for (i, d) in t.shape.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&dim_json(d, self.symbols()));
        }
        out.push(']');
        if let Some(count) = &t.element_count {
            let _ = write!(out, ",\"elements\":{}", dim_json(count, self.symbols()));
        }
        if t.has_static_size()
            && let Ok(b) = t.static_bytes()
        {
            let _ = write!(out, ",\"bytes\":{b}");
        }
        let _ = write!(out, ",\"kind\":{}", json_str(t.kind.name()));
        if let Some(v) = &t.int_value {
            out.push_str(",\"value\":");
            write_ints(out, v);
        }
        out.push('}');
    }

    fn write_node(&self, out: &mut String, n: &Node) {
        let name_of = |t: crate::TensorId| self.tensors().get(t).map_or("", |t| t.name.as_str());
        let _ = write!(
            out,
            "{{\"name\":{},\"op\":{},\"inputs\":[",
            json_str(&n.name),
            json_str(&n.op)
        );
        for (i, t) in n.inputs.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&json_str(t.map_or("", name_of)));
        }
        out.push_str("],\"outputs\":[");
        for (i, &t) in n.outputs.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&json_str(name_of(t)));
        }
        out.push_str("],\"attrs\":{");
        for (i, (k, a)) in n.attrs.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&json_str(k));
            out.push(':');
            match a {
                Attr::Int(v) => {
                    let _ = write!(out, "{v}");
                }
                Attr::Float(v) => out.push_str(&py_float(*v)),
                Attr::Str(s) => out.push_str(&json_str(s)),
                Attr::Ints(v) => write_ints(out, v),
                Attr::Floats(v) => {
                    out.push('[');
                    for (j, x) in v.iter().enumerate() {
                        if j > 0 {
                            out.push(',');
                        }
                        out.push_str(&py_float(*x));
                    }
                    out.push(']');
                }
            }
        }
        out.push('}');
        if !n.implicit_inputs.is_empty() {
            out.push_str(",\"implicit_inputs\":[");
            for (i, &t) in n.implicit_inputs.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&json_str(name_of(t)));
            }
            out.push(']');
        }
        if !n.bodies.is_empty() {
            out.push_str(",\"bodies\":[");
            for (i, body) in n.bodies.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{{\"attr\":{},\"graph\":", json_str(&body.attr));
                body.graph.write_body(out);
                out.push('}');
            }
            out.push(']');
        }
        out.push('}');
    }

    /// A body graph in compact JSON: its name, tensors and nodes (its symbols are its
    /// enclosing graph's, so they are not repeated).
    fn write_body(&self, out: &mut String) {
        let _ = write!(out, "{{\"name\":{},\"tensors\":[", json_str(&self.name));
        for (i, t) in self.tensors().iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            self.write_tensor(out, t);
        }
        out.push_str("],\"nodes\":[");
        for (i, n) in self.nodes().iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            self.write_node(out, n);
        }
        out.push_str("]}");
    }
}

/// A dimension as JSON: an integer, or the expression as a string.
fn dim_json(d: &Expr, symbols: &crate::ids::IndexVec<crate::ids::SymbolId, String>) -> String {
    match d.as_constant() {
        Some(c) => c.to_string(),
        None => json_str(&d.display(symbols).to_string()),
    }
}

fn write_ints(out: &mut String, v: &[i64]) {
    out.push('[');
    for (j, x) in v.iter().enumerate() {
        if j > 0 {
            out.push(',');
        }
        let _ = write!(out, "{x}");
    }
    out.push(']');
}

/// A JSON string literal escaped as Python's `json.dumps` does (ASCII only).
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A finite float in Python's `repr` form: shortest round-trip digits, positional for
/// decimal exponents in `[-4, 16)`, else `d.ddde±XX`. Non-finite values become the
/// strings `"inf"`, `"-inf"`, `"nan"`, as the format prescribes.
fn py_float(x: f64) -> String {
    if x.is_nan() {
        return "\"nan\"".into();
    }
    if x.is_infinite() {
        return if x > 0.0 {
            "\"inf\"".into()
        } else {
            "\"-inf\"".into()
        };
    }
    // `{:e}` gives the shortest round-trip digits: "-1.2345e-5".
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = mantissa
        .strip_prefix('-')
        .map_or(("", mantissa), |m| ("-", m));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        let s = if point <= 0 {
            format!("0.{}{}", "0".repeat((-point) as usize), digits)
        } else if (point as usize) >= digits.len() {
            format!("{}{}.0", digits, "0".repeat(point as usize - digits.len()))
        } else {
            let (a, b) = digits.split_at(point as usize);
            format!("{a}.{b}")
        };
        format!("{sign}{s}")
    } else {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{first}{frac}e{esign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_float_repr() {
        for (x, s) in [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (9.999999747378752e-05, "9.999999747378752e-05"),
            (1e-05, "1e-05"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (123456789012345.0, "123456789012345.0"),
            (-2.5e-7, "-2.5e-07"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1e100, "1e+100"),
        ] {
            assert_eq!(py_float(x), s, "{x}");
        }
        assert_eq!(py_float(f64::INFINITY), "\"inf\"");
    }

    #[test]
    fn strings_escape_like_python() {
        assert_eq!(json_str("a\"b\\c\n"), r#""a\"b\\c\n""#);
        assert_eq!(json_str("é"), r#""\u00e9""#);
        assert_eq!(json_str("😀"), r#""\ud83d\ude00""#);
        assert_eq!(json_str("\u{7f}"), r#""\u007f""#);
    }
}
