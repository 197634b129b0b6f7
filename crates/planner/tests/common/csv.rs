//! Reading two numeric columns of a test data CSV (first column: the graph's name).

use std::collections::BTreeMap;
use std::path::Path;

/// `path`'s rows: first column -> (column `a`, column `b`), both parsed as `u64`. Panics on
/// a missing column or a malformed number: the CSVs are test data in the repository.
pub fn two_columns(path: &Path, a: &str, b: &str) -> BTreeMap<String, (u64, u64)> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|&c| c == name).unwrap();
    let (ia, ib) = (col(a), col(b));
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                f[0].to_owned(),
                (f[ia].parse().unwrap(), f[ib].parse().unwrap()),
            )
        })
        .collect()
}
