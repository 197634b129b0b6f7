//! Tidy tests: the architecture invariants of `docs/ARCHITECTURE.md`, checked on the source
//! tree so that `cargo test` enforces them.

use std::path::{Path, PathBuf};

use crate::root;

/// Every workspace member's directory, from the root manifest's `members` list.
fn members() -> Vec<String> {
    let manifest = read(&root().join("Cargo.toml"));
    let start = manifest
        .find("members = [")
        .expect("the root manifest lists its members");
    let list = &manifest[start..];
    let end = list.find(']').unwrap_or(list.len());
    let members: Vec<String> = list[..end]
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert!(
        members.len() >= 8,
        "expected the workspace members, found {members:?}"
    );
    members
}

/// Which workspace crates each library may depend on.
const ALLOWED: &[(&str, &[&str])] = &[
    ("crates/ir", &[]),
    // The packing engine knows no IR: buffers with lifetimes in, offsets out.
    ("crates/packing", &[]),
    ("crates/planner", &["memplan-ir", "memplan-packing"]),
    ("crates/onnx", &["memplan-ir"]),
    (
        "crates/tracker",
        &["memplan-ir", "memplan-packing", "memplan-planner"],
    ),
    // The layout is backend-neutral: a plan as memory, no device.
    ("crates/layout", &["memplan-ir", "memplan-planner"]),
    (
        "crates/cuda-arena",
        &[
            "memplan-ir",
            "memplan-packing",
            "memplan-planner",
            "memplan-layout",
        ],
    ),
    // The facade: every library crate, and what the command line prints as functions.
    (
        "crates/memplan",
        &[
            "memplan-ir",
            "memplan-packing",
            "memplan-planner",
            "memplan-onnx",
            "memplan-tracker",
            "memplan-layout",
            "memplan-cuda-arena",
        ],
    ),
    // The Python bindings go through the facade (and name the types it re-exports).
    (
        "crates/python",
        &[
            "memplan",
            "memplan-ir",
            "memplan-packing",
            "memplan-planner",
            "memplan-tracker",
        ],
    ),
];

const NEVER_DEPENDED_ON: &[&str] = &["memplan-cli", "memplan-python", "memplan-benches", "xtask"];

/// Where `unsafe` may appear (each block with a `// SAFETY:` comment): the device arena's
/// FFI and the Python bindings.
const UNSAFE_ALLOWED: &[&str] = &["crates/cuda-arena/", "crates/python/"];

