//! The job at a failure: when one rank of a job runs out of memory, every other rank writes
//! its state at that moment, before the launcher tears the job down.
//!
//! It uses what the job already has, no new service: the dump directory (shared by every
//! node of a cluster, local to one node otherwise) and the launcher's SIGTERM.
//!
//! - The rank that runs out of memory appends a line to the job's failure file in the dump
//!   directory (`oomscope-job-JOB.failures`, [`FailureLine`]) before anything else, then
//!   writes its OOM dump as usual.
//! - Every rank of the job (that allocated on a GPU) has a watcher thread that looks at the
//!   failure file every [`POLL`]; a new line from another rank makes it write this rank's
//!   state (`oomscope-rankR-PID-gpuN-jobK.dump.json`). A rank blocked in a collective
//!   (waiting for the one that failed) still writes it: the watcher is its own thread.
//! - A launcher ends the other ranks with SIGTERM (torchrun, after its grace period
//!   SIGKILL): a handler wakes the watcher and returns at once; the watcher looks at the
//!   failure file once more, writes the state if a failure is there, and only then gives
//!   the signal its previous course (by default the end of the process). The handler never
//!   waits: the thread it interrupts may hold the allocator's lock the watcher needs to
//!   write the state, and the watcher blocks SIGTERM, so the handler never runs on it.
//! - The watcher reads the file from its start, not from where it stood when this process
//!   first allocated: a rank that allocates after another has failed still writes its
//!   state. Lines stamped before the job started (another run that reused the job's name)
//!   are not this job's ([`Cursor`]).
//!
//! Threat model (the failure file is in a directory the user chose, which others may be able
//! to write): only a regular file owned by this user is opened, never what a symlink points
//! to and never a FIFO, whose open would block ([`open_failures`]); a line is read as data
//! (JSON, at most [`LINE_CAP`] bytes; a longer or bad line is skipped, and reading goes on
//! after it), it only ever causes this process to write a dump of its own state into the
//! dump directory it writes anyway, and at most `OOMSCOPE_MAX_DUMPS` of them. A process that
//! forked (a DataLoader worker) inherits the handler but not the watcher: the handler then
//! does nothing of its own.

use oomscope_format::name::{PREFIX, job_failures_name};
use serde::{Deserialize, Serialize};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

/// How often a watcher looks at the failure file.
pub const POLL: Duration = Duration::from_millis(200);
/// The longest line of the failure file that is read.
const LINE_CAP: usize = 4096;

/// One failure of the job, as the failing rank tells the others.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureLine {
    pub rank: u32,
    pub host: String,
    pub pid: u32,
    pub gpu: i32,
    /// The OOM dump's file name (in the dump directory).
    pub dump: String,
    pub unix_ms: u64,
}

/// The failure file of `job` in `dir`.
pub fn failures_path(dir: &Path, job: &str) -> PathBuf {
    dir.join(job_failures_name(job))
}

/// Opens the failure file: to append when `append` (created when absent), else to read.
/// Refused unless it is a regular file owned by this user: a symlink planted under the
/// job's predictable name would make a rank append to the file it points to, a FIFO would
/// block the open, another user's file would feed this rank lines it did not ask for.
pub fn open_failures(path: &Path, append: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let mut o = std::fs::OpenOptions::new();
    if append {
        o.create(true).append(true);
    } else {
        o.read(true);
    }
    let f = o.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY).open(path).map_err(|e| {
        match e.raw_os_error() {
            Some(libc::ELOOP) => std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{}: a symbolic link, not the job's failure file: not followed", path.display()),
            ),
            // A FIFO opened to write, without blocking, with no reader.
            Some(libc::ENXIO) => std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{}: not a regular file (a FIFO): not the job's failure file; remove it", path.display()),
            ),
            _ => e,
        }
    })?;
    let m = f.metadata()?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !m.file_type().is_file() || m.uid() != me {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{}: not a regular file of this user (uid {me}): not the job's failure file; remove it",
                path.display()
            ),
        ));
    }
    Ok(f)
}

