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
//!   SIGKILL): a handler wakes the watcher, which looks at the failure file once more and
//!   writes the state if a failure is there, then the signal takes its course (the previous
//!   disposition: by default the process ends). The handler waits at most
//!   [`TERM_WAIT`] for the watcher.
//!
//! Threat model (the failure file is in a directory the user chose, which others may be able
//! to write): a line is read as data (JSON, at most [`LINE_CAP`] bytes; a bad line is
//! skipped), it only ever causes this process to write a dump of its own state into the
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
/// How long the SIGTERM handler waits for the watcher to write the state.
pub const TERM_WAIT: Duration = Duration::from_secs(10);
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

/// Appends `line` to the job's failure file (one `write` of one line, so lines of ranks that
/// fail at once do not mix on a local filesystem).
pub fn tell(path: &Path, line: &FailureLine) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut text = serde_json::to_string(line).map_err(std::io::Error::other)?;
    text.push('\n');
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    f.write_all(text.as_bytes())
}

/// Reads the failure file from byte `from`: the whole lines after it and where they end.
pub fn read_from(path: &Path, from: u64) -> (Vec<FailureLine>, u64) {
    let Ok(mut f) = std::fs::File::open(path) else { return (Vec::new(), from) };
    let len = f.metadata().map_or(0, |m| m.len());
    if len <= from || f.seek(SeekFrom::Start(from)).is_err() {
        return (Vec::new(), from.min(len));
    }
    // A file that grew by more than many lines' worth is read in part: what a watcher needs
    // is that something failed, not every line of an adversary's file.
    let mut buf = Vec::new();
    let _ = f.take((LINE_CAP * 64) as u64).read_to_end(&mut buf);
    let Some(end) = buf.iter().rposition(|&b| b == b'\n') else { return (Vec::new(), from) };
    let lines = buf[..end]
        .split(|&b| b == b'\n')
        .filter(|l| l.len() <= LINE_CAP)
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect();
    (lines, from + end as u64 + 1)
}

/// Whether `name` is a job's failure file.
pub fn is_failures_file(name: &str) -> bool {
    name.starts_with(PREFIX) && name.ends_with(".failures")
}

// ---- SIGTERM --------------------------------------------------------------------------

/// The watcher's wake-up pipe (write end) and the handler's answer pipe (read end), and the
/// process that installed the handler; -1 / 0 before.
static WAKE: AtomicI32 = AtomicI32::new(-1);
static ANSWER: AtomicI32 = AtomicI32::new(-1);
static OWNER: AtomicI32 = AtomicI32::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The disposition SIGTERM had before (set once, before the handler is installed).
static PREVIOUS: std::sync::OnceLock<libc::sigaction> = std::sync::OnceLock::new();

/// The two pipes the handler and the watcher talk through: the watcher reads `wake` and
/// writes `answer`.
#[derive(Debug)]
pub struct TermPipes {
    pub wake: i32,
    pub answer: i32,
}

fn pipe() -> Option<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    (r == 0).then_some((fds[0], fds[1]))
}

/// Installs the SIGTERM handler, once per process; the watcher gets its ends of the pipes.
/// None when SIGTERM is ignored (nohup: nothing to do) or a pipe cannot be made.
pub fn install_term_handler() -> Option<TermPipes> {
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
    let (answer_read, answer_write) = pipe()?;
    let _ = PREVIOUS.set(old);
    WAKE.store(wake_write, Ordering::SeqCst);
    ANSWER.store(answer_read, Ordering::SeqCst);
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
    Some(TermPipes { wake: wake_read, answer: answer_write })
}

/// SIGTERM: wakes the watcher (in the process that installed it) and waits until it has
/// written the state or [`TERM_WAIT`] has passed, then gives the signal its previous course.
/// Only async-signal-safe calls: getpid, write, poll, read, sigaction, raise.
extern "C" fn on_term(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: every call below is async-signal-safe; the descriptors were set before the
    // handler was installed and are never closed.
    unsafe {
        if libc::getpid() == OWNER.load(Ordering::SeqCst) {
            let wake = WAKE.load(Ordering::SeqCst);
            let answer = ANSWER.load(Ordering::SeqCst);
            if libc::write(wake, [1u8].as_ptr().cast(), 1) == 1 {
                let mut p = libc::pollfd { fd: answer, events: libc::POLLIN, revents: 0 };
                if libc::poll(&mut p, 1, TERM_WAIT.as_millis() as libc::c_int) == 1 {
                    let mut b = [0u8; 1];
                    let _ = libc::read(answer, b.as_mut_ptr().cast(), 1);
                }
            }
        }
        let Some(previous) = PREVIOUS.get() else { return };
        libc::sigaction(libc::SIGTERM, previous, std::ptr::null_mut());
        match previous.sa_sigaction {
            libc::SIG_DFL => {
                // Blocked while this handler runs: the default action (the end of the
                // process) comes as soon as it returns.
                libc::raise(sig);
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
pub fn wait_for_term(pipes: &TermPipes, timeout: Duration) -> bool {
    let mut p = libc::pollfd { fd: pipes.wake, events: libc::POLLIN, revents: 0 };
    // SAFETY: `p` is a valid pollfd for one descriptor this process owns.
    let n = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as libc::c_int) };
    if n == 1 {
        let mut b = [0u8; 64];
        // SAFETY: reads at most the buffer's length into it.
        let _ = unsafe { libc::read(pipes.wake, b.as_mut_ptr().cast(), b.len()) };
        return true;
    }
    false
}

/// Tells the handler the state is written (or that there was nothing to write).
pub fn answer_term(pipes: &TermPipes) {
    // SAFETY: writes one byte from a valid buffer to a descriptor this process owns.
    let _ = unsafe { libc::write(pipes.answer, [1u8].as_ptr().cast(), 1) };
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
        assert_eq!(read_from(&path, 0), (Vec::new(), 0), "no file yet");
        let a = FailureLine { rank: 2, host: "h".into(), pid: 7, gpu: 2, dump: "d".into(), unix_ms: 1 };
        tell(&path, &a).unwrap();
        let (lines, at) = read_from(&path, 0);
        assert_eq!(lines, vec![a.clone()]);
        assert_eq!(read_from(&path, at), (Vec::new(), at));
        // A half-written line waits for its end; a bad line is skipped.
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"not json\n{\"rank\":").unwrap();
        let (lines, at2) = read_from(&path, at);
        assert!(lines.is_empty());
        f.write_all(b"3,\"host\":\"h\",\"pid\":8,\"gpu\":3,\"dump\":\"e\",\"unix_ms\":2}\n").unwrap();
        let (lines, _) = read_from(&path, at2);
        assert_eq!(lines.iter().map(|l| l.rank).collect::<Vec<_>>(), vec![3]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
