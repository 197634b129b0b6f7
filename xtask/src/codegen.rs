//! Placeholder until the ONNX codegen lands.

pub fn run(_check: bool) -> Result<(), String> {
    Ok(())
}
