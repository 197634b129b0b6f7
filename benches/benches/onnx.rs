//! Criterion benchmarks of ONNX import (`memplan_onnx::import`, decoding included).
//!
//! Data-driven: every `.onnx` file in `testdata/graphs/onnx/` and `testdata/graphs/dynamic/onnx/`
//! is a case, named after its folder and file (drop a file there and it becomes a case), in two
//! modes: `value_info` (shapes from the file) and `infer` (every shape inferred). Throughput is
//! in file bytes. Each case is imported once outside the timing and must succeed.
//!
//! ```text
//! cargo bench -p memplan-benches --bench onnx [-- FILTER]
//! ```

#![allow(
    missing_docs,
    reason = "`criterion_group!` defines a public function with no doc comment"
)]

use std::path::PathBuf;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use memplan_onnx::{ImportOptions, import};

/// The corpus files, sorted, with their case names.
fn cases() -> Vec<(String, Vec<u8>)> {
    let root = memplan_benches::testdata().join("graphs");
    let mut out = Vec::new();
    for (dir, prefix) in [("onnx", "static"), ("dynamic/onnx", "dynamic")] {
        let dir = root.join(dir);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "onnx"))
            .collect();
        files.sort();
        for path in files {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("?")
                .to_owned();
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            out.push((format!("{prefix}/{stem}"), bytes));
        }
    }
    out
}

fn onnx_import(c: &mut Criterion) {
    let mut group = c.benchmark_group("onnx/import");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for (case, bytes) in cases() {
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        for (mode, infer_all) in [("value_info", false), ("infer", true)] {
            let options = ImportOptions::default().with_infer_all(infer_all);
            if let Err(e) = import(&bytes, &options) {
                panic!("{case} ({mode}): {e}");
            }
            group.bench_with_input(BenchmarkId::new(mode, &case), &bytes, |b, bytes| {
                b.iter(|| import(bytes, &options))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, onnx_import);
criterion_main!(benches);
