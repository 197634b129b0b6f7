//! `cargo xtask gpu-smoke`: run the device smoke test when a CUDA driver is present.
//!
//! The test itself is the `gpu_smoke` example of `memplan-cuda-arena` (feature `cuda`): it
//! plans corpus graphs, allocates their arenas on device 0, runs the pattern check there and
//! reports arena size, the drop in free device memory and the time taken. Building it in
//! release takes minutes, so this task first looks for the driver library the cheap way
//! (the dynamic loader's cache and the usual library folders); without one it prints one line
//! saying it skipped and why, and succeeds. With one it builds and runs the example, which
//! itself skips (one line, success) when the driver finds no device.
//!
//! A machine with a GPU and no Rust toolchain runs a binary built elsewhere:
//! `cargo xtask gpu-smoke --build` builds it and prints its path
//! (`target/release/examples/gpu_smoke`); copy it into the repository there and run it from
//! the repository root (it finds `testdata/` from the current folder), or run
//! `cargo xtask gpu-smoke --bin PATH` where cargo is at hand.

use std::path::Path;
use std::process::Command;

/// Folders where a CUDA driver library is usually installed.
const LIB_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/cuda/lib64",
    "/usr/local/cuda/compat",
    "/usr/lib/wsl/lib",
];

/// Where the driver library was found, or `None`.
fn find_libcuda() -> Option<String> {
    // The loader's cache knows every library `dlopen("libcuda.so")` would find.
    if let Ok(out) = Command::new("ldconfig").arg("-p").output() {
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(line) = text
            .lines()
            .find(|l| l.trim_start().starts_with("libcuda.so"))
        {
            return Some(line.rsplit("=> ").next().unwrap_or(line).trim().to_owned());
        }
    }
    let mut dirs: Vec<String> = LIB_DIRS.iter().map(|d| (*d).to_owned()).collect();
    if let Ok(paths) = std::env::var("LD_LIBRARY_PATH") {
        dirs.extend(
            paths
                .split(':')
                .filter(|p| !p.is_empty())
                .map(str::to_owned),
        );
    }
    for dir in dirs {
        for name in ["libcuda.so.1", "libcuda.so"] {
            let p = Path::new(&dir).join(name);
            if p.exists() {
                return Some(p.display().to_string());
            }
        }
    }
    if cfg!(windows) {
        Some("nvcuda.dll (assumed: Windows)".to_owned())
    } else {
        None
    }
}

/// The arguments of `cargo xtask gpu-smoke` that build or run the example.
const EXAMPLE: &[&str] = &[
    "-p",
    "memplan-cuda-arena",
    "--features",
    "cuda",
    "--example",
    "gpu_smoke",
];

/// `gpu-smoke [--build | --bin PATH]`.
pub fn run_with(args: &[String]) -> Result<(), String> {
    match args {
        [] => run(),
        [flag] if flag == "--build" => {
            let mut build = vec!["build", "--release", "-q"];
            build.extend_from_slice(EXAMPLE);
            crate::run_cargo(&build, &[])?;
            let bin = crate::target_dir().join("release/examples/gpu_smoke");
            println!("{}", bin.display());
            Ok(())
        }
        [flag, path] if flag == "--bin" => {
            if find_libcuda().is_none() {
                println!("gpu-smoke: skipped: no CUDA driver");
                return Ok(());
            }
            let mut command = Command::new(path);
            command.current_dir(crate::root());
            crate::run(command, path)
        }
        _ => Err("usage: cargo xtask gpu-smoke [--build | --bin PATH]".to_owned()),
    }
}

pub fn run() -> Result<(), String> {
    let Some(lib) = find_libcuda() else {
        println!(
            "gpu-smoke: skipped: no CUDA driver (libcuda.so not found by ldconfig or in the usual library folders)"
        );
        return Ok(());
    };
    eprintln!("xtask: gpu-smoke: CUDA driver library at {lib}");
    let mut command = vec!["run", "--release", "-q"];
    command.extend_from_slice(EXAMPLE);
    crate::run_cargo(&command, &[])
}
