//! Helpers shared by the CLI tests: run the binary, find the test graphs, read its output,
//! build ONNX models in memory ([`onnx`]).

#![allow(dead_code, reason = "each test file uses some of these")]

pub mod onnx;

use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// Runs `memplan` with `args`.
pub fn memplan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .output()
        .expect("run memplan")
}

/// Runs `memplan` with `args` from the repository's root, so paths such as
/// `testdata/graphs/...` in `args` and in its output are relative to it.
pub fn memplan_at_root(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect("run memplan")
}

/// The path of `testdata/graphs/NAME`.
pub fn graph(name: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/graphs");
    root.join(name).to_string_lossy().into_owned()
}

/// Standard output as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Standard error as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `args` with standard output (and, with `close_stderr`, standard error) closed
/// before memplan writes, as `memplan ... | head` (and `2>&1 | head`) do: the code, and
/// what reached standard error when it stayed open.
pub fn with_closed_output(args: &[&str], close_stderr: bool) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run memplan");
    drop(child.stdout.take());
    let mut err = String::new();
    if close_stderr {
        drop(child.stderr.take());
    } else {
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
    }
    (child.wait().unwrap().code(), err)
}

/// Imports `testdata/<path>` with the symbol values `dims`; panics naming the file on error.
pub fn load_testdata(path: &str, dims: &[(&str, u64)]) -> memplan_ir::Graph {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(path);
    let options = memplan_onnx::ImportOptions::default()
        .with_dims(dims.iter().map(|(n, v)| ((*n).to_owned(), *v)).collect());
    memplan_onnx::load(&p, &options).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}
