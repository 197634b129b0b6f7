//! Recomputation under a budget (`Checkpoint::Auto`) on chains, against an independent
//! dynamic program written here.
//!
//! A chain of `n` MatMuls `x_{j+1} = x_j · W_j` (widths `d_j`, so tensor sizes and FLOPs
//! differ from node to node), trained with no loss (the output's gradient is an input). A
//! checkpoint after node `p` keeps `x_{p+1}`; every activation after the last checkpoint is
//! kept too (its backward follows at once); every other saved activation is recomputed in
//! the backward from the nearest kept one. The step's peak for a set of kept activations is
//! derived by hand below ([`chain_peak`]: the forward, then each backward group's recompute,
//! weight-gradient and input-gradient steps) and checked against the planner's own plans,
//! all subsets of an 8-node chain. The DP then finds the fewest recomputed FLOPs for a
//! budget, segment by segment ([`optimum`]); `Checkpoint::Auto` must find the same FLOPs,
//! with a plan that fits, at every budget from the least that fits to the budget at which
//! nothing needs recomputing, and a budget below the least must be refused with that least.

use memplan_ir::{DType, Graph, GraphBuilder};
use memplan_planner::{Checkpoint, Loss, PlanError, TrainingOptions, plan_training, verify_plan};

const B: u64 = 16;

/// The chain with widths `d` (`d.len() - 1` nodes): `x_j` is `f32[B, d_j]`.
fn chain(d: &[u64]) -> Graph {
    let mut b = GraphBuilder::new("chain");
    let mut x = b.input("x", DType::F32, [B as i64, d[0] as i64]);
    for j in 0..d.len() - 1 {
        let w = b.weight(format!("w{j}"), DType::F32, [d[j] as i64, d[j + 1] as i64]);
        x = b.op("MatMul", &[x, w], DType::F32, [B as i64, d[j + 1] as i64]);
    }
    b.mark_output(x);
    b.build().unwrap()
}

/// Gradients accumulate (persistent), so the arena holds activations and their gradients
/// only, as the hand derivation counts.
fn options(checkpoint: Checkpoint) -> TrainingOptions {
    TrainingOptions::default()
        .with_checkpoint(checkpoint)
        .with_loss(Loss::None)
        .with_accumulate(true)
}

/// Bytes of `x_j`.
fn sizes(d: &[u64]) -> Vec<u64> {
    d.iter().map(|&w| B * w * 4).collect()
}

/// FLOPs of node `j` (making `x_{j+1}`).
fn flops(d: &[u64], j: usize) -> u64 {
    2 * B * d[j] * d[j + 1]
}

/// Which of `x_1..x_{n-1}` are kept for checkpoints after nodes `cuts` (ascending).
fn kept_for(n: usize, cuts: &[usize]) -> Vec<bool> {
    let mut kept = vec![false; n];
    match cuts.last() {
        None => kept.iter_mut().for_each(|k| *k = true),
        Some(&last) => {
            for &c in cuts {
                kept[c + 1] = true;
            }
            for k in kept.iter_mut().skip(last + 1) {
                *k = true;
            }
        }
    }
    kept[0] = true;
    kept
}

/// The arena peak of the step for `kept` (index `j` for `x_j`; `x_0` is the input), by
/// hand: see the module docs.
fn chain_peak(s: &[u64], kept: &[bool]) -> u64 {
    let n = s.len() - 1;
    let seed = s[n];
    let mut peak = 0;
    // Forward: the input, the seed (an input, live until its read), what is kept so far,
    // the node's input and output.
    let mut kept_sum = 0;
    for i in 0..n {
        let live = seed + s[0] + kept_sum + if i >= 1 { s[i] } else { 0 } + s[i + 1];
        peak = peak.max(live);
        if i >= 1 && kept[i] {
            kept_sum += s[i];
        }
    }
    // Backward, group by group from the last node: recompute what is missing, then the
    // weight gradient (reads x_i and dx_{i+1}), then the input gradient (dx_i).
    let mut kept_live: u64 = (1..n).filter(|&j| kept[j]).map(|j| s[j]).sum();
    let mut copies: Vec<usize> = Vec::new();
    let mut dy = seed;
    let fixed = s[0] + s[n];
    for i in (0..n).rev() {
        let copy_sum = |c: &[usize]| c.iter().map(|&j| s[j]).sum::<u64>();
        if i >= 1 && !kept[i] && !copies.contains(&i) {
            let a = (0..i).rev().find(|&j| kept[j]).unwrap_or(0);
            for k in a + 1..=i {
                copies.push(k);
                peak = peak.max(fixed + kept_live + copy_sum(&copies) + dy);
            }
        }
        peak = peak.max(fixed + kept_live + copy_sum(&copies) + dy);
        if i >= 1 {
            if kept[i] {
                kept_live -= s[i];
            } else {
                copies.retain(|&j| j != i);
            }
            peak = peak.max(fixed + kept_live + copy_sum(&copies) + dy + s[i]);
            dy = s[i];
        }
    }
    peak
}

