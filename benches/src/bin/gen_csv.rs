//! Writes a generated instance as MiniMalloc CSV, so that `memplan solve` can be timed on it.
//!
//! ```text
//! cargo run --release -p memplan-benches --bin gen_csv -- heavy|realistic N [SEED] > FILE.csv
//! ```
//!
//! The seed defaults to 42, the one the benches and `bench_suite` use.

use std::io::Write as _;
use std::process::ExitCode;

use memplan_packing::{csv, generate};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(kind), Some(n)) = (args.first(), args.get(1).and_then(|n| n.parse().ok())) else {
        eprintln!("usage: gen_csv heavy|realistic N [SEED]");
        return ExitCode::from(2);
    };
    let seed = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(42);
    let problem = match kind.as_str() {
        "heavy" => generate::heavy_tailed(n, seed),
        "realistic" => generate::realistic(n, seed),
        other => {
            eprintln!("error: unknown generator {other:?}; expected heavy or realistic");
            return ExitCode::from(2);
        }
    };
    let text = match csv::write(&problem, None) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
