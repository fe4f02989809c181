//! `oomscope run [OPTIONS] -- CMD ARGS...`: runs a training program with oomscope's
//! allocator in every Python process that imports torch, and reads what TensorFlow and JAX
//! print at an OOM, without a change to the program.
//!
//! How: a private directory on PYTHONPATH holds a `sitecustomize.py` (which chains to any
//! existing one) and the `oomscope` package (`python/oomscope/`: the torch and TF hooks); the environment
//! tells them where `liboomscope.so` is and how to behave (`oomscope_core::config`). Child
//! processes (DataLoader workers, torchrun ranks) inherit all of it; each writes its own
//! dumps. The program's stdout passes untouched; its stderr passes through oomscope
//! ([`relay`]), which reads TF's and XLA's OOM reports in it ([`frameworks`]). Its exit code
//! is ours.

mod frameworks;
mod relay;

use super::CliError;
use super::args::RunArgs;
use frameworks::Frameworks;
use oomscope_core::device::cuda;
use oomscope_core::env::{self, Naming, RunEnv};
use oomscope_format::feed::{FeedLine, OomCount};
use oomscope_format::{DumpName, Moment};
use oomscope_pipeline::job;
use oomscope_tui::model::Update;
use relay::Relay;
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io::{BufRead, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering as AtomicOrdering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

const SITECUSTOMIZE: &str = include_str!("../../../python/sitecustomize.py");
/// The Python package (`python/oomscope/`), written beside the sitecustomize: the hooks
/// it loads, and the same `import oomscope` API as the installed package's.
const PACKAGE: [(&str, &str); 12] = [
    ("__init__.py", include_str!("../../../python/oomscope/__init__.py")),
    ("__main__.py", include_str!("../../../python/oomscope/__main__.py")),
    ("_abi.py", include_str!("../../../python/oomscope/_abi.py")),
    ("_cli.py", include_str!("../../../python/oomscope/_cli.py")),
    ("_gpu.py", include_str!("../../../python/oomscope/_gpu.py")),
    ("_ipython.py", include_str!("../../../python/oomscope/_ipython.py")),
    ("_log.py", include_str!("../../../python/oomscope/_log.py")),
    ("_paths.py", include_str!("../../../python/oomscope/_paths.py")),
    ("_scratch.py", include_str!("../../../python/oomscope/_scratch.py")),
    ("_tf.py", include_str!("../../../python/oomscope/_tf.py")),
    ("_torch.py", include_str!("../../../python/oomscope/_torch.py")),
    ("_watch.py", include_str!("../../../python/oomscope/_watch.py")),
];

/// `liboomscope.so`: `$OOMSCOPE_LIB`, or beside the binary (cargo builds both into
/// `target/<profile>/`; `cargo test` leaves it in `deps/`), or in `../lib`.
fn library() -> Result<PathBuf, CliError> {
    if let Some(p) = std::env::var_os(env::LIB).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() { Ok(p) } else { Err(CliError(format!("{}={}: no such file", env::LIB, p.display()))) };
    }
    let exe = std::env::current_exe().map_err(|e| CliError(format!("cannot find this program's path: {e}")))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    for candidate in [dir.join("liboomscope.so"), dir.join("deps/liboomscope.so"), dir.join("../lib/liboomscope.so")] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(CliError(format!(
        "liboomscope.so is not beside {} (cargo build builds it with the binary: \
         target/release/liboomscope.so); or set OOMSCOPE_LIB to its path",
        exe.display()
    )))
}

/// The functions the hook calls; a library without them is from an older oomscope.
const SYMBOLS: [&str; 11] = [
    "oomscope_torch_malloc",
    "oomscope_empty_cache",
    "oomscope_set_memory_fraction",
    "oomscope_malloc",
    "oomscope_free",
    "oomscope_record_stream",
    "oomscope_scope_push",
    "oomscope_scope_pop",
    "oomscope_scope_clear",
    "oomscope_step",
    "oomscope_dump_at_exit",
];

