//! MiniMalloc's CSV format for problems and solutions.
//!
//! A header row names the columns, in any order: `id`, `lower`, `upper`, `size` (required),
//! `alignment` (optional, a power of two, 1 when absent), `offset` (optional: a solution
//! file), and MiniMalloc's `hint` and `gaps`, which are read past and ignored. MiniMalloc's
//! older header `start,end` (with an inclusive `end`) is accepted in place of `lower,upper`.
//! Each further row is one buffer live over the half-open `[lower, upper)`. Fields are
//! separated by commas with surrounding spaces trimmed; blank lines are skipped.
//!
//! Quoting follows RFC 4180: a field that starts with `"` runs to the next `"` not doubled,
//! may hold commas, line breaks and spaces (kept as they are), and `""` inside it is one
//! `"`; an id such as `"layer.0,attn"` is one field. A quote inside a field that does not
//! start with one is read as a plain character. [`write()`] quotes the ids that need it (a
//! comma, a quote, a line break, surrounding spaces) and no others, so files without such
//! ids are byte for byte MiniMalloc's.
//!
//! Reading never panics: every malformed input is a [`CsvError`] naming the line and field.
//! [`write()`] produces the same format with an `offset` column, and reading what it wrote gives
//! back the same problem and offsets.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use super::problem::{Buffer, Problem, Solution};

/// A problem read from CSV, with its offsets when the file has an `offset` column.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CsvProblem {
    /// The buffers, in row order, with no capacity.
    pub problem: Problem,
    /// The offsets, when the file is a solution.
    pub solution: Option<Solution>,
}

/// Why a CSV file could not be read or written. Lines are numbered from 1.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CsvError {
    /// No header row.
    #[error("the file is empty: expected a header row such as `id,lower,upper,size`")]
    Empty,
    /// A header column that is not one of the known ones.
    #[error(
        "line {line}: unknown column `{name}`; expected id, lower, upper, size, alignment, offset, hint or gaps"
    )]
    UnknownColumn {
        /// The line.
        line: usize,
        /// The column name.
        name: String,
    },
    /// A header column named twice.
    #[error("line {line}: column `{name}` appears twice")]
    DuplicateColumn {
        /// The line.
        line: usize,
        /// The column name.
        name: String,
    },
    /// A required column that the header lacks.
    #[error("line {line}: the header has no `{name}` column")]
    MissingColumn {
        /// The line.
        line: usize,
        /// The column name.
        name: &'static str,
    },
    /// A row with the wrong number of fields.
    #[error("line {line}: expected {expected} fields as in the header, found {found}")]
    FieldCount {
        /// The line.
        line: usize,
        /// Fields in the header.
        expected: usize,
        /// Fields in the row.
        found: usize,
    },
    /// A field that is not a non-negative integer that fits in 64 bits.
    #[error(
        "line {line}, field `{field}`: expected a non-negative integer below 2^64, found {value:?}"
    )]
    NotANumber {
        /// The line.
        line: usize,
        /// The column name.
        field: &'static str,
        /// The text found.
        value: String,
    },
    /// A negative number.
    #[error("line {line}, field `{field}`: {value} is negative")]
    Negative {
        /// The line.
        line: usize,
        /// The column name.
        field: &'static str,
        /// The text found.
        value: String,
    },
    /// An empty `id`.
    #[error("line {line}, field `id`: the id is empty")]
    EmptyId {
        /// The line.
        line: usize,
    },
    /// `upper <= lower`.
    #[error(
        "line {line}: upper {upper} is not greater than lower {lower} (intervals are [lower, upper))"
    )]
    EmptyInterval {
        /// The line.
        line: usize,
        /// The lower time.
        lower: u64,
        /// The upper time.
        upper: u64,
    },
    /// An inclusive `end` of `u64::MAX`, which has no half-open equivalent.
    #[error("line {line}, field `end`: {end} is too large")]
    EndTooLarge {
        /// The line.
        line: usize,
        /// The inclusive end.
        end: u64,
    },
    /// An id used by an earlier row.
    #[error("line {line}, field `id`: {id:?} is already the id of line {first_line}")]
    DuplicateId {
        /// The line.
        line: usize,
        /// The id.
        id: String,
        /// The line that used it first.
        first_line: usize,
    },
    /// An alignment that is not a power of two.
    #[error("line {line}, field `alignment`: {align} is not a power of two")]
    BadAlignment {
        /// The line.
        line: usize,
        /// The alignment.
        align: u64,
    },
    /// `offset + size` does not fit in 64 bits.
    #[error("line {line}: offset {offset} + size {size} does not fit in 64 bits")]
    OffsetOverflow {
        /// The line.
        line: usize,
        /// The offset.
        offset: u64,
        /// The size.
        size: u64,
    },
    /// The sizes (with alignment padding) add up to more than `u64::MAX`.
    #[error("line {line}: the sizes up to this row add up to more than 2^64 - 1 bytes")]
    SumOverflow {
        /// The line where the sum overflowed.
        line: usize,
    },
    /// More rows than a buffer id can number.
    #[error("line {line}: more than {} buffers", u32::MAX)]
    TooManyRows {
        /// The line.
        line: usize,
    },
    /// A quoted field whose closing quote never comes.
    #[error(
        "line {line}: a quoted field (starting with `\"`) is not closed before the end of the file"
    )]
    UnclosedQuote {
        /// The line where the field starts.
        line: usize,
    },
    /// Text between a quoted field's closing quote and the next comma.
    #[error(
        "line {line}: text after the closing quote of a field; a quoted field ends at its closing quote (write a quote inside it as `\"\"`)"
    )]
    TextAfterQuote {
        /// The line of the closing quote.
        line: usize,
    },
    /// A name that [`write()`] cannot put in a CSV field.
    #[error("buffer {name:?} cannot be written: an id must not be empty")]
    UnwritableName {
        /// The name.
        name: String,
    },
    /// Two buffers that [`write()`] would give the same id (a name given twice, or one that
    /// clashes with the `buf{i}` a buffer without a name is written as).
    #[error("two buffers would both be written with id {name:?}; ids must be unique")]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// A solution whose offset count differs from the buffer count.
    #[error("the solution has {found} offsets for {expected} buffers")]
    OffsetCount {
        /// Buffers.
        expected: usize,
        /// Offsets.
        found: usize,
    },
}

