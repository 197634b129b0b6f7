//! Writing output files: never half a file (a temporary file next to the target, renamed
//! over it), and errors that name the target.
//!
//! Only a regular file (or a name that does not exist yet) is replaced that way. A target
//! that exists and is something else, a device such as `/dev/null` or `/dev/stdout` or a
//! named pipe, is written in place: renaming a file over it would replace the device itself
//! (run as root, `-o /dev/null` used to turn `/dev/null` into a regular file, and every later
//! program that read it then read memplan's output). A symbolic link is followed, so the
//! file it points to is replaced and the link stays.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::{Context as _, Result};

/// Writes `bytes` to a temporary file next to `path`, then renames it over `path`; into
/// `path` directly when it exists and is not a regular file (see the module docs).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let target = match std::fs::metadata(path) {
        // A device, a pipe or a socket: write in place.
        Ok(meta) if !meta.is_file() && !meta.is_dir() => {
            return std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|mut file| file.write_all(bytes))
                .with_context(|| format!("writing {}", path.display()));
        }
        // A regular file, through any symbolic links: replace what they point to.
        Ok(meta) if meta.is_file() => std::fs::canonicalize(path).unwrap_or_else(|_| path.into()),
        // A folder fails below with the rename's own error; a new name is created.
        _ => path.to_owned(),
    };
    let asked = path;
    let path = target.as_path();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .with_context(|| format!("{} is not a file name", asked.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    // Errors name the file asked for, not the temporary one (an implementation detail).
    let result = (|| -> std::io::Result<()> {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| format!("writing {}", asked.display()))
}
