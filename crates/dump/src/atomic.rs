//! Writing files so that a reader never sees half of one: into a temporary file beside the
//! target, flushed to disk, then renamed over it. A crash leaves the old file or the new
//! one, and on error the temporary file is removed.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Writes `path` atomically with the bytes `fill` produces.
pub fn write_file(path: &Path, fill: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    let tmp = temp_path(path)?;
    let result = (|| {
        let file = File::create(&tmp)?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        fill(&mut w)?;
        let file = w.into_inner().map_err(io::IntoInnerError::into_error)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn temp_path(path: &Path) -> io::Result<PathBuf> {
    let name =
        path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the output path names no file"))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok(dir.join(format!(".{}.{}.tmp", name.to_string_lossy(), std::process::id())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_or_leaves_nothing() {
        let dir = std::env::temp_dir().join(format!("oomscope-atomic-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let target = dir.join("out.json");
        write_file(&target, |w| w.write_all(b"first")).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"first");
        let err = write_file(&target, |w| {
            w.write_all(b"partial")?;
            Err(io::Error::other("boom"))
        });
        assert!(err.is_err());
        assert_eq!(fs::read(&target).unwrap(), b"first", "a failed write leaves the old file");
        let leftovers: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left: {leftovers:?}");
        assert!(write_file(&dir.join("missing-dir/x.json"), |_| Ok(())).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
