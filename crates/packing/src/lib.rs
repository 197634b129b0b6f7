//! The packing engine of memplan: byte offsets for buffers with lifetimes, in one arena.
//!
//! This is the dynamic storage allocation problem. The crate depends on no other memplan
//! crate and knows nothing about graphs: an engine with its own IR builds a [`Problem`] and
//! calls [`solve`]; `memplan-planner` does the same for memplan graphs.
//!
//! ```
//! use memplan_packing::{Buffer, Problem, SolveOptions, lower_bound, solve, verify};
//!
//! // Three buffers: `a` and `b` live together, `c` only after `a` is dead.
//! let problem = Problem::new(vec![
//!     Buffer::new(0, 2, 64),
//!     Buffer::new(1, 3, 32),
//!     Buffer::new(2, 4, 64),
//! ]);
//! let outcome = solve(&problem, &SolveOptions::default()).unwrap();
//! let solution = outcome.solution.unwrap();
//! verify(&problem, &solution).unwrap();
//! assert_eq!(outcome.arena, lower_bound(&problem)); // 96 bytes: `c` reuses `a`'s
//! assert_eq!(outcome.arena, 96);
//! ```
//!
//! The modules follow the phases of a solve:
//!
//! - [`problem`](Problem): buffers with half-open live intervals `[start, end)`, sizes and
//!   alignments; the [`Solution`] is one offset per buffer.
//! - `bound`: the [`lower_bound`] every solution respects and the [`naive_size`] of placing
//!   everything side by side.
//! - `timeline`: compressed time and an index of placed buffers by time, so a placement
//!   reads only the bytes occupied by the buffers it overlaps, never every placed buffer.
//! - `greedy`, `first_fit` and `split`: the heuristics behind each [`Strategy`].
//! - `gaps`: sets of byte ranges that keep their gaps by length, and best fit against one
//!   of them and a few ranges more, without reading the set whole.
//! - [`exact`]: the branch-and-bound search that `solve` calls to improve a heuristic
//!   solution or to meet a capacity.
//! - `reorder`: a search over best-fit orders (move the buffers that ended up at the peak
//!   earlier, place again), for problems the exact search cannot take whole.
//! - `improve`: local improvement around the peak (take out the buffers around a peak
//!   buffer, place them again lower), for problems the exact search cannot take whole.
//! - `solve`: the entry point ([`solve`], or a reusable [`Solver`]), which runs a strategy,
//!   asks the exact search and local improvement to improve the result when the options call
//!   for it, and verifies every solution it returns.
//! - [`verify`](verify()): the independent checker, which reads only a problem and a solution.
//! - [`csv`]: MiniMalloc's CSV format for problems and solutions.
//! - `index`: the typed ids and index vectors of the engine's internals (the exact search's
//!   local buffer numbering is a type of its own, distinct from [`BufferId`]).
//! - `generate` (feature `bench-support`): deterministic synthetic instances for tests and
//!   benchmarks; not part of the engine's API.

mod bound;
pub mod csv;
pub mod exact;
mod first_fit;
mod gaps;
#[cfg(any(test, feature = "bench-support"))]
pub mod generate;
mod greedy;
mod improve;
mod index;
mod problem;
mod reorder;
mod solve;
mod split;
mod strategy;
mod timeline;
mod verify;
mod window;

pub use bound::{lower_bound, naive_size};
pub use greedy::TieBreak;
pub use problem::{Buffer, BufferId, BufferRef, Problem, ProblemError, Solution, align_up};
pub use solve::{
    AUTO_TIE_BREAKS_MAX_BUFFERS, DEFAULT_NODE_LIMIT, EXACT_SEARCH_MAX_BUFFERS, Gap,
    IMPROVE_COST_FACTOR, IMPROVE_WORK_PER_NODE, MINIMIZE_SEARCH_MAX_BUFFERS, Outcome, Phase,
    Producer, REORDER_COST_FACTOR, REORDER_WORK_PER_NODE, SAFETY_NET, SCALE_MIN_BUFFERS,
    SCALE_WORK_FLOOR, SCALE_WORK_PER_BUFFER, Skip, SolveError, SolveOptions, Solver, solve,
};
#[cfg(feature = "bench-support")]
pub use strategy::greedy_size_with;
pub use strategy::{ParseStrategyError, Strategy, run_heuristic};
pub use verify::{MAX_LISTED, VerifyError, Violation, verify};
pub use window::{SAMPLE_MAX_BUFFERS, WINDOW_MAX_BUFFERS, window_bound};
