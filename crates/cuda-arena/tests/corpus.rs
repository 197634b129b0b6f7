//! The pattern check on every corpus graph, in three planning modes, and on corrupted plans.
//!
//! Each graph in `testdata/graphs/json` is planned with the default options, with views and
//! in-place writes off, and with memory-aware scheduling, then executed on a host arena: every
//! node writes its outputs' patterns and checks its inputs' patterns. Writes are always whole.
//! Reads are checked whole when the arena is at most `FULL_CHECK_MAX_ARENA` bytes; larger arenas
//! (the batch-8 and SD UNet graphs) are checked at both ends of every tensor plus one 4 KiB
//! block per 64 KiB, which keeps the debug-build test short. `memplan check` (release) checks
//! every byte of every graph, sd15_unet_b2 included, in seconds.

use std::path::{Path, PathBuf};

#[path = "../../planner/tests/common/fixtures.rs"]
mod fixtures;

use memplan_cuda_arena::{
    Cause, CheckArena, CheckOptions, HostPool, Layout, LayoutOptions, PoolLimits, Region, Sampling,
    run_check,
};
use memplan_ir::{Graph, TensorId};
use memplan_planner::{AliasKind, Plan, PlanOptions, ScheduleMode, plan_graph};

const FULL_CHECK_MAX_ARENA: u64 = 256 << 20;

/// The corpus tests hold arenas of up to 5.4 GiB (sd15_unet_b2: 2.1 GiB of activations, 3.2
/// GiB of weights); one at a time keeps the test run's memory at that.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/graphs/json");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 32, "the corpus has 32 graphs");
    files
}

