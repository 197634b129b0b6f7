//! `memplan solve` end to end: the built binary on the embedded example, files, capacities,
//! bad input and every strategy; every solution it writes is read back and verified.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use memplan_packing::{self as packing, csv};

fn memplan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memplan"))
        .arg("solve")
        .args(args)
        .output()
        .expect("runs")
}

fn testdata(relative: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/benchmarks")
        .join(relative);
    path.display().to_string()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Reads a solution CSV, checks it against its own problem (and capacity), returns its arena.
fn verified_arena(text: &str, capacity: Option<u64>) -> u64 {
    let parsed = csv::read(text).expect("the output is valid CSV");
    let mut problem = parsed.problem;
    problem.capacity = capacity;
    let solution = parsed.solution.expect("the output has offsets");
    packing::verify(&problem, &solution).expect("the output is a valid solution");
    solution.arena_size(&problem)
}

/// A fresh folder for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memplan-solve-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn solves_the_embedded_example_optimally() {
    let output = memplan(&["--verify"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(text.starts_with("id,lower,upper,size,offset\n"), "{text}");
    assert_eq!(verified_arena(&text, Some(12)), 12);
    let summary = stderr(&output);
    assert!(
        summary.contains("arena 12 B (12 bytes), lower bound 12 B (12 bytes) (1.000x)"),
        "{summary}"
    );
    assert!(summary.contains("proven optimal, verified"), "{summary}");
}

#[test]
fn every_strategy_writes_a_valid_solution_file() {
    let dir = scratch("strategies");
    for strategy in [
        "naive",
        "greedy-size",
        "greedy-lifetime",
        "greedy-area",
        "greedy-breadth",
        "first-fit-time",
        "long-short",
        "auto",
    ] {
        let out = dir.join(format!("{strategy}.csv"));
        let output = memplan(&[
            &testdata("minimalloc/A.1048576.csv"),
            "--strategy",
            strategy,
            "--verify",
            "-o",
            &out.display().to_string(),
        ]);
        assert!(output.status.success(), "{strategy}: {}", stderr(&output));
        assert!(output.stdout.is_empty());
        let text = std::fs::read_to_string(&out).expect("written");
        assert!(verified_arena(&text, None) >= 1_048_576);
        assert!(
            stderr(&output).contains("lower bound 1.00 MiB (1,048,576 bytes)"),
            "{}",
            stderr(&output)
        );
    }
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_impossible_capacity_fails_clearly_and_writes_nothing() {
    let dir = scratch("capacity");
    let out = dir.join("never.csv");
    let output = memplan(&["--capacity", "11", "-o", &out.display().to_string()]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("no placement fits the capacity of 11 B"),
        "{}",
        stderr(&output)
    );
    assert!(!Path::new(&out).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_tight_capacity_is_met() {
    let output = memplan(&[
        "--capacity",
        "12",
        "--strategy",
        "naive",
        "--time-limit",
        "5",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8(output.stdout).expect("utf-8");
    assert!(verified_arena(&text, Some(12)) <= 12);
}

/// `--capacity 1MiB --minimize` on MiniMalloc's `C` gives the default answer (the lower
/// bound, proven), not the first placement under 1 MiB; without `--minimize` the capacity is
/// a feasibility question, answered by the first placement that fits.
#[test]
fn a_capacity_gives_the_default_answer_with_minimize() {
    let file = testdata("minimalloc/C.1048576.csv");
    let plain = memplan(&[&file]);
    let capped = memplan(&[&file, "--capacity", "1MiB", "--minimize"]);
    for output in [&plain, &capped] {
        assert!(output.status.success(), "{}", stderr(output));
        assert!(
            stderr(output).contains("proven optimal"),
            "{}",
            stderr(output)
        );
    }
    let arena =
        |output: &Output| verified_arena(&String::from_utf8_lossy(&output.stdout), Some(1 << 20));
    assert_eq!(arena(&capped), 1_039_360);
    assert_eq!(arena(&capped), arena(&plain));
    let fits = memplan(&[&file, "--capacity", "1MiB"]);
    assert!(fits.status.success(), "{}", stderr(&fits));
    assert!(arena(&fits) <= 1 << 20);
    assert!(
        stderr(&fits).contains("within the capacity of 1.00 MiB (1,048,576 bytes)"),
        "{}",
        stderr(&fits)
    );
}

/// A capacity is answered as soon as a placement fits it: a time limit is a cap, not a
/// target (MiniMalloc's D at 1 MiB with a minute's limit used to search for the whole minute).
/// A run that fails this takes the minute, then fails.
#[test]
fn a_capacity_stops_at_the_first_fit_not_at_the_time_limit() {
    let file = testdata("minimalloc/D.1048576.csv");
    let started = std::time::Instant::now();
    let output = memplan(&[&file, "--capacity", "1048576", "--time-limit", "60"]);
    let took = started.elapsed();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(verified_arena(&String::from_utf8_lossy(&output.stdout), Some(1 << 20)) <= 1 << 20);
    assert!(took < std::time::Duration::from_secs(40), "{took:?}");
}

/// `--gap` stops at the first answer within that fraction of the bound, and says so; a gap
/// that is not a fraction is an error.
#[test]
fn a_gap_stops_within_it() {
    let file = testdata("minimalloc/C.1048576.csv");
    let output = memplan(&[&file, "--gap", "0.5"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("within the --gap of 50% of the bound"),
        "{message}"
    );
    let arena = verified_arena(&String::from_utf8_lossy(&output.stdout), None);
    assert!(arena > 1_039_360 && arena <= 1_039_360 * 3 / 2, "{arena}");
    for bad in ["-0.1", "one", "NaN", "2", "1", "inf"] {
        let output = memplan(&[&file, &format!("--gap={bad}")]);
        assert_eq!(output.status.code(), Some(2), "{bad}");
        assert!(
            stderr(&output).contains("is not a fraction of the lower bound in [0, 1)"),
            "{}",
            stderr(&output)
        );
    }
}

#[test]
fn bad_input_is_an_error_naming_the_line() {
    let dir = scratch("bad");
    let path = dir.join("bad.csv");
    std::fs::write(&path, "id,lower,upper,size\na,0,1,4\nb,3,2,4\n").expect("write");
    let output = memplan(&[&path.display().to_string()]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(
        message.contains("line 3: upper 2 is not greater than lower 3"),
        "{message}"
    );
    let output = memplan(&[&dir.join("missing.csv").display().to_string()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("cannot read"),
        "{}",
        stderr(&output)
    );
    let output = memplan(&["--strategy", "random"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("invalid value 'random'")
            && stderr(&output).contains("greedy-size"),
        "{}",
        stderr(&output)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_solution_file_can_be_solved_again() {
    let first = memplan(&[]);
    assert!(first.status.success());
    let dir = scratch("again");
    let path = dir.join("solved.csv");
    std::fs::write(&path, &first.stdout).expect("write");
    let second = memplan(&[&path.display().to_string(), "--strategy", "greedy-size"]);
    assert!(second.status.success(), "{}", stderr(&second));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `-o` onto something other than a regular file writes through it: `/dev/null` keeps its
/// kind (renaming a file over it, which as root would succeed, replaced the device), and a
/// symbolic link to a file stays a link while the file it points to gets the solution.
#[cfg(unix)]
#[test]
fn output_onto_a_device_or_a_link_writes_through_it() {
    let kind = || {
        std::fs::symlink_metadata("/dev/null")
            .expect("/dev/null exists")
            .file_type()
    };
    let before = kind();
    let output = memplan(&["-o", "/dev/null"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(kind(), before, "writing to /dev/null changed what it is");

    let dir = scratch("link");
    let real = dir.join("real.csv");
    let link = dir.join("link.csv");
    std::fs::write(&real, "old").expect("write");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    let output = memplan(&["-o", &link.display().to_string()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let link_kind = std::fs::symlink_metadata(&link).expect("link").file_type();
    assert!(link_kind.is_symlink(), "the link was replaced by a file");
    let text = std::fs::read_to_string(&real).expect("read");
    assert_eq!(verified_arena(&text, Some(12)), 12);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--verbose` prints every phase with its work and gain, and the JSON lists them: every
/// heuristic of the portfolio, then the exact search; the first answer less every gain is the
/// final arena, and the same input gives the same phases twice; the window bound is reported
/// beside the arena.
#[test]
fn phases_report_their_work_and_gains() {
    let file = testdata("minimalloc/A.1048576.csv");
    let json = || {
        let output = memplan(&[&file, "--format", "json"]);
        assert!(output.status.success(), "{}", stderr(&output));
        let v: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
        v
    };
    let v = json();
    assert_eq!(v, json(), "the same input, the same phases");
    let phases = v["phases"].as_array().expect("phases");
    let names: Vec<&str> = phases.iter().filter_map(|p| p["phase"].as_str()).collect();
    for heuristic in packing::Strategy::HEURISTICS {
        assert!(names.contains(&heuristic.name()), "{names:?}");
    }
    assert!(names.contains(&"exact-search"), "{names:?}");
    let first = phases
        .iter()
        .find_map(|p| p["arena_bytes"].as_u64())
        .expect("a heuristic finished");
    let gained: u64 = phases
        .iter()
        .filter_map(|p| p["gained_bytes"].as_u64())
        .sum();
    assert_eq!(first - gained, v["arena_bytes"].as_u64().expect("arena"));
    // The window bound sits between the classic bound and the arena (it is the classic one
    // where the arena is at it).
    let window = v["window_bound_bytes"].as_u64().expect("window bound");
    let bound = v["lower_bound_bytes"].as_u64().expect("bound");
    assert!(bound <= window && window <= v["arena_bytes"].as_u64().expect("arena"));
    assert!(
        phases
            .iter()
            .all(|p| p["work"].as_u64().is_some_and(|w| w > 0))
    );

    let output = memplan(&[
        &file,
        "--verbose",
        "-o",
        if cfg!(windows) { "NUL" } else { "/dev/null" },
    ]);
    let message = stderr(&output);
    assert!(message.contains("  long-short: work "), "{message}");
    assert!(message.contains("  exact-search: work "), "{message}");
}
