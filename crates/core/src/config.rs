//! The C ABI's settings, read once from the environment (`oomscope run` sets them; anyone
//! loading `liboomscope.so` may).
//!
//! | variable | meaning |
//! |---|---|
//! | `OOMSCOPE_DEVICE` | `cuda` (default) or `sim:SIZE` / `sim:CARD` (`sim:16GiB`, `sim:a100-80`): a simulated GPU per device number |
//! | `OOMSCOPE_LIMIT` | the allocator's limit per device (`12GiB`); default: the device's free memory at start |
//! | `OOMSCOPE_LIMIT_FRACTION` | the limit as a fraction of the device's total memory (`0.8`) |
//! | `OOMSCOPE_DUMP_DIR` | where dumps are written (default `oomscope-dumps` in the working directory) |
//! | `OOMSCOPE_DUMP_AT_STEPS` | steps at whose mark a dump is written, as `10,20` (a program marks steps with `oomscope_step`; the PyTorch hook step 0 at the first forward, step N after the N-th optimizer step) |
//! | `OOMSCOPE_DUMP_AT_EXIT` | `1`: a dump is written when the process exits normally (or when it calls `oomscope_dump_at_exit`, as the PyTorch hook does from `atexit`), if it allocated on a GPU |
//! | `OOMSCOPE_LIVE` | `1`: publish the live feed (`docs/live-protocol.md`) in `OOMSCOPE_LIVE_DIR` or the default directory |
//! | `OOMSCOPE_QUIET` | `1`: at OOM, one line on stderr instead of the whole report |
//! | `OOMSCOPE_MAX_DUMPS` | OOMs that get a dump, per process (default 5); later ones are counted, a line every 10 s |
//! | `OOMSCOPE_DUMP_DIR_LIMIT` | no dump is written (at an OOM, a step or exit) while the dump directory's oomscope dumps take this much (default `1GiB`) |
//! | `OOMSCOPE_HISTORY` | events kept per device for dumps (default 10 000) |
//! | `OOMSCOPE_ALLOCATOR` | `caching` (default: PyTorch's caching allocator) or `bfc` (TensorFlow's BFC) |
//! | `PYTORCH_ALLOC_CONF`, else `PYTORCH_CUDA_ALLOC_CONF` | the caching allocator's settings, as PyTorch reads them |
//! | `OOMSCOPE_EMULATE_SMS`, `OOMSCOPE_EMULATE_CC` | with `OOMSCOPE_TORCH_EMULATE`: the card emulated, its multiprocessors and compute capability (`132`, `9.0`: an H100's, the default), which size CUDA kernels' scratch (a reduction's staging buffers, cuBLAS's workspace); `oomscope fit` sets them from `--device` |
//! | `OOMSCOPE_FIT_DIR`, `OOMSCOPE_FIT_STEPS` | set by `oomscope fit` for its probe runs: every request is kept and written to the directory (`tape-PID-gpuN.jsonl`, `result-PID.json`) when step `OOMSCOPE_FIT_STEPS` is marked, and the process then exits 0; or at exit |
//! | `OOMSCOPE_JOB_DUMPS` | `0`: in a job, a rank does not write its state when another rank runs out of memory (default: it does) |
//!
//! A process's place in a job comes from its launcher's variables ([`process_from_vars`]).

use crate::caching::Settings;
use crate::device::parse_device;
use crate::env;
use oomscope_base::size::parse_size;
use oomscope_format::ProcessInfo;
use std::path::PathBuf;

/// A setting that cannot be used: the variable, the value it has, and what it accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub var: String,
    pub value: String,
    pub problem: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}: {}", self.var, self.value, self.problem)
    }
}

impl std::error::Error for ConfigError {}

fn bad(var: &str, value: &str, problem: impl std::fmt::Display) -> ConfigError {
    ConfigError { var: var.to_string(), value: value.to_string(), problem: problem.to_string() }
}

/// Where regions come from.
#[derive(Clone, Debug, PartialEq)]
pub enum DeviceChoice {
    Cuda,
    /// A simulated GPU of `total` bytes (`model` names the card it stands for).
    Sim {
        total: u64,
        model: String,
    },
}