fn load(path: &Path) -> Graph {
    Graph::load_json(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn options_for(arena_bytes: u64) -> CheckOptions {
    if arena_bytes <= FULL_CHECK_MAX_ARENA {
        CheckOptions::default()
    } else {
        CheckOptions::default().with_sampling(Sampling::Sampled {
            block: 4096,
            stride: 64 << 10,
        })
    }
}

fn check_all(mode: &str, options: &PlanOptions) {
    let _guard = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // Host memory is reused from graph to graph (any size fits, at most 3 buffers): fresh
    // pages cost a page fault each, which dominates a debug run. Stale bytes do not matter to
    // a clean plan, since every tensor is written before it is read.
    let mut pool = HostPool::new(
        PoolLimits::default()
            .with_max_buffers(3)
            .with_max_bytes(8 << 30)
            .with_max_slack_percent(u64::MAX / 100),
    );
    fixtures::each(
        corpus().into_iter().map(|p| (p.display().to_string(), p)),
        |_, path| {
            let graph = load(&path);
            let plan = plan_graph(&graph, options)
                .unwrap_or_else(|e| panic!("{} ({mode}): {e}", graph.name));
            let layout = Layout::new(&graph, &plan, &LayoutOptions::default())
                .unwrap_or_else(|e| panic!("{} ({mode}): {e}", graph.name));
            let mut arena = CheckArena::from_pool(layout.clone(), &mut pool).unwrap();
            let report =
                run_check(&graph, &layout, &mut arena, options_for(plan.arena_bytes)).unwrap();
            assert!(
                report.is_clean(),
                "{} ({mode}): {}",
                graph.name,
                report.render_clobbers(&graph).join("\n")
            );
            assert!(
                report.trusted.is_empty(),
                "{}: the default ops need no trust",
                graph.name
            );
            assert_eq!(report.steps as usize, graph.nodes().len(), "{}", graph.name);
            let produced = graph
                .nodes()
                .iter()
                .map(|n| n.present_inputs().count())
                .sum::<usize>();
            assert!(report.reads > 0 && report.reads as usize <= produced + graph.tensors().len());
            assert!(
                report.bytes_written >= plan.weight_bytes.min(1),
                "{}",
                graph.name
            );
            if !options.views && !options.inplace {
                assert!(plan.buffers.iter().all(|b| b.alias.is_none()));
            }
            arena.release(&mut pool);
        },
    );
}

#[test]
fn corpus_default_plans_hold_their_bytes() {
    check_all("default", &PlanOptions::default());
}

#[test]
fn corpus_unaliased_plans_hold_their_bytes() {
    check_all("no aliasing", &PlanOptions::default().without_aliasing());
}

#[test]
fn corpus_memory_scheduled_plans_hold_their_bytes() {
    check_all(
        "memory schedule",
        &PlanOptions::default().with_schedule(ScheduleMode::Memory),
    );
}

/// Steps at which each tensor is read (inputs of scheduled nodes).
fn read_steps(graph: &Graph, plan: &Plan) -> Vec<Vec<u32>> {
    let mut out = vec![Vec::new(); graph.tensors().len()];
    for (step, &n) in plan.schedule.iter().enumerate() {
        for t in graph.nodes()[n].present_inputs() {
            out[t.0 as usize].push(step as u32);
        }
    }
    out
}

/// The storage root of `t` in `plan`.
fn root_of(plan: &Plan, mut t: TensorId) -> TensorId {
    while let Some(p) = plan
        .buffers
        .iter()
        .find(|b| b.tensor == t)
        .and_then(|b| b.parent())
    {
        t = p;
    }
    t
}

/// Moves `culprit`'s whole storage (it and every tensor aliasing it) so that `culprit`
/// starts on `victim`'s first byte (aligned down); false when that would leave the arena.
fn overlap(plan: &mut Plan, victim: TensorId, culprit: TensorId) -> bool {
    let v = plan
        .buffers
        .iter()
        .find(|b| b.tensor == victim)
        .unwrap()
        .clone();
    let c = plan
        .buffers
        .iter()
        .find(|b| b.tensor == culprit)
        .unwrap()
        .clone();
    let target = v.offset / plan.alignment * plan.alignment;
    let members: Vec<usize> = (0..plan.buffers.len())
        .filter(|&i| root_of(plan, plan.buffers[i].tensor) == culprit)
        .collect();
    let moved = |o: u64| (o + target).checked_sub(c.offset);
    let fits = members.iter().all(|&i| {
        let b = &plan.buffers[i];
        moved(b.offset).is_some_and(|o| o + b.bytes <= plan.arena_bytes)
    });
    if !fits {
        return false;
    }
    for i in members {
        plan.buffers[i].offset = moved(plan.buffers[i].offset).unwrap();
    }
    true
}

/// Finds a victim (read at a step after the culprit's write) and a culprit (a storage root
/// written while the victim is live) and checks that the corrupted plan reports the victim.
fn corrupt_and_check(name: &str, want_view_victim: bool) {
    let path = corpus()
        .into_iter()
        .find(|p| p.file_stem().is_some_and(|s| s == name))
        .unwrap();
    let graph = load(&path);
    let plan = plan_graph(&graph, &PlanOptions::default()).unwrap();
    let reads = read_steps(&graph, &plan);
    let roots: Vec<_> = plan.buffers.iter().filter(|b| b.alias.is_none()).collect();
    for victim in &plan.buffers {
        if want_view_victim != (victim.alias_kind() == Some(AliasKind::View)) {
            continue;
        }
        // A root written strictly inside the victim's life, before one of its reads, whose
        // storage does not contain the victim.
        let Some(culprit) = roots.iter().find(|c| {
            c.tensor != victim.tensor
                && root_of(&plan, victim.tensor) != c.tensor
                && c.first > victim.first
                && reads[victim.tensor.0 as usize].iter().any(|&s| s > c.first)
                && graph.tensors()[c.tensor].kind != memplan_ir::TensorKind::Input
        }) else {
            continue;
        };
        let mut bad = plan.clone();
        if !overlap(&mut bad, victim.tensor, culprit.tensor) {
            continue;
        }
        // The planner's verifier refuses the plan; the check runs it anyway, unverified.
        assert!(Layout::new(&graph, &bad, &LayoutOptions::default()).is_err());
        let layout = Layout::new_unverified(&graph, &bad, &LayoutOptions::default()).unwrap();
        let mut arena = CheckArena::new(layout.clone()).unwrap();
        let report = run_check(&graph, &layout, &mut arena, CheckOptions::default()).unwrap();
        let found = report.clobbers.iter().find(|c| c.tensor == victim.tensor);
        let c = found.unwrap_or_else(|| {
            panic!(
                "{name}: moving {} onto {} went unnoticed: {:?}",
                culprit.tensor, victim.tensor, report.clobbers
            )
        });
        assert_eq!(c.region, Region::Arena);
        assert!(c.bad_bytes > 0);
        assert!(
            matches!(c.cause, Cause::Overwritten { .. }),
            "{:?}",
            c.cause
        );
        let line = report.render_clobbers(&graph).join("\n");
        assert!(
            line.contains(&graph.tensors()[victim.tensor].name),
            "{line}"
        );
        return;
    }
    panic!("{name}: no victim/culprit pair found");
}

#[test]
fn corrupted_plan_reports_the_clobbered_tensor() {
    corrupt_and_check("light_resnet50_b1", false);
    corrupt_and_check("gpt2_b1", false);
}

#[test]
fn corrupted_plan_reports_a_clobbered_view() {
    corrupt_and_check("gpt2_b1", true);
}
