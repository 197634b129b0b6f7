//! `cargo xtask codegen [--check]`: regenerates memplan-onnx's protobuf types.
//!
//! Runs the `memplan-onnx-codegen` tool (protox + prost-build, no `protoc`) through
//! `cargo run`. Without `--check` it rewrites the committed `crates/onnx/src/generated/onnx.rs`;
//! with `--check` it generates into a fresh temporary folder and fails, naming the file, when
//! the committed copy differs. The tool formats with prettyplease, not the local rustfmt,
//! so the output is the same on every machine.

use std::path::Path;
use std::process::Command;

/// The committed generated file, relative to the workspace root.
const GENERATED: &str = "crates/onnx/src/generated/onnx.rs";

fn run_tool(root: &Path, out_dir: &Path) -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    crate::empty_regular_dev_null();
    let status = Command::new(cargo)
        .current_dir(root)
        .args(["run", "--quiet", "--package", "memplan-onnx-codegen", "--"])
        .arg(out_dir)
        .stdin(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("memplan-onnx-codegen failed ({status})"))
    }
}

/// Regenerates the protobuf code, or with `check` verifies that the committed copy is current.
pub fn run(check: bool) -> Result<(), String> {
    let root = crate::root();
    let committed = root.join(GENERATED);
    if !check {
        let dir = committed
            .parent()
            .ok_or_else(|| format!("{GENERATED} has no parent folder"))?;
        run_tool(&root, dir)?;
        println!("wrote {GENERATED}");
        return Ok(());
    }
    let tmp = std::env::temp_dir().join(format!("memplan-codegen-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let result = run_tool(&root, &tmp).and_then(|()| {
        let fresh = tmp.join("onnx.rs");
        let fresh = std::fs::read(&fresh).map_err(|e| format!("{}: {e}", fresh.display()))?;
        let old = std::fs::read(&committed).map_err(|e| format!("{GENERATED}: {e}"))?;
        if fresh == old {
            Ok(())
        } else {
            Err(format!(
                "{GENERATED} is stale: it differs from what crates/onnx/proto/onnx.proto3 generates; run `cargo xtask codegen` and commit the result"
            ))
        }
    });
    // Best effort: a leftover temporary folder is harmless.
    let _ = std::fs::remove_dir_all(&tmp);
    result?;
    println!("{GENERATED} is up to date");
    Ok(())
}