/// Refuses a library that lacks the functions this oomscope uses: one left by an older
/// build (`cargo run` rebuilds the binary, not the library; `cargo build` does both).
fn check_library(lib: &Path) -> Result<(), CliError> {
    let c =
        std::ffi::CString::new(lib.as_os_str().as_encoded_bytes()).map_err(|_| CliError("bad library path".into()))?;
    // SAFETY: dlopen/dlsym/dlclose on a path; nothing in the library runs but its
    // initializers, and the handle is closed before returning.
    let missing: Vec<&str> = unsafe {
        let h = libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
        if h.is_null() {
            let e = std::ffi::CStr::from_ptr(libc::dlerror()).to_string_lossy().into_owned();
            return Err(CliError(format!("{}: cannot be loaded: {e}", lib.display())));
        }
        let missing = SYMBOLS
            .iter()
            .filter(|name| {
                let n = std::ffi::CString::new(**name).expect("no NUL");
                libc::dlsym(h, n.as_ptr()).is_null()
            })
            .copied()
            .collect();
        libc::dlclose(h);
        missing
    };
    if !missing.is_empty() {
        return Err(CliError(format!(
            "{} is from another oomscope (it lacks {}): rebuild it with `cargo build --release`, or set OOMSCOPE_LIB",
            lib.display(),
            missing.join(", ")
        )));
    }
    Ok(())
}

/// A directory only this user can read, removed when dropped.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn new(name: &str) -> Result<PrivateDir, CliError> {
        let path = std::env::temp_dir().join(format!("oomscope-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| CliError(format!("{}: cannot create: {e}", path.display())))?;
        Ok(PrivateDir(path))
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn run(a: RunArgs) -> Result<u8, CliError> {
    let lib = library()?;
    check_library(&lib)?;
    let device_var = checked_device(&a)?;

    let hook = hook_dir()?;
    std::fs::create_dir_all(&a.dump_dir).map_err(|e| CliError(format!("{}: {e}", a.dump_dir.display())))?;
    let dump_dir = std::fs::canonicalize(&a.dump_dir).unwrap_or_else(|_| a.dump_dir.clone());
    let live_dir = if a.tui { Some(PrivateDir::new("live")?) } else { None };

    let mut python_path = OsString::from(hook.0.as_os_str());
    if let Some(existing) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
        python_path.push(":");
        python_path.push(existing);
    }
    let (program, args) = a.command.split_first().ok_or_else(|| CliError("give the command to run after --".into()))?;
    let mut cmd = Command::new(program);
    cmd.args(args).env("PYTHONPATH", python_path);
    let started = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    // TF prints its allocator's dump at INFO level: the program runs with every level on,
    // and the relay hides what the user's own level would have (the hook does the same for
    // a level the program sets itself before importing TensorFlow).
    let min_level = Arc::new(AtomicU8::new(
        std::env::var("TF_CPP_MIN_LOG_LEVEL").ok().and_then(|v| v.trim().parse::<u8>().ok()).unwrap_or(0).min(3),
    ));
    let (feed_read, feed_write) = feed_pipe()?;
    let contract = contract(
        &a,
        &lib,
        &device_var,
        &dump_dir,
        live_dir.as_ref(),
        &feed_write,
        min_level.load(AtomicOrdering::Relaxed),
        started,
    );
    cmd.envs(contract.vars());
    let run_id = contract.run;
    let (log, out, pty_master) = outputs(&mut cmd, a.tui, &dump_dir)?;
    if a.tui {
        oomscope_tui::term::check_terminal().map_err(CliError::from)?;
    }

    // The dumps already there: a file's time is the kernel's coarse clock, which may read
    // earlier than ours at the start, so new dumps are told by comparison with these.
    let before = dump_files(&dump_dir);
    // Ctrl-C is for the program: it gets it (same process group) and we report after it.
    // The program starts with SIGINT's default disposition, not our ignoring of it.
    // SAFETY: between fork and exec only signal(2), which is async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    ignore_interrupts(true);
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            ignore_interrupts(false);
            let (code, why) = not_started(program, &e);
            eprintln!("oomscope: error: {}", super::output::safe(&format!("{program}: {why}")));
            return Ok(code);
        }
    };
    // SIGTERM and SIGHUP to us are passed on: the program ends, and we clean up and report.
    forward_terminations(child.id());
    // The program has them now (the pty's other side went with `cmd`).
    drop(feed_write);
    drop(cmd);
    let stderr: Box<dyn Read + Send> = match (pty_master, child.stderr.take()) {
        (Some(master), _) => Box::new(master),
        (None, Some(pipe)) => Box::new(pipe),
        (None, None) => Box::new(std::io::empty()),
    };
    let live = match (&live_dir, a.live) {
        (Some(dir), _) => Some(dir.0.clone()),
        (None, true) => {
            let dir = oomscope_live::default_dir();
            oomscope_live::private_dir(&dir).ok().map(|()| dir)
        }
        (None, false) => None,
    };
    let frameworks = Arc::new(Mutex::new(Frameworks::new(child.id(), &a.command.join(" "), &dump_dir, live)));
    let relayed = relay_stderr(stderr, out, Arc::clone(&min_level), Arc::clone(&frameworks));
    let counts = OomCounts::default();
    let fed = read_feed(feed_read, min_level, Arc::clone(&frameworks), Arc::clone(&counts));
    if let Some(dir) = &live_dir {
        watch(&dir.0, child.id());
        eprintln!("oomscope: the UI is closed; waiting for {program} to finish");
    }
    let status = child.wait().map_err(|e| CliError(format!("{program}: {e}")));
    // Reaped: its pid may be reused now, so nothing is forwarded to it any more, and a
    // SIGTERM to us ends us (`timeout`).
    stop_forwarding();
    ignore_interrupts(false);
    let status = status?;
    // What the program wrote last; processes it left behind may keep its stderr open.
    let _ = relayed.recv_timeout(std::time::Duration::from_secs(3));
    let _ = fed.recv_timeout(std::time::Duration::from_secs(1));
    let (report, reported) = {
        let mut f = frameworks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f.finish();
        (f.report(), f.episodes.dumps.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>())
    };
    if !report.is_empty() {
        eprint!("{report}");
    }

    // The allocator's own dumps (PyTorch) of this run's processes; the framework's were told
    // with their verdict.
    let mine = Claims { run: run_id.clone(), framework: reported.clone() };
    let dumps: Vec<PathBuf> =
        new_dumps(&dump_dir, &before, &mine).into_iter().filter(|d| !reported.contains(d)).collect();
    untold_ooms(&counts);
    if let Some(log) = &log {
        eprintln!("oomscope: the program's output is in {}", log.display());
    }
    let job = said_at_the_end(&a, &dump_dir, &before, &mine, &dumps);
    if a.html {
        pages(&dump_dir, &new_dumps(&dump_dir, &before, &mine), job.as_ref());
    }
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => (128 + sig) as u8,
        _ => 1,
    })
}

