//! Hand-made graphs and plans for unit tests.

use memplan_ir::{DType, Graph, GraphBuilder, NodeId, TensorId};
use memplan_planner::{
    Alias, Plan, PlanSettings, PlanStats, PlannedBuffer, PlannedWeight, ScheduleChoice,
    ScheduleMode,
};

/// The tensors of [`chain_graph`].
pub(crate) struct ChainIds {
    pub x: TensorId,
    pub w: TensorId,
    pub w2: TensorId,
    pub k: TensorId,
    pub a: TensorId,
    pub v: TensorId,
    pub b: TensorId,
    pub y: TensorId,
}

/// `a = Add(x, w); v = Reshape(a, k); b = Mul(v, w2); y = Add(b, a)`, all f32[16] (64 bytes).
pub(crate) fn chain_graph() -> (Graph, ChainIds) {
    let mut g = GraphBuilder::new("chain");
    let x = g.input("x", DType::F32, [16]);
    let w = g.weight("w", DType::F32, [16]);
    let w2 = g.weight("w2", DType::F32, [16]);
    let k = g.int_constant("k", &[4, 4]);
    let a = g.op("Add", &[x, w], DType::F32, [16]);
    let v = g.op("Reshape", &[a, k], DType::F32, [4, 4]);
    let b = g.op("Mul", &[v, w2], DType::F32, [16]);
    let y = g.op("Add", &[b, a], DType::F32, [16]);
    g.mark_output(y);
    let graph = g.build().expect("valid chain graph");
    (
        graph,
        ChainIds {
            x,
            w,
            w2,
            k,
            a,
            v,
            b,
            y,
        },
    )
}

fn buf(tensor: TensorId, offset: u64, first: u32, last: u32) -> PlannedBuffer {
    PlannedBuffer {
        tensor,
        offset,
        bytes: 64,
        first,
        last,
        alias: None,
    }
}

/// A correct plan for [`chain_graph`] at alignment 64: `y` reuses `x`'s bytes, `v` is a view
/// of `a`.
pub(crate) fn chain_plan(_g: &Graph, ids: &ChainIds) -> Plan {
    let mut v = buf(ids.v, 0, 1, 2);
    v.alias = Some(Alias::View {
        of: ids.a,
        offset: 0,
    });
    Plan {
        graph: "chain".to_owned(),
        arena_bytes: 192,
        lower_bound_bytes: 192,
        naive_bytes: 320,
        weight_bytes: 192,
        alignment: 64,
        schedule: (0..4).map(NodeId).collect(),
        buffers: vec![
            buf(ids.x, 64, 0, 0),
            buf(ids.a, 0, 0, 3),
            v,
            buf(ids.b, 128, 2, 3),
            buf(ids.y, 64, 3, 3),
        ],
        weights: vec![
            PlannedWeight {
                tensor: ids.w,
                offset: 0,
                bytes: 64,
            },
            PlannedWeight {
                tensor: ids.w2,
                offset: 64,
                bytes: 64,
            },
            PlannedWeight {
                tensor: ids.k,
                offset: 128,
                bytes: 16,
            },
        ],
        settings: PlanSettings::default(),
        workspaces: Vec::new(),
        stats: hand_stats(),
    }
}

/// The figures of [`chain_plan`], made by hand.
fn hand_stats() -> PlanStats {
    let mut schedule = ScheduleChoice::default();
    schedule.mode = ScheduleMode::Given;
    schedule.chosen = "given".to_owned();
    schedule.given_peak = 192;
    schedule.peak = 192;
    let mut stats = PlanStats::default();
    stats.unaliased_lower_bound = 192;
    stats.views = 1;
    stats.storages = 4;
    stats.placed_by = "hand".to_owned();
    stats.schedule = schedule;
    stats
}
