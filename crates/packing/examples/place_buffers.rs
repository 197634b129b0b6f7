//! The packing engine alone, as an engine with its own IR would use it: describe buffers by
//! their live steps and sizes, solve, verify, and read the offsets.
//!
//! `cargo run -p memplan-packing --example place_buffers`

use memplan_packing::{Buffer, Problem, SolveOptions, lower_bound, solve, verify};

fn main() {
    // Live intervals are half-open: `[start, end)` in your own time steps.
    let mut buffers = vec![
        Buffer::new(0, 2, 4096),
        Buffer::new(1, 3, 16384),
        Buffer::new(2, 4, 4096),
        Buffer::new(3, 5, 16384),
        Buffer::new(4, 6, 8192),
    ];
    // A buffer a kernel reads with vector loads: 256-byte aligned.
    buffers[1].align = 256;
    // Names are optional and kept apart from the buffers: the engine never reads them.
    let problem = Problem::new(buffers).with_names([
        "embeddings",
        "attn_scores",
        "attn_out",
        "mlp_hidden",
        "logits",
    ]);
    let outcome = match solve(&problem, &SolveOptions::default()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("cannot solve: {e}");
            std::process::exit(2);
        }
    };
    let Some(solution) = outcome.solution else {
        eprintln!("no placement found");
        std::process::exit(1);
    };
    if let Err(e) = verify(&problem, &solution) {
        eprintln!("invalid placement: {e}");
        std::process::exit(1);
    }
    for ((id, b), offset) in problem.ids().zip(&problem.buffers).zip(&solution.offsets) {
        println!(
            "{:<12} steps {}..{}  bytes {:>6}  at offset {:>6}",
            problem.name(id),
            b.start,
            b.end,
            b.size,
            offset
        );
    }
    println!(
        "arena {} bytes; lower bound {} bytes{}",
        outcome.arena,
        lower_bound(&problem),
        if outcome.proven_optimal {
            " (proven optimal)"
        } else {
            ""
        }
    );
}
