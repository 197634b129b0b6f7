//! `cargo xtask package`: every crate packaged as it would be published, each package built
//! on its own, against the other packages (not the repository).
//!
//! The crates stay `publish = false`, and cargo's `package --workspace` resolves a crate's
//! workspace dependencies through a registry overlay that leaves unpublishable crates out;
//! so the dependencies are patched to their folders for packaging (which only writes each
//! package's lockfile), `--no-verify`. Then the packages are unpacked side by side into
//! `target/package-check`, made a workspace whose patches point at the unpacked packages,
//! and checked there with `cargo check` (the repository's lockfile and target folder, so
//! only memplan's own code compiles again). A package that lacks a file it needs (a test
//! fixture or a sibling's file through `include_str!`) fails here.
//!
//! The internal tools (xtask, the benches, the ONNX codegen and the downstream examples) are
//! not packaged: they will never be published.

use std::path::Path;
use std::process::Command;

use crate::{root, run_cargo, target_dir};

/// The crates packaged, by folder and package name.
pub const PACKAGED: &[(&str, &str)] = &[
    ("crates/ir", "memplan-ir"),
    ("crates/packing", "memplan-packing"),
    ("crates/planner", "memplan-planner"),
    ("crates/layout", "memplan-layout"),
    ("crates/onnx", "memplan-onnx"),
    ("crates/tracker", "memplan-tracker"),
    ("crates/cuda-arena", "memplan-cuda-arena"),
    ("crates/memplan", "memplan"),
    ("crates/cli", "memplan-cli"),
];

/// Workspace members that are not packaged.
const UNPACKAGED: &[&str] = &[
    "xtask",
    "memplan-python",
    "memplan-benches",
    "memplan-onnx-codegen",
    "engine-runtime",
    "plan-snapshot",
    "packing-only",
];

pub fn run() -> Result<(), String> {
    let version = workspace_version()?;
    let mut args: Vec<String> = vec![
        "package".into(),
        "-q".into(),
        "--workspace".into(),
        "--no-verify".into(),
        "--allow-dirty".into(),
    ];
    for name in UNPACKAGED {
        args.extend(["--exclude".into(), (*name).to_owned()]);
    }
    for (dir, name) in PACKAGED {
        args.push("--config".into());
        args.push(format!("patch.crates-io.{name}.path=\"{dir}\""));
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    run_cargo(&refs, &[])?;

    // Unpack side by side and check them as a workspace of their own.
    let out = target_dir().join("package-check");
    if out.exists() {
        std::fs::remove_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut members = Vec::new();
    let mut patches = String::new();
    for (_, name) in PACKAGED {
        let krate = target_dir().join(format!("package/{name}-{version}.crate"));
        let mut tar = Command::new("tar");
        tar.arg("xzf").arg(&krate).arg("-C").arg(&out);
        crate::run(tar, &format!("unpacking {}", krate.display()))?;
        let dir = format!("{name}-{version}");
        patches.push_str(&format!("{name} = {{ path = \"{dir}\" }}\n"));
        members.push(format!("\"{dir}\""));
    }
    let manifest = format!(
        "# Written by `cargo xtask package`: the packages, unpacked, checked together.\n[workspace]\nresolver = \"3\"\nmembers = [{}]\n\n[patch.crates-io]\n{patches}",
        members.join(", ")
    );
    write(&out.join("Cargo.toml"), &manifest)?;
    std::fs::copy(root().join("Cargo.lock"), out.join("Cargo.lock"))
        .map_err(|e| format!("copying Cargo.lock: {e}"))?;
    eprintln!(
        "xtask: cargo check of the unpacked packages in {}",
        out.display()
    );
    let mut command = crate::cargo();
    command
        .args([
            "check",
            "-q",
            "--workspace",
            "--all-features",
            "--manifest-path",
        ])
        .arg(out.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target_dir());
    crate::run(command, "`cargo check` of the unpacked packages")
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The workspace's version (`[workspace.package] version`).
fn workspace_version() -> Result<String, String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml"))
        .map_err(|e| format!("Cargo.toml: {e}"))?;
    let section = manifest
        .split("[workspace.package]")
        .nth(1)
        .ok_or("no [workspace.package] in Cargo.toml")?;
    section
        .lines()
        .find_map(|l| l.trim().strip_prefix("version = "))
        .map(|v| v.trim_matches('"').to_owned())
        .ok_or_else(|| "no workspace version".to_owned())
}
