//! GPU smoke test: plan real corpus graphs, allocate their arenas on device 0, and run the
//! pattern check on the device (pattern writes and checks as copies, in schedule order).
//!
//! For each graph it prints the arena size next to the drop in free device memory when the
//! arena was allocated, the time taken, and whether every byte held. One graph keeps its
//! weights as `f16` in the half region: synthetic `f32` weights are converted on upload and
//! read back to check the conversion. Without a driver or a device it prints one line saying
//! it skipped and why, and exits 0.
//!
//! Then the device-safety cases: two `Device`s (two streams) on one GPU sharing a
//! pool, with a fresh allocation afterwards that must hold only zeros; an upload from pinned
//! host memory whose host buffer is overwritten right after the call, the arena's bytes
//! checked after; and a pattern check on a pooled arena, whose salt differs from the run
//! that left the bytes.
//!
//! Then memory the engine owns: an arena of a device made from the engine's own context and
//! stream, in an allocation the engine lends (refused when too small, and given back), with
//! the plan's caller-owned inputs and outputs bound to the engine's own allocations; the
//! pattern check runs on it, values uploaded through the arena are read back from the
//! engine's allocation at the layout's buffer offsets, and the allocation comes back.
//!
//! Run it with `cargo xtask gpu-smoke`, or directly:
//! `cargo run --release -p memplan-cuda-arena --features cuda --example gpu_smoke`. A
//! prebuilt binary (`target/release/examples/gpu_smoke`) runs on another machine from the
//! repository root: it finds the corpus in `$MEMPLAN_TESTDATA`, the source tree it was built
//! in, or `testdata/` under the current folder or a folder above it.
//!
//! Runs on devices are recorded in `docs/MEASUREMENTS.md`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use memplan_cuda_arena::device::{Device, DeviceArena, DevicePool};
use memplan_cuda_arena::{
    CheckOptions, HalfData, HalfFormat, Layout, LayoutOptions, Placement, PoolLimits, Region,
    run_check,
};
use memplan_ir::{DType, Graph, TensorKind};
use memplan_planner::{PlanOptions, ScheduleMode, plan_graph};

const MIB: f64 = 1024.0 * 1024.0;

struct Case {
    graph: &'static str,
    schedule: ScheduleMode,
    half: Option<HalfFormat>,
}

const CASES: &[Case] = &[
    Case {
        graph: "light_resnet50_b1",
        schedule: ScheduleMode::Given,
        half: None,
    },
    Case {
        graph: "gpt2_b1",
        schedule: ScheduleMode::Memory,
        half: None,
    },
    Case {
        graph: "bert_base_b1",
        schedule: ScheduleMode::Given,
        half: Some(HalfFormat::F16),
    },
    Case {
        graph: "sd15_unet_b1",
        schedule: ScheduleMode::Given,
        half: Some(HalfFormat::BF16),
    },
];

