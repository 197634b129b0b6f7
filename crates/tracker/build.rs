//! Declares the `loom` cfg, set by the model-checking build (`--cfg loom`).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