/// Whether `dep` names a workspace crate.
fn workspace_crate(dep: &str) -> bool {
    dep == "memplan" || dep.starts_with("memplan-")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Dependency names in the `[dependencies]`, `[dev-dependencies]` and `[build-dependencies]`
/// tables of a manifest, as `(table, name)`.
fn dependencies(manifest: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut table = String::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            table = line.trim_matches(['[', ']']).to_owned();
            continue;
        }
        if table.ends_with("dependencies")
            && let Some((name, _)) = line.split_once('=')
        {
            let name = name
                .trim()
                .split('.')
                .next()
                .unwrap_or("")
                .trim()
                .to_owned();
            if !name.is_empty() && !name.starts_with('#') {
                out.push((table.clone(), name));
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "target" && name != "fuzz" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

fn all_rust_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for m in members() {
        rust_files(&root().join(m), &mut files);
    }
    files
}

#[test]
fn layers_point_one_way() {
    // Every library crate has a layer: a new crate cannot escape the rules.
    for member in members() {
        let library = member.starts_with("crates/")
            && member != "crates/cli"
            && !member.ends_with("/codegen");
        assert!(
            !library || ALLOWED.iter().any(|(m, _)| *m == member),
            "{member} has no layer in tidy.rs's ALLOWED"
        );
    }
    for (member, allowed) in ALLOWED {
        let manifest = read(&root().join(member).join("Cargo.toml"));
        for (table, dep) in dependencies(&manifest) {
            if workspace_crate(&dep) && table == "dependencies" {
                assert!(
                    allowed.contains(&dep.as_str()),
                    "{member} depends on {dep}, which its layer may not"
                );
            }
            assert!(
                dep != "anyhow" || table != "dependencies",
                "library {member} depends on anyhow"
            );
        }
    }
    for member in members() {
        let manifest = read(&root().join(&member).join("Cargo.toml"));
        for (_, dep) in dependencies(&manifest) {
            assert!(
                !NEVER_DEPENDED_ON.contains(&dep.as_str()),
                "{member} depends on {dep}"
            );
        }
    }
}

#[test]
fn every_member_uses_the_workspace_lints() {
    for member in members() {
        let manifest = read(&root().join(&member).join("Cargo.toml"));
        assert!(
            manifest.contains("[lints]\nworkspace = true")
                || manifest.contains("lints.workspace = true"),
            "{member}/Cargo.toml does not inherit the workspace lints"
        );
    }
    let workspace = read(&root().join("Cargo.toml"));
    assert!(
        workspace.contains("unsafe_code = \"deny\""),
        "the workspace must deny unsafe_code"
    );
}

#[test]
fn unsafe_only_in_cuda_arena_and_python_with_safety_comments() {
    for path in all_rust_files() {
        let text = read(&path);
        let rel = path
            .strip_prefix(root())
            .unwrap_or(&path)
            .to_string_lossy()
            .replace('\\', "/");
        let in_arena = UNSAFE_ALLOWED.iter().any(|p| rel.starts_with(p));
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let has_unsafe = code.contains("unsafe {")
                || code.contains("unsafe fn")
                || code.contains("unsafe impl");
            if rel == "xtask/src/tidy.rs" {
                continue;
            }
            assert!(
                !code.contains("allow(unsafe_code)") || in_arena,
                "{rel}:{}: allows unsafe_code outside cuda-arena and the Python bindings",
                i + 1
            );
            if !has_unsafe {
                continue;
            }
            assert!(
                in_arena,
                "{rel}:{}: `unsafe` outside crates/cuda-arena and crates/python",
                i + 1
            );
            if code.contains("unsafe {") {
                let above = &lines[i.saturating_sub(4)..i];
                assert!(
                    above.iter().any(|l| l.contains("// SAFETY:")) || line.contains("// SAFETY:"),
                    "{rel}:{}: unsafe block without a `// SAFETY:` comment above it",
                    i + 1
                );
            }
        }
    }
}

/// Library crates whose public enums of errors and faults must stay open to new variants.
const LIBRARY_SOURCES: &[&str] = &[
    "crates/ir/src",
    "crates/packing/src",
    "crates/planner/src",
    "crates/layout/src",
    "crates/onnx/src",
    "crates/tracker/src",
    "crates/cuda-arena/src",
    "crates/memplan/src",
];

/// Enums that grow with memplan and that callers pick a value of rather than match whole
/// (docs/LIBRARY.md says which are and why the others are not).
const GROWING_ENUMS: &[&str] = &[
    "Strategy",
    "TieBreak",
    "Occupant",
    "HalfFormat",
    "Sampling",
    "Checkpoint",
    "Loss",
    "AttentionImpl",
    "QuantKind",
    "Logits",
    "Norm",
    "QkNorm",
    "Mlp",
    "Activation",
    "Architecture",
    "Runtime",
];

/// The crates whose every public enum is `#[non_exhaustive]` but for [`COMPLETE_ENUMS`],
/// and whose every public `*Options` struct is too (docs/LIBRARY.md, "A surface that can
/// stay stable").
const CORE_SOURCES: &[&str] = &[
    "crates/ir/src",
    "crates/packing/src",
    "crates/planner/src",
    "crates/tracker/src",
];

/// Enums of the core crates that every caller must match whole, so that a new variant
/// breaks their matches on purpose (a `_` arm would silently plan or place it wrongly): the
/// tensor kinds, the memory semantics of an op, and how a planned tensor shares bytes.
const COMPLETE_ENUMS: &[&str] = &["TensorKind", "MemorySemantics", "AliasKind", "Alias"];

/// The public `enum`s and `struct`s of the library sources with whether the attributes just
/// above them say `#[non_exhaustive]`: (path, kind, name, non-exhaustive).
fn public_types(dirs: &[&str]) -> Vec<(String, &'static str, String, bool)> {
    let mut out = Vec::new();
    for dir in dirs {
        let mut files = Vec::new();
        rust_files(&root().join(dir), &mut files);
        for path in files {
            let text = read(&path);
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let trimmed = line.trim_start();
                let (kind, rest) = if let Some(rest) = trimmed.strip_prefix("pub enum ") {
                    ("enum", rest)
                } else if let Some(rest) = trimmed.strip_prefix("pub struct ") {
                    ("struct", rest)
                } else {
                    continue;
                };
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                // The attributes and doc lines just above the item.
                let open = lines[..i]
                    .iter()
                    .rev()
                    .take_while(|l| {
                        let l = l.trim_start();
                        l.starts_with("#[") || l.starts_with("//") || l.starts_with(')')
                    })
                    .any(|l| l.contains("non_exhaustive"));
                out.push((path.display().to_string(), kind, name, open));
            }
        }
    }
    out
}

