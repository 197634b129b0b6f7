//! Mixture-of-experts blocks as today's exporters write them (`testdata/pytorch/moe`, made by
//! `export_moe.py`: routing by `torch.where`, by a split of the sorted tokens, and by
//! `arange(start, end)` over the counts' cumulative sums; the dynamo exporter at opsets 18 to
//! 23 and the TorchScript exporter): each plans with `--bound` alone, the sizes it leaves to
//! the data bounded (`--dim batch=2 --dim seq=8` where the export names those dims), and the
//! plan passes `check --plan` (issue 36, item 10: the `range` exports were refused for a
//! `Range` of an unbounded start, the dynamo `split` ones for a broadcast of the experts'
//! summed token counts with the tokens).

mod common;

use std::path::PathBuf;

use common::{memplan, stderr, stdout};

#[test]
fn every_moe_export_plans_with_bound_alone_and_passes_check() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/pytorch/moe");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 8, "{files:?}");
    let out = std::env::temp_dir().join(format!("memplan-moe-bound-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    for f in &files {
        let name = f.file_stem().unwrap().to_string_lossy().into_owned();
        let file = f.to_string_lossy().into_owned();
        let plan = out.join(format!("{name}.plan.json"));
        let plan = plan.to_string_lossy().into_owned();
        let mut args = vec!["plan", file.as_str(), "--bound", "-q", "--format", "json"];
        args.extend(["-o", plan.as_str()]);
        if name.ends_with("_dyn") {
            args.extend(["--dim", "batch=2", "--dim", "seq=8"]);
        }
        let o = memplan(&args);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
        // The TorchScript exporter traces a split's sizes as constants: nothing is left to
        // the data there.
        let traced = name.starts_with("moe_split") && name.contains("torchscript");
        assert_eq!(
            json["settings"]["bounded"]
                .as_array()
                .is_none_or(Vec::is_empty),
            traced,
            "{name}: {}",
            json["settings"]["bounded"]
        );
        let o = memplan(&["check", &file, "--plan", &plan]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{name}: {}{}",
            stdout(&o),
            stderr(&o)
        );
    }
    std::fs::remove_dir_all(&out).ok();
}