/// Which allocator serves the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocatorChoice {
    /// PyTorch's caching allocator: the one a PyTorch program runs without oomscope.
    Caching,
    /// TensorFlow's BFC allocator.
    Bfc,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub device: DeviceChoice,
    pub allocator: AllocatorChoice,
    /// The caching allocator's settings (`PYTORCH_ALLOC_CONF` / `PYTORCH_CUDA_ALLOC_CONF`).
    pub torch_settings: Settings,
    pub limit: Option<u64>,
    pub fraction: Option<f64>,
    pub dump_dir: PathBuf,
    pub live: bool,
    pub quiet: bool,
    pub history: usize,
    /// OOMs per process that get a dump (a retry loop must not fill the disk).
    pub max_dumps: u64,
    /// The dump directory's size past which no dump is written.
    pub dump_dir_limit: u64,
    /// Steps whose mark writes a dump, ascending, each once.
    pub dump_at_steps: Vec<i64>,
    /// A dump is written when the process exits.
    pub dump_at_exit: bool,
    /// This process and its place in a job, from the launcher's environment.
    pub process: ProcessInfo,
    /// When another rank of the job runs out of memory, this one writes its state
    /// (`OOMSCOPE_JOB_DUMPS`, default on in a job).
    pub job_dumps: bool,
    /// Where `oomscope run` reads what its processes tell it (`OOMSCOPE_FEED_FD`), and the
    /// pipe's inode (`OOMSCOPE_FEED_INODE`): written only while the descriptor is that pipe.
    pub feed_fd: Option<(i32, u64)>,
    /// When the job started (ms since the epoch): the start of the `oomscope run` that
    /// started this process (`OOMSCOPE_RUN_STARTED_MS`), else the process's own. A failure
    /// line stamped earlier is another run's.
    pub job_started_ms: Option<u64>,
    /// `oomscope fit`'s probe: every request on a tape, written with the result to this
    /// directory at the stop step or at exit.
    pub fit_dir: Option<PathBuf>,
    /// The step whose mark ends the probe (exit 0).
    pub fit_steps: Option<i64>,
}

impl Config {
    /// Reads the settings through `var` (the environment, or a map in tests). An error names
    /// the variable and what it accepts.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let get = |name: &str| var(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let device = match get(env::DEVICE).as_deref() {
            None | Some("cuda") => DeviceChoice::Cuda,
            Some(s) => match s.strip_prefix("sim:") {
                Some(spec) => {
                    let d = parse_device(spec).map_err(|e| bad(env::DEVICE, s, e))?;
                    DeviceChoice::Sim { total: d.total, model: d.model }
                }
                None => {
                    return Err(bad(env::DEVICE, s, "expected `cuda` or `sim:SIZE` (sim:16GiB, sim:a100-80)"));
                }
            },
        };
        let limit = match get(env::LIMIT) {
            None => None,
            Some(s) => Some(
                parse_size(&s)
                    .map_err(|e| oomscope_base::Problem(e.to_string()))
                    .and_then(oomscope_base::size::device_bytes)
                    .map_err(|e| bad(env::LIMIT, &s, e))?,
            ),
        };
        let fraction = match get(env::LIMIT_FRACTION) {
            None => None,
            Some(s) => match s.parse::<f64>() {
                Ok(f) if f > 0.0 && f <= 1.0 => Some(f),
                _ => return Err(bad(env::LIMIT_FRACTION, &s, "expected a fraction in (0, 1], such as 0.8")),
            },
        };
        let flag = |name: &str| -> Result<bool, ConfigError> {
            match get(name).as_deref() {
                None | Some("0") | Some("false") | Some("no") => Ok(false),
                Some("1") | Some("true") | Some("yes") => Ok(true),
                Some(v) => Err(bad(name, v, "expected 1 or 0")),
            }
        };
        let allocator = match get(env::ALLOCATOR).as_deref() {
            None | Some("caching") => AllocatorChoice::Caching,
            Some("bfc") => AllocatorChoice::Bfc,
            Some(v) => return Err(bad(env::ALLOCATOR, v, "expected `caching` or `bfc`")),
        };
        // PyTorch 2.9 reads PYTORCH_ALLOC_CONF first; earlier versions only the CUDA one.
        let torch_settings =
            match ["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"].iter().find_map(|k| Some((*k, get(k)?))) {
                None => Settings::default(),
                Some((name, text)) => Settings::parse(&text).map_err(|e| bad(name, &text, e.0))?,
            };
        let history = match get(env::HISTORY) {
            None => 10_000,
            Some(s) => s.parse().map_err(|_| bad(env::HISTORY, &s, "expected a number of events"))?,
        };
        let max_dumps = match get(env::MAX_DUMPS) {
            None => 5,
            Some(s) => s.parse().map_err(|_| bad(env::MAX_DUMPS, &s, "expected a number of dumps (0: none)"))?,
        };
        let dump_dir_limit = match get(env::DUMP_DIR_LIMIT) {
            None => 1 << 30,
            Some(s) => parse_size(&s).map_err(|e| bad(env::DUMP_DIR_LIMIT, &s, e))?,
        };
        let dump_at_steps = match get(env::DUMP_AT_STEPS) {
            None => Vec::new(),
            Some(s) => parse_steps(&s).map_err(|e| bad(env::DUMP_AT_STEPS, &s, e))?,
        };
        let process = process_from_vars(&get);
        Ok(Config {
            job_dumps: process.in_job() && !matches!(get(env::JOB_DUMPS).as_deref(), Some("0" | "false" | "no")),
            process,
            dump_at_steps,
            dump_at_exit: flag(env::DUMP_AT_EXIT)?,
            max_dumps,
            dump_dir_limit,
            device,
            allocator,
            torch_settings,
            limit,
            fraction,
            dump_dir: get(env::DUMP_DIR).map_or_else(|| PathBuf::from("oomscope-dumps"), PathBuf::from),
            live: flag(env::LIVE)?,
            quiet: flag(env::QUIET)?,
            history,
            // Set by `oomscope run` only: one that is not a number is not ours, and ignored.
            feed_fd: get(env::FEED_FD)
                .and_then(|f| f.parse().ok())
                .filter(|&f: &i32| f > 2)
                .zip(get(env::FEED_INODE).and_then(|i| i.parse().ok())),
            job_started_ms: get(env::RUN_STARTED_MS).and_then(|t| t.parse().ok()).or_else(process_started_ms),
            fit_dir: get(env::FIT_DIR).map(PathBuf::from),
            fit_steps: match get(env::FIT_STEPS) {
                None => None,
                Some(s) => Some(
                    s.parse()
                        .ok()
                        .filter(|&n: &i64| n > 0)
                        .ok_or_else(|| bad(env::FIT_STEPS, &s, "expected a number of steps"))?,
                ),
            },
        })
    }

    /// The limit for a device of `total` bytes with `free` free now: the explicit limit, or
    /// the fraction of the total, or what is free (never the whole card behind other
    /// processes' backs, as Keras does).
    pub fn limit_for(&self, total: u64, free: u64) -> u64 {
        let limit = match (self.limit, self.fraction) {
            (Some(l), _) => l,
            (None, Some(f)) => (total as f64 * f) as u64,
            (None, None) => free,
        };
        // TF's rounding of the limit: down to the allocation unit.
        limit & !(crate::bfc::MIN_ALLOCATION_SIZE - 1)
    }
}

