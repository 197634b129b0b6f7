//! Random search for hangs and invalid answers on extreme packing problems.
//!
//! ```text
//! cargo run --release -p memplan-packing --example extreme_problems -- [SEED] [ROUNDS]
//! ```
//!
//! Each round draws a problem of 1 to 60 buffers (one round in five: up to 3,000). Start
//! times are drawn near 0, `u64::MAX / 2` or `u64::MAX`, and lifetimes are one slot, a few
//! slots or long. A quarter of the buffers have size 0, some sizes are near `u64::MAX / 256`,
//! and alignments go up to 2^39. Capacities are none, small, or a fraction of the naive
//! size. The problem then goes through `solve` with every strategy and random options:
//! time limits of 0 to 40 ms, no node limit or a small one, 0 to 3 threads, `minimize` on
//! or off, and several gaps.
//!
//! Each solve runs on its own thread with a 20 s watchdog. A solve that is not back by then
//! prints the problem and the options and exits with status 3; an answer the verifier
//! rejects exits with status 4. A solve more than four times over its time limit (plus
//! 200 ms) is reported as slow.
//!
//! This is how two hangs were found: local improvement on a zero-size buffer at the peak,
//! and the exact search's climb under a 2^33 alignment with no node limit. Both are tests in
//! `tests/arena_strategies.rs` now.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use memplan_packing::{self as packing, Buffer, Gap, Problem, SolveOptions, Strategy, verify};

/// xorshift64: the same problems for the same seed, on every machine.
struct Rng(u64);

impl Rng {
    fn below(&mut self, m: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        if m == 0 { self.0 } else { self.0 % m }
    }
}

fn draw_problem(rng: &mut Rng) -> Problem {
    let n = 1 + if rng.below(5) == 0 {
        rng.below(3000)
    } else {
        rng.below(60)
    } as usize;
    let base = match rng.below(4) {
        0 => 0,
        1 => u64::MAX / 2,
        2 => u64::MAX - 1000,
        _ => rng.below(1000),
    };
    let horizon = 1 + [3, 50, 1000][rng.below(3) as usize];
    let big = rng.below(3) == 0;
    let buffers = (0..n)
        .map(|_| {
            let start = base.saturating_add(rng.below(horizon)).min(u64::MAX - 2);
            let len = 1 + match rng.below(3) {
                0 => 0,
                1 => rng.below(horizon),
                _ => rng.below(4),
            };
            let end = start.saturating_add(len).max(start + 1);
            let size = match rng.below(6) {
                0 => 0,
                1 => 1,
                2 => 1 << rng.below(20),
                3 if big => (u64::MAX / 256) >> rng.below(8),
                _ => rng.below(5000),
            };
            let align_log = match rng.below(4) {
                0 => 0,
                1 => rng.below(40),
                _ => rng.below(8),
            };
            Buffer::new(start, end, size).with_align(1 << align_log)
        })
        .collect();
    Problem::new(buffers)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seed: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let rounds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(300);
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let (mut solves, mut skipped) = (0u64, 0u64);
    for round in 0..rounds {
        let problem = draw_problem(&mut rng);
        if problem.validate().is_err() {
            skipped += 1; // Sizes that overflow together: refused, as they should be.
            continue;
        }
        let capacity = match rng.below(3) {
            0 => None,
            1 => Some(rng.below(10_000)),
            _ => packing::naive_size(&problem)
                .ok()
                .map(|naive| naive / (1 + rng.below(4))),
        };
        for strategy in Strategy::ALL {
            let gap = match rng.below(4) {
                0 => Gap::from_fraction(0.05),
                1 => Gap::from_fraction(0.0001),
                2 => Gap::from_fraction(0.5),
                _ => Some(Gap::ZERO),
            }
            .unwrap_or(Gap::ZERO);
            let options = SolveOptions::default()
                .with_strategy(strategy)
                .with_time_limit(Duration::from_millis(rng.below(40)))
                .with_node_limit((rng.below(2) == 0).then(|| rng.below(5000)))
                .with_capacity(capacity)
                .with_minimize(rng.below(2) == 0)
                .with_gap(gap)
                .with_threads(rng.below(4) as usize);
            let (tx, rx) = mpsc::channel();
            let (p, o) = (problem.clone(), options.clone());
            std::thread::spawn(move || {
                let _ = tx.send(packing::solve(&p, &o));
            });
            let started = Instant::now();
            let answer = rx.recv_timeout(Duration::from_secs(20));
            let took = started.elapsed();
            solves += 1;
            if took > options.time_limit * 4 + Duration::from_millis(200) {
                eprintln!(
                    "slow: {took:?} against a limit of {:?}: seed {seed} round {round} {strategy}, {} buffers",
                    options.time_limit,
                    problem.len()
                );
            }
            match answer {
                Err(_) => {
                    eprintln!(
                        "HANG: seed {seed} round {round} {strategy}\n{problem:?}\n{options:?}"
                    );
                    std::process::exit(3);
                }
                Ok(Err(e)) => eprintln!("error: seed {seed} round {round} {strategy}: {e}"),
                Ok(Ok(outcome)) => {
                    let Some(solution) = &outcome.solution else {
                        if capacity.is_none() {
                            eprintln!(
                                "no answer without a capacity: seed {seed} round {round} {strategy}"
                            );
                            std::process::exit(4);
                        }
                        continue;
                    };
                    let mut constrained = problem.clone();
                    constrained.capacity = capacity;
                    if let Err(e) = verify(&constrained, solution) {
                        eprintln!(
                            "INVALID: seed {seed} round {round} {strategy}: {e}\n{problem:?}\n{options:?}"
                        );
                        std::process::exit(4);
                    }
                }
            }
        }
    }
    println!("seed {seed}: {solves} solves, {skipped} problems refused by validate, no hang");
}