/// Appends `line` to the job's failure file (one `write` of one line, so lines of ranks that
/// fail at once do not mix on a local filesystem).
pub fn tell(path: &Path, line: &FailureLine) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut text = serde_json::to_string(line).map_err(std::io::Error::other)?;
    text.push('\n');
    open_failures(path, true)?.write_all(text.as_bytes())
}

/// Where a watcher stands in the failure file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    /// Bytes read so far.
    pub at: u64,
    /// Inside a line longer than [`LINE_CAP`]: what comes up to its end is skipped.
    pub skipping: bool,
}

/// Bytes read at most in one look at the file: a file that grew by more is read on at the
/// next look.
const CHUNK: usize = LINE_CAP * 64;

/// Reads the failure file from `cursor`: the whole lines after it stamped at or after
/// `since_ms` (the job's start), and where reading stopped. A line longer than
/// [`LINE_CAP`] is skipped, however long, and reading goes on after it.
pub fn read_from(path: &Path, cursor: Cursor, since_ms: u64) -> (Vec<FailureLine>, Cursor) {
    let Ok(mut f) = open_failures(path, false) else { return (Vec::new(), cursor) };
    let len = f.metadata().map_or(0, |m| m.len());
    if len < cursor.at {
        // Truncated or replaced: read it again from its start.
        return read_from(path, Cursor::default(), since_ms);
    }
    if len == cursor.at || f.seek(SeekFrom::Start(cursor.at)).is_err() {
        return (Vec::new(), cursor);
    }
    let mut buf = Vec::new();
    let _ = f.take(CHUNK as u64).read_to_end(&mut buf);
    let mut next = cursor;
    let mut lines = Vec::new();
    let mut rest: &[u8] = &buf;
    if next.skipping {
        match rest.iter().position(|&b| b == b'\n') {
            Some(i) => {
                rest = &rest[i + 1..];
                next.at += i as u64 + 1;
                next.skipping = false;
            }
            None => {
                next.at += rest.len() as u64;
                return (lines, next);
            }
        }
    }
    while let Some(i) = rest.iter().position(|&b| b == b'\n') {
        let line = &rest[..i];
        if line.len() <= LINE_CAP
            && let Ok(l) = serde_json::from_slice::<FailureLine>(line)
            && l.unix_ms >= since_ms
        {
            lines.push(l);
        }
        rest = &rest[i + 1..];
        next.at += i as u64 + 1;
    }
    // What is left has no end yet: a line being written waits for it, unless it is already
    // longer than any line read, which is skipped up to its end.
    if rest.len() > LINE_CAP {
        next.at += rest.len() as u64;
        next.skipping = true;
    }
    (lines, next)
}

/// Whether `name` is a job's failure file.
pub fn is_failures_file(name: &str) -> bool {
    name.starts_with(PREFIX) && name.ends_with(".failures")
}

// ---- SIGTERM --------------------------------------------------------------------------

/// The watcher's wake-up pipe (write end) and the process that installed the handler; -1 /
/// 0 before.
static WAKE: AtomicI32 = AtomicI32::new(-1);
static OWNER: AtomicI32 = AtomicI32::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// A watcher is there to take the signal (set before its thread is spawned, so that a
/// signal that comes before the thread first runs waits for it in the pipe).
static WATCHING: AtomicBool = AtomicBool::new(false);
/// A SIGTERM the watcher has still to give its course to.
static PENDING: AtomicBool = AtomicBool::new(false);
/// The disposition SIGTERM had before (set once, before the handler is installed).
static PREVIOUS: std::sync::OnceLock<libc::sigaction> = std::sync::OnceLock::new();

/// The pipe the handler wakes the watcher through (its read end).
#[derive(Debug)]
pub struct TermPipe {
    pub wake: i32,
}

fn pipe() -> Option<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
    (r == 0).then_some((fds[0], fds[1]))
}

