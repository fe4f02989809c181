//! The environment contract between `oomscope run` (or the Python package's `install()`)
//! and the processes it starts: every variable spelled once, here, written by [`RunEnv`] and
//! read by [`crate::config::Config::from_vars`]. The Python package spells the ones it
//! sets itself (`python/oomscope/__init__.py`); a test checks each is one of [`ALL`].

use std::ffi::OsString;
use std::path::PathBuf;

pub const DEVICE: &str = "OOMSCOPE_DEVICE";
pub const LIMIT: &str = "OOMSCOPE_LIMIT";
pub const LIMIT_FRACTION: &str = "OOMSCOPE_LIMIT_FRACTION";
pub const DUMP_DIR: &str = "OOMSCOPE_DUMP_DIR";
pub const DUMP_AT_STEPS: &str = "OOMSCOPE_DUMP_AT_STEPS";
pub const DUMP_AT_EXIT: &str = "OOMSCOPE_DUMP_AT_EXIT";
pub const LIVE: &str = "OOMSCOPE_LIVE";
pub const LIVE_DIR: &str = "OOMSCOPE_LIVE_DIR";
pub const QUIET: &str = "OOMSCOPE_QUIET";
pub const MAX_DUMPS: &str = "OOMSCOPE_MAX_DUMPS";
pub const DUMP_DIR_LIMIT: &str = "OOMSCOPE_DUMP_DIR_LIMIT";
pub const HISTORY: &str = "OOMSCOPE_HISTORY";
pub const ALLOCATOR: &str = "OOMSCOPE_ALLOCATOR";
pub const JOB_DUMPS: &str = "OOMSCOPE_JOB_DUMPS";
/// `aten`: allocations named by the ATen op as well as the module.
pub const OPS: &str = "OOMSCOPE_OPS";
/// `1`: allocations named by module only.
pub const NO_OPS: &str = "OOMSCOPE_NO_OPS";
/// The library the Python hook loads, and the command it runs.
pub const LIB: &str = "OOMSCOPE_LIB";
pub const BIN: &str = "OOMSCOPE_BIN";
/// What names the job when its launcher names none (set by a run, kept when already set).
pub const RUN_ID: &str = "OOMSCOPE_RUN_ID";
/// The `oomscope run` itself, one per run: its processes' dumps say it.
pub const RUN: &str = "OOMSCOPE_RUN";
/// When that run started (ms since the epoch): the job's start.
pub const RUN_STARTED_MS: &str = "OOMSCOPE_RUN_STARTED_MS";
/// The run's pipe, and its inode: what the processes tell the run.
pub const FEED_FD: &str = "OOMSCOPE_FEED_FD";
pub const FEED_INODE: &str = "OOMSCOPE_FEED_INODE";
/// TensorFlow's log level as the user set it, while the program runs with every level on.
pub const TF_MIN_LOG_LEVEL: &str = "OOMSCOPE_TF_MIN_LOG_LEVEL";
/// `1`: PyTorch's CPU tensors recorded as if on a GPU (a machine without one).
pub const TORCH_EMULATE: &str = "OOMSCOPE_TORCH_EMULATE";
/// `1`: the error messages the Python hooks go on after are printed.
pub const DEBUG: &str = "OOMSCOPE_DEBUG";
/// The version of PyTorch the hook found, for the dump.
pub const TORCH_VERSION: &str = "OOMSCOPE_TORCH_VERSION";
/// `1`: a stand-in `torch` module (oomscope's own tests).
pub const TORCH_STANDIN: &str = "OOMSCOPE_TORCH_STANDIN";
/// No time-stamp counter: the clock reads the system's (`crate::clock`).
pub const NO_TSC: &str = "OOMSCOPE_NO_TSC";
/// `oomscope fit`'s probe: the directory its tape and result go to.
pub const FIT_DIR: &str = "OOMSCOPE_FIT_DIR";
/// `oomscope fit`'s probe: the process ends (exit 0) once this step is marked.
pub const FIT_STEPS: &str = "OOMSCOPE_FIT_STEPS";
/// Emulation: the card's multiprocessors and compute capability (`9.0`), which decide the
/// scratch memory of CUDA's kernels (an H100's without them).
pub const EMULATE_SMS: &str = "OOMSCOPE_EMULATE_SMS";
pub const EMULATE_CC: &str = "OOMSCOPE_EMULATE_CC";

