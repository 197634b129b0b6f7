//! Plans the example block and runs it in one buffer the engine owns; prints where memplan
//! put every tensor and checks the result against the engine's reference evaluation.

use engine_runtime::{Runtime, aligned, block};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (seq, d, hidden) = (16, 32, 64);
    let model = block(seq, d, hidden, 1);
    let input: Vec<f32> = (0..seq * d).map(|i| (i % 13) as f32 * 0.1 - 0.6).collect();
    let want = model.reference(&input);
    let runtime = Runtime::new(model)?;
    let layout = runtime.layout();
    println!(
        "one buffer of {} bytes (arena {}, weights {}; naive {})",
        layout.buffer_bytes(),
        runtime.plan().arena_bytes,
        runtime.plan().weight_bytes,
        runtime.plan().naive_bytes
    );
    for line in runtime.describe() {
        println!("  {line}");
    }
    // The engine's own memory: a byte buffer, the layout's window of it aligned.
    let bytes = usize::try_from(layout.buffer_bytes())?;
    let align = usize::try_from(layout.buffer_alignment())?;
    let mut storage = vec![0u8; bytes + align];
    let got = runtime.run(aligned(&mut storage, bytes, align), &input)?;
    if got != want {
        return Err("the planned run differs from the reference".into());
    }
    println!("outputs match the reference, bit for bit");
    Ok(())
}
