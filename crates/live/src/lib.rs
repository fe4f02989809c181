//! The live feed: an instrumented process publishes its allocator's state over a Unix
//! socket in a private directory, and `oomscope tui --attach` follows it. The protocol,
//! `oomscope-live/1`, is documented in `docs/live-protocol.md`.
//!
//! - the messages (JSON lines) are plain data in `oomscope_format::live`;
//! - [`capture`]: allocator state → state frames, copying under the lock and building outside.
//! - [`publish`]: the socket, per-viewer queues that drop frames rather than wait.
//! - [`sampler`]: a thread that samples an [`oomscope_core::Allocator`] and publishes.
//! - [`attach`]: the viewer's side;
//! - [`play`]: a trace played in real time as a live feed (the demo's `--publish`).

pub mod attach;
pub mod capture;
pub mod play;
pub mod publish;
pub mod sampler;

pub use attach::{Feed, FeedError};
pub use capture::Capture;
pub use oomscope_format::live::{Hello, Message, PROTOCOL};
pub use publish::Publisher;
pub use sampler::Sampler;

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The hello of this process for an allocator of `bfc`, sampled every `interval`.
pub fn hello_for_this_process(
    command: &str,
    alloc: &(impl oomscope_core::View + ?Sized),
    interval: std::time::Duration,
) -> Hello {
    Hello {
        protocol: PROTOCOL.to_string(),
        pid: std::process::id(),
        command: command.to_string(),
        device: alloc.device_info(),
        allocator: alloc.allocator_info(),
        started_unix: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        interval_ms: interval.as_millis() as u64,
        process: None,
    }
}

/// Where processes publish: `$OOMSCOPE_LIVE_DIR`, else `$XDG_RUNTIME_DIR/oomscope`, else
/// `/tmp/oomscope-$UID`.
pub fn default_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(oomscope_core::env::LIVE_DIR).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return Path::new(&dir).join("oomscope");
    }
    std::env::temp_dir().join(format!("oomscope-{}", uid()))
}

/// The socket of process `pid` in `dir`; `device` tells apart several allocators of one
/// process.
pub fn socket_path(dir: &Path, pid: u32, device: Option<u32>) -> PathBuf {
    match device {
        Some(d) => dir.join(format!("{pid}-{d}.sock")),
        None => dir.join(format!("{pid}.sock")),
    }
}

pub(crate) fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// Makes `dir` (and missing parents) owner-only, or checks that an existing `dir` belongs to
/// this user and is closed to others: the feed shows op names, shapes and stacks.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
            .map_err(|e| io::Error::new(e.kind(), format!("{}: cannot create the live directory: {e}", dir.display()))),
        Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", dir.display()))),
        Ok(_) => check_private_dir(dir),
    }
}

/// Checks that `dir` is a directory (not a symlink) of this user's, closed to others. A
/// viewer checks this before it connects: a socket in a directory another user controls may
/// be theirs, however it is named.
pub fn check_private_dir(dir: &Path) -> io::Result<()> {
    let meta =
        std::fs::symlink_metadata(dir).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
    if !meta.is_dir() {
        return Err(io::Error::other(format!(
            "{}: not a directory (a symlink or a file); the live feed needs a private directory",
            dir.display()
        )));
    }
    if meta.uid() != uid() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: owned by another user (uid {}); set OOMSCOPE_LIVE_DIR to a directory of yours",
                dir.display(),
                meta.uid()
            ),
        ));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: other users can open it (mode {mode:o}); run `chmod 700 {}` or set OOMSCOPE_LIVE_DIR",
                dir.display(),
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// The sockets in `dir`, oldest first (the order processes started in).
pub fn sockets_in(dir: &Path) -> io::Result<Vec<PathBuf>> {
    use std::os::unix::fs::FileTypeExt;
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Ok(meta) = entry.metadata() else { continue };
        if meta.file_type().is_socket() && entry.path().extension().is_some_and(|e| e == "sock") {
            found.push((meta.mtime(), entry.path()));
        }
    }
    found.sort();
    Ok(found.into_iter().map(|(_, p)| p).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_is_made_private_and_a_public_one_is_refused() {
        let base = std::env::temp_dir().join(format!("oomscope-live-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = base.join("a/b");
        private_dir(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        private_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = private_dir(&dir).unwrap_err().to_string();
        assert!(e.contains("mode 755") && e.contains("chmod 700"), "{e}");
        let file = base.join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(private_dir(&file).unwrap_err().to_string().contains("not a directory"));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
