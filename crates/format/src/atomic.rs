//! Writing files so that a reader never sees half of one: into a temporary file beside the
//! target, flushed to disk, then renamed over it. A crash leaves the old file or the new
//! one, and on error the temporary file is removed.
//!
//! Output often goes to shared directories (`/tmp`, a team's scratch space), so the
//! temporary file is created with an unpredictable name and `O_CREAT|O_EXCL`: another user
//! who plants a symlink under a guessable name cannot redirect the write. What the target
//! already is decides how it is written:
//! - absent or a regular file: temporary file, then rename (the file's mode is kept);
//! - a symlink: its destination is written the same way (the link stays a link);
//! - a character device or a FIFO (`/dev/null`, `/dev/stdout` on a pipe): written in place,
//!   never replaced;
//! - anything else (a directory, a socket): refused.
//!
//! A write killed midway (`kill -9`) leaves its temporary file behind; the next write into
//! the same directory removes those of processes that no longer exist, and says so.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, RandomState};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Symlinks followed before a target is called a loop (Linux's own limit).
const MAX_LINKS: usize = 40;

/// Writes `path` atomically with the bytes `fill` produces.
pub fn write_file(path: &Path, fill: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    let path = destination(path)?;
    match fs::metadata(&path) {
        Ok(m) if m.is_file() => replace(&path, Some(m.permissions()), fill),
        Ok(m) if m.file_type().is_char_device() || m.file_type().is_fifo() => {
            let file = OpenOptions::new().write(true).open(&path)?;
            let mut w = BufWriter::with_capacity(1 << 20, file);
            fill(&mut w)?;
            w.flush()
        }
        Ok(m) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is {}, not a file; name a file to write",
                path.display(),
                if m.is_dir() { "a directory" } else { "a special file" }
            ),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => replace(&path, None, fill),
        Err(e) => Err(e),
    }
}

/// Where a write to `path` lands: `path` itself, or the end of its chain of symlinks.
fn destination(path: &Path) -> io::Result<PathBuf> {
    let mut at = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = fs::read_link(&at)?;
                at = match at.parent() {
                    Some(dir) if to.is_relative() => dir.join(to),
                    _ => to,
                };
            }
            _ => return Ok(at),
        }
    }
    Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{}: too many levels of symbolic links", path.display())))
}

