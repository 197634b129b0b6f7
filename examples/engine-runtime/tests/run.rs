//! The engine's runs in one buffer match its reference bit for bit, for several sizes and
//! weights; the plan shares memory as declared; and memory too small is an error.

use engine_runtime::{Runtime, aligned, block};
use memplan::planner::AliasKind;

fn run(seq: usize, d: usize, hidden: usize, seed: u32) -> Runtime {
    let model = block(seq, d, hidden, seed);
    let input: Vec<f32> = (0..seq * d)
        .map(|i| ((i * 7 + seed as usize) % 17) as f32 * 0.05 - 0.4)
        .collect();
    let want = model.reference(&input);
    let runtime = Runtime::new(model).unwrap();
    let layout = runtime.layout();
    let bytes = layout.buffer_bytes() as usize;
    let align = layout.buffer_alignment() as usize;
    // Garbage in the engine's buffer first: the plan must not read what it did not write.
    let mut storage = vec![0xA5u8; bytes + align];
    let got = runtime
        .run(aligned(&mut storage, bytes, align), &input)
        .unwrap();
    assert_eq!(got, want, "seq {seq} d {d} hidden {hidden} seed {seed}");
    runtime
}

#[test]
fn runs_match_the_reference() {
    let mut shared = [0usize; 3];
    for (seq, d, hidden, seed) in [
        (8, 16, 32, 1),
        (16, 32, 64, 2),
        (5, 12, 40, 3),
        (32, 8, 8, 4),
    ] {
        let r = run(seq, d, hidden, seed);
        for b in &r.plan().buffers {
            match b.alias_kind() {
                Some(AliasKind::View) => shared[0] += 1,
                Some(AliasKind::InPlace) => shared[1] += 1,
                _ => shared[2] += 1,
            }
        }
        assert!(r.plan().arena_bytes < r.plan().naive_bytes);
    }
    assert!(
        shared[0] > 0 && shared[1] > 0,
        "views and in-place writes were used: {shared:?}"
    );
}

#[test]
fn memory_too_small_is_an_error() {
    let model = block(8, 16, 32, 1);
    let runtime = Runtime::new(model).unwrap();
    let bytes = runtime.layout().buffer_bytes() as usize;
    let mut storage = vec![0u8; bytes + 256];
    let err = runtime
        .run(aligned(&mut storage, bytes - 1, 256), &[0.0; 128])
        .unwrap_err();
    assert!(err.to_string().contains("needs"), "{err}");
}