/// Every variable of the contract.
pub const ALL: [&str; 33] = [
    FIT_DIR,
    FIT_STEPS,
    EMULATE_SMS,
    EMULATE_CC,
    DEVICE,
    LIMIT,
    LIMIT_FRACTION,
    DUMP_DIR,
    DUMP_AT_STEPS,
    DUMP_AT_EXIT,
    LIVE,
    LIVE_DIR,
    QUIET,
    MAX_DUMPS,
    DUMP_DIR_LIMIT,
    HISTORY,
    ALLOCATOR,
    JOB_DUMPS,
    OPS,
    NO_OPS,
    LIB,
    BIN,
    RUN_ID,
    RUN,
    RUN_STARTED_MS,
    FEED_FD,
    FEED_INODE,
    TF_MIN_LOG_LEVEL,
    TORCH_EMULATE,
    DEBUG,
    TORCH_VERSION,
    TORCH_STANDIN,
    NO_TSC,
];

/// How allocations are named.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Naming {
    /// By module and op (the default).
    #[default]
    Ops,
    /// The ATen op as well.
    Aten,
    /// By module only.
    Modules,
}

/// What a run tells the processes it starts, typed; [`RunEnv::vars`] writes it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunEnv {
    pub lib: PathBuf,
    pub bin: PathBuf,
    /// `cuda`, or `sim:SIZE` / `sim:CARD`.
    pub device: String,
    pub dump_dir: PathBuf,
    /// `caching` or `bfc`.
    pub allocator: &'static str,
    pub limit: Option<u64>,
    pub limit_fraction: Option<f64>,
    pub naming: Naming,
    pub dump_at_steps: Vec<i64>,
    pub dump_at_exit: bool,
    /// Publish the live feed (in `live_dir`, else the default directory).
    pub live: bool,
    pub live_dir: Option<PathBuf>,
    /// Names the job when its launcher names none; None: one set already is kept.
    pub run_id: Option<String>,
    pub run: String,
    pub run_started_ms: u128,
    /// The run's pipe and its inode.
    pub feed: Option<(i32, u64)>,
    /// The user's TensorFlow log level, when the program runs with every level on instead.
    pub tf_min_log_level: Option<u8>,
}

impl RunEnv {
    /// The variables, in the order a reader meets them.
    pub fn vars(&self) -> Vec<(&'static str, OsString)> {
        let mut v: Vec<(&'static str, OsString)> = vec![
            (LIB, self.lib.clone().into()),
            (BIN, self.bin.clone().into()),
            (DEVICE, self.device.clone().into()),
            (DUMP_DIR, self.dump_dir.clone().into()),
        ];
        let mut put = |k: &'static str, value: String| v.push((k, value.into()));
        if let Some(id) = &self.run_id {
            put(RUN_ID, id.clone());
        }
        put(RUN, self.run.clone());
        put(RUN_STARTED_MS, self.run_started_ms.to_string());
        if let Some(limit) = self.limit {
            put(LIMIT, limit.to_string());
        }
        if let Some(f) = self.limit_fraction {
            put(LIMIT_FRACTION, f.to_string());
        }
        match self.naming {
            Naming::Ops => {}
            Naming::Aten => put(OPS, "aten".into()),
            Naming::Modules => put(NO_OPS, "1".into()),
        }
        if !self.dump_at_steps.is_empty() {
            put(DUMP_AT_STEPS, self.dump_at_steps.iter().map(i64::to_string).collect::<Vec<_>>().join(","));
        }
        if self.dump_at_exit {
            put(DUMP_AT_EXIT, "1".into());
        }
        put(ALLOCATOR, self.allocator.to_string());
        if self.live {
            put(LIVE, "1".into());
        }
        if let Some(level) = self.tf_min_log_level {
            // The program runs with every level on (TF prints its allocator's dump at INFO);
            // the user's own level is passed on for the relay and the hook.
            put("TF_CPP_MIN_LOG_LEVEL", "0".into());
            put(TF_MIN_LOG_LEVEL, level.to_string());
        }
        if let Some((fd, inode)) = self.feed {
            put(FEED_FD, fd.to_string());
            put(FEED_INODE, inode.to_string());
        }
        if let Some(dir) = &self.live_dir {
            v.push((LIVE_DIR, dir.clone().into()));
        }
        v
    }
}
