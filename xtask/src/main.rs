//! `cargo xtask`: project tasks for memplan.
//!
//! - `ci`: everything CI checks, in order: formatting, clippy (all targets, and the `cuda`
//!   feature; its `incompatible_msrv` lint holds the code to the `rust-version` the
//!   workspace states), every test, the Python package's tests, the API docs without a
//!   warning, every crate packaged and built from its package, the ONNX codegen check,
//!   cargo-deny, the GPU smoke test (which skips without a device).
//! - `python`: the Python package's tests alone: a virtual environment with maturin, pytest
//!   and NumPy, the extension built and installed, `crates/python/tests` run.
//! - `bench-suite`: every packing strategy on every instance under `testdata/benchmarks`, the
//!   heuristics and `auto` on generated realistic and heavy-tailed instances, and
//!   `greedy-size` and `auto` on every member of the packing engine's generator family at 100k
//!   and 1M buffers (flags pass through: `--family --sizes 100000` for that table alone).
//! - `order-report [--xla] [--corpus] [--training] [--runs N] [FILTER]`: `--schedule
//!   memory` on the XLA graphs (beside XLA's own figures), the corpus and training-shaped
//!   graphs: arena, time, ratio to XLA's best, gap to the any-order bound.
//! - `fuse-report [--runs N] [--memory] [FILTER]`: planning time and arena with `--fuse all
//!   --attention flash` against without, on the corpus (the SD 1.5 UNet among it).
//! - `codegen [--check]`: regenerates (or checks) the committed ONNX protobuf code.
//! - `package`: packages every published crate and checks each package builds on its own
//!   (see the `package` module).
//! - `doc`: the API docs of every crate, every feature on, with rustdoc's warnings denied.
//! - `gpu-smoke [--build | --bin PATH]`: plans real graphs and runs them on a CUDA device, or
//!   says why it skipped; `--build` only builds the binary (for a GPU machine without a
//!   toolchain), `--bin` runs one built before.
//!
//! The architecture rules of `docs/ARCHITECTURE.md` are checked by `tidy` tests in this
//! crate, so `cargo test` enforces them.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

mod codegen;
mod gpu_smoke;
mod package;
mod python;
#[cfg(test)]
mod tidy;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("bench-suite") => run_bench_bin("bench_suite", &args[1..]),
        Some("order-report") => run_bench_bin("order_report", &args[1..]),
        Some("fuse-report") => run_bench_bin("fuse_report", &args[1..]),
        Some("codegen") => codegen::run(args.iter().any(|a| a == "--check")),
        Some("gpu-smoke") => gpu_smoke::run_with(&args[1..]),
        Some("python") => python::run_tests(),
        Some("package") => package::run(),
        Some("doc") => api_docs(),
        Some(other) => Err(format!("unknown task `{other}`\n{USAGE}")),
        None => Err(USAGE.to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: cargo xtask <ci | python | bench-suite | order-report | fuse-report | codegen [--check] | gpu-smoke [--build | --bin PATH] | package | doc>";

/// Runs the benches crate's binary `bin` in release mode with `args`.
fn run_bench_bin(bin: &str, args: &[String]) -> Result<(), String> {
    run_cargo(
        &[
            "run",
            "--release",
            "-q",
            "-p",
            "memplan-benches",
            "--bin",
            bin,
            "--",
        ],
        args,
    )
}

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The target folder cargo builds into: `$CARGO_TARGET_DIR` where set (relative to the
/// repository root, where every step runs), else the repository's `target`.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), |d| root().join(d))
}

/// Runs `cargo` with `args` then `extra` at the repository root, failing on a non-zero exit.
pub fn run_cargo(args: &[&str], extra: &[String]) -> Result<(), String> {
    eprintln!("xtask: cargo {} {}", args.join(" "), extra.join(" "));
    let mut command = cargo();
    command.args(args).args(extra);
    run(command, &format!("`cargo {}`", args.join(" ")))
}

/// A `cargo` command (the one running xtask), at the repository root.
pub fn cargo() -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()));
    command.current_dir(root());
    command
}