/// What the run says when its program has ended: this run's OOM dumps (or its job's
/// summary), the dumps asked for at steps and exit, the steps that got none. The job, read
/// and reported once, when the dumps are a job's ranks'.
fn said_at_the_end(
    a: &RunArgs,
    dump_dir: &Path,
    before: &HashMap<PathBuf, SystemTime>,
    mine: &Claims,
    dumps: &[PathBuf],
) -> Option<OwnJob> {
    let ranks = dumps.iter().any(|d| name_of(d).is_some_and(|n| n.rank.is_some()));
    let job = if ranks { own_job(dump_dir, mine) } else { None };
    match dumps.len() {
        _ if ranks => {
            if let Some(j) = &job {
                job_summary(dump_dir, j);
            }
        }
        0 => {}
        1 => eprintln!(
            "oomscope: an OOM dump was written: {}\n  look inside: oomscope tui {}",
            dumps[0].display(),
            quoted(&dumps[0])
        ),
        n => {
            eprintln!("oomscope: {n} OOM dumps were written:");
            for d in dumps {
                eprintln!("  {}", d.display());
            }
            eprintln!("  look inside: oomscope tui {}", quoted(&dumps[0]));
        }
    }
    // The dumps asked for at steps and at exit: what `oomscope diff` compares.
    let mut asked = dumps_named(dump_dir, before, mine, |n| moment(n).is_some());
    asked.sort_by_key(|p| name_of(p).map(|n| (n.rank, n.pid, n.device.to_string(), moment(&n))));
    if !asked.is_empty() {
        eprintln!(
            "oomscope: {} dump{} written at the steps and exit asked for:",
            asked.len(),
            if asked.len() == 1 { " was" } else { "s were" }
        );
        for d in &asked {
            eprintln!("  {}", d.display());
        }
        if let Some((a, b)) = first_pair(&asked) {
            eprintln!("  what grew between two: oomscope diff {} {}", quoted(a), quoted(b));
        }
    }
    let dumped: Vec<i64> = asked.iter().filter_map(|p| moment(&name_of(p)?)).collect();
    if let Some(line) = steps_without_dumps(&a.dump_at_step, &dumped) {
        eprintln!("{line}");
    }
    job
}