#[test]
fn public_error_enums_are_non_exhaustive() {
    let missing: Vec<String> = public_types(LIBRARY_SOURCES)
        .into_iter()
        .filter(|(_, kind, name, open)| {
            *kind == "enum"
                && !open
                && (["Error", "Fault", "Violation"]
                    .iter()
                    .any(|end| name.ends_with(end))
                    || GROWING_ENUMS.contains(&name.as_str()))
        })
        .map(|(path, _, name, _)| format!("{path}: {name}"))
        .collect();
    assert!(
        missing.is_empty(),
        "public error enums (and growing enums) without #[non_exhaustive] (a new variant would \
         break every match outside the crate): {missing:?}"
    );
}

#[test]
fn core_enums_and_options_are_non_exhaustive() {
    let missing: Vec<String> = public_types(CORE_SOURCES)
        .into_iter()
        .filter(|(_, kind, name, open)| {
            !open
                && match *kind {
                    "enum" => !COMPLETE_ENUMS.contains(&name.as_str()),
                    _ => name.ends_with("Options"),
                }
        })
        .map(|(path, kind, name, _)| format!("{path}: {kind} {name}"))
        .collect();
    assert!(
        missing.is_empty(),
        "public enums and options of ir, packing, planner and tracker without \
         #[non_exhaustive] (mark them, or list an enum every caller must match whole in \
         COMPLETE_ENUMS): {missing:?}"
    );
}

/// The library crate whose messages may name command-line flags: the facade is what the
/// command line prints as functions, and maps its settings to flags. Every other library
/// crate speaks the library's terms (the CLI adds its flag when it reports the error).
const FLAGS_ALLOWED_IN: &str = "crates/memplan/src";

/// The string literals of Rust source `text` outside comments and `#[cfg(test)]` items, with
/// the line each starts on. Raw strings, byte strings, escapes and char literals are read as
/// Rust reads them; lifetimes are not literals.
fn string_literals(text: &str) -> Vec<(usize, String)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if c == '#' && text_at(&chars, i, "#[cfg(test)]") {
            // The test item that follows: up to its closing brace (or `;`).
            i += "#[cfg(test)]".len();
            let mut depth = 0;
            while i < chars.len() {
                match chars[i] {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ';' if depth == 0 => break,
                    '\n' => line += 1,
                    _ => {}
                }
                i += 1;
            }
        } else if c == '"' || ((c == 'r' || c == 'b') && starts_raw(&chars, i)) {
            let start = line;
            let mut j = i;
            while chars[j] != '"' && chars[j] != '#' {
                j += 1; // the `r`, `b` or `br` prefix
            }
            let raw = chars[i..j].contains(&'r');
            let hashes = chars[j..].iter().take_while(|&&h| h == '#').count();
            j += hashes + 1;
            let mut lit = String::new();
            while j < chars.len() {
                let d = chars[j];
                if d == '"'
                    && chars[j + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == '#')
                        .count()
                        == hashes
                {
                    j += 1 + hashes;
                    break;
                }
                if d == '\\' && !raw {
                    lit.push(d);
                    lit.push(at(j + 1));
                    line += usize::from(at(j + 1) == '\n');
                    j += 2;
                    continue;
                }
                line += usize::from(d == '\n');
                lit.push(d);
                j += 1;
            }
            out.push((start, lit));
            i = j;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}'), or a lifetime ('a).
            if at(i + 1) == '\\' {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            // A whole identifier, so that `r` or `b` inside one starts no literal.
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

fn text_at(chars: &[char], i: usize, what: &str) -> bool {
    what.chars()
        .enumerate()
        .all(|(k, w)| chars.get(i + k) == Some(&w))
}

/// Whether a raw or byte string starts at `i` (`r"`, `r#"`, `b"`, `br"`, `br#"`).
fn starts_raw(chars: &[char], i: usize) -> bool {
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) == Some(&'r') {
        j += 1;
        while chars.get(j) == Some(&'#') {
            j += 1;
        }
    }
    j > i && chars.get(j) == Some(&'"')
}

