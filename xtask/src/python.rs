//! `cargo xtask python` (and a step of `cargo xtask ci`): the Python package's tests.
//!
//! A virtual environment under `target/python-venv` (kept between runs) gets maturin,
//! pytest and NumPy from the package index; the extension is built as a wheel by maturin in
//! the `dev` profile (the dependencies `cargo test` compiled are reused from the workspace's
//! target folder, optimised as `[profile.dev.package."*"]` says; not the `test` profile,
//! which `cargo rustc` takes as "build the test harness"); the wheel is installed and
//! `crates/python/tests` run with `MEMPLAN_CLI` naming the `memplan` binary the equality
//! tests compare with. Without Python 3.9+ (with `venv` and
//! `pip`) the step fails saying what to install.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::{root, run_cargo, target_dir};

/// The packages the tests need, from the package index.
const PACKAGES: &[&str] = &["maturin>=1.5,<2", "pytest", "numpy"];

/// The interpreter: `$MEMPLAN_PYTHON`, else `python3`.
fn interpreter() -> String {
    std::env::var("MEMPLAN_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

const MISSING: &str = "the Python package's tests need Python 3.9 or later with venv and pip \
    (Debian: `apt-get install python3 python3-venv python3-pip`); set MEMPLAN_PYTHON to use \
    another interpreter";

/// Runs `program args` in `dir` with `envs`, failing with `what` on a non-zero exit.
fn run(program: &Path, args: &[&str], envs: &[(&str, &str)], what: &str) -> Result<(), String> {
    eprintln!("xtask: {} {}", program.display(), args.join(" "));
    crate::empty_regular_dev_null();
    let status = Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .current_dir(root())
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("{what}: cannot run {}: {e}", program.display()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status})"))
    }
}

/// The version of `python` as `(major, minor)`, or why there is none.
fn version(python: &str) -> Result<(u32, u32), String> {
    let out = Command::new(python)
        .args([
            "-c",
            "import sys, venv; print(sys.version_info[0], sys.version_info[1])",
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("`{python}` cannot be run ({e}): {MISSING}"))?;
    if !out.status.success() {
        return Err(format!(
            "`{python}` has no venv module ({}): {MISSING}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.split_whitespace().map(str::parse::<u32>);
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => Ok((major, minor)),
        _ => Err(format!("`{python}` did not say its version: {MISSING}")),
    }
}

/// The virtual environment's interpreter, made with `python` if it is not there yet.
fn venv(python: &str) -> Result<PathBuf, String> {
    let dir = target_dir().join("python-venv");
    let bin = dir.join("bin").join("python");
    if bin.exists() {
        return Ok(bin);
    }
    run(
        Path::new(python),
        &["-m", "venv", &dir.to_string_lossy()],
        &[],
        &format!("making a virtual environment with `{python}` ({MISSING})"),
    )?;
    Ok(bin)
}

/// Builds the extension, installs it in the virtual environment and runs the tests.
pub fn run_tests() -> Result<(), String> {
    let started = Instant::now();
    let python = interpreter();
    let (major, minor) = version(&python)?;
    if (major, minor) < (3, 9) {
        return Err(format!("`{python}` is Python {major}.{minor}: {MISSING}"));
    }
    let venv_python = venv(&python)?;
    let mut install = vec![
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--quiet",
    ];
    install.extend_from_slice(PACKAGES);
    run(
        &venv_python,
        &install,
        &[],
        "installing maturin, pytest and NumPy from the package index (pip needs the network)",
    )?;
    eprintln!(
        "xtask: python environment ready ({:.0} s)",
        started.elapsed().as_secs_f64()
    );
    // The `memplan` binary the equality tests compare with, in the profile `cargo test` used.
    run_cargo(
        &[
            "build",
            "-p",
            "memplan-cli",
            "--profile",
            "test",
            "--locked",
        ],
        &[],
    )?;
    let wheels = target_dir().join("python-wheels");
    let _ = std::fs::remove_dir_all(&wheels);
    let maturin = venv_python.with_file_name("maturin");
    let built = Instant::now();
    run(
        &maturin,
        &[
            "build",
            "--profile",
            "dev",
            "--locked",
            "--quiet",
            "-m",
            "crates/python/Cargo.toml",
            "-i",
            &venv_python.to_string_lossy(),
            "-o",
            &wheels.to_string_lossy(),
        ],
        &[],
        "building the extension with maturin",
    )?;
    eprintln!(
        "xtask: python extension built ({:.0} s)",
        built.elapsed().as_secs_f64()
    );
    let wheel = std::fs::read_dir(&wheels)
        .map_err(|e| format!("reading {}: {e}", wheels.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| format!("maturin left no wheel in {}", wheels.display()))?;
    run(
        &venv_python,
        &[
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--quiet",
            "--no-deps",
            "--force-reinstall",
            &wheel.to_string_lossy(),
        ],
        &[],
        "installing the wheel",
    )?;
    let cli = target_dir().join("debug").join("memplan");
    let cache = target_dir().join("pytest-cache");
    run(
        &venv_python,
        &[
            "-m",
            "pytest",
            "-q",
            "-o",
            &format!("cache_dir={}", cache.display()),
            "crates/python/tests",
        ],
        &[("MEMPLAN_CLI", &cli.to_string_lossy())],
        "the Python package's tests",
    )?;
    eprintln!(
        "xtask: python tests ok ({:.0} s in all)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