/// The device as the processes are told it (`cuda`, or `sim:SIZE` / `sim:CARD`), checked
/// now rather than in every child, and PyTorch's settings checked as PyTorch would.
fn checked_device(a: &RunArgs) -> Result<String, CliError> {
    let device = a.device.trim().to_string();
    if device == "cuda" && !cuda::driver_present() {
        eprintln!(
            "oomscope: no CUDA driver here, so no GPU to watch directly; TensorFlow's and JAX's out-of-memory \
             reports in the program's output are read all the same (for PyTorch, --device sim:SIZE simulates a GPU)"
        );
    }
    // Check the device now rather than in every child. A bare size or card means the
    // simulated one; errors quote what the user typed, not the `sim:` form passed on.
    let device_var =
        if device == "cuda" { device.clone() } else { format!("sim:{}", device.trim_start_matches("sim:")) };
    if let Some(spec) = device_var.strip_prefix("sim:") {
        oomscope_core::device::parse_device(spec).map_err(|e| {
            CliError(format!(
                "--device {device}: {e}\n  (--device takes `cuda`, the real GPU, or `sim:SIZE` / `sim:CARD`, a simulated one)"
            ))
        })?;
    }
    // PyTorch refuses bad settings at its first allocation; say so before the run starts.
    oomscope_core::config::Config::from_vars(|k| match k {
        "PYTORCH_ALLOC_CONF" | "PYTORCH_CUDA_ALLOC_CONF" => std::env::var(k).ok(),
        _ => None,
    })
    .map_err(|e| CliError(format!("{e} (PyTorch would refuse it too)")))?;
    Ok(device_var)
}

/// The private directory of the Python hook the program's interpreter finds first
/// (`sitecustomize.py` and the `oomscope` package).
fn hook_dir() -> Result<PrivateDir, CliError> {
    let hook = PrivateDir::new("run")?;
    let write = |path: PathBuf, text: &str| {
        std::fs::write(&path, text).map_err(|e| CliError(format!("{}: {e}", path.display())))
    };
    write(hook.0.join("sitecustomize.py"), SITECUSTOMIZE)?;
    let package = hook.0.join("oomscope");
    std::fs::create_dir(&package).map_err(|e| CliError(format!("{}: {e}", package.display())))?;
    for (name, text) in PACKAGE {
        write(package.join(name), text)?;
    }
    Ok(hook)
}

/// What this run tells the processes it starts ([`RunEnv`]): its flags, the library, where
/// dumps go, which run it is and when it started, its pipe.
#[allow(clippy::too_many_arguments)]
fn contract(
    a: &RunArgs,
    lib: &Path,
    device_var: &str,
    dump_dir: &Path,
    live_dir: Option<&PrivateDir>,
    feed_write: &RawFdHolder,
    min_level: u8,
    started: u128,
) -> RunEnv {
    RunEnv {
        lib: lib.to_path_buf(),
        bin: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("oomscope")),
        device: device_var.to_string(),
        dump_dir: dump_dir.to_path_buf(),
        allocator: match a.allocator {
            super::args::RunAllocator::Caching => "caching",
            super::args::RunAllocator::Bfc => "bfc",
        },
        limit: a.limit,
        limit_fraction: a.limit_fraction,
        naming: match (a.aten_ops, a.no_ops) {
            (true, _) => Naming::Aten,
            (false, true) => Naming::Modules,
            (false, false) => Naming::Ops,
        },
        dump_at_steps: a.dump_at_step.clone(),
        dump_at_exit: a.dump_at_exit,
        live: live_dir.is_some() || a.live,
        live_dir: live_dir.map(|d| d.0.clone()),
        // What names the job of the processes this run starts when their launcher names
        // none (a launcher's own id, the same on every node, comes first).
        run_id: std::env::var_os(env::RUN_ID).is_none().then(|| format!("run-{}-{started}", std::process::id())),
        // This run, whatever names the job: its processes' dumps say it, and only those are
        // claimed (runs may share a dump directory). When it started: a failure of the job
        // stamped before is another run's.
        run: format!(
            "{}-{started}-{}",
            std::process::id(),
            std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), started) & 0xffff_ffff
        ),
        run_started_ms: started,
        // Which pipe it is: a process whose launcher closed the descriptor (and maybe opened
        // a file under its number) must not write there.
        feed: Some((feed_write.as_raw(), feed_write.inode())),
        // The hook reads the user's level here: a program that leaves TF_CPP_MIN_LOG_LEVEL at
        // our 0 did not ask for another one.
        tf_min_log_level: Some(min_level).filter(|l| *l > 0),
    }
}

