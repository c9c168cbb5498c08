//! Writing a whole file so that it is complete or absent: the bytes go to a temporary file in the
//! same directory, which is renamed over the final name once written and synced. A reader never
//! sees half a profile under its final name, and a failed write leaves the previous file (or
//! nothing) there. Standard output (`-`) is written directly.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::Error;

/// Writes `path` (`-`: standard output) with `write`, atomically for a file.
///
/// # Errors
/// [`Error::Io`] naming the file when it cannot be created, written or renamed; the temporary file
/// is removed.
pub fn write_file(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), Error> {
    if path == Path::new("-") {
        let out = std::io::stdout();
        let mut w = BufWriter::with_capacity(1 << 16, out.lock());
        return write(&mut w)
            .and_then(|()| w.flush())
            .map_err(|source| io("write", path, source));
    }
    let tmp = temporary(path);
    let result = File::create(&tmp)
        .map_err(|source| io("create", &tmp, source))
        .and_then(|f| {
            let mut w = BufWriter::with_capacity(1 << 16, f);
            write(&mut w)
                .and_then(|()| w.flush())
                .map_err(|source| io("write", &tmp, source))?;
            let f = w
                .into_inner()
                .map_err(|e| io("write", &tmp, e.into_error()))?;
            f.sync_all().map_err(|source| io("sync", &tmp, source))
        })
        .and_then(|()| std::fs::rename(&tmp, path).map_err(|source| io("rename", path, source)));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// `dir/.name.tmp-PID`, next to `path`.
fn temporary(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

fn io(op: &'static str, path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_complete_or_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.folded");
        write_file(&path, |w| w.write_all(b"a 1\n")).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"a 1\n");
        let err = write_file(&path, |w| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("disk full"))
        })
        .unwrap_err();
        assert!(err.to_string().contains("disk full") || format!("{err:?}").contains("disk full"));
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"a 1\n",
            "the old file stays"
        );
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file is left behind");
    }
}