/// Installs the SIGTERM handler, once per process; the watcher gets the pipe's read end.
/// None when SIGTERM is ignored (nohup: nothing to do) or a pipe cannot be made.
pub fn install_term_handler() -> Option<TermPipe> {
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return None;
    }
    // SAFETY: a zeroed sigaction is a valid value to be filled by sigaction(2).
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: reads the current disposition into `old`; no handler is changed.
    if unsafe { libc::sigaction(libc::SIGTERM, std::ptr::null(), &mut old) } != 0 || old.sa_sigaction == libc::SIG_IGN {
        return None;
    }
    let (wake_read, wake_write) = pipe()?;
    let _ = PREVIOUS.set(old);
    WAKE.store(wake_write, Ordering::SeqCst);
    // SAFETY: getpid has no preconditions.
    OWNER.store(unsafe { libc::getpid() }, Ordering::SeqCst);
    // SAFETY: a zeroed sigaction is valid; the fields set below make it a SA_SIGINFO handler
    // with an empty mask.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = on_term as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize;
    act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: `act.sa_mask` is a valid sigset to empty; installing a handler whose body is
    // async-signal-safe (see `on_term`).
    unsafe {
        libc::sigemptyset(&mut act.sa_mask);
        if libc::sigaction(libc::SIGTERM, &act, std::ptr::null_mut()) != 0 {
            return None;
        }
    }
    Some(TermPipe { wake: wake_read })
}

/// Runs `spawn` with SIGTERM blocked in the calling thread, so the thread it starts inherits
/// the mask: the handler never runs on the watcher (which would then wait on itself). The
/// caller's mask is restored after; a SIGTERM that came meanwhile is delivered then.
pub fn with_term_blocked<T>(spawn: impl FnOnce() -> T) -> T {
    // SAFETY: zeroed sigsets are valid values for sigemptyset/sigaddset/pthread_sigmask to
    // fill; the calls change only this thread's mask, restored below.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
        let out = spawn();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        out
    }
}

/// Marks whether a watcher takes the signal: set before its thread is spawned, cleared if
/// the spawn failed and when it stops (then a signal that came meanwhile takes its course).
pub fn set_watching(on: bool) {
    WATCHING.store(on, Ordering::SeqCst);
    if !on {
        finish_term();
    }
}

/// SIGTERM: in the process that installed it, with a watcher there, wakes the watcher and
/// returns (the watcher gives the signal its course once the state is written); otherwise
/// gives the signal its previous course at once. Only async-signal-safe calls: getpid,
/// write, sigaction, raise.
extern "C" fn on_term(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: every call below is async-signal-safe; the descriptor was set before the
    // handler was installed and is never closed.
    unsafe {
        if libc::getpid() == OWNER.load(Ordering::SeqCst) && WATCHING.load(Ordering::SeqCst) {
            PENDING.store(true, Ordering::SeqCst);
            // The pipe is non-blocking: a full pipe already holds a wake-up.
            let _ = libc::write(WAKE.load(Ordering::SeqCst), [1u8].as_ptr().cast(), 1);
            return;
        }
        previous_course(sig, info, ctx);
    }
}

/// Gives SIGTERM the course it had before the handler: the default (the end of the
/// process), or the previous handler, called.
///
/// # Safety
/// Async-signal-safe; `info` and `ctx` are passed on to a previous SA_SIGINFO handler as
/// they are (null from [`finish_term`]).
unsafe fn previous_course(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(previous) = PREVIOUS.get() else { return };
    // SAFETY: as the caller states; sigaction, kill and getpid are async-signal-safe.
    unsafe {
        match previous.sa_sigaction {
            libc::SIG_DFL => {
                // The default action, the end of the process: the disposition restored, the
                // signal sent to the process again (delivered as soon as it is not blocked).
                libc::sigaction(libc::SIGTERM, previous, std::ptr::null_mut());
                libc::kill(libc::getpid(), sig);
            }
            libc::SIG_IGN => {}
            f if previous.sa_flags & libc::SA_SIGINFO != 0 => {
                let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    std::mem::transmute(f);
                handler(sig, info, ctx);
            }
            f => {
                let handler: extern "C" fn(libc::c_int) = std::mem::transmute(f);
                handler(sig);
            }
        }
    }
}