/// Where the program's output goes: with the UI, stdout into a log beside the dumps (its
/// path) and stderr relayed there; without, stderr relayed to ours, through a terminal of
/// its own when ours is one (the pty's master end).
#[allow(clippy::type_complexity)]
fn outputs(
    cmd: &mut Command,
    tui: bool,
    dump_dir: &Path,
) -> Result<(Option<PathBuf>, Box<dyn Write + Send>, Option<std::fs::File>), CliError> {
    let log = if tui {
        let path = dump_dir.join(format!("oomscope-run-{}.log", std::process::id()));
        let file = std::fs::File::create(&path).map_err(|e| CliError(format!("{}: {e}", path.display())))?;
        cmd.stdout(Stdio::from(file));
        Some(path)
    } else {
        None
    };
    // The program's stderr comes to us: through a terminal of its own when ours is one (the
    // program sees a terminal, as it would without oomscope), else through a pipe.
    let out: Box<dyn Write + Send> = match &log {
        Some(path) => Box::new(
            std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .map_err(|e| CliError(format!("{}: {e}", path.display())))?,
        ),
        None => Box::new(std::io::stderr()),
    };
    let pty = if log.is_none() && std::io::IsTerminal::is_terminal(&std::io::stderr()) { open_pty() } else { None };
    let mut pty_master = None;
    match pty {
        Some((master, slave)) => {
            cmd.stderr(Stdio::from(slave));
            pty_master = Some(std::fs::File::from(master));
        }
        None => {
            cmd.stderr(Stdio::piped());
        }
    }
    Ok((log, out, pty_master))
}

/// Why `program` did not start, and the exit code a shell gives for it, so that scripts
/// that wrap `oomscope run` see what they would see without it: 127 when there is no such
/// command, 126 when it is there but cannot be run.
fn not_started(program: &str, e: &std::io::Error) -> (u8, String) {
    let path = Path::new(program);
    match e.kind() {
        std::io::ErrorKind::NotFound if !program.contains('/') => {
            (127, "command not found (no such program in any directory of PATH)".into())
        }
        // execve says ENOENT both for a missing file and for a script whose #! interpreter
        // is missing.
        std::io::ErrorKind::NotFound if path.is_file() => {
            (127, "cannot run it: the interpreter its #! line names is not found".into())
        }
        std::io::ErrorKind::NotFound => (127, "no such file".into()),
        std::io::ErrorKind::PermissionDenied if path.is_dir() => (126, "is a directory, not a program".into()),
        std::io::ErrorKind::PermissionDenied => {
            (126, "found but not executable (permission denied; chmod +x it, or run it with its interpreter)".into())
        }
        _ => (126, format!("cannot start it: {e}")),
    }
}

/// A pipe for the hook's memory samples: our end closes on exec, the program's does not.
fn feed_pipe() -> Result<(std::fs::File, RawFdHolder), CliError> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(CliError(format!("cannot make a pipe: {}", std::io::Error::last_os_error())));
    }
    // SAFETY: pipe2 returned two open descriptors that nothing else owns.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // The program inherits the writing end.
    // SAFETY: clears FD_CLOEXEC on a descriptor we own.
    unsafe { libc::fcntl(fds[1], libc::F_SETFD, 0) };
    Ok((std::fs::File::from(read), RawFdHolder(write)))
}

/// A descriptor the program inherits, closed here once it has started.
struct RawFdHolder(OwnedFd);

impl RawFdHolder {
    fn as_raw(&self) -> i32 {
        std::os::fd::AsRawFd::as_raw_fd(&self.0)
    }

    /// The pipe's inode number.
    fn inode(&self) -> u64 {
        // SAFETY: a zeroed `stat` is a valid value of this plain C struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes into `st` for a descriptor we own.
        if unsafe { libc::fstat(self.as_raw(), &mut st) } != 0 {
            return 0;
        }
        st.st_ino
    }
}

/// A terminal for the program's stderr, the size of ours: (our side, its side).
fn open_pty() -> Option<(OwnedFd, OwnedFd)> {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: winsize is plain data; TIOCGWINSZ fills it or fails.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: reads the size of our stderr's terminal into `size`.
    let sized = unsafe { libc::ioctl(2, libc::TIOCGWINSZ, &mut size) } == 0;
    let size_ptr = if sized { &size as *const libc::winsize } else { std::ptr::null() };
    // SAFETY: openpty writes two descriptors; the name and termios pointers may be null.
    let ok = unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), size_ptr) } == 0;
    if !ok {
        return None;
    }
    // SAFETY: openpty returned two open descriptors that nothing else owns.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    // SAFETY: sets FD_CLOEXEC on our side, which the program must not inherit.
    unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&master), libc::F_SETFD, libc::FD_CLOEXEC) };
    Some((master, slave))
}

