//! What every command shares in how it talks to the user: `--quiet`, notes on standard
//! error, the exit codes, the one-line error report, and writing output to a file or to
//! standard output (`-o -`).
//!
//! Exit codes, the same on every command: [`OK`] (0), [`NEGATIVE`] (1: the answer is no —
//! an unsafe plan, an infeasible capacity, a plan that does not fit), [`BAD_INPUT`] (2: bad
//! input or usage, and every error), and `memplan fit`'s [`NOTHING_FITS`] (3).

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;

/// The command did what was asked and the answer is yes.
pub const OK: u8 = 0;
/// The command ran and the answer is no.
pub const NEGATIVE: u8 = 1;
/// Bad input or usage (clap uses 2 for usage errors too).
pub const BAD_INPUT: u8 = 2;
/// `memplan fit`: not even the smallest value fits.
pub const NOTHING_FITS: u8 = 3;

/// An exit code from one of the constants.
pub fn exit(code: u8) -> ExitCode {
    ExitCode::from(code)
}

static QUIET: AtomicBool = AtomicBool::new(false);

/// Silences notes and progress bars (`--quiet`); results and errors still print.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether `--quiet` was given.
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// A note on standard error (what was assumed, how long it took), unless `--quiet`.
pub fn note(text: impl std::fmt::Display) {
    if !quiet() {
        eprint_line(text);
    }
}

/// One line on standard error, whatever `--quiet` says (errors). Never panics: with
/// standard error closed too (`memplan ... 2>&1 | head`) the line is dropped, where
/// `eprintln!` would panic and exit 101.
pub fn eprint_line(text: impl std::fmt::Display) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Lines of an error message printed before the rest is folded.
const MAX_ERROR_LINES: usize = 25;

/// The error as one report: its message, then each cause not already said by the message
/// before it (libraries often print their source in their own message too), and long lists
/// of problems folded after the first [`MAX_ERROR_LINES`] lines.
pub fn error_report(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let message = cause.to_string();
        if message.is_empty() || text.contains(&message) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&message);
    }
    if let Some(advice) = err.chain().find_map(memplan::flag_advice) {
        text.push_str(&format!(" ({advice})"));
    }
    fold(&text, MAX_ERROR_LINES)
}

/// A facade error's report, with the flag that sets what it is about (see
/// [`memplan::flag_advice`]).
pub fn facade_report(err: &memplan::Error) -> String {
    match memplan::flag_advice(err) {
        Some(advice) => format!("{} ({advice})", err.report()),
        None => err.report(),
    }
}

/// `text` cut to `max` lines, with a line saying how many more there were.
pub fn fold(text: &str, max: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= max {
        return text.to_owned();
    }
    let mut out = lines[..max].join("\n");
    out.push_str(&format!(
        "\n  ... and {} more lines (fix the first problems first: later ones often follow from them)",
        lines.len() - max
    ));
    out
}

/// Whether `path` names standard input or output (`-`).
pub fn is_dash(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Writes `bytes` to `path` atomically, or to standard output when `path` is `-` or absent.
pub fn write_output(path: Option<&Path>, bytes: &[u8]) -> anyhow::Result<()> {
    match path {
        Some(p) if !is_dash(p) => Ok(memplan::output::write_atomically(p, bytes)?),
        // A reader that has gone away ends the output quietly, as `print` does.
        _ => print_bytes(bytes),
    }
}

/// Writes `text` to standard output. A reader that has gone away (`memplan ... | head`)
/// ends the output quietly, as other command-line tools do: the rest is dropped and the
/// command's exit status stands.
pub fn print(text: &str) -> anyhow::Result<()> {
    print_bytes(text.as_bytes())
}

fn print_bytes(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => result.context("writing to standard output"),
    }
}

/// Reads a text input: a file, or standard input for `-`.
pub fn read_text(path: &Path) -> anyhow::Result<String> {
    if is_dash(path) {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut text)
            .context("reading standard input")?;
        return Ok(text);
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// Notes on standard error ([`note`]): where the facade's notes go.
#[derive(Clone, Copy, Debug)]
pub struct Stderr;

impl memplan::Notes for Stderr {
    fn note(&mut self, text: String) {
        note(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        #[derive(Debug)]
        struct Wrapped(std::io::Error);
        impl std::fmt::Display for Wrapped {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "model.onnx: {}", self.0)
            }
        }
        impl std::error::Error for Wrapped {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let err = anyhow::Error::new(Wrapped(io)).context("importing model.onnx");
        assert_eq!(
            error_report(&err),
            "importing model.onnx: model.onnx: No such file"
        );
    }

    #[test]
    fn long_lists_fold() {
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let folded = fold(&text, 5);
        assert_eq!(folded.lines().count(), 6);
        assert!(folded.ends_with("... and 95 more lines (fix the first problems first: later ones often follow from them)"));
    }
}