fn replace(
    path: &Path,
    mode: Option<fs::Permissions>,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let name =
        path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the output path names no file"))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    remove_stale(dir, name);
    let (tmp, file) = create_temp(dir, name)?;
    let result = (|| {
        if let Some(mode) = mode {
            file.set_permissions(mode)?;
        }
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

/// A new temporary file `.NAME.PID.RANDOM.tmp` in `dir`, created exclusively: an existing
/// file or symlink under that name is an error, never opened, and the name is tried again.
fn create_temp(dir: &Path, name: &OsStr) -> io::Result<(PathBuf, File)> {
    let seed = RandomState::new();
    let mut last = None;
    for attempt in 0u32..16 {
        let random = seed.hash_one((attempt, std::time::SystemTime::now()));
        let tmp = dir.join(format!(".{}.{}.{random:016x}.tmp", name.to_string_lossy(), std::process::id()));
        match OpenOptions::new().write(true).create_new(true).mode(0o666).custom_flags(libc::O_NOFOLLOW).open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no temporary file name was free")))
}

/// Removes the temporary files of writes into `dir` whose process is gone (killed midway),
/// when they are the user's own regular files: ours for any target (`.X.PID.RANDOM.tmp`, a
/// name no other program makes), and the older `.NAME.PID.tmp` for this target. Dumps at
/// OOM have a new name each time, so a killed one is found through another's write.
/// Prints what it removed.
fn remove_stale(dir: &Path, name: &OsStr) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    let prefix = format!(".{}.", name.to_string_lossy());
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let (mut count, mut bytes) = (0u64, 0u64);
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(pid) = file.to_str().and_then(|f| stale_pid(f, &prefix).or_else(|| ours(f))) else { continue };
        let Ok(m) = entry.metadata() else { continue };
        if !m.file_type().is_file() || m.uid() != uid || alive(pid) {
            continue;
        }
        if fs::remove_file(entry.path()).is_ok() {
            count += 1;
            bytes += m.len();
        }
    }
    if count > 0 {
        eprintln!(
            "oomscope: removed {count} temporary file(s) of {} left in {} by interrupted writes",
            oomscope_base::size::human(bytes),
            dir.display()
        );
    }
}

/// The writer's pid in a temporary name `PREFIX PID [.RANDOM] .tmp`.
fn stale_pid(file: &str, prefix: &str) -> Option<i32> {
    let middle = file.strip_prefix(prefix)?.strip_suffix(".tmp")?;
    let (pid, random) = middle.split_once('.').unwrap_or((middle, "0"));
    let hex = !random.is_empty() && random.len() <= 16 && random.bytes().all(|b| b.is_ascii_hexdigit());
    let pid = pid.parse::<i32>().ok().filter(|&p| p > 0)?;
    hex.then_some(pid)
}

/// The writer's pid in a temporary name of ours for any target: `.X.PID.RANDOM.tmp`, with
/// RANDOM 16 hex digits.
fn ours(file: &str) -> Option<i32> {
    let rest = file.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (rest, random) = rest.rsplit_once('.')?;
    let (name, pid) = rest.rsplit_once('.')?;
    let hex = random.len() == 16 && random.bytes().all(|b| b.is_ascii_hexdigit());
    (hex && !name.is_empty()).then(|| pid.parse::<i32>().ok().filter(|&p| p > 0)).flatten()
}

fn alive(pid: i32) -> bool {
    if pid == std::process::id() as i32 {
        return true;
    }
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("oomscope-atomic-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn replaces_the_file_or_leaves_nothing() {
        let dir = dir("replace");
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

    #[test]
    fn a_planted_symlink_under_the_old_temporary_name_is_not_followed() {
        let dir = dir("planted");
        let victim = dir.join("victim");
        fs::write(&victim, b"precious").unwrap();
        // The name the old scheme used, and one per likely pid nearby.
        let me = std::process::id();
        for pid in me.saturating_sub(2)..me + 3 {
            symlink(&victim, dir.join(format!(".out.json.{pid}.tmp"))).unwrap();
        }
        write_file(&dir.join("out.json"), |w| w.write_all(b"dump")).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert_eq!(fs::read(dir.join("out.json")).unwrap(), b"dump");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_symlink_target_is_followed_and_kept_and_a_file_keeps_its_mode() {
        let dir = dir("link");
        let real = dir.join("real.json");
        fs::write(&real, b"old").unwrap();
        fs::set_permissions(&real, fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.join("link.json");
        symlink("real.json", &link).unwrap();
        write_file(&link, |w| w.write_all(b"new")).unwrap();
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link stays a link");
        assert_eq!(fs::read(&real).unwrap(), b"new");
        assert_eq!(fs::metadata(&real).unwrap().permissions().mode() & 0o777, 0o600);
        // A dangling link: its destination is created.
        let dangling = dir.join("dangling.json");
        symlink("made.json", &dangling).unwrap();
        write_file(&dangling, |w| w.write_all(b"made")).unwrap();
        assert_eq!(fs::read(dir.join("made.json")).unwrap(), b"made");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn devices_and_fifos_are_written_in_place_and_directories_refused() {
        let dir = dir("special");
        write_file(Path::new("/dev/null"), |w| w.write_all(b"gone")).unwrap();
        assert!(fs::metadata("/dev/null").unwrap().file_type().is_char_device());
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let reader = std::thread::spawn({
            let fifo = fifo.clone();
            move || fs::read(fifo).unwrap()
        });
        write_file(&fifo, |w| w.write_all(b"through")).unwrap();
        assert_eq!(reader.join().unwrap(), b"through");
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO is not replaced");
        let err = write_file(&dir, |w| w.write_all(b"x")).unwrap_err();
        assert!(err.to_string().contains("a directory"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn temporaries_of_dead_writers_are_removed_and_live_ones_kept() {
        let dir = dir("stale");
        // A pid that cannot exist (beyond pid_max) and this process's own.
        let dead = dir.join(".out.json.2147483000.00ff.tmp");
        let old_style = dir.join(".out.json.2147483001.tmp");
        let live = dir.join(format!(".out.json.{}.abcd.tmp", std::process::id()));
        let other = dir.join(".other.json.2147483000.00ff.tmp");
        for p in [&dead, &old_style, &live, &other] {
            fs::write(p, vec![0u8; 4096]).unwrap();
        }
        write_file(&dir.join("out.json"), |w| w.write_all(b"x")).unwrap();
        assert!(!dead.exists() && !old_style.exists(), "dead writers' temporaries are removed");
        assert!(live.exists(), "a live writer's temporary is kept");
        assert!(other.exists(), "another target's temporaries of the old form are not touched");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_killed_dump_is_cleaned_up_by_the_next_write_of_another_name() {
        let dir = dir("stale-other");
        let killed = dir.join(".oomscope-7-gpu0-oom1.dump.json.2147483000.0123456789abcdef.tmp");
        let foreign = dir.join(".notes.txt.2147483000.tmp");
        fs::write(&killed, b"half a dump").unwrap();
        fs::write(&foreign, b"someone else's").unwrap();
        write_file(&dir.join("oomscope-8-gpu0-oom1.dump.json"), |w| w.write_all(b"{}")).unwrap();
        assert!(!killed.exists());
        assert!(foreign.exists(), "a name of the old form is another program's as far as we know");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn stale_names_are_parsed_strictly() {
        assert_eq!(ours(".a.json.12.0123456789abcdef.tmp"), Some(12));
        assert_eq!(ours(".a.12.0123456789abcdef.tmp"), Some(12));
        assert_eq!(ours(".a.json.12.0123.tmp"), None);
        assert_eq!(ours("..12.0123456789abcdef.tmp"), None);
        assert_eq!(ours(".a.json.x.0123456789abcdef.tmp"), None);
        assert_eq!(stale_pid(".a.json.12.ff.tmp", ".a.json."), Some(12));
        assert_eq!(stale_pid(".a.json.12.tmp", ".a.json."), Some(12));
        assert_eq!(stale_pid(".a.json.x.tmp", ".a.json."), None);
        assert_eq!(stale_pid(".a.json.12.zz.tmp", ".a.json."), None);
        assert_eq!(stale_pid(".a.json.0.tmp", ".a.json."), None);
        assert_eq!(stale_pid(".b.json.12.tmp", ".a.json."), None);
    }
}