/// Waits up to `timeout` for the SIGTERM handler; true when it rang.
pub fn wait_for_term(pipe: &TermPipe, timeout: Duration) -> bool {
    let mut p = libc::pollfd { fd: pipe.wake, events: libc::POLLIN, revents: 0 };
    // SAFETY: `p` is a valid pollfd for one descriptor this process owns.
    let n = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as libc::c_int) };
    if n == 1 {
        let mut b = [0u8; 64];
        // SAFETY: reads at most the buffer's length into it.
        let _ = unsafe { libc::read(pipe.wake, b.as_mut_ptr().cast(), b.len()) };
        return true;
    }
    false
}

/// The watcher has written what it had to: a SIGTERM that came takes its previous course
/// now (by default, the process ends here).
pub fn finish_term() {
    if PENDING.swap(false, Ordering::SeqCst) {
        // SAFETY: called outside any handler, on the watcher's thread; the previous handler
        // gets no siginfo or context of its own.
        unsafe { previous_course(libc::SIGTERM, std::ptr::null_mut(), std::ptr::null_mut()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_read_back_line_by_line_from_where_the_reader_stopped() {
        let dir = std::env::temp_dir().join(format!("oomscope-job-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = failures_path(&dir, "abc/def");
        assert!(path.file_name().unwrap().to_str().is_some_and(is_failures_file), "{path:?}");
        let start = Cursor::default();
        assert_eq!(read_from(&path, start, 0), (Vec::new(), start), "no file yet");
        let a = FailureLine { rank: 2, host: "h".into(), pid: 7, gpu: 2, dump: "d".into(), unix_ms: 1 };
        tell(&path, &a).unwrap();
        let (lines, at) = read_from(&path, start, 0);
        assert_eq!(lines, vec![a.clone()]);
        assert_eq!(read_from(&path, at, 0), (Vec::new(), at));
        // Stamped before the job started: another run's.
        assert_eq!(read_from(&path, start, 2).0, Vec::new());
        // A half-written line waits for its end; a bad line is skipped.
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"not json\n{\"rank\":").unwrap();
        let (lines, at2) = read_from(&path, at, 0);
        assert!(lines.is_empty());
        f.write_all(b"3,\"host\":\"h\",\"pid\":8,\"gpu\":3,\"dump\":\"e\",\"unix_ms\":2}\n").unwrap();
        let (lines, at3) = read_from(&path, at2, 0);
        assert_eq!(lines.iter().map(|l| l.rank).collect::<Vec<_>>(), vec![3]);
        // A line far longer than any read (half a megabyte, no end yet, then its end) is
        // skipped, and the lines after it are read.
        f.write_all(&vec![b'x'; 512 << 10]).unwrap();
        let mut cursor = at3;
        for _ in 0..4 {
            cursor = read_from(&path, cursor, 0).1;
        }
        assert!(cursor.skipping, "{cursor:?}");
        f.write_all(b"\n").unwrap();
        tell(&path, &FailureLine { rank: 4, ..a.clone() }).unwrap();
        let mut ranks = Vec::new();
        for _ in 0..4 {
            let (lines, c) = read_from(&path, cursor, 0);
            ranks.extend(lines.iter().map(|l| l.rank));
            cursor = c;
        }
        assert_eq!(ranks, vec![4]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failure_file_that_is_a_link_or_a_fifo_is_neither_followed_nor_opened() {
        let dir = std::env::temp_dir().join(format!("oomscope-job-link-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("elsewhere.txt");
        std::fs::write(&target, "mine\n").unwrap();
        let path = failures_path(&dir, "j");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let a = FailureLine { rank: 1, host: "h".into(), pid: 7, gpu: 1, dump: "d".into(), unix_ms: 1 };
        let e = tell(&path, &a).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "mine\n", "nothing appended through the link");
        std::fs::remove_file(&path).unwrap();
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Neither blocks: the FIFO is refused as not a regular file.
        let e = tell(&path, &a).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert_eq!(read_from(&path, Cursor::default(), 0), (Vec::new(), Cursor::default()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