fn main() -> ExitCode {
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) if e.is_unavailable() => {
            println!("gpu-smoke: skipped: {e}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("gpu-smoke: error: {e}");
            return ExitCode::from(1);
        }
    };
    let all = run(&device)
        .and_then(|ok| Ok(ok & safety_cases(&device)?))
        .and_then(|ok| Ok(ok & engine_owned(&device)?));
    match all {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("gpu-smoke: error: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(device: &Device) -> Result<bool, Box<dyn std::error::Error>> {
    let info = device.mem_info()?;
    println!(
        "gpu-smoke: device {} `{}`: {:.0} MiB free of {:.0} MiB",
        device.ordinal(),
        device.name()?,
        info.free as f64 / MIB,
        info.total as f64 / MIB
    );
    let dir = graphs_dir()?;
    let mut all_clean = true;
    for case in CASES {
        let graph = Graph::load_json(&dir.join(format!("{}.json", case.graph)))?;
        let options = PlanOptions::default().with_schedule(case.schedule);
        let plan = plan_graph(&graph, &options)?;
        let layout = Layout::new(&graph, &plan, &{
            let mut o = LayoutOptions::default();
            o.half_weights = case.half;
            o
        })?;
        let total = layout.total_bytes().unwrap_or(u64::MAX);

        device.synchronize()?;
        let before = device.mem_info()?;
        let t0 = Instant::now();
        let mut arena = DeviceArena::new(device, layout.clone())?;
        let alloc_s = t0.elapsed().as_secs_f64();
        let after = device.mem_info()?;
        let free_drop = before.free.saturating_sub(after.free);

        let mut conversion = String::new();
        if let Some(format) = case.half {
            conversion = check_half_upload(&graph, &layout, &mut arena, format)?;
        }

        let t1 = Instant::now();
        let report = run_check(&graph, &layout, &mut arena, CheckOptions::default())?;
        device.synchronize()?;
        let check_s = t1.elapsed().as_secs_f64();
        let gib_moved = (report.bytes_written + report.bytes_checked) as f64 / (MIB * 1024.0);
        println!(
            "gpu-smoke: {:<20} schedule {:<6} arena {:>8.1} MiB, weights {:>7.1} MiB, half {:>7.1} MiB; allocated {:>8.1} MiB, free memory dropped {:>8.1} MiB ({:+.1} MiB); alloc {:.3} s, check {:.2} s ({:.1} GiB copied, {:.1} GiB/s){}",
            case.graph,
            case.schedule.name(),
            layout.region_bytes(Region::Arena) as f64 / MIB,
            layout.region_bytes(Region::Weights) as f64 / MIB,
            layout.region_bytes(Region::Half) as f64 / MIB,
            total as f64 / MIB,
            free_drop as f64 / MIB,
            (free_drop as f64 - total as f64) / MIB,
            alloc_s,
            check_s,
            gib_moved,
            gib_moved / check_s.max(1e-9),
            conversion,
        );
        if report.is_clean() {
            println!(
                "gpu-smoke: {:<20} ok: {} writes, {} reads, every byte held",
                case.graph, report.writes, report.reads
            );
        } else {
            all_clean = false;
            println!("gpu-smoke: {:<20} CLOBBERED:", case.graph);
            for line in report.render_clobbers(&graph).iter().take(10) {
                println!("gpu-smoke:   {line}");
            }
        }
        drop(arena);
    }
    Ok(all_clean)
}

/// Uploads synthetic `f32` values into every half-region weight (converted on the way) and
/// reads a few back, comparing with the host conversion. Returns a note for the report.
fn check_half_upload(
    graph: &Graph,
    layout: &Layout,
    arena: &mut DeviceArena,
    format: HalfFormat,
) -> Result<String, Box<dyn std::error::Error>> {
    let mut converted = 0u64;
    let mut compared = 0u64;
    for slot in layout.slots().filter(|s| s.region == Region::Half) {
        let t = slot.tensor;
        if graph.tensors()[t].kind != TensorKind::Weight || slot.dtype != format.dtype() {
            return Err(
                format!("{t} in the half region is not a {} weight", format.dtype()).into(),
            );
        }
        let n = usize::try_from(slot.bytes / 2)?;
        let values: Vec<f32> = (0..n)
            .map(|i| ((i % 251) as f32 - 125.0) * 0.0625 + t.0 as f32 * 1e-3)
            .collect();
        arena.upload_f32(t, &values)?;
        converted += 1;
        if compared < 8 {
            let want = HalfData::from_f32(&values, format);
            let same = match (format, &want) {
                (HalfFormat::F16, HalfData::F16(w)) => arena.download::<half::f16>(t)? == *w,
                (HalfFormat::BF16, HalfData::BF16(w)) => arena.download::<half::bf16>(t)? == *w,
                _ => false,
            };
            if !same {
                return Err(format!(
                    "{t}: the device's {} weights differ from the host conversion",
                    format.dtype()
                )
                .into());
            }
            compared += 1;
        }
    }
    debug_assert!(
        layout
            .slots()
            .all(|s| s.region != Region::Weights || s.dtype != DType::F32)
    );
    Ok(format!(
        "; {converted} f32 weights stored as {} ({compared} read back)",
        format.dtype()
    ))
}

/// The largest f32 tensor of the arena region: where the safety cases write.
fn largest_f32(layout: &Layout) -> Option<(memplan_ir::TensorId, usize)> {
    layout
        .slots()
        .filter(|s| s.region == Region::Arena && s.dtype == DType::F32 && s.alias.is_none())
        .max_by_key(|s| (s.bytes, std::cmp::Reverse(s.tensor)))
        .and_then(|s| Some((s.tensor, usize::try_from(s.bytes / 4).ok()?)))
}

/// The device-safety cases. Returns whether all held.
fn safety_cases(device: &Device) -> Result<bool, Box<dyn std::error::Error>> {
    let graph = Graph::load_json(&graphs_dir()?.join("gpt2_b1.json"))?;
    let plan = plan_graph(&graph, &PlanOptions::default())?;
    let layout = Layout::new(&graph, &plan, &LayoutOptions::default())?;
    let (t, n) = largest_f32(&layout).ok_or("no f32 tensor in the arena")?;
    let mut ok = true;
    let mut say = |case: &str, held: bool, note: String| {
        ok &= held;
        let verdict = if held { "ok" } else { "FAILED" };
        println!("gpu-smoke: safety {case:<34} {verdict}: {note}");
    };

    // Two streams on one GPU sharing a pool: an arena of the second device reuses the first
    // device's released buffers; its upload must have finished before its drop frees them
    // (on the first device's stream), and a fresh allocation after it holds only zeros.
    let second = Device::open(device.ordinal())?;
    let mut pool = DevicePool::new(PoolLimits::default());
    let first_arena = DeviceArena::from_pool(device, layout.clone(), &mut pool)?;
    let layout = first_arena.release(&mut pool)?;
    let mut reused = DeviceArena::from_pool(&second, layout.clone(), &mut pool)?;
    let hits = pool.stats().hits;
    let ones = vec![1.0f32; n];
    reused.upload(t, &ones)?;
    let report = run_check(&graph, &layout, &mut reused, CheckOptions::default())?;
    reused.upload(t, &ones)?;
    drop(reused);
    let fresh = DeviceArena::new(device, layout.clone())?;
    let zeros = fresh.download::<f32>(t)?.iter().all(|&x| x == 0.0);
    say(
        "two streams sharing a pool",
        hits >= 1 && report.is_clean() && zeros,
        format!(
            "{hits} pooled buffers reused across streams, salted check clean: {}, fresh allocation all zero: {zeros}",
            report.is_clean()
        ),
    );
    drop(fresh);

    // A pinned-memory upload, the host buffer overwritten as soon as the call returns: the
    // device must hold the values uploaded, not the overwrite.
    let mut arena = DeviceArena::new(device, layout.clone())?;
    let mut pinned = device.pinned_zeroed::<f32>(n)?;
    let want: Vec<f32> = (0..n).map(|i| (i % 1021) as f32).collect();
    pinned.as_mut_slice()?.copy_from_slice(&want);
    arena.upload(t, pinned.as_slice()?)?;
    pinned.as_mut_slice()?.fill(-1.0);
    let got = arena.download::<f32>(t)?;
    let wrong = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    say(
        "pinned upload, host overwritten",
        wrong == 0,
        format!("{n} f32 values uploaded, {wrong} differ on the device"),
    );
    Ok(ok)
}

/// The corpus folder (`testdata/graphs/json`): from `$MEMPLAN_TESTDATA` (the `testdata`
/// folder), the source tree this binary was built in, or `testdata/` under the current
/// folder or any folder above it (a prebuilt binary run from a copy of the repository).
fn graphs_dir() -> Result<PathBuf, String> {
    let sub = Path::new("graphs/json");
    let mut tried = Vec::new();
    if let Some(dir) = std::env::var_os("MEMPLAN_TESTDATA") {
        tried.push(PathBuf::from(dir).join(sub));
    }
    tried.push(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata")
            .join(sub),
    );
    if let Ok(cwd) = std::env::current_dir() {
        tried.extend(cwd.ancestors().map(|d| d.join("testdata").join(sub)));
    }
    tried
        .iter()
        .find(|d| d.join("gpt2_b1.json").is_file())
        .cloned()
        .ok_or_else(|| {
            format!(
                "no corpus: set MEMPLAN_TESTDATA to the repository's testdata folder, or run from the repository (looked in {})",
                tried.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
            )
        })
}

/// Memory the engine owns: its context and stream, its allocation for the arena, its
/// allocations for the caller-owned inputs and outputs. Returns whether all held.
fn engine_owned(device: &Device) -> Result<bool, Box<dyn std::error::Error>> {
    let graph = Graph::load_json(&graphs_dir()?.join("light_resnet50_b1.json"))?;
    let options = PlanOptions::default()
        .with_inputs_in_arena(false)
        .with_outputs_in_arena(false);
    let plan = plan_graph(&graph, &options)?;
    let layout = Layout::new(&graph, &plan, &LayoutOptions::default())?;
    let mut ok = true;
    let mut say = |case: &str, held: bool, note: String| {
        ok &= held;
        let verdict = if held { "ok" } else { "FAILED" };
        println!("gpu-smoke: engine {case:<34} {verdict}: {note}");
    };

    // The engine's context and stream (a second stream of the same context), and a device
    // from each way of handing them over.
    let ctx = Arc::clone(device.context());
    let stream = ctx.new_stream()?;
    let engine = Device::from_stream(Arc::clone(&stream));
    let other = Device::from_context(Arc::clone(&ctx))?;
    say(
        "device from context and stream",
        engine.stream().cu_stream() == stream.cu_stream()
            && other.stream().cu_stream() != stream.cu_stream()
            && other.ordinal() == device.ordinal(),
        format!("device {} in the engine's context", engine.ordinal()),
    );

    // Too small an allocation is refused and given back untouched.
    let bytes = usize::try_from(layout.buffer_bytes())?;
    let small = stream.alloc_zeros::<u8>(bytes / 2)?;
    let refused = match DeviceArena::in_slice(&engine, layout.clone(), small) {
        Err(r) => r.slice.len() == bytes / 2,
        Ok(_) => false,
    };
    say(
        "too small an allocation refused",
        refused,
        format!("{} of {bytes} bytes given back", bytes / 2),
    );

    // The arena in the engine's allocation, caller tensors bound to the engine's own.
    let mut slice = stream.alloc_zeros::<u8>(bytes)?;
    stream.memcpy_htod(&vec![0xA5u8; bytes], &mut slice)?;
    let mut arena = DeviceArena::in_slice(&engine, layout.clone(), slice)?;
    let callers: Vec<_> = layout.caller_tensors().collect();
    for &(t, b, _) in &callers {
        arena.bind(t, stream.alloc_zeros::<u8>(usize::try_from(b)?)?)?;
    }
    let report = run_check(&graph, &layout, &mut arena, CheckOptions::default())?;
    say(
        "pattern check in the engine's memory",
        report.is_clean() && arena.allocated_bytes() == layout.buffer_bytes(),
        format!(
            "{} writes, {} reads, {} caller tensors bound",
            report.writes,
            report.reads,
            callers.len()
        ),
    );

    // Values through the arena land at the layout's buffer offsets of the engine's memory.
    let (input, in_bytes, _) = *callers.first().ok_or("the plan has no caller tensor")?;
    let n = usize::try_from(in_bytes / 4)?;
    let values: Vec<f32> = (0..n).map(|i| (i % 997) as f32).collect();
    arena.upload(input, &values)?;
    let same_input = arena.download::<f32>(input)? == values;
    let weight = layout
        .slots()
        .filter(|s| s.region == Region::Weights && s.dtype == DType::F32)
        .max_by_key(|s| (s.bytes, std::cmp::Reverse(s.tensor)))
        .map(|s| (s.tensor, s.bytes))
        .ok_or("no f32 weight")?;
    let w: Vec<f32> = (0..usize::try_from(weight.1 / 4)?)
        .map(|i| i as f32 * 0.5)
        .collect();
    arena.upload(weight.0, &w)?;
    let returned = arena
        .into_slice()?
        .ok_or("the arena gave no allocation back")?;
    let raw = stream.clone_dtoh(&returned)?;
    let at = usize::try_from(layout.buffer_offset(weight.0)?)?;
    let landed = raw
        .get(at..at + w.len() * 4)
        .is_some_and(|b| b.chunks_exact(4).zip(&w).all(|(c, v)| c == v.to_ne_bytes()));
    let placed = matches!(layout.placement(input), Some(Placement::Caller { .. }));
    say(
        "values at the layout's buffer offsets",
        same_input && landed && placed && returned.len() == bytes,
        format!(
            "caller input read back: {same_input}; weight at buffer offset {at}: {landed}; allocation of {} bytes returned",
            returned.len()
        ),
    );
    Ok(ok)
}