/// This process and its place in a job, read from what launchers set: torchrun and
/// `torch.distributed.launch` (also under accelerate and DeepSpeed: `RANK`, `LOCAL_RANK`,
/// `WORLD_SIZE`, `LOCAL_WORLD_SIZE`, `GROUP_RANK`, `TORCHELASTIC_RUN_ID`), SLURM
/// (`SLURM_PROCID`, `SLURM_LOCALID`, `SLURM_NTASKS`, `SLURM_NODEID`, `SLURM_JOB_ID`) and
/// Open MPI (`OMPI_COMM_WORLD_*`). The job is named so that every node of one job names it
/// the same: torchrun's run id (unless it is its default, `none`), SLURM's job and step, the
/// rendezvous address, else what `oomscope run` set for the processes it started
/// (`OOMSCOPE_RUN_ID`).
pub fn process_from_vars(get: &dyn Fn(&str) -> Option<String>) -> ProcessInfo {
    let num = |names: &[&str]| names.iter().find_map(|n| get(n)?.parse::<u32>().ok());
    let torch = get("RANK").is_some() && get("WORLD_SIZE").is_some();
    let slurm = !torch && get("SLURM_PROCID").is_some() && get("SLURM_NTASKS").is_some();
    let mpi = !torch && !slurm && get("OMPI_COMM_WORLD_RANK").is_some();
    let (launcher, rank, local_rank, world_size, local_world_size, node_rank) = if torch {
        let launcher = if get("TORCHELASTIC_RUN_ID").is_some() { "torchrun" } else { "torch.distributed" };
        (
            Some(launcher),
            num(&["RANK"]),
            num(&["LOCAL_RANK"]),
            num(&["WORLD_SIZE"]),
            num(&["LOCAL_WORLD_SIZE"]),
            num(&["GROUP_RANK", "NODE_RANK"]),
        )
    } else if slurm {
        (
            Some("slurm"),
            num(&["SLURM_PROCID"]),
            num(&["SLURM_LOCALID"]),
            num(&["SLURM_NTASKS"]),
            num(&["SLURM_NTASKS_PER_NODE"]),
            num(&["SLURM_NODEID"]),
        )
    } else if mpi {
        (
            Some("mpi"),
            num(&["OMPI_COMM_WORLD_RANK"]),
            num(&["OMPI_COMM_WORLD_LOCAL_RANK"]),
            num(&["OMPI_COMM_WORLD_SIZE"]),
            num(&["OMPI_COMM_WORLD_LOCAL_SIZE"]),
            num(&["OMPI_COMM_WORLD_NODE_RANK"]),
        )
    } else {
        (None, None, None, None, None, None)
    };
    let rendezvous = match (get("MASTER_ADDR"), get("MASTER_PORT")) {
        (Some(a), Some(p)) => Some(format!("{a}:{p}")),
        _ => None,
    };
    let job = get("TORCHELASTIC_RUN_ID")
        .filter(|id| id != "none")
        .or_else(|| get("SLURM_JOB_ID").map(|j| get("SLURM_STEP_ID").map_or(j.clone(), |s| format!("{j}.{s}"))))
        .or_else(|| get("OMPI_MCA_ess_base_jobid"))
        .or(rendezvous)
        .or_else(|| get(env::RUN_ID))
        .filter(|_| rank.is_some());
    ProcessInfo {
        pid: std::process::id(),
        host: host_name(),
        rank,
        local_rank,
        world_size,
        local_world_size,
        node_rank,
        job,
        launcher: launcher.filter(|_| rank.is_some()).map(str::to_string),
        dumped_unix_ms: None,
        run: get(env::RUN),
    }
}