/// The known columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Column {
    Id,
    Lower,
    Upper,
    Size,
    Alignment,
    Offset,
    Ignored,
    /// `start`, MiniMalloc's old name for `lower`.
    Start,
    /// `end`, MiniMalloc's old inclusive upper end.
    End,
}

fn column(name: &str) -> Option<Column> {
    Some(match name {
        "id" => Column::Id,
        "lower" => Column::Lower,
        "upper" => Column::Upper,
        "size" => Column::Size,
        "alignment" => Column::Alignment,
        "offset" => Column::Offset,
        "hint" | "gaps" => Column::Ignored,
        "start" => Column::Start,
        "end" => Column::End,
        _ => return None,
    })
}

/// Where each used column sits in a row.
#[derive(Debug)]
struct Layout {
    width: usize,
    id: usize,
    lower: usize,
    upper: usize,
    /// Whether `upper` is MiniMalloc's old inclusive `end`.
    inclusive_end: bool,
    size: usize,
    alignment: Option<usize>,
    offset: Option<usize>,
}

fn layout(line: usize, names: &[Cow<'_, str>]) -> Result<Layout, CsvError> {
    let mut found: Vec<(Column, usize)> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let name = name.as_ref();
        let c = column(name).ok_or_else(|| CsvError::UnknownColumn {
            line,
            name: name.to_owned(),
        })?;
        if c != Column::Ignored && found.iter().any(|&(f, _)| f == c) {
            return Err(CsvError::DuplicateColumn {
                line,
                name: name.to_owned(),
            });
        }
        found.push((c, i));
    }
    let find = |c: Column| found.iter().find(|&&(f, _)| f == c).map(|&(_, i)| i);
    let need =
        |c: Column, name: &'static str| find(c).ok_or(CsvError::MissingColumn { line, name });
    let (lower, upper, inclusive_end) = match (find(Column::Lower), find(Column::Start)) {
        (Some(_), Some(_)) => {
            return Err(CsvError::DuplicateColumn {
                line,
                name: "start".to_owned(),
            });
        }
        (None, Some(start)) => (start, need(Column::End, "end")?, true),
        _ => (
            need(Column::Lower, "lower")?,
            need(Column::Upper, "upper")?,
            false,
        ),
    };
    if !inclusive_end && find(Column::End).is_some() {
        return Err(CsvError::DuplicateColumn {
            line,
            name: "end".to_owned(),
        });
    }
    if inclusive_end && find(Column::Upper).is_some() {
        return Err(CsvError::DuplicateColumn {
            line,
            name: "upper".to_owned(),
        });
    }
    Ok(Layout {
        width: names.len(),
        id: need(Column::Id, "id")?,
        lower,
        upper,
        inclusive_end,
        size: need(Column::Size, "size")?,
        alignment: find(Column::Alignment),
        offset: find(Column::Offset),
    })
}

fn number(line: usize, field: &'static str, text: &str) -> Result<u64, CsvError> {
    let value = || text.to_owned();
    if let Some(digits) = text.strip_prefix('-')
        && !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(CsvError::Negative {
            line,
            field,
            value: value(),
        });
    }
    // `u64::from_str` accepts a leading `+`; the format does not.
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CsvError::NotANumber {
            line,
            field,
            value: value(),
        });
    }
    text.parse().map_err(|_| CsvError::NotANumber {
        line,
        field,
        value: value(),
    })
}