/// Passes the program's stderr on and gives its lines to `frameworks`; the receiver hears
/// when the stream ended.
fn relay_stderr(
    mut from: Box<dyn Read + Send>,
    mut to: Box<dyn Write + Send>,
    min_level: Arc<AtomicU8>,
    frameworks: Arc<Mutex<Frameworks>>,
) -> mpsc::Receiver<()> {
    let (done, ended) = mpsc::channel();
    let _ = std::thread::Builder::new().name("oomscope-relay".into()).spawn(move || {
        let mut relay = Relay::new(min_level.load(AtomicOrdering::Relaxed));
        let mut buf = vec![0u8; 64 << 10];
        let (mut out, mut lines) = (Vec::new(), Vec::new());
        loop {
            // A terminal's other side ends with EIO once the program and its children are gone.
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => {
                    relay.finish(&mut out, &mut lines);
                    0
                }
                Ok(n) => {
                    relay.min_level = min_level.load(AtomicOrdering::Relaxed);
                    relay.feed(&buf[..n], &mut out, &mut lines);
                    n
                }
            };
            if !out.is_empty() {
                let _ = to.write_all(&out);
                let _ = to.flush();
                out.clear();
            }
            if !lines.is_empty() {
                let mut f = frameworks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                for l in lines.drain(..) {
                    f.line(&l);
                }
            }
            if n == 0 {
                break;
            }
        }
        let _ = done.send(());
    });
    ended
}

/// The hook's messages: the user's own TF log level, and memory samples for the live view.
/// Each process's latest count of OOMs, by pid.
type OomCounts = Arc<Mutex<BTreeMap<u32, OomCount>>>;

/// Reads the feed until every writer closed it; the receiver hears when it is done.
fn read_feed(
    from: std::fs::File,
    min_level: Arc<AtomicU8>,
    frameworks: Arc<Mutex<Frameworks>>,
    counts: OomCounts,
) -> std::sync::mpsc::Receiver<()> {
    let (done, finished) = std::sync::mpsc::channel();
    let _ = std::thread::Builder::new().name("oomscope-feed".into()).spawn(move || {
        for line in std::io::BufReader::new(from).lines().map_while(Result::ok) {
            match FeedLine::parse(&line) {
                Some(FeedLine::LogLevel { min_log_level }) => {
                    min_level.store(min_log_level.min(3), AtomicOrdering::Relaxed)
                }
                Some(FeedLine::Sample(s)) => {
                    frameworks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).sample(&s)
                }
                Some(FeedLine::Variables(v)) => {
                    frameworks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).variables(v)
                }
                Some(FeedLine::Ooms(c)) => {
                    counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(c.pid, c);
                }
                None => {}
            }
        }
        let _ = done.send(());
    });
    finished
}

/// The OOMs of processes that ended without saying how many they had (`os._exit`, a kill):
/// their stderr's last count may be days old, so the run says it.
fn untold_ooms(counts: &OomCounts) {
    let counts = counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for c in counts.values().filter(|c| !c.said && c.ooms > c.dumps) {
        eprintln!(
            "oomscope: process {} ran out of memory {} times in all, {} dumped (it ended without saying so)",
            c.pid, c.ooms, c.dumps
        );
    }
}

/// The program's pid, for the forwarding handler (0: none).
static CHILD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn pass_on(sig: libc::c_int) {
    let pid = CHILD.load(AtomicOrdering::Relaxed);
    if pid > 0 {
        // SAFETY: kill(2) is async-signal-safe.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// The program has been reaped: SIGTERM and SIGHUP take their default course again.
fn stop_forwarding() {
    CHILD.store(0, AtomicOrdering::Relaxed);
    for sig in [libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: restores the default disposition; no handler code runs.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
}

fn forward_terminations(pid: u32) {
    CHILD.store(i32::try_from(pid).unwrap_or(0), AtomicOrdering::Relaxed);
    for sig in [libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only reads an atomic and calls kill(2).
        unsafe {
            libc::signal(sig, pass_on as extern "C" fn(libc::c_int) as libc::sighandler_t);
        }
    }
}

fn ignore_interrupts(on: bool) {
    // SAFETY: sets the disposition of SIGINT for this process; no handler code runs.
    unsafe {
        libc::signal(libc::SIGINT, if on { libc::SIG_IGN } else { libc::SIG_DFL });
    }
}

/// The library's dumps (`oomscope-*.dump.json`) in `dir`, and when each was written: regular
/// files only (what the listing says, without following a link).
fn dump_files(dir: &Path) -> HashMap<PathBuf, SystemTime> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let meta = e.metadata().ok().filter(std::fs::Metadata::is_file)?;
            let modified = meta.modified().ok()?;
            DumpName::matches(&name).then(|| (e.path(), modified))
        })
        .collect()
}

