//! One run of the user's command under `oomscope run`, for a probe or a check: its own
//! process group (so that nothing it started outlives it), its output in a log, ended at
//! its timeout, and what its allocator said of it (`result-PID.json`, the tape).
//!
//! Threat model: the command is the user's own, run as they would run it; the directory it
//! writes its result to is private to this `fit` (created 0700, removed after).

use oomscope_base::Problem;
use oomscope_core::env;
use oomscope_format::fit::ProbeResult;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// The process group of the run in progress (0: none), for the signal handler.
static GROUP: AtomicI32 = AtomicI32::new(0);

extern "C" fn end_run(sig: libc::c_int) {
    let g = GROUP.load(Ordering::Relaxed);
    // SAFETY: killpg, signal and raise are async-signal-safe.
    unsafe {
        if g > 0 {
            libc::killpg(g, libc::SIGKILL);
        }
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// A run is in a session of its own (Ctrl-C at the terminal does not reach it): when fit is
/// interrupted or terminated, the run in progress is ended with it.
pub fn end_runs_with_us() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installs a handler that only makes async-signal-safe calls.
        unsafe { libc::signal(sig, end_run as *const () as libc::sighandler_t) };
    }
}

/// Where a run's memory comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// As much as it wants: a probe (a simulated device this large on the CPU; the GPU
    /// without a limit).
    Unlimited,
    /// The device fit answers for, `capacity` bytes for the allocator.
    Device { capacity: u64 },
}

/// How runs are started.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The `oomscope` binary (`run` wraps each run).
    pub bin: PathBuf,
    /// The command, `{batch}` where the batch goes.
    pub command: Vec<String>,
    /// Probes and checks run on the real GPU (else on the CPU, emulated).
    pub on_gpu: bool,
    /// Training steps each run makes before it is ended.
    pub steps: u32,
    pub timeout: Duration,
    /// The card an emulated run allocates as (its kernels' scratch).
    pub arch: oomscope_core::device::Arch,
}

/// The simulated device of a probe on the CPU: larger than any probe needs.
const UNLIMITED_SIM: &str = "sim:64TiB";

/// What one run did.
#[derive(Debug)]
pub struct RunOutcome {
    pub batch: Option<u64>,
    pub result: ProbeResult,
    /// Device 0's tape (PyTorch).
    pub tape: PathBuf,
    /// A TensorFlow program's requests, from its allocator's log.
    pub tf: Option<crate::tf::TfRun>,
    pub seconds: f64,
    /// The run's output (stdout and stderr), the last lines.
    pub output_tail: String,
}

impl Launch {
    pub fn has_batch(&self) -> bool {
        self.command.iter().any(|a| a.contains("{batch}"))
    }

    /// The command at `batch`.
    pub fn command_at(&self, batch: Option<u64>) -> Vec<String> {
        match batch {
            None => self.command.clone(),
            Some(b) => self.command.iter().map(|a| a.replace("{batch}", &b.to_string())).collect(),
        }
    }

    /// Runs the command at `batch` on `target`, in `dir` (created), until it has made
    /// `steps` steps, ended, or timed out.
    pub fn run(&self, batch: Option<u64>, target: &Target, dir: &Path) -> Result<RunOutcome, Problem> {
        std::fs::create_dir_all(dir).map_err(|e| Problem(format!("{}: {e}", dir.display())))?;
        let log_path = dir.join("output.log");
        let log = std::fs::File::create(&log_path).map_err(|e| Problem(format!("{}: {e}", log_path.display())))?;
        let log2 = log.try_clone().map_err(|e| Problem(e.to_string()))?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("run").arg("--dump-dir").arg(dir.join("dumps"));
        match (target, self.on_gpu) {
            (Target::Unlimited, false) => cmd.args(["--device", UNLIMITED_SIM]),
            (Target::Unlimited, true) => cmd.args(["--device", "cuda"]),
            (Target::Device { capacity }, false) => cmd.args(["--device", &format!("sim:{capacity}")]),
            (Target::Device { capacity }, true) => cmd.args(["--device", "cuda", "--limit", &capacity.to_string()]),
        };
        let command = self.command_at(batch);
        cmd.arg("--").args(&command);
        cmd.env(env::FIT_DIR, dir).env(env::FIT_STEPS, self.steps.to_string()).env(env::QUIET, "1");
        cmd.env(env::MAX_DUMPS, "0");
        if !self.on_gpu {
            let (major, minor) = self.arch.cc;
            cmd.env(env::TORCH_EMULATE, "1")
                .env(env::EMULATE_SMS, self.arch.sms.to_string())
                .env(env::EMULATE_CC, format!("{major}.{minor}"));
        }
        self.tensorflow(&mut cmd, target);
        cmd.stdin(Stdio::null()).stdout(Stdio::from(log)).stderr(Stdio::from(log2));
        // SAFETY: between fork and exec only setsid(2), which is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let started = Instant::now();
        let mut child = cmd.spawn().map_err(|e| Problem(format!("{}: cannot start: {e}", self.bin.display())))?;
        let group = child.id() as i32;
        GROUP.store(group, Ordering::Relaxed);
        let status = wait(&mut child, group, self.timeout);
        // Whatever the run left behind (a DataLoader's workers, a launcher's children).
        // SAFETY: killpg on the group this run's setsid made; ESRCH when it is gone.
        unsafe { libc::killpg(group, libc::SIGKILL) };
        GROUP.store(0, Ordering::Relaxed);
        let seconds = started.elapsed().as_secs_f64();
        let said = |what: String| {
            let tail = tail(&log_path, 15);
            Problem(format!("{}:\n  $ {}\n{tail}  (its whole output: {})", what, command.join(" "), log_path.display()))
        };
        let Some(status) = status else {
            return Err(said(format!(
                "{} did not end within {} s{}",
                at(batch),
                self.timeout.as_secs(),
                " (a hang, or a step longer than that: --timeout SECONDS gives it more)"
            )));
        };
        let mut result = results(dir).map_err(|e| said(format!("{}: {}", at(batch), e.0)))?;
        let mut tf = None;
        if result.is_none() {
            // A TensorFlow program: its allocator's log says what it did.
            let log = std::fs::read(&log_path).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
            tf = crate::tf::read(&log, batch.unwrap_or(1));
            result = tf.as_ref().map(|t| ProbeResult {
                pid: 0,
                stopped: t.stopped,
                step: t.steps.max(0),
                ooms: t.ooms,
                failed: Vec::new(),
                devices: Vec::new(),
            });
        }
        let Some(result) = result else {
            return Err(said(format!(
                "{} {} before it allocated anything on the GPU ({}): fit needs a PyTorch program that \
                 trains on `cuda`, or a Keras one (`model.fit`)",
                at(batch),
                ended(status),
                if self.on_gpu { "on the GPU" } else { "emulated on the CPU" }
            )));
        };
        if result.ooms == 0 && !result.stopped {
            return Err(said(format!(
                "{} {} at step {} of the {} fit needs (it counts optimizer steps: a program that trains \
                 for fewer, or never calls optimizer.step(), cannot be probed; --steps N asks for fewer)",
                at(batch),
                ended(status),
                result.step.max(0),
                self.steps
            )));
        }
        let tape = dir.join(result.devices.first().map_or("", |d| d.tape.as_str()));
        let output_tail = tail(&log_path, 12);
        Ok(RunOutcome { batch, result, tape, tf, seconds, output_tail })
    }