/// The records of a CSV text, one at a time: blank lines skipped, fields trimmed unless
/// quoted, quoted fields unescaped (see the module docs).
struct Records<'a> {
    rest: &'a str,
    /// The line `rest` starts on.
    line: usize,
}

impl<'a> Records<'a> {
    /// Reads the next record's fields into `fields`; returns the line it starts on, or `None`
    /// at the end of the text.
    fn next(&mut self, fields: &mut Vec<Cow<'a, str>>) -> Result<Option<usize>, CsvError> {
        fields.clear();
        loop {
            if self.rest.is_empty() {
                return Ok(None);
            }
            let (row, after) = match self.rest.find('\n') {
                Some(at) => (&self.rest[..at], &self.rest[at + 1..]),
                None => (self.rest, ""),
            };
            let row = row.strip_suffix('\r').unwrap_or(row);
            let line = self.line;
            if row.trim().is_empty() {
                self.rest = after;
                self.line += 1;
                continue;
            }
            if !row.contains('"') {
                // Most rows: no quote, so commas split and spaces trim.
                fields.extend(row.split(',').map(|f| Cow::Borrowed(f.trim())));
                self.rest = after;
                self.line += 1;
                return Ok(Some(line));
            }
            self.quoted(fields)?;
            return Ok(Some(line));
        }
    }

    /// Reads one record that holds a quote, field by field, from the start of `rest`.
    fn quoted(&mut self, fields: &mut Vec<Cow<'a, str>>) -> Result<(), CsvError> {
        let text = self.rest;
        let mut at = 0;
        loop {
            let field_start = at;
            let lead = text[at..].len() - text[at..].trim_start_matches([' ', '\t']).len();
            if text[at + lead..].starts_with('"') {
                let open_line = self.line;
                let mut value = String::new();
                let mut pos = at + lead + 1;
                loop {
                    let Some(q) = text[pos..].find('"') else {
                        return Err(CsvError::UnclosedQuote { line: open_line });
                    };
                    let chunk = &text[pos..pos + q];
                    self.line += chunk.matches('\n').count();
                    value.push_str(chunk);
                    pos += q + 1;
                    if text[pos..].starts_with('"') {
                        value.push('"');
                        pos += 1;
                    } else {
                        break;
                    }
                }
                // Quoted line breaks are CRLF or LF; keep them as written.
                let tail = text[pos..].len() - text[pos..].trim_start_matches([' ', '\t']).len();
                pos += tail;
                fields.push(Cow::Owned(value));
                let rest = &text[pos..];
                if let Some(r) = rest.strip_prefix(',') {
                    at = text.len() - r.len();
                    continue;
                }
                let ended = rest.is_empty() || rest.starts_with('\n') || rest.starts_with("\r\n");
                if !ended {
                    return Err(CsvError::TextAfterQuote { line: self.line });
                }
                self.finish_row(&text[pos..]);
                return Ok(());
            }
            // An unquoted field: to the next comma or the end of the line.
            let rest = &text[field_start..];
            let end = rest.find([',', '\n']).unwrap_or(rest.len());
            let raw = &rest[..end];
            let raw = raw.strip_suffix('\r').unwrap_or(raw);
            fields.push(Cow::Borrowed(raw.trim()));
            if rest[end..].starts_with(',') {
                at = field_start + end + 1;
                continue;
            }
            self.finish_row(&rest[end..]);
            return Ok(());
        }
    }

    /// Moves past the line break that ends a record (`rest` starts at it, or is empty).
    fn finish_row(&mut self, rest: &'a str) {
        let rest = rest.strip_prefix('\r').unwrap_or(rest);
        match rest.strip_prefix('\n') {
            Some(after) => {
                self.rest = after;
                self.line += 1;
            }
            None => self.rest = rest,
        }
    }
}