/// What this run claims in a directory others may share: the dumps of the processes it
/// started (their `process.run`), and the ones it wrote itself from a framework's log.
struct Claims {
    run: String,
    framework: Vec<PathBuf>,
}

impl Claims {
    /// The process this run started, by what its dump says of it.
    fn started(&self, p: &oomscope_format::ProcessInfo) -> bool {
        p.run.as_deref() == Some(self.run.as_str())
    }

    fn owns(&self, path: &Path) -> bool {
        self.framework.iter().any(|p| p == path)
            || oomscope_format::read_process(path).is_ok_and(|p| p.is_some_and(|p| self.started(&p)))
    }
}

/// This run's OOM dumps written since `before` was taken, oldest first.
fn new_dumps(dir: &Path, before: &HashMap<PathBuf, SystemTime>, mine: &Claims) -> Vec<PathBuf> {
    dumps_named(dir, before, mine, |n| n.moment.is_oom())
}

/// This run's dumps whose names `pick` takes, written or rewritten since `before` was taken,
/// oldest first.
fn dumps_named(
    dir: &Path,
    before: &HashMap<PathBuf, SystemTime>,
    mine: &Claims,
    pick: impl Fn(&DumpName) -> bool,
) -> Vec<PathBuf> {
    let mut found: Vec<(SystemTime, PathBuf)> = dump_files(dir)
        .into_iter()
        .filter(|(path, modified)| before.get(path) != Some(modified) && name_of(path).is_some_and(|n| pick(&n)))
        .filter(|(path, _)| mine.owns(path))
        .map(|(path, modified)| (modified, path))
        .collect();
    found.sort();
    found.into_iter().map(|(_, p)| p).collect()
}

/// The job of this run's ranks: among the dumps in `dir`, those of the job this run's own
/// dumps name (the other nodes' ranks of that job included).
/// A job of this run's ranks, read once, with its report (which replays the failing rank's
/// fix): what the summary and the job's page both show.
struct OwnJob {
    job: job::Job,
    report: oomscope_format::job::JobReport,
}

fn own_job(dir: &Path, mine: &Claims) -> Option<OwnJob> {
    // The jobs this run's ranks name, from each rank dump's `process` alone.
    let jobs: Vec<String> = dump_files(dir)
        .into_keys()
        .filter(|p| name_of(p).is_some_and(|n| n.rank.is_some()))
        .filter_map(|p| oomscope_format::read_process(&p).ok().flatten())
        .filter(|p| mine.started(p))
        .filter_map(|p| p.job)
        .collect();
    let job_of = |d: &oomscope_format::Dump| d.process.as_ref().and_then(|p| p.job.clone());
    let mut job = job::load_where(dir, |d| job_of(d).is_some_and(|j| jobs.contains(&j))).ok()?;
    job.other_jobs.clear();
    let report = job::report(&job);
    Some(OwnJob { job, report })
}

/// A job's ranks ran out of memory: the first to fail, the job's verdict, and where every
/// rank's state is.
fn job_summary(dir: &Path, own: &OwnJob) {
    let OwnJob { job, report } = own;
    super::output::warn_all(&job.skipped_lines());
    let n = job.ranks.len();
    match (&report.first_failure, &report.verdict) {
        (Some(f), Some(v)) => eprintln!(
            "oomscope: rank {} ran out of memory first; the state of {n} rank{} is in {}\n  verdict for the job: {}\n  \
             the job at the failure: oomscope report {}",
            f.rank,
            if n == 1 { "" } else { "s" },
            dir.display(),
            v.headline,
            quoted(dir)
        ),
        _ => eprintln!("oomscope: {n} ranks' dumps are in {}: oomscope report {}", dir.display(), quoted(dir)),
    }
}