/// The command-line flags a literal names: `--word` at the start or after a character that
/// is not part of a word (`---` and `a--b` are not flags).
fn flags_in(literal: &str) -> Vec<String> {
    let chars: Vec<char> = literal.chars().collect();
    let mut flags = Vec::new();
    for i in 0..chars.len().saturating_sub(2) {
        let before_ok = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '-');
        if before_ok && chars[i] == '-' && chars[i + 1] == '-' && chars[i + 2].is_ascii_lowercase()
        {
            let flag: String = chars[i..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == '-')
                .collect();
            flags.push(flag);
        }
    }
    flags
}

#[test]
fn library_messages_name_no_command_line_flags() {
    let mut found = Vec::new();
    for dir in LIBRARY_SOURCES.iter().filter(|d| **d != FLAGS_ALLOWED_IN) {
        let mut files = Vec::new();
        rust_files(&root().join(dir), &mut files);
        for path in files {
            let rel = path
                .strip_prefix(root())
                .unwrap_or(&path)
                .display()
                .to_string();
            if rel.ends_with("/tests.rs") || rel.contains("/tests/") || rel.contains("/generated/")
            {
                continue;
            }
            for (line, literal) in string_literals(&read(&path)) {
                for flag in flags_in(&literal) {
                    found.push(format!("{rel}:{line}: {flag}"));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "library string literals that name command-line flags (say what is wrong in the \
         library's terms; the CLI adds its flag when it reports the error): {found:#?}"
    );
}

#[test]
fn the_flag_scan_reads_literals_as_rust_does() {
    let src = r##"
// a comment with "--dim" is no literal
fn f<'a>(x: &'a str) -> char {
    let _ = "pass --dim batch=8";
    let _ = r#"raw "--bound" here"#;
    let _ = "escaped \" --persistent x";
    let _ = "no flag: a--b, ---, -- dash";
    /* block "--loss" */
    '"'
}
#[cfg(test)]
mod tests {
    const T: &str = "--checkpoint";
}
"##;
    let flags: Vec<(usize, Vec<String>)> = string_literals(src)
        .into_iter()
        .map(|(line, lit)| (line, flags_in(&lit)))
        .filter(|(_, f)| !f.is_empty())
        .collect();
    assert_eq!(
        flags,
        vec![
            (4, vec!["--dim".to_owned()]),
            (5, vec!["--bound".to_owned()]),
            (6, vec!["--persistent".to_owned()]),
        ]
    );
}

#[test]
fn every_source_file_opens_with_a_module_doc() {
    for path in all_rust_files() {
        let rel = path
            .strip_prefix(root())
            .unwrap_or(&path)
            .to_string_lossy()
            .replace('\\', "/");
        if rel.contains("/generated/") || rel.contains("/snapshots/") {
            continue;
        }
        let text = read(&path);
        let first = text
            .lines()
            .find(|l| !l.trim().is_empty() && !l.starts_with("#!"))
            .unwrap_or("");
        assert!(
            first.starts_with("//!"),
            "{rel} does not open with a `//!` comment"
        );
    }
}

#[test]
fn nothing_reads_outside_the_repository() {
    let needles = [concat!("../", "shared"), concat!("/work/", "shared")];
    for path in all_rust_files() {
        let text = read(&path);
        for needle in needles {
            assert!(
                !text.contains(needle),
                "{} refers to `{needle}`: copy the data into testdata/",
                path.display()
            );
        }
    }
}

#[test]
fn ci_runs_the_readme_test_command() {
    let readme = read(&root().join("README.md"));
    let ci = read(&root().join(".ci/run"));
    let command = readme
        .lines()
        .filter(|l| l.trim_start().starts_with("cargo "))
        .nth(1)
        .expect("README.md opens with two commands: the main job and the tests");
    assert!(
        ci.contains(command.trim()),
        ".ci/run does not run README's test command `{}`",
        command.trim()
    );
}

#[test]
fn the_dependency_parser_reads_tables() {
    let deps = dependencies(
        "[package]\nname = \"x\"\n[dependencies]\nmemplan-ir.workspace = true\nfoo = \"1\"\n[dev-dependencies]\nbar = { version = \"1\" }\n",
    );
    assert_eq!(
        deps,
        vec![
            ("dependencies".to_owned(), "memplan-ir".to_owned()),
            ("dependencies".to_owned(), "foo".to_owned()),
            ("dev-dependencies".to_owned(), "bar".to_owned())
        ]
    );
}

/// The value of `key = ...` in a manifest's text (first occurrence), unquoted.
fn manifest_value<'a>(manifest: &'a str, key: &str) -> Option<&'a str> {
    manifest.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"'))
    })
}