    /// What a TensorFlow program needs to be probed, harmless to any other: its BFC
    /// allocator's log and its memory log (each request, each tensor's op, `crate::tf`),
    /// one inter-op thread (the requests
    /// in one order from run to run), and on the CPU TF's BFC allocator for the CPU with the
    /// device's memory as its limit (as much as a probe wants for a probe), without oneDNN
    /// (whose kernels crash TF after an OOM on some CPUs).
    fn tensorflow(&self, cmd: &mut Command, target: &Target) {
        let vmodule = match std::env::var("TF_CPP_VMODULE") {
            Ok(v) if !v.trim().is_empty() => format!("{v},bfc_allocator=3"),
            _ => "bfc_allocator=3".to_string(),
        };
        cmd.env("TF_CPP_VMODULE", vmodule).env("TF_NUM_INTEROP_THREADS", "1");
        if !self.on_gpu {
            let mb = match target {
                Target::Unlimited => 1 << 20,
                Target::Device { capacity } => capacity >> 20,
            };
            cmd.env("TF_CPU_ALLOCATOR_USE_BFC", "true").env("TF_CPU_BFC_MEM_LIMIT_IN_MB", mb.to_string());
            if std::env::var_os("TF_ENABLE_ONEDNN_OPTS").is_none() {
                cmd.env("TF_ENABLE_ONEDNN_OPTS", "0");
            }
        }
    }
}

fn at(batch: Option<u64>) -> String {
    batch.map_or_else(|| "the run".to_string(), |b| format!("the run at batch {b}"))
}

fn ended(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(0), _) => "ended (exit 0)".into(),
        (Some(c), _) => format!("failed (exit {c})"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        _ => "ended".into(),
    }
}

/// Waits for `child` until `timeout`; then ends its group (SIGTERM, then SIGKILL) and
/// returns None.
fn wait(child: &mut std::process::Child, group: i32, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => break,
        }
    }
    // SAFETY: signals to the group this run's setsid made.
    unsafe { libc::killpg(group, libc::SIGTERM) };
    let grace = Instant::now() + Duration::from_secs(3);
    while Instant::now() < grace {
        if let Ok(Some(_)) = child.try_wait() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: as above.
    unsafe { libc::killpg(group, libc::SIGKILL) };
    let _ = child.wait();
    None
}

/// The result of the one process that allocated on a GPU; None when none did.
fn results(dir: &Path) -> Result<Option<ProbeResult>, Problem> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Problem(format!("{}: {e}", dir.display())))?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("result-") && name.ends_with(".json") {
            let text = std::fs::read(entry.path()).map_err(|e| Problem(format!("{name}: {e}")))?;
            let r: ProbeResult = serde_json::from_slice(&text).map_err(|e| Problem(format!("{name}: {e}")))?;
            found.push(r);
        }
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        n => Err(Problem(format!(
            "{n} processes allocated on a GPU; fit learns the step of one process (a job's ranks are \
             fitted one at a time: run one rank's command)"
        ))),
    }
}

/// The last `n` lines of the log, indented.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read(path).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(n);
    lines[from..].iter().map(|l| format!("  | {l}\n")).collect()
}
