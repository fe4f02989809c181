//! `oomscope run [OPTIONS] -- CMD ARGS...`: runs a training program with oomscope's
//! allocator in every Python process that imports torch, without a change to the program.
//!
//! How: a private directory on PYTHONPATH holds a `sitecustomize.py` (which chains to any
//! existing one) and `oomscope_torch.py` (`python/`); the environment tells them where
//! `liboomscope.so` is and how to behave (`src/abi/config.rs`). Child processes (DataLoader
//! workers, torchrun ranks) inherit all of it; each writes its own dumps. The program's
//! output passes through untouched and its exit code is ours.

use super::CliError;
use super::args::RunArgs;
use oomscope_core::device::cuda;
use oomscope_tui::model::Update;
use std::ffi::OsString;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::SystemTime;

const SITECUSTOMIZE: &str = include_str!("../../python/sitecustomize.py");
const TORCH_HOOK: &str = include_str!("../../python/oomscope_torch.py");

/// `liboomscope.so`: `$OOMSCOPE_LIB`, or beside the binary (cargo builds both into
/// `target/<profile>/`; `cargo test` leaves it in `deps/`), or in `../lib`.
fn library() -> Result<PathBuf, CliError> {
    if let Some(p) = std::env::var_os("OOMSCOPE_LIB").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() { Ok(p) } else { Err(CliError(format!("OOMSCOPE_LIB={}: no such file", p.display()))) };
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
const SYMBOLS: [&str; 8] = [
    "oomscope_torch_malloc",
    "oomscope_malloc",
    "oomscope_free",
    "oomscope_record_stream",
    "oomscope_scope_push",
    "oomscope_scope_pop",
    "oomscope_scope_clear",
    "oomscope_step",
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
    let device = a.device.trim().to_string();
    if device == "cuda" && !cuda::driver_present() {
        return Err(CliError(
            "no CUDA driver here (libcuda.so cannot be loaded), so there is no GPU to watch; \
             try the simulated device: oomscope run --device sim:16GiB -- ..."
                .into(),
        ));
    }
    // Check the settings now rather than in every child.
    let device_var =
        if device == "cuda" { device.clone() } else { format!("sim:{}", device.trim_start_matches("sim:")) };
    oomscope_core::config::Config::from_vars(|k| match k {
        "OOMSCOPE_DEVICE" => Some(device_var.clone()),
        _ => None,
    })
    .map_err(|e| CliError(e.replace("OOMSCOPE_DEVICE=", "--device ")))?;

    let hook = PrivateDir::new("run")?;
    for (name, text) in [("sitecustomize.py", SITECUSTOMIZE), ("oomscope_torch.py", TORCH_HOOK)] {
        std::fs::write(hook.0.join(name), text).map_err(|e| CliError(format!("{}: {e}", hook.0.display())))?;
    }
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
    cmd.args(args)
        .env("PYTHONPATH", python_path)
        .env("OOMSCOPE_LIB", &lib)
        .env("OOMSCOPE_DEVICE", &device_var)
        .env("OOMSCOPE_DUMP_DIR", &dump_dir);
    if let Some(limit) = a.limit {
        cmd.env("OOMSCOPE_LIMIT", limit.to_string());
    }
    if let Some(f) = a.limit_fraction {
        cmd.env("OOMSCOPE_LIMIT_FRACTION", f.to_string());
    }
    if a.no_ops {
        cmd.env("OOMSCOPE_NO_OPS", "1");
    }
    if let Some(dir) = &live_dir {
        cmd.env("OOMSCOPE_LIVE", "1").env("OOMSCOPE_LIVE_DIR", &dir.0);
    } else if a.live {
        cmd.env("OOMSCOPE_LIVE", "1");
    }
    let log = if a.tui {
        let path = dump_dir.join(format!("oomscope-run-{}.log", std::process::id()));
        let file = std::fs::File::create(&path).map_err(|e| CliError(format!("{}: {e}", path.display())))?;
        let err = file.try_clone().map_err(|e| CliError(format!("{}: {e}", path.display())))?;
        cmd.stdout(Stdio::from(file)).stderr(Stdio::from(err));
        Some(path)
    } else {
        None
    };
    if a.tui {
        oomscope_tui::term::check_terminal().map_err(CliError)?;
    }

    let started = SystemTime::now();
    // Ctrl-C is for the program: it gets it (same process group) and we report after it.
    ignore_interrupts(true);
    let mut child = cmd.spawn().map_err(|e| {
        ignore_interrupts(false);
        CliError(format!("{program}: cannot start it: {e}"))
    })?;
    if let Some(dir) = &live_dir {
        watch(&dir.0, child.id());
        eprintln!("oomscope: the UI is closed; waiting for {program} to finish");
    }
    let status = child.wait().map_err(|e| CliError(format!("{program}: {e}")));
    ignore_interrupts(false);
    let status = status?;

    let dumps = new_dumps(&dump_dir, started);
    if let Some(log) = &log {
        eprintln!("oomscope: the program's output is in {}", log.display());
    }
    match dumps.len() {
        0 => {}
        1 => eprintln!(
            "oomscope: an OOM dump was written: {}\n  look inside: oomscope tui {}",
            dumps[0].display(),
            dumps[0].display()
        ),
        n => {
            eprintln!("oomscope: {n} OOM dumps were written:");
            for d in &dumps {
                eprintln!("  {}", d.display());
            }
            eprintln!("  look inside: oomscope tui {}", dumps[0].display());
        }
    }
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => (128 + sig) as u8,
        _ => 1,
    })
}

fn ignore_interrupts(on: bool) {
    // SAFETY: sets the disposition of SIGINT for this process; no handler code runs.
    unsafe {
        libc::signal(libc::SIGINT, if on { libc::SIG_IGN } else { libc::SIG_DFL });
    }
}

/// OOM dumps written since `since`, oldest first.
fn new_dumps(dir: &Path, since: SystemTime) -> Vec<PathBuf> {
    let mut found: Vec<(SystemTime, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let modified = e.metadata().ok()?.modified().ok()?;
            (name.starts_with("oomscope-")
                && name.contains("-oom")
                && name.ends_with(".dump.json")
                && modified >= since)
                .then(|| (modified, e.path()))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, p)| p).collect()
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
