//! The device arena without a GPU (this machine, CI) and with one (`cargo xtask gpu-smoke`
//! machines): reaching for a device either works or is an `Err`, never a panic or an abort.

#![cfg(feature = "cuda")]

use std::path::Path;

use memplan_cuda_arena::PoolLimits;
use memplan_cuda_arena::device::{
    Device, DeviceArena, DeviceError, DevicePool, device_count, driver_present,
};
use memplan_cuda_arena::{CheckArena, CheckOptions, Layout, LayoutOptions, run_check};
use memplan_ir::Graph;
use memplan_planner::{PlanOptions, plan_graph};

fn small_graph() -> Graph {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/graphs/json/silero_vad_16k_b1.json");
    Graph::load_json(&path).unwrap()
}

#[test]
fn opening_a_device_without_a_driver_is_an_error() {
    if driver_present() {
        // A machine with a driver: the count works (0 where the driver finds no GPU), and an
        // ordinal past it is refused cleanly, as "no device".
        let n = device_count().unwrap();
        let err = Device::open(n).unwrap_err();
        assert!(err.is_unavailable(), "{err}");
        assert!(
            matches!(err, DeviceError::NoDevice { count, .. } if count == n),
            "{err}"
        );
        return;
    }
    let err = Device::open(0).unwrap_err();
    assert!(matches!(err, DeviceError::NoDriver), "{err:?}");
    assert!(err.to_string().contains("libcuda"), "{err}");
    assert!(matches!(device_count(), Err(DeviceError::NoDriver)));
    // Asking again is as clean as the first time (no poisoned global state).
    assert!(matches!(Device::open(3), Err(DeviceError::NoDriver)));
}

#[test]
fn device_pattern_check_matches_the_host_or_reports_no_device() {
    let graph = small_graph();
    let plan = plan_graph(&graph, &PlanOptions::default()).unwrap();
    let layout = Layout::new(&graph, &plan, &LayoutOptions::default()).unwrap();
    let mut host = CheckArena::new(layout.clone()).unwrap();
    let host_report = run_check(&graph, &layout, &mut host, CheckOptions::default()).unwrap();
    assert!(host_report.is_clean());
    match Device::open(0) {
        Ok(device) => {
            let mut arena = DeviceArena::new(&device, layout.clone()).unwrap();
            // One allocation holds every region.
            assert_eq!(arena.allocated_bytes(), layout.buffer_bytes());
            let report = run_check(&graph, &layout, &mut arena, CheckOptions::default()).unwrap();
            assert_eq!(
                report, host_report,
                "device and host execute the same plan alike"
            );
            // Buffers go back to a pool and serve the same plan again.
            let mut pool = DevicePool::new(PoolLimits::default());
            let layout = arena.release(&mut pool).unwrap();
            let mut again = DeviceArena::from_pool(&device, layout.clone(), &mut pool).unwrap();
            assert!(pool.stats().hits >= 1);
            let report = run_check(&graph, &layout, &mut again, CheckOptions::default()).unwrap();
            assert!(report.is_clean());
        }
        Err(e) => assert!(e.is_unavailable(), "{e}"),
    }
}