/// Runs `command` with no input, failing (naming it `what`) on a non-zero exit.
pub fn run(mut command: Command, what: &str) -> Result<(), String> {
    empty_regular_dev_null();
    let status = command
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status})"))
    }
}

/// Empties `/dev/null` where it is a regular file that something wrote to.
///
/// Cargo learns about the target by running `rustc -` with `/dev/null` as its input. Where
/// `/dev/null` is a regular file (seen on a CI machine), the error text that build scripts'
/// feature probes send to "the null device" is read back as Rust source, and every cargo
/// command after the first cold build fails. `.ci/run` puts the real device back when it
/// can; this keeps CI working when it cannot. (The cause found on these machines: memplan's
/// own `-o /dev/null`, run as root, renamed its output over the device; the CLI now writes
/// into devices in place. Something else may still do the same.)
pub fn empty_regular_dev_null() {
    let path = Path::new("/dev/null");
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if meta.is_file() && meta.len() > 0 {
        eprintln!(
            "xtask: /dev/null is a regular file holding {} bytes; emptying it",
            meta.len()
        );
        if let Err(e) = std::fs::File::create(path) {
            eprintln!("xtask: cannot empty /dev/null: {e}");
        }
    }
}

fn ci() -> Result<(), String> {
    let started = std::time::Instant::now();
    let step = |name: &str, args: &[&str]| -> Result<(), String> {
        let t = std::time::Instant::now();
        run_cargo(args, &[])?;
        eprintln!("xtask: {name} ok ({:.0} s)", t.elapsed().as_secs_f64());
        Ok(())
    };
    step("fmt", &["fmt", "--all", "--", "--check"])?;
    step(
        "clippy",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    step(
        "clippy (cuda)",
        &[
            "clippy",
            "-p",
            "memplan-cuda-arena",
            "-p",
            "memplan-cli",
            "--all-targets",
            "--features",
            "cuda",
            "--locked",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    step("test", &["test", "--workspace", "--locked"])?;
    python::run_tests()?;
    let t = std::time::Instant::now();
    api_docs()?;
    eprintln!("xtask: doc ok ({:.0} s)", t.elapsed().as_secs_f64());
    let t = std::time::Instant::now();
    package::run()?;
    eprintln!("xtask: package ok ({:.0} s)", t.elapsed().as_secs_f64());
    codegen::run(true)?;
    deny()?;
    gpu_smoke::run()?;
    eprintln!(
        "xtask: ci passed in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `cargo doc` of every crate with every feature (the device arena too), rustdoc's warnings
/// denied: broken or private links, unclosed HTML.
fn api_docs() -> Result<(), String> {
    let args = [
        "doc",
        "--workspace",
        "--no-deps",
        "--all-features",
        "--locked",
    ];
    eprintln!(
        "xtask: RUSTDOCFLAGS=\"-D warnings\" cargo {}",
        args.join(" ")
    );
    let mut command = cargo();
    command.args(args).env("RUSTDOCFLAGS", "-D warnings");
    run(command, "`cargo doc` (warnings denied)")
}

/// cargo-deny, offline (the advisory database cannot be fetched here): licenses, bans and
/// sources. Installed into `~/.cargo/bin` when missing (about 8 minutes to build once).
fn deny() -> Result<(), String> {
    let present = Command::new("cargo")
        .args(["deny", "--version"])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        // A debug build: 86 s to install against 193 s for a release build (two cores,
        // crates already downloaded), and its three offline checks take 1.5 s against 0.5.
        run_cargo(&["install", "cargo-deny", "--locked", "--debug"], &[])?;
    }
    // Offline checks need every platform's crates on disk, not just this one's.
    run_cargo(&["fetch", "--locked"], &[])?;
    run_cargo(
        &[
            "deny",
            "--offline",
            "--locked",
            "--all-features",
            "check",
            "licenses",
            "bans",
            "sources",
        ],
        &[],
    )
}