/// FLOPs recomputed for `kept`.
fn chain_flops(d: &[u64], kept: &[bool]) -> u64 {
    (1..kept.len())
        .filter(|&j| !kept[j])
        .map(|j| flops(d, j - 1))
        .sum()
}

/// The dynamic program: the fewest recomputed FLOPs whose peak is at most `limit`. The
/// kept activations `0 = k_0 < k_1 < ... < k_m` split the chain into segments whose steps'
/// live bytes are what the earlier segments keep (`S`) plus what the segment itself needs;
/// after `k_m` everything is kept. State: the last kept index and `S`, with the fewest
/// FLOPs for each (a map per index).
#[allow(
    clippy::needless_range_loop,
    reason = "indices are chain positions, read beside the table"
)]
fn optimum(d: &[u64], limit: u64) -> Option<u64> {
    use std::collections::BTreeMap;
    let s = sizes(d);
    let n = s.len() - 1;
    // best[k]: S -> fewest FLOPs with x_k the last kept so far.
    let mut best: Vec<BTreeMap<u64, u64>> = vec![BTreeMap::new(); n];
    best[0].insert(0, 0);
    let mut answer: Option<u64> = None;
    for a in 0..n {
        let states: Vec<(u64, u64)> = best[a].iter().map(|(&k, &v)| (k, v)).collect();
        for (held, cost) in states {
            // The tail: everything after x_a kept.
            let kept: Vec<bool> = (0..n).map(|j| j == 0 || j >= a).collect();
            if segment_peak(&s, a, None, held, &kept) <= limit {
                answer = Some(answer.map_or(cost, |x: u64| x.min(cost)));
            }
            // A segment to the next kept x_b (a < b < n), x_{a+1..b-1} recomputed.
            for b in a + 1..n {
                let kept: Vec<bool> = (0..n).map(|j| j == 0 || j == a || j == b).collect();
                if segment_peak(&s, a, Some(b), held, &kept) > limit {
                    continue;
                }
                let extra: u64 = (a + 1..b).map(|j| flops(d, j - 1)).sum();
                let next_held = held + if a == 0 { 0 } else { s[a] };
                let e = best[b].entry(next_held).or_insert(u64::MAX);
                *e = (*e).min(cost + extra);
            }
        }
    }
    answer
}

/// The most live bytes at the steps of the segment after kept `x_a` (to the next kept
/// `x_b`, or the tail), with `held` bytes kept by earlier segments (not counting `x_a`).
/// `kept` marks `x_a`, `x_b` (and for the tail, everything from `x_a`).
fn segment_peak(s: &[u64], a: usize, b: Option<usize>, held: u64, kept: &[bool]) -> u64 {
    let n = s.len() - 1;
    let seed = s[n];
    let end = b.unwrap_or(n - 1);
    let own_a = if a == 0 { 0 } else { s[a] };
    let mut peak = 0;
    // Forward steps a+1..=end (and step 0 for the first segment): earlier segments' bytes,
    // x_a, and in the tail the kept activations made so far.
    let first = if a == 0 { 0 } else { a + 1 };
    let mut tail_sum = 0;
    for i in first..=end.min(n - 1) {
        let before = if i > a { own_a } else { 0 };
        let live =
            seed + s[0] + held + before + tail_sum + if i >= 1 { s[i] } else { 0 } + s[i + 1];
        peak = peak.max(live);
        if b.is_none() && i > a && i >= 1 {
            tail_sum += s[i];
        }
    }
    // Backward groups end..=a+1 (and 0 for the first segment).
    let fixed = s[0] + s[n];
    let mut live_kept: u64 = held
        + own_a
        + match b {
            Some(b) => s[b],
            None => (a + 1..n).map(|j| s[j]).sum(),
        };
    let mut dy = if end + 1 == n { seed } else { s[end + 1] };
    let mut copies: Vec<usize> = Vec::new();
    let last = if a == 0 { 0 } else { a + 1 };
    if end < last {
        return peak;
    }
    let mut i = end;
    loop {
        let copy_sum = |c: &[usize]| c.iter().map(|&j| s[j]).sum::<u64>();
        if i >= 1 && !kept[i] && !copies.contains(&i) {
            for k in a + 1..=i {
                copies.push(k);
                peak = peak.max(fixed + live_kept + copy_sum(&copies) + dy);
            }
        }
        peak = peak.max(fixed + live_kept + copy_sum(&copies) + dy);
        if i >= 1 {
            if kept[i] {
                live_kept -= s[i];
            } else {
                copies.retain(|&j| j != i);
            }
            peak = peak.max(fixed + live_kept + copy_sum(&copies) + dy + s[i]);
            dy = s[i];
        }
        if i == last {
            break;
        }
        i -= 1;
    }
    peak
}

fn node_names(cuts: &[usize]) -> Vec<String> {
    cuts.iter().map(|&c| format!("n{c}_MatMul")).collect()
}

