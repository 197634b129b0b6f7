//! Both presets place validly; the thorough one is never worse; a hand-checked case.

use memplan_packing::{Buffer, Problem};
use packing_only::{Preset, requests, solve};

#[test]
fn a_hand_checked_problem() {
    // `a` and `b` live together, `c` after `a`: 64 + 32 bytes, `c` over `a`'s.
    let problem = Problem::new(vec![
        Buffer::new(0, 2, 64),
        Buffer::new(1, 3, 32),
        Buffer::new(2, 4, 64),
    ]);
    for preset in [Preset::Fast, Preset::Thorough] {
        let placed = solve(&problem, preset).unwrap();
        assert_eq!((placed.arena, placed.lower_bound), (96, 96), "{preset:?}");
        assert_eq!(placed.offsets[0], placed.offsets[2], "{preset:?}");
    }
}

#[test]
fn thorough_is_never_worse_than_fast() {
    for seed in 0..2 {
        let problem = requests(500, seed);
        let fast = solve(&problem, Preset::Fast).unwrap();
        let thorough = solve(&problem, Preset::Thorough).unwrap();
        assert!(thorough.arena <= fast.arena, "seed {seed}");
        assert!(fast.arena >= fast.lower_bound);
    }
}