/// Reads a problem (and offsets, if the file has them) from CSV text.
pub fn read(text: &str) -> Result<CsvProblem, CsvError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut records = Records {
        rest: text,
        line: 1,
    };
    let mut fields: Vec<Cow<'_, str>> = Vec::new();
    let header_line = records.next(&mut fields)?.ok_or(CsvError::Empty)?;
    let layout = layout(header_line, &fields)?;
    let mut buffers: Vec<Buffer> = Vec::new();
    let mut offsets: Vec<u64> = Vec::new();
    let mut ids: Vec<Cow<'_, str>> = Vec::new();
    // Ids borrowed from the text where unquoted: no allocation per row for the duplicate
    // check.
    let mut seen: HashMap<Cow<'_, str>, usize> = HashMap::with_capacity(text.len() / 32);
    let mut total = 0u64;
    fields.reserve(layout.width);
    while let Some(line) = records.next(&mut fields)? {
        if fields.len() != layout.width {
            return Err(CsvError::FieldCount {
                line,
                expected: layout.width,
                found: fields.len(),
            });
        }
        if buffers.len() >= u32::MAX as usize {
            return Err(CsvError::TooManyRows { line });
        }
        let field = |i: usize| fields.get(i).map_or("", |f| f.as_ref());
        let (lower_name, upper_name) = if layout.inclusive_end {
            ("start", "end")
        } else {
            ("lower", "upper")
        };
        if field(layout.id).is_empty() {
            return Err(CsvError::EmptyId { line });
        }
        let lower = number(line, lower_name, field(layout.lower))?;
        let mut upper = number(line, upper_name, field(layout.upper))?;
        if layout.inclusive_end {
            upper = upper
                .checked_add(1)
                .ok_or(CsvError::EndTooLarge { line, end: upper })?;
        }
        if upper <= lower {
            return Err(CsvError::EmptyInterval { line, lower, upper });
        }
        let size = number(line, "size", field(layout.size))?;
        let align = match layout.alignment {
            Some(i) => number(line, "alignment", field(i))?,
            None => 1,
        };
        if !align.is_power_of_two() {
            return Err(CsvError::BadAlignment { line, align });
        }
        total = total
            .checked_add(size)
            .and_then(|t| t.checked_add(align - 1))
            .ok_or(CsvError::SumOverflow { line })?;
        if let Some(i) = layout.offset {
            let offset = number(line, "offset", field(i))?;
            offset
                .checked_add(size)
                .ok_or(CsvError::OffsetOverflow { line, offset, size })?;
            offsets.push(offset);
        }
        let id = match fields.get_mut(layout.id) {
            Some(f) => std::mem::take(f),
            None => Cow::Borrowed(""),
        };
        // One hash lookup a row: the entry is the first line of an id, or is made here.
        if let Some(first_line) = seen.insert(id.clone(), line) {
            return Err(CsvError::DuplicateId {
                line,
                id: id.into_owned(),
                first_line,
            });
        }
        ids.push(id);
        buffers.push(Buffer {
            start: lower,
            end: upper,
            size,
            align,
        });
    }
    let solution = layout.offset.map(|_| Solution { offsets });
    let mut problem = Problem::new(buffers).with_names(ids);
    // `seen` has checked that no id repeats.
    problem.assume_distinct_names();
    Ok(CsvProblem { problem, solution })
}

/// Appends `name` to `out` as one CSV field: as it is, or quoted (with its quotes doubled)
/// where it holds a comma, a quote or a line break, has surrounding spaces, or would start
/// the file with a byte-order mark.
fn push_field(out: &mut String, name: &str, first: bool) {
    let quote = name.trim() != name
        || name.contains([',', '"', '\n', '\r'])
        || (first && name.starts_with('\u{feff}'));
    if quote {
        out.push('"');
        out.push_str(&name.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(name);
    }
}

/// Writes a problem as CSV, with an `offset` column when a solution is given and an
/// `alignment` column when some buffer needs one. Rows are in buffer order.
pub fn write(problem: &Problem, solution: Option<&Solution>) -> Result<String, CsvError> {
    if let Some(s) = solution
        && s.offsets.len() != problem.len()
    {
        return Err(CsvError::OffsetCount {
            expected: problem.len(),
            found: s.offsets.len(),
        });
    }
    let aligned = problem.buffers.iter().any(|b| b.align != 1);
    let mut out = String::with_capacity(32 * (problem.len() + 1));
    out.push_str("id,lower,upper,size");
    if aligned {
        out.push_str(",alignment");
    }
    if solution.is_some() {
        out.push_str(",offset");
    }
    out.push('\n');
    // Given names may repeat, or clash with the `buf{i}` of a buffer without one; not when
    // no buffer has a name, or when the names were read as distinct ids.
    let check = !(problem.unnamed() || problem.names_known_distinct());
    let mut seen: HashSet<Cow<'_, str>> = HashSet::new();
    for ((i, b), id) in problem.buffers.iter().enumerate().zip(problem.ids()) {
        let name = problem.name(id);
        if name.is_empty() {
            return Err(CsvError::UnwritableName {
                name: name.into_owned(),
            });
        }
        if check && !seen.insert(name.clone()) {
            return Err(CsvError::DuplicateName {
                name: name.into_owned(),
            });
        }
        push_field(&mut out, &name, i == 0);
        // Writing to a String cannot fail.
        let _ = write!(out, ",{},{},{}", b.start, b.end, b.size);
        if aligned {
            let _ = write!(out, ",{}", b.align);
        }
        if let Some(offset) = solution.and_then(|s| s.offsets.get(i)) {
            let _ = write!(out, ",{offset}");
        }
        out.push('\n');
    }
    Ok(out)
}