#[test]
fn published_crates_carry_their_metadata_and_only_their_sources() {
    for (dir, name) in crate::package::PACKAGED {
        let path = root().join(dir);
        let manifest = read(&path.join("Cargo.toml"));
        assert_eq!(manifest_value(&manifest, "name"), Some(*name), "{dir}");
        for key in [
            "description",
            "readme",
            "keywords",
            "categories",
            "include",
            "repository.workspace",
            "license.workspace",
            "rust-version.workspace",
        ] {
            assert!(
                manifest_value(&manifest, key).is_some(),
                "{dir}/Cargo.toml has no `{key}`"
            );
        }
        for file in ["README.md", "LICENSE-MIT", "LICENSE-APACHE"] {
            assert!(path.join(file).is_file(), "{dir} has no {file}");
        }
        let include = manifest_value(&manifest, "include").unwrap_or("");
        for word in ["tests", "testdata", "examples", "benches", "fuzz"] {
            assert!(
                !include.contains(word),
                "{dir}: its package would hold `{word}`, which reads the repository's corpus"
            );
        }
    }
    let workspace = read(&root().join("Cargo.toml"));
    let repo = manifest_value(&workspace, "repository").unwrap_or("");
    assert!(
        repo.starts_with("https://github.com/"),
        "repository `{repo}`"
    );
}

/// The minimum Rust version is the policy's: the last three stable releases counting the
/// pinned toolchain (1.95 pins 1.93). Clippy's `incompatible_msrv` then holds the code to it.
#[test]
fn the_minimum_rust_version_follows_the_policy() {
    let minor = |v: &str| -> u32 {
        v.trim_matches('"')
            .split('.')
            .nth(1)
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("version `{v}`"))
    };
    let toolchain = read(&root().join("rust-toolchain.toml"));
    let pinned = minor(manifest_value(&toolchain, "channel").expect("a pinned channel"));
    let workspace = read(&root().join("Cargo.toml"));
    let stated = minor(manifest_value(&workspace, "rust-version").expect("a rust-version"));
    assert_eq!(
        stated + 2,
        pinned,
        "rust-version must be the pinned minor - 2"
    );
    let changelog = read(&root().join("CHANGELOG.md"));
    assert!(
        changelog.contains("## Unreleased") && changelog.contains("rust-version"),
        "CHANGELOG.md has an Unreleased section and states the Rust version policy"
    );
}