/// `--html`: a page beside each dump this run wrote, and one of the job when ranks wrote them.
fn pages(dir: &Path, dumps: &[PathBuf], job: Option<&OwnJob>) {
    let mut written = Vec::new();
    for path in dumps {
        let Ok(mut d) = oomscope_format::read_found(path) else { continue };
        oomscope_pipeline::diagnose(&mut d);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("dump.json");
        let page = path.with_file_name(format!("{}.html", name.trim_end_matches(".json").trim_end_matches(".dump")));
        match super::report::write_page(&page, &oomscope_report::html::page(&d)) {
            Ok(()) => written.push(page),
            Err(e) => eprintln!("oomscope: no page for {}: {}", path.display(), e.0),
        }
    }
    if let Some(OwnJob { job: j, report }) = job {
        let failing = job::failing(j, report);
        let id: String =
            report.job.as_deref().unwrap_or("job").chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
        let page = dir.join(format!("oomscope-job-{id}.html"));
        match super::report::write_page(&page, &oomscope_report::html::job_page(report, failing.as_ref())) {
            Ok(()) => written.insert(0, page),
            Err(e) => eprintln!("oomscope: no page for the job: {}", e.0),
        }
    }
    if !written.is_empty() {
        eprintln!("oomscope: {} to share, open in a browser:", if written.len() == 1 { "a page" } else { "pages" });
        for p in &written {
            eprintln!("  {}", p.display());
        }
    }
}

/// The name of one of oomscope's dump files, read back.
fn name_of(path: &Path) -> Option<DumpName> {
    path.file_name()?.to_str()?.parse().ok()
}

/// For a dump asked for at a step or at exit (`oomscope-PID-gpuN-step00020.dump.json`,
/// `oomscope-PID-gpuN-exit.dump.json`): its order among its allocator's (the steps, then
/// exit).
fn moment(name: &DumpName) -> Option<i64> {
    match name.moment {
        Moment::Step(s) => Some(s),
        Moment::Exit => Some(i64::MAX),
        _ => None,
    }
}

/// The steps asked for (`--dump-at-step`) that no process wrote a dump at (`dumped`: the
/// [`moment`] orders of the dumps written), and why that happens; None when every one got one.
fn steps_without_dumps(asked: &[i64], dumped: &[i64]) -> Option<String> {
    let mut missing: Vec<i64> = asked.iter().copied().filter(|s| !dumped.contains(s)).collect();
    missing.sort_unstable();
    missing.dedup();
    let steps = match missing.as_slice() {
        [] => return None,
        [one] => format!("step {one}"),
        [init @ .., last] => {
            format!("steps {} and {last}", init.iter().map(i64::to_string).collect::<Vec<_>>().join(", "))
        }
    };
    Some(format!(
        "oomscope: no dump at {steps} (--dump-at-step): the program never marked {} while it had memory on the GPU\n  \
         steps are marked by the program: the PyTorch hook marks step 0 at the first forward (or optimizer step) \
         and step N after the N-th optimizer step;\n  a program driving the C ABI calls oomscope_step(N); \
         TensorFlow and JAX programs mark none",
        if missing.len() == 1 { "it" } else { "them" }
    ))
}

/// A path as a shell reads it back, for a command to type.
fn quoted(p: &Path) -> String {
    oomscope_base::shell::quoted(&p.display().to_string())
}

/// The first and last dump of the first process's device with two or more among `dumps`
/// (asked for at steps and exit, in [`moment`] order): a pair worth comparing.
fn first_pair(dumps: &[PathBuf]) -> Option<(&PathBuf, &PathBuf)> {
    dumps.iter().find_map(|first| {
        let o = name_of(first)?;
        let last = dumps.iter().rev().find(|d| name_of(d).is_some_and(|n| n.same_owner(&o)))?;
        (last != first).then_some((first, last))
    })
}

/// The terminal UI on the run's live directory until the user quits.
fn watch(dir: &Path, pid: u32) {
    let (tx, rx) = mpsc::channel::<Update>();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut app = oomscope_tui::App::new(Vec::new());
    app.waiting = Some(format!(
        "process {pid} is starting; its devices appear here when it first allocates on the GPU \
         (its output goes to the log file named when the UI closes)"
    ));
    super::tui::watch_in_background(dir.to_path_buf(), tx, std::sync::Arc::clone(&stop));
    let _ = oomscope_tui::run(app, rx);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
}