/// When this process started, ms since the epoch: its start in clock ticks after boot
/// (`/proc/self/stat`, field 22) plus the boot's time (`/proc/stat`, `btime`). None where
/// there is no `/proc`.
pub fn process_started_ms() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command's name (field 2) is in parentheses and may hold spaces: count after it.
    let after = &stat[stat.rfind(')')? + 1..];
    let ticks: u64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let boot: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok().filter(|&h| h > 0)?;
    // btime is the boot's whole second: this reads up to a second early, which can only
    // take a line of that second for this job's.
    Some(boot * 1000 + ticks * 1000 / hz)
}

/// This machine's name (`gethostname`), empty when it has none.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Steps as `oomscope run --dump-at-step` and `OOMSCOPE_DUMP_AT_STEPS` take them: whole
/// numbers from 0, separated by commas; returned ascending, each once.
pub fn parse_steps(text: &str) -> Result<Vec<i64>, oomscope_base::Problem> {
    let mut steps = Vec::new();
    for part in text.split(',').map(str::trim) {
        match part.parse::<i64>() {
            Ok(n) if n >= 0 => steps.push(n),
            _ if part.is_empty() => return Err("an empty step in the list; expected steps such as 10,20".into()),
            _ => {
                return Err(oomscope_base::problem!(
                    "{part:?} is not a step; expected whole numbers from 0, such as 10,20"
                ));
            }
        }
    }
    steps.sort_unstable();
    steps.dedup();
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(vars: &[(&str, &str)]) -> ProcessInfo {
        let get = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string());
        process_from_vars(&get)
    }

    #[test]
    fn a_process_reads_its_place_in_the_job_from_its_launcher() {
        let p = process(&[
            ("RANK", "5"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_WORLD_SIZE", "4"),
            ("GROUP_RANK", "1"),
            ("TORCHELASTIC_RUN_ID", "none"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29500"),
        ]);
        assert_eq!(
            (p.rank, p.local_rank, p.world_size, p.local_world_size, p.node_rank),
            (Some(5), Some(1), Some(8), Some(4), Some(1))
        );
        assert_eq!(p.job.as_deref(), Some("10.0.0.1:29500"), "torchrun's default run id names no job");
        assert_eq!(p.launcher.as_deref(), Some("torchrun"));
        let p = process(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("TORCHELASTIC_RUN_ID", "abc")]);
        assert_eq!(p.job.as_deref(), Some("abc"));
        let p = process(&[
            ("SLURM_PROCID", "3"),
            ("SLURM_LOCALID", "3"),
            ("SLURM_NTASKS", "16"),
            ("SLURM_NODEID", "0"),
            ("SLURM_JOB_ID", "991"),
            ("SLURM_STEP_ID", "2"),
        ]);
        assert_eq!(
            (p.rank, p.world_size, p.job.as_deref(), p.launcher.as_deref()),
            (Some(3), Some(16), Some("991.2"), Some("slurm"))
        );
        let p = process(&[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2"), ("OOMSCOPE_RUN_ID", "r")]);
        assert_eq!(
            (p.rank, p.world_size, p.launcher.as_deref(), p.job.as_deref()),
            (Some(1), Some(2), Some("mpi"), Some("r"))
        );
        // Alone: no rank, no job, whatever else is set.
        let p = process(&[("SLURM_JOB_ID", "991"), ("MASTER_ADDR", "x"), ("MASTER_PORT", "1")]);
        assert_eq!((p.rank, p.job.as_deref(), p.launcher.as_deref()), (None, None, None));
        assert!(!p.in_job());
        assert_eq!(p.pid, std::process::id());
    }
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> Result<Config, String> {
        let m: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_vars(|k| m.get(k).cloned()).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_values() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.device, DeviceChoice::Cuda);
        assert_eq!(c.allocator, AllocatorChoice::Caching, "PyTorch's own allocator by default");
        assert_eq!(c.torch_settings, Settings::default());
        assert_eq!(c.dump_dir, PathBuf::from("oomscope-dumps"));
        assert_eq!(c.limit_for(80 << 30, 70 << 30), 70 << 30, "default: what is free");
        let c = cfg(&[("OOMSCOPE_DEVICE", "sim:16GiB"), ("OOMSCOPE_LIMIT", "1.5GiB"), ("OOMSCOPE_LIVE", "1")]).unwrap();
        assert_eq!(c.device, DeviceChoice::Sim { total: 16 << 30, model: "simulated GPU".into() });
        assert_eq!(c.limit_for(16 << 30, 16 << 30), 3 << 29);
        assert!(c.live);
        let c = cfg(&[("OOMSCOPE_DEVICE", "sim:a100-80"), ("OOMSCOPE_LIMIT_FRACTION", "0.5")]).unwrap();
        assert_eq!(c.limit_for(80 << 30, 1 << 30), 40 << 30);
        assert!(c.dump_at_steps.is_empty() && !c.dump_at_exit, "no dumps but at OOM by default");
        let c = cfg(&[("OOMSCOPE_DUMP_AT_STEPS", "20, 5,20"), ("OOMSCOPE_DUMP_AT_EXIT", "1")]).unwrap();
        assert_eq!(c.dump_at_steps, vec![5, 20], "ascending, each once");
        assert!(c.dump_at_exit);
    }

    #[test]
    fn pytorch_settings_are_read_as_pytorch_reads_them() {
        let c = cfg(&[("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"), ("OOMSCOPE_ALLOCATOR", "bfc")]).unwrap();
        assert!(c.torch_settings.expandable_segments);
        assert_eq!(c.allocator, AllocatorChoice::Bfc);
        let c = cfg(&[
            ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
            ("PYTORCH_ALLOC_CONF", "max_split_size_mb:128"),
        ])
        .unwrap();
        assert!(!c.torch_settings.expandable_segments, "PYTORCH_ALLOC_CONF comes first");
        assert_eq!(c.torch_settings.max_split_size, Some(128 << 20));
    }

    #[test]
    fn errors_name_the_variable() {
        for (k, v, want) in [
            ("OOMSCOPE_DEVICE", "tpu", "expected `cuda` or `sim:SIZE`"),
            ("OOMSCOPE_DEVICE", "sim:lots", "OOMSCOPE_DEVICE=sim:lots"),
            ("OOMSCOPE_LIMIT", "12GB", "OOMSCOPE_LIMIT=12GB"),
            ("OOMSCOPE_LIMIT_FRACTION", "80", "fraction in (0, 1]"),
            ("OOMSCOPE_LIVE", "maybe", "OOMSCOPE_LIVE=maybe"),
            ("OOMSCOPE_ALLOCATOR", "tlsf", "expected `caching` or `bfc`"),
            ("OOMSCOPE_DUMP_AT_STEPS", "10,x", "\"x\" is not a step"),
            ("OOMSCOPE_DUMP_AT_STEPS", "-1", "whole numbers from 0"),
            ("OOMSCOPE_DUMP_AT_STEPS", "1,,2", "an empty step"),
            ("OOMSCOPE_DUMP_AT_EXIT", "sure", "OOMSCOPE_DUMP_AT_EXIT=sure"),
            ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:10", "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:10"),
        ] {
            let e = cfg(&[(k, v)]).unwrap_err();
            assert!(e.contains(want), "{k}={v}: {e}");
        }
    }
}