fn subsets(n: usize) -> impl Iterator<Item = Vec<usize>> {
    (0u32..1 << (n - 1)).map(move |mask| (0..n - 1).filter(|&p| mask & (1 << p) != 0).collect())
}

#[test]
fn the_hand_derived_peak_is_the_planners_and_decomposes_by_segment() {
    let d = [64u64, 128, 32, 96, 64, 160, 32, 128, 64];
    let g = chain(&d);
    let s = sizes(&d);
    let n = d.len() - 1;
    for cuts in subsets(n) {
        let kept = kept_for(n, &cuts);
        let step = plan_training(&g, &options(Checkpoint::After(node_names(&cuts)))).unwrap();
        verify_plan(&step.graph, &step.plan).unwrap();
        let want = chain_peak(&s, &kept);
        assert_eq!(step.plan.lower_bound_bytes, want, "cuts {cuts:?}");
        assert_eq!(step.plan.arena_bytes, want, "cuts {cuts:?}");
        assert_eq!(
            step.summary.recompute.flops,
            chain_flops(&d, &kept),
            "cuts {cuts:?}"
        );
        // The peak is the largest segment's.
        let mut ks: Vec<usize> = (1..n).filter(|&j| kept[j]).collect();
        let mut segments = 0;
        let (mut a, mut held, mut seg_max) = (0usize, 0u64, 0u64);
        let tail_from = cuts.last().map_or(1, |&c| c + 1);
        ks.retain(|&k| k <= tail_from);
        for &k in &ks {
            if k == tail_from {
                break;
            }
            let kept_seg: Vec<bool> = (0..n).map(|j| j == 0 || j == a || j == k).collect();
            seg_max = seg_max.max(segment_peak(&s, a, Some(k), held, &kept_seg));
            held += if a == 0 { 0 } else { s[a] };
            a = k;
            segments += 1;
        }
        let tail_start = if cuts.is_empty() { 0 } else { tail_from };
        if tail_start != a {
            let kept_seg: Vec<bool> = (0..n)
                .map(|j| j == 0 || j == a || j == tail_start)
                .collect();
            seg_max = seg_max.max(segment_peak(&s, a, Some(tail_start), held, &kept_seg));
            held += if a == 0 { 0 } else { s[a] };
            a = tail_start;
        }
        let kept_tail: Vec<bool> = (0..n).map(|j| j == 0 || j >= a).collect();
        seg_max = seg_max.max(segment_peak(&s, a, None, held, &kept_tail));
        assert_eq!(seg_max, want, "cuts {cuts:?}, {segments} segments");
    }
}

#[test]
fn auto_recomputes_the_fewest_flops_the_dynamic_program_finds() {
    for d in [
        vec![64u64, 128, 32, 96, 64, 160, 32, 128, 64, 96, 64],
        vec![32u64, 256, 64, 64, 192, 32, 32, 224, 96, 64, 128, 48, 64],
    ] {
        let g = chain(&d);
        let s = sizes(&d);
        let n = d.len() - 1;
        let none = plan_training(&g, &options(Checkpoint::None)).unwrap();
        let persistent = none.plan.weight_bytes;
        // The DP's answer is the brute force's.
        let least = subsets(n)
            .map(|c| chain_peak(&s, &kept_for(n, &c)))
            .min()
            .unwrap();
        let most = chain_peak(&s, &kept_for(n, &[]));
        let mut budgets: Vec<u64> = (0..=12).map(|k| least + (most - least) * k / 12).collect();
        budgets.extend(
            subsets(n)
                .map(|c| chain_peak(&s, &kept_for(n, &c)))
                .filter(|p| p % 3 == 0)
                .take(6),
        );
        budgets.sort_unstable();
        budgets.dedup();
        for limit in budgets {
            let brute = subsets(n)
                .map(|c| kept_for(n, &c))
                .filter(|k| chain_peak(&s, k) <= limit)
                .map(|k| chain_flops(&d, &k))
                .min();
            let dp = optimum(&d, limit);
            assert_eq!(dp, brute, "limit {limit}");
            println!("limit {limit}: fewest recomputed FLOPs {dp:?}");
            let budget = limit + persistent;
            let step = plan_training(&g, &options(Checkpoint::Auto { budget })).unwrap();
            verify_plan(&step.graph, &step.plan).unwrap();
            assert!(step.plan.arena_bytes + step.plan.weight_bytes <= budget);
            assert_eq!(
                Some(step.summary.recompute.flops),
                dp,
                "limit {limit}: checkpoints {:?}",
                step.summary.checkpoints
            );
        }
        // Below the least: refused, naming the least.
        match plan_training(
            &g,
            &options(Checkpoint::Auto {
                budget: least + persistent - 1,
            }),
        ) {
            Err(PlanError::BudgetTooSmall { minimum, .. }) => {
                assert_eq!(minimum, least + persistent)
            }
            other => panic!("{:?}", other.map(|s| s.summary.recompute)),
        }
    }
}
