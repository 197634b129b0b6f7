//! Placeholder until the GPU smoke test lands.

pub fn run() -> Result<(), String> {
    println!("gpu-smoke: skipped (not built yet)");
    Ok(())
}
