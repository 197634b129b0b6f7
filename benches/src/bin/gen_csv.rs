//! Writes a generated instance as MiniMalloc CSV, so that `memplan solve` can be timed on it.
//!
//! ```text
//! cargo run --release -p memplan-benches --bin gen_csv -- GENERATOR N [SEED] > FILE.csv
//! ```
//!
//! `GENERATOR` is `heavy` ([`generate::heavy_tailed`]), `realistic` ([`generate::realistic`])
//! or a member of the generator family ([`generate::Shape`]): `short`, `heavy-T%-n/D`
//! (tail of T% of the buffers, longest lifetime n/D steps), `training-P%` (P% of the
//! forward buffers saved for the backward pass) or `mixed`. The seed defaults to 42, the one
//! the benches and `bench_suite` use.

use std::io::Write as _;
use std::process::ExitCode;

use memplan_packing::{csv, generate};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(kind), Some(n)) = (args.first(), args.get(1).and_then(|n| n.parse().ok())) else {
        eprintln!("usage: gen_csv heavy|realistic|short|heavy-T%-n/D|training-P%|mixed N [SEED]");
        return ExitCode::from(2);
    };
    let seed = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(42);
    let problem = match kind.as_str() {
        "heavy" => generate::heavy_tailed(n, seed),
        "realistic" => generate::realistic(n, seed),
        other => match other.parse::<generate::Shape>() {
            Ok(shape) => shape.generate(n, seed),
            Err(e) => {
                eprintln!("error: {e} (or heavy, realistic)");
                return ExitCode::from(2);
            }
        },
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
