//! The state behind the C ABI: one allocator per device, created on first use from the
//! environment's settings, and what happens at an OOM (the dump written, the report on
//! stderr, the message the caller's exception carries).

use crate::job;
use oomscope_base::size::human;
use oomscope_core::bfc::{Bfc, Options};
use oomscope_core::caching::{Caching, CachingOptions};
use oomscope_core::config::{AllocatorChoice, Config, DeviceChoice};
use oomscope_core::device::cuda::StreamEvent;
use oomscope_core::device::{CudaDevice, Device, SimDevice};
use oomscope_core::{Allocator, Engine, Oom, Recording, Request};
use oomscope_format::{self as dump, DeviceTag, DumpName, Moment, Source, SourceKind};
use oomscope_live::{self as live, Publisher, Sampler};
use oomscope_report as render;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// No step marked yet.
const NO_STEP: i64 = i64::MIN;
/// Warnings of one kind printed before the rest are only counted.
const WARNINGS_SHOWN: u64 = 5;
/// OOMs past the dump budget are summed up in a line at most this often.
const UNDUMPED_LINE_EVERY: Duration = Duration::from_secs(10);

/// Why a call failed: what the caller is told.
#[derive(Debug)]
pub enum Failure {
    /// An allocation failed; the message starts `CUDA out of memory. Tried to allocate`.
    Oom(String),
    /// Bad input or an environment problem.
    Error(String),
}

impl Failure {
    pub fn message(&self) -> &str {
        match self {
            Failure::Oom(m) | Failure::Error(m) => m,
        }
    }
}

/// Work a freed block may still be part of: the streams that used it (PyTorch's
/// `record_stream`), as events to wait for. The BFC allocator has no streams: its free is
/// held back here; the caching allocator keeps the block pending free itself, and is told
/// when the events have passed.
enum Pending {
    Cuda(StreamEvent),
    /// The simulated device has no streams: done at the next synchronize.
    Sim,
}

impl Pending {
    fn done(&self) -> bool {
        match self {
            Pending::Cuda(e) => e.done(),
            Pending::Sim => false,
        }
    }
}

#[derive(Default)]
struct Streams {
    /// Pointers used on other streams than their own: the streams.
    recorded: HashMap<u64, Vec<usize>>,
    /// Frees waiting for those streams.
    deferred: Vec<(u64, Vec<Pending>)>,
}

/// No stream seen yet.
const NO_STREAM: usize = usize::MAX;

/// One device's allocator and what goes with it.
pub struct Slot {
    pub device: i32,
    pub allocator: Arc<Allocator>,
    sim: bool,
    /// PyTorch's caching allocator (else BFC).
    caching: bool,
    /// The stream of the first allocation; `multi_stream` once another appears.
    first_stream: AtomicUsize,
    multi_stream: AtomicBool,
    /// Sizes of `streams.recorded` and `streams.deferred`, read without the lock so that
    /// the common case (one stream, no `record_stream`) takes no lock besides the
    /// allocator's.
    recorded: AtomicUsize,
    held: AtomicUsize,
    streams: Mutex<Streams>,
    /// The live feed, running until the process exits ([`Runtime::finish`]).
    sampler: Mutex<Option<Sampler>>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").field("device", &self.device).field("sim", &self.sim).finish_non_exhaustive()
    }
}

/// Devices a process may use (CUDA numbers them from 0).
pub const MAX_DEVICES: usize = 64;

pub struct Runtime {
    config: Config,
    /// One slot per device number, set once: looked up without a lock on every call.
    slots: Vec<OnceLock<Slot>>,
    /// Held while a device is opened, so that it is opened once.
    opening: Mutex<()>,
    step: AtomicI64,
    ooms: AtomicU64,
    /// The first OOMs' ops and sizes, for `oomscope fit`'s result.
    failed: Mutex<Vec<oomscope_format::fit::FailedRequest>>,
    /// OOMs in convolutions held back, the last of each thread: PyTorch's cuDNN code catches
    /// them and tries another algorithm. The thread's next allocation that succeeds shows it
    /// went on ([`Runtime::went_on`]); an error that reaches the program shows it did not
    /// ([`Runtime::say_held_report`]); one still held at exit was its thread's last
    /// allocation. `holding` is the fast check of the allocation path; `caught` counts those
    /// the program went on past.
    held_oom: Mutex<Vec<HeldOom>>,
    holding: AtomicBool,
    caught: AtomicU64,
    /// The line for the first held OOM was said.
    said_holding: AtomicBool,
    /// OOMs reported (each dumped while `OOMSCOPE_MAX_DUMPS` allows).
    reported: AtomicU64,
    /// OOMs past the dump budget since the last line said so, and when that line was.
    undumped: AtomicU64,
    undumped_line: Mutex<Option<Instant>>,
    /// OOM dumps written.
    dumps_written: AtomicU64,
    /// Steps of `OOMSCOPE_DUMP_AT_STEPS` already dumped (a step marked twice is dumped once).
    steps_dumped: Mutex<Vec<i64>>,
    /// Steps of `OOMSCOPE_DUMP_AT_STEPS` marked while no device was open yet, not dumped
    /// since: said at exit when the process did allocate later.
    steps_missed: Mutex<Vec<i64>>,
    /// The dump at exit is written (by [`Runtime::dump_at_exit`]; the destructor then
    /// writes none).
    exit_dumped: AtomicBool,
    warnings: Mutex<HashMap<&'static str, u64>>,
    command: String,
    /// The job's watcher was started ([`Runtime::watch_job`]).
    watching: AtomicBool,
    /// Dumps written because another rank of the job failed.
    job_dumps: AtomicU64,
    /// When this process last ran out of memory (ms since the epoch; 0: never).
    last_oom_ms: AtomicU64,
    /// The process is ending: the watcher stops.
    ending: AtomicBool,
    /// `oomscope fit`'s result is written ([`Runtime::write_fit`]).
    fit_written: AtomicBool,
    /// What each device had free when it was opened.
    fit_free: Mutex<Vec<(i32, u64)>>,
    /// Memory fractions set for devices not opened yet: applied when they are, so that
    /// setting one opens no device (and adds no empty allocator to every dump).
    fractions: Mutex<HashMap<i32, f64>>,
    /// The process the runtime started in: a forked child inherits a copy of its state.
    pid: u32,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("config", &self.config).finish_non_exhaustive()
    }
}

static RUNTIME: OnceLock<Result<Runtime, oomscope_core::config::ConfigError>> = OnceLock::new();

/// Runs [`Runtime::finish`] when the process exits (or the library is unloaded): a program
/// that never says goodbye itself must not look like one that died. Registered as the
/// library's destructor, so it runs at `exit()` and at `dlclose`, never after the code is
/// gone.
#[used]
#[unsafe(link_section = ".fini_array")]
static FINISH: extern "C" fn() = finish_at_exit;

extern "C" fn finish_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(Ok(rt)) = RUNTIME.get() {
            rt.finish();
        }
    });
}

/// The process's runtime, set up from the environment on first use. A bad setting is an
/// error on every call (and said once on stderr), never a crash.
pub fn runtime() -> Result<&'static Runtime, Failure> {
    let r = RUNTIME.get_or_init(|| {
        let r = Config::from_vars(|k| std::env::var(k).ok()).map(Runtime::new);
        if let Err(e) = &r {
            eprintln!("oomscope: error: {e}; every allocation will fail until it is fixed");
        }
        r
    });
    r.as_ref().map_err(|e| Failure::Error(e.to_string()))
}

/// The runtime when it was set up already (something called in before) with good settings.
pub fn started() -> Option<&'static Runtime> {
    RUNTIME.get()?.as_ref().ok()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn command_line() -> String {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

impl Runtime {
    pub fn new(config: Config) -> Runtime {
        Runtime {
            config,
            slots: (0..MAX_DEVICES).map(|_| OnceLock::new()).collect(),
            opening: Mutex::new(()),
            step: AtomicI64::new(NO_STEP),
            ooms: AtomicU64::new(0),
            failed: Mutex::new(Vec::new()),
            held_oom: Mutex::new(Vec::new()),
            holding: AtomicBool::new(false),
            caught: AtomicU64::new(0),
            said_holding: AtomicBool::new(false),
            reported: AtomicU64::new(0),
            undumped: AtomicU64::new(0),
            undumped_line: Mutex::new(None),
            dumps_written: AtomicU64::new(0),
            steps_dumped: Mutex::new(Vec::new()),
            steps_missed: Mutex::new(Vec::new()),
            fractions: Mutex::new(HashMap::new()),
            pid: std::process::id(),
            exit_dumped: AtomicBool::new(false),
            warnings: Mutex::new(HashMap::new()),
            command: command_line(),
            watching: AtomicBool::new(false),
            job_dumps: AtomicU64::new(0),
            last_oom_ms: AtomicU64::new(0),
            ending: AtomicBool::new(false),
            fit_written: AtomicBool::new(false),
            fit_free: Mutex::new(Vec::new()),
        }
    }

    /// In a job, once this process has a device open: a thread that writes this rank's state
    /// when another rank of the job runs out of memory, and a SIGTERM handler that gives it
    /// the time to ([`crate::job`]).
    pub fn watch_job(&'static self) {
        if !self.config.job_dumps || self.watching.load(Ordering::Relaxed) || self.all().is_empty() {
            return;
        }
        if self.watching.swap(true, Ordering::SeqCst) {
            return;
        }
        let Some(job) = self.config.process.job.clone() else { return };
        let path = job::failures_path(&self.config.dump_dir, &job);
        // Failures stamped before the job started are another run's; those after it are
        // read whenever they came, also before this process first allocated.
        let since = self.config.job_started_ms.unwrap_or(0);
        let Some(pipe) = job::install_term_handler() else {
            self.warn("job", "SIGTERM is ignored or its handler could not be installed: the watcher only polls");
            return self.spawn_watcher(path, since, None);
        };
        job::set_watching(true);
        self.spawn_watcher(path, since, Some(pipe));
    }

    fn spawn_watcher(&'static self, path: PathBuf, since: u64, pipe: Option<job::TermPipe>) {
        let spawned = job::with_term_blocked(|| {
            std::thread::Builder::new().name("oomscope-job".into()).spawn(move || {
                self.watch(&path, since, pipe.as_ref());
                job::set_watching(false);
            })
        });
        if let Err(e) = spawned {
            job::set_watching(false);
            self.warn("job", &format!("this rank will not write its state when another fails: {e}"));
        }
    }

    /// The watcher's loop: a new failure of another rank writes this rank's state; a
    /// SIGTERM takes its course once that is done.
    fn watch(&self, path: &std::path::Path, since: u64, pipe: Option<&job::TermPipe>) {
        let me = &self.config.process;
        let mut cursor = job::Cursor::default();
        loop {
            let term = match pipe {
                Some(p) => job::wait_for_term(p, job::POLL),
                None => {
                    std::thread::sleep(job::POLL);
                    false
                }
            };
            // Everything there is, when a SIGTERM came (a large file is read a chunk at a time).
            loop {
                let (lines, next) = job::read_from(path, cursor, since);
                let moved = next != cursor;
                cursor = next;
                if let Some(first) = lines.iter().find(|l| !(l.pid == me.pid && l.host == me.host)) {
                    self.dump_for_job(first);
                }
                if !(term && moved) {
                    break;
                }
            }
            if term {
                job::finish_term();
            }
            if self.ending.load(Ordering::Relaxed) {
                return;
            }
        }
    }

    /// Another rank failed: this rank's state at that moment, on every device it uses.
    fn dump_for_job(&self, failed: &job::FailureLine) {
        // A rank that has just run out of memory itself has its OOM dump for this moment.
        let last_oom = self.last_oom_ms.load(Ordering::Relaxed);
        if last_oom > 0 && now_ms().saturating_sub(last_oom) < 5_000 {
            return;
        }
        let n = self.job_dumps.fetch_add(1, Ordering::Relaxed) + 1;
        if n > self.config.max_dumps {
            return;
        }
        self.dump_moment(
            Moment::Job(n),
            &format!(
                "when rank {} ran out of memory (host {}, GPU {})",
                failed.rank,
                if failed.host.is_empty() { "?" } else { &failed.host },
                failed.gpu
            ),
        );
    }

    /// Prints a warning, the first few of each kind; later ones are counted.
    pub fn warn(&self, kind: &'static str, message: &str) {
        let n = {
            let mut w = lock(&self.warnings);
            let n = w.entry(kind).or_insert(0);
            *n += 1;
            *n
        };
        if n <= WARNINGS_SHOWN {
            let more = if n == WARNINGS_SHOWN { " (further warnings of this kind are not shown)" } else { "" };
            let _ = writeln!(std::io::stderr().lock(), "oomscope: warning: {message}{more}");
        }
    }

    /// The allocator of `device`, created on first use.
    pub fn slot(&self, device: i32) -> Result<&Slot, Failure> {
        let Some(cell) = usize::try_from(device).ok().and_then(|i| self.slots.get(i)) else {
            return Err(Failure::Error(format!(
                "device {device} is not a device number oomscope handles (0 to {})",
                MAX_DEVICES - 1
            )));
        };
        if let Some(s) = cell.get() {
            return Ok(s);
        }
        let _opening = lock(&self.opening);
        if let Some(s) = cell.get() {
            return Ok(s);
        }
        let slot = self.open(device)?;
        Ok(cell.get_or_init(|| slot))
    }

    /// An existing slot (no device is opened).
    pub fn existing(&self, device: i32) -> Option<&Slot> {
        self.slots.get(usize::try_from(device).ok()?)?.get()
    }

    /// At the process's exit: each live feed sends its last state and says goodbye, and its
    /// socket is removed; the dump at exit is written when asked (`OOMSCOPE_DUMP_AT_EXIT`)
    /// unless the program wrote it already ([`Runtime::dump_at_exit`]); steps asked for that
    /// were marked before anything was allocated are said; OOMs that were counted, not
    /// dumped, are summed up.
    pub fn finish(&self) {
        if std::process::id() != self.pid {
            // A forked child (a DataLoader worker) holds a copy of the parent's allocators:
            // their state, feeds and dumps are the parent's to end.
            return;
        }
        self.ending.store(true, Ordering::Relaxed);
        self.write_fit(false);
        for slot in self.all() {
            let sampler = lock(&slot.sampler).take();
            drop(sampler);
        }
        self.dump_at_exit();
        if !self.all().is_empty() {
            let missed = std::mem::take(&mut *lock(&self.steps_missed));
            for step in missed {
                self.warn(
                    "dump-at",
                    &format!("no dump at step {step}: it was marked before anything was allocated on a GPU"),
                );
            }
        }
        let ooms = self.ooms.load(Ordering::Relaxed);
        // An OOM still held was its thread's last allocation: the program may have ended
        // there (a program without Python's hook, a libtorch one): dumped, and said so.
        let last = std::mem::take(&mut *lock(&self.held_oom));
        let caught = self.caught.load(Ordering::Relaxed);
        if caught > 0 && !self.config.quiet {
            let _ = writeln!(
                std::io::stderr().lock(),
                "oomscope: the program went on past {caught} OOM(s) in convolutions: PyTorch's cuDNN took another \
                 algorithm each time (not failures: not dumped)"
            );
        }
        for h in last {
            let written = self.write_dump(&h.path, &h.dump);
            if written.is_ok() {
                self.dumps_written.fetch_add(1, Ordering::Relaxed);
            }
            if !self.config.quiet {
                let p = h.path.display().to_string();
                let where_ = match written {
                    Ok(()) => format!("dumped to {p} (oomscope tui {})", oomscope_base::shell::quoted(&p)),
                    Err(e) => format!("its dump was not written: {e}"),
                };
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "oomscope: an OOM in a convolution on GPU {} was its thread's last allocation, nothing allocated \
                     after it: {where_}, in case it is what ended the program",
                    h.device
                );
            }
        }
        let ooms = ooms.saturating_sub(caught);
        let written = self.dumps_written.load(Ordering::Relaxed);
        if ooms > written {
            let _ = writeln!(std::io::stderr().lock(), "oomscope: {ooms} OOMs in all, {written} dump(s) written");
        }
        if ooms > 0 {
            self.tell_run(true);
        }
    }

    /// `oomscope fit`'s probe: each device's tape and this process's result, into the fit
    /// directory, once (a process that never allocated on a GPU writes nothing). True when
    /// written now.
    fn write_fit(&self, stopped: bool) -> bool {
        let Some(dir) = &self.config.fit_dir else { return false };
        if self.all().is_empty() || self.fit_written.swap(true, Ordering::AcqRel) {
            return false;
        }
        let pid = std::process::id();
        let free_at_start = lock(&self.fit_free).clone();
        let mut result = oomscope_format::fit::ProbeResult {
            pid,
            stopped,
            step: self.step.load(Ordering::Relaxed).max(-1),
            ooms: self.ooms.load(Ordering::Relaxed),
            failed: lock(&self.failed).clone(),
            devices: Vec::new(),
        };
        for s in self.all() {
            let name = format!("tape-{pid}-gpu{}.jsonl", s.device);
            let written = oomscope_format::atomic::write_file(&dir.join(&name), |w| {
                s.allocator.write_tape(&mut &mut *w).map(|_| ())
            });
            if let Err(e) = written {
                self.warn("fit", &format!("{}: the tape was not written: {e}", dir.join(&name).display()));
                return false;
            }
            let stats = s.allocator.stats();
            let info = s.allocator.with_engine(|e| oomscope_core::View::device_info(e));
            result.devices.push(oomscope_format::fit::ProbeDevice {
                device: s.device,
                tape: name,
                peak_allocated: stats.peak_bytes_in_use,
                peak_reserved: stats.peak_pool_bytes,
                total: info.total,
                free: free_at_start.iter().find(|(d, _)| *d == s.device).map_or(info.total, |(_, f)| *f),
                // (A free of 0 is the driver's query failing: nothing is known then.)
                outside_at_end: if info.free == 0 {
                    0
                } else {
                    info.total.saturating_sub(info.free).saturating_sub(stats.pool_bytes)
                },
            });
        }
        let path = dir.join(format!("result-{pid}.json"));
        let text = serde_json::to_vec(&result).unwrap_or_default();
        if let Err(e) = oomscope_format::atomic::write_file(&path, |w| w.write_all(&text)) {
            self.warn("fit", &format!("{}: not written: {e}", path.display()));
            return false;
        }
        true
    }

    fn all(&self) -> Vec<&Slot> {
        self.slots.iter().filter_map(OnceLock::get).collect()
    }

    fn open(&self, ordinal: i32) -> Result<Slot, Failure> {
        let sim = matches!(self.config.device, DeviceChoice::Sim { .. });
        let (dev, maps): (Box<dyn Device>, bool) = match &self.config.device {
            DeviceChoice::Cuda => {
                let d = CudaDevice::open(ordinal).map_err(|e| Failure::Error(e.to_string()))?;
                let maps = d.maps_memory();
                (Box::new(d), maps)
            }
            DeviceChoice::Sim { total, model } => (Box::new(SimDevice::new(*total, 0).with_model(model)), true),
        };
        let mem = dev.mem_info();
        let source = Source { kind: SourceKind::Run, command: Some(self.command.clone()), ..Source::default() };
        let caching = self.config.allocator == AllocatorChoice::Caching;
        let engine = if caching {
            let mut settings = self.config.torch_settings.clone();
            if settings.expandable_segments && !maps {
                // PyTorch warns and goes on without them on such a GPU too.
                self.warn(
                    "expandable",
                    "expandable_segments:True is not applied: this GPU or driver cannot map memory into reserved \
                     address space; segments are ordinary cudaMalloc ranges",
                );
                settings.expandable_segments = false;
            }
            let mut opts = CachingOptions::new(ordinal);
            opts.history = self.config.history;
            let mut c = Caching::new(settings, opts, dev);
            // PyTorch has no limit of its own: the device's memory is it, unless one is set.
            if self.config.limit.is_some() || self.config.fraction.is_some() {
                c.set_allowed(self.config.limit_for(mem.total, mem.free));
            }
            if let Some(&f) = lock(&self.fractions).get(&ordinal) {
                c.set_memory_fraction(f);
            }
            Engine::Caching(c)
        } else {
            let mut opts = Options::new(self.config.limit_for(mem.total, mem.free));
            // Grow on demand up to the limit: never take the whole card up front.
            opts.allow_growth = true;
            opts.history = self.config.history;
            opts.name = format!("GPU_{ordinal}_bfc");
            opts.device_name = format!("/job:localhost/replica:0/task:0/device:GPU:{ordinal}");
            Engine::Bfc(Bfc::new(opts, dev))
        };
        let mut allocator = Allocator::from_engine(engine, Recording::default())
            .with_source(source)
            .with_process(self.config.process.clone());
        if self.config.fit_dir.is_some() {
            allocator = allocator.with_tape();
        }
        let allocator = Arc::new(allocator);
        lock(&self.fit_free).push((ordinal, mem.free));
        let step = self.step.load(Ordering::Relaxed);
        if step != NO_STEP {
            allocator.mark_step(step);
        }
        let sampler = if self.config.live { self.publish(ordinal, &allocator) } else { None };
        Ok(Slot {
            device: ordinal,
            allocator,
            sim,
            caching,
            first_stream: AtomicUsize::new(NO_STREAM),
            multi_stream: AtomicBool::new(false),
            recorded: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            streams: Mutex::new(Streams::default()),
            sampler: Mutex::new(sampler),
        })
    }

    fn publish(&self, ordinal: i32, allocator: &Arc<Allocator>) -> Option<Sampler> {
        let mut hello =
            allocator.with_engine(|e| live::hello_for_this_process(&self.command, e, live::sampler::DEFAULT_INTERVAL));
        hello.process = Some(self.config.process.clone()).filter(|p| p.in_job());
        let path = live::socket_path(&live::default_dir(), std::process::id(), Some(ordinal as u32));
        let started = Publisher::bind(&path, hello)
            .and_then(|p| Sampler::start(Arc::clone(allocator), Arc::new(p), live::sampler::DEFAULT_INTERVAL));
        match started {
            Ok(s) => Some(s),
            Err(e) => {
                self.warn("live", &format!("the live feed is off: {e}"));
                None
            }
        }
    }

    /// Allocates `size` bytes on `device` for `stream`.
    pub fn malloc(&self, size: isize, device: i32, stream: usize) -> Result<u64, Failure> {
        if size < 0 {
            return Err(Failure::Error(format!("a negative size ({size}) cannot be allocated")));
        }
        if size == 0 {
            return Ok(0);
        }
        let slot = self.slot(device)?;
        if !slot.caching {
            slot.note_stream(self, stream);
        }
        slot.release_deferred(false);
        let req = Request::new(size as u64).stream(stream as u64);
        match slot.allocator.allocate(&req) {
            Ok(addr) => {
                if self.holding.load(Ordering::Relaxed) {
                    self.went_on();
                }
                Ok(addr)
            }
            Err(oom) => {
                // Memory other streams still hold back: wait for it once before giving up,
                // as PyTorch synchronizes before it reports an OOM (the caching allocator
                // did so itself).
                if !slot.caching
                    && slot.release_deferred(true) > 0
                    && let Ok(addr) = slot.allocator.allocate(&req)
                {
                    return Ok(addr);
                }
                let mut oom = oom;
                // Set by the PyTorch hook: the message is worded as that version words it.
                oom.dump.allocator.torch_version = std::env::var(oomscope_core::env::TORCH_VERSION).ok();
                // On a GPU, who holds its memory (NVML): PyTorch's message lists them, and
                // this process's CUDA context is told apart from other processes.
                if !slot.sim
                    && let Some(mut processes) = oomscope_core::device::cuda::processes(slot.device)
                {
                    let d = &mut oom.dump;
                    // In a container NVML's pids are the host's: this process is the one
                    // holding at least what the allocator reserved, when only one does.
                    let reserved = d.stats.pool_bytes;
                    if !processes.iter().any(|p| p.this) {
                        let holding: Vec<usize> =
                            (0..processes.len()).filter(|&i| processes[i].bytes >= reserved).collect();
                        if let [i] = holding[..] {
                            processes[i].this = true;
                        }
                    }
                    d.device.others = processes.iter().filter(|p| !p.this).map(|p| p.bytes).sum();
                    for o in d.oom.iter_mut().chain(d.ooms.last_mut()) {
                        o.processes = processes.clone();
                    }
                }
                Err(Failure::Oom(self.report_oom(slot, oom)))
            }
        }
    }

    /// Frees `ptr` (0 is ignored). Unknown pointers and double frees are warnings.
    pub fn free(&self, ptr: u64, device: i32) -> Result<(), Failure> {
        if ptr == 0 {
            return Ok(());
        }
        let Some(slot) = self.existing(device) else {
            self.warn("free", &format!("free of {ptr:#x} on device {device}, where nothing was allocated: ignored"));
            return Ok(());
        };
        let recorded = if slot.recorded.load(Ordering::Acquire) == 0 {
            None
        } else {
            let r = lock(&slot.streams).recorded.remove(&ptr);
            if r.is_some() {
                slot.recorded.fetch_sub(1, Ordering::AcqRel);
            }
            r
        };
        if let Some(streams) = recorded {
            // Used on other streams: reusable once they have passed this point.
            let pending: Vec<Pending> = streams
                .iter()
                .map(|&s| match slot.sim {
                    true => Pending::Sim,
                    false => StreamEvent::record(s).map_or(Pending::Sim, Pending::Cuda),
                })
                .collect();
            let held = slot.allocator.with_engine(|e| e.hold_free(ptr, slot.allocator.elapsed_ns()));
            if held {
                slot.allocator.note_free(ptr);
                let mut st = lock(&slot.streams);
                // An entry left for this address is stale (the block was reused since).
                st.deferred.retain(|(p, _)| *p != ptr);
                st.deferred.push((ptr, pending));
                slot.held.store(st.deferred.len(), Ordering::Release);
                return Ok(());
            }
        }
        if let Err(e) = slot.allocator.free(ptr) {
            self.warn("free", &format!("GPU {device}: {e}: ignored"));
        }
        Ok(())
    }

    /// Says what the live allocation at `ptr` on `device` is ([`Allocator::tag`]); false
    /// when nothing is allocated there.
    pub fn tag(&self, ptr: u64, device: i32, name: Option<&str>, kind: oomscope_format::Kind) -> bool {
        self.existing(device).is_some_and(|slot| slot.allocator.tag(ptr, name, kind))
    }

    /// Records the shape of the tensor at `ptr` on `device` ([`Allocator::tag_shape`]).
    pub fn tag_shape(&self, ptr: u64, device: i32, shape: &[i64], dtype: Option<&str>) -> bool {
        self.existing(device).is_some_and(|slot| slot.allocator.tag_shape(ptr, shape, dtype))
    }

    /// PyTorch's `record_stream`: `ptr` is in use on `stream` too.
    pub fn record_stream(&self, ptr: u64, stream: usize) {
        for slot in self.all() {
            let known = slot.allocator.with_engine(|e| e.record_stream(ptr, stream as u64));
            if known {
                let mut st = lock(&slot.streams);
                let streams = st.recorded.entry(ptr).or_default();
                if streams.is_empty() {
                    slot.recorded.fetch_add(1, Ordering::AcqRel);
                }
                if !streams.contains(&stream) {
                    streams.push(stream);
                }
                return;
            }
        }
        self.warn("record_stream", &format!("record_stream of {ptr:#x}, which oomscope did not allocate: ignored"));
    }

    /// Waits for every stream's pending work (as `cudaDeviceSynchronize`) and releases the
    /// memory it held back.
    pub fn synchronize(&self) -> usize {
        self.all().iter().map(|s| s.release_deferred(true)).sum()
    }

    /// `torch.cuda.empty_cache()`: pending frees complete, and the caching allocator gives
    /// every whole cached segment back to the device (BFC keeps its regions, as TF does).
    pub fn empty_cache(&self) {
        for s in self.all() {
            s.release_deferred(true);
            let t_ns = s.allocator.elapsed_ns();
            s.allocator.with_engine(|e| e.empty_cache(t_ns));
            s.allocator.note_empty_cache();
        }
    }

    /// `torch.cuda.set_per_process_memory_fraction(fraction, device)`: the caching
    /// allocator may hold at most that share of the device's memory.
    pub fn set_memory_fraction(&self, fraction: f64, device: i32) -> Result<(), Failure> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(Failure::Error(format!("memory fraction {fraction}: expected a number from 0 to 1")));
        }
        let Some(slot) = self.existing(device) else {
            if !(0..MAX_DEVICES as i32).contains(&device) {
                return Err(Failure::Error(format!(
                    "device {device} is not a device number oomscope handles (0 to {})",
                    MAX_DEVICES - 1
                )));
            }
            if self.config.allocator != AllocatorChoice::Caching {
                self.warn(
                    "fraction",
                    "set_per_process_memory_fraction is not applied to the BFC allocator (its limit is --limit)",
                );
            }
            lock(&self.fractions).insert(device, fraction);
            return Ok(());
        };
        let applied = slot.allocator.with_engine(|e| e.set_memory_fraction(fraction));
        if !applied {
            self.warn(
                "fraction",
                "set_per_process_memory_fraction is not applied to the BFC allocator (its limit is --limit)",
            );
        }
        Ok(())
    }

    pub fn step(&self, step: i64) {
        self.step.store(step, Ordering::Relaxed);
        for s in self.all() {
            s.allocator.mark_step(step);
        }
        if self.config.fit_steps.is_some_and(|n| step >= n) && self.write_fit(true) {
            // The probe has what it came for: the program ends here, as if it had finished
            // (its own teardown, a checkpoint at the end, is not part of a step).
            let _ = std::io::stderr().flush();
            // SAFETY: _exit ends the process at once; nothing here is left half-written
            // (the tape and the result are renamed into place).
            unsafe { libc::_exit(0) };
        }
        if self.config.dump_at_steps.binary_search(&step).is_err() {
            return;
        }
        if self.all().is_empty() {
            // Nothing to dump yet (a PyTorch process before its first allocation): the step
            // is not done, so a later mark of it is dumped.
            let mut missed = lock(&self.steps_missed);
            if !missed.contains(&step) {
                missed.push(step);
            }
            return;
        }
        let first = {
            let mut done = lock(&self.steps_dumped);
            let first = !done.contains(&step);
            if first {
                done.push(step);
            }
            first
        };
        if first {
            lock(&self.steps_missed).retain(|&s| s != step);
            self.dump_moment(Moment::Step(step), &format!("at step {step}"));
        }
    }

    /// Writes the dump at exit now, once, when `OOMSCOPE_DUMP_AT_EXIT` asks for one: for a
    /// runtime that frees its memory as it shuts down after the program's end (Python's
    /// module teardown frees tensors held in globals), before the library's destructor
    /// would find it freed. A process that never allocated on a GPU (a launcher, a
    /// DataLoader worker) writes none and says nothing. True when it was written now.
    pub fn dump_at_exit(&self) -> bool {
        if !self.config.dump_at_exit || self.all().is_empty() || self.exit_dumped.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.dump_moment(Moment::Exit, "at exit");
        true
    }

    /// Writes each device's dump into the dump directory as
    /// `oomscope-PID-gpuN-WHAT.dump.json` and says where on stderr; `moment` says when
    /// (`at step 20`, `at exit`).
    fn dump_moment(&self, what: Moment, moment: &str) {
        for s in self.all() {
            let path = self.dump_path(s.device, what);
            let d = s.allocator.dump(Source {
                kind: SourceKind::Run,
                command: Some(self.command.clone()),
                ..Source::default()
            });
            let who = self.config.process.rank.map_or(String::new(), |r| format!("rank {r}: "));
            let said = match self.write_dump(&path, &d) {
                Ok(()) => format!("oomscope: {who}dump {moment} written to {}", path.display()),
                Err(e) => format!("oomscope: {who}the dump {moment} was not written: {e}"),
            };
            let _ = writeln!(std::io::stderr().lock(), "{said}");
        }
    }

    /// Writes every device's dump: to `path` with one device, `path` with `-gpuN` before
    /// the extension with several; to the dump directory when `path` is None.
    pub fn dump(&self, path: Option<PathBuf>) -> Result<Vec<PathBuf>, Failure> {
        let slots = self.all();
        if slots.is_empty() {
            return Err(Failure::Error("nothing has been allocated yet: there is nothing to dump".into()));
        }
        let mut written = Vec::new();
        for s in &slots {
            let target = match &path {
                Some(p) if slots.len() == 1 => p.clone(),
                Some(p) => with_device_suffix(p, s.device),
                None => self.dump_path(s.device, Moment::State(self.ooms.load(Ordering::Relaxed))),
            };
            let d = s.allocator.dump(Source {
                kind: SourceKind::Run,
                command: Some(self.command.clone()),
                ..Source::default()
            });
            if path.is_none() {
                // Into the dump directory, as automatic dumps go: within its limit.
                self.write_dump(&target, &d).map_err(|e| Failure::Error(e.0))?;
            } else {
                if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|e| Failure::Error(format!("{}: {e}", dir.display())))?;
                }
                dump::write_atomic(&target, &d).map_err(|e| Failure::Error(e.to_string()))?;
            }
            written.push(target);
        }
        Ok(written)
    }

    /// Where this process's dump of `device` at `moment` goes.
    fn dump_path(&self, device: i32, moment: Moment) -> PathBuf {
        let name = DumpName {
            rank: self.config.process.rank,
            pid: std::process::id(),
            device: DeviceTag::gpu(device as u32),
            moment,
        };
        self.config.dump_dir.join(name.to_string())
    }

    /// At an OOM: the verdict attached, the dump written, the report on stderr (whole the
    /// first time) and on the live feed, and the message for the caller, in PyTorch's words
    /// first. Past `OOMSCOPE_MAX_DUMPS` (a program retrying in a loop) an OOM is only
    /// counted: the caller still gets its message, stderr a line every few seconds.
    fn report_oom(&self, slot: &Slot, mut oom: Oom) -> String {
        let n = self.ooms.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(r) = &oom.dump.oom {
            let mut failed = lock(&self.failed);
            if failed.len() < oomscope_format::fit::FAILED_KEPT {
                failed.push(oomscope_format::fit::FailedRequest {
                    op: r.op.clone().unwrap_or_default(),
                    bytes: r.requested,
                });
            }
        }
        let in_convolution =
            oom.dump.oom.as_ref().is_some_and(|r| r.op.as_deref().is_some_and(oomscope_core::scope::convolution));
        if slot.caching && in_convolution && !emulating() && c10() {
            return self.hold_oom(slot, oom, n);
        }
        let k = self.reported.fetch_add(1, Ordering::Relaxed) + 1;
        if k > self.config.max_dumps {
            return self.count_oom(slot, &oom, n);
        }
        let path = self.dump_path(slot.device, Moment::Oom(n));
        self.last_oom_ms.store(now_ms(), Ordering::Relaxed);
        self.tell_job(slot, &path);
        let oomscope_report::PostMortem { report, written } =
            oomscope_pipeline::at_oom(&mut oom.dump, |d| self.write_dump(&path, d));
        let message = self.said_oom(slot, &oom.dump, &report, &path, written, n, k);
        if let Some(sampler) = &*lock(&slot.sampler) {
            sampler.oom(std::sync::Arc::from(oom.dump), report);
        }
        message
    }

    /// An OOM reported: counted, said on stderr (the whole report the first time, else a
    /// line), the caller's message made.
    #[allow(clippy::too_many_arguments)]
    fn said_oom(
        &self,
        slot: &Slot,
        d: &dump::Dump,
        report: &str,
        path: &std::path::Path,
        written: Result<(), oomscope_base::Problem>,
        n: u64,
        k: u64,
    ) -> String {
        if written.is_ok() {
            self.dumps_written.fetch_add(1, Ordering::Relaxed);
        }
        self.tell_run(false);
        let where_ = match &written {
            Ok(()) => format!("dump: {}", path.display()),
            Err(e) => format!("the dump was not written: {e}"),
        };
        let verdict = d.verdict.as_ref().map_or(String::new(), |v| format!(" {}; fix: {}.", v.headline, v.fix));
        let tail = format!("{verdict} ({where_}; the report is on stderr)");
        let message = caller_text(slot, d, d.oom.as_ref().map_or(0, |r| r.requested), &tail);
        let mut err = std::io::stderr().lock();
        if k == 1 && !self.config.quiet {
            let _ = err.write_all(report.as_bytes());
            let _ = writeln!(err);
            if written.is_ok() {
                let _ = writeln!(
                    err,
                    "oomscope: dump written to {}\n  look inside: oomscope tui {}",
                    path.display(),
                    oomscope_base::shell::quoted(&path.display().to_string())
                );
            }
        } else {
            let req = d.oom.as_ref().map_or(String::new(), render::summary::request_line);
            let _ = writeln!(err, "oomscope: OOM #{n} on GPU {}: {req}; {where_}", slot.device);
        }
        if k == self.config.max_dumps {
            let _ = writeln!(
                err,
                "oomscope: OOM #{n} was the last to get a dump (OOMSCOPE_MAX_DUMPS={}); later ones are counted",
                self.config.max_dumps
            );
        }
        message
    }

    /// An OOM in a convolution with PyTorch's libc10 in the process: cuDNN's code catches it
    /// and tries another algorithm (on an H200, ResNet-50 went on past 34 such OOMs in a step
    /// and trained). Diagnosed now, but dumped and reported only when it reaches the program;
    /// a line says the first one.
    fn hold_oom(&self, slot: &Slot, mut oom: Oom, n: u64) -> String {
        let path = self.dump_path(slot.device, Moment::Oom(n));
        let oomscope_report::PostMortem { report, .. } = oomscope_pipeline::at_oom(&mut oom.dump, |_| Ok::<(), ()>(()));
        let d = &oom.dump;
        let verdict = d.verdict.as_ref().map_or(String::new(), |v| format!(" {}; fix: {}.", v.headline, v.fix));
        let message = self.caller_message(slot, &oom, &format!("{verdict} (the report is on stderr)"));
        let first = !self.said_holding.swap(true, Ordering::Relaxed);
        if first && !self.config.quiet {
            let req = d.oom.as_ref().map_or(String::new(), render::summary::request_line);
            let _ = writeln!(
                std::io::stderr().lock(),
                "oomscope: an OOM in a convolution on GPU {}: {req}; PyTorch's cuDNN tries another algorithm when a \
                 workspace does not fit, so it is reported only if the program does not go on",
                slot.device
            );
        }
        let thread = std::thread::current().id();
        let mut held = lock(&self.held_oom);
        // The thread's OOM held before this one was gone past: cuDNN tried another algorithm,
        // whose workspace did not fit either.
        self.gone_past(&mut held, thread);
        held.push(HeldOom { thread, device: slot.device, n, path, dump: oom.dump, report });
        self.holding.store(true, Ordering::Relaxed);
        message
    }

    /// This thread allocated after an OOM it held: the program went on past that OOM.
    fn went_on(&self) {
        let mut held = lock(&self.held_oom);
        self.gone_past(&mut held, std::thread::current().id());
        self.holding.store(!held.is_empty(), Ordering::Relaxed);
    }

    /// `thread`'s held OOM, if any, was gone past: dropped, and counted.
    fn gone_past(&self, held: &mut Vec<HeldOom>, thread: std::thread::ThreadId) {
        let before = held.len();
        held.retain(|h| h.thread != thread);
        if held.len() < before {
            self.caught.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An error reached the program (Python's hook on its way): the OOM this thread holds, or
    /// else the last one held, is its cause (cuDNN ran out of algorithms, or the OOM itself
    /// came through): dumped and reported as any other.
    pub fn say_held_report(&self) {
        let thread = std::thread::current().id();
        let h = {
            let mut held = lock(&self.held_oom);
            let i = held.iter().position(|h| h.thread == thread).or(held.len().checked_sub(1));
            let h = i.map(|i| held.remove(i));
            self.holding.store(!held.is_empty(), Ordering::Relaxed);
            h
        };
        if let Some(h) = h {
            self.report_held(h);
        }
    }

    fn report_held(&self, h: HeldOom) {
        let Some(slot) = self.all().into_iter().find(|s| s.device == h.device) else { return };
        let k = self.reported.fetch_add(1, Ordering::Relaxed) + 1;
        self.last_oom_ms.store(now_ms(), Ordering::Relaxed);
        self.tell_job(slot, &h.path);
        let written = if k > self.config.max_dumps {
            Err(oomscope_base::problem!("OOMSCOPE_MAX_DUMPS={} dumps were written already", self.config.max_dumps))
        } else {
            self.write_dump(&h.path, &h.dump)
        };
        let _ = self.said_oom(slot, &h.dump, &h.report, &h.path, written, h.n, k);
        if let Some(sampler) = &*lock(&slot.sampler) {
            sampler.oom(std::sync::Arc::from(*h.dump), h.report);
        }
    }

    /// In a job: the other ranks are told at once, before this rank's report is made, that
    /// this one ran out of memory (they write their state then).
    fn tell_job(&self, slot: &Slot, path: &std::path::Path) {
        let p = &self.config.process;
        let (true, Some(rank), Some(job)) = (self.config.job_dumps, p.rank, p.job.as_deref()) else { return };
        let line = job::FailureLine {
            rank,
            host: p.host.clone(),
            pid: p.pid,
            gpu: slot.device,
            dump: path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            unix_ms: now_ms(),
        };
        if let Err(e) = job::tell(&job::failures_path(&self.config.dump_dir, job), &line) {
            self.warn("job", &format!("the other ranks could not be told of this OOM: {e}"));
        }
    }

    /// Tells `oomscope run` (when it started this process) its OOMs and dumps so far: the
    /// line every few seconds and the total at exit may never be printed (`os._exit`, a kill).
    fn tell_run(&self, said: bool) {
        let Some((fd, inode)) = self.config.feed_fd else { return };
        // The descriptor is still run's pipe (a launcher may have closed it, and something
        // else may hold its number now).
        // SAFETY: a zeroed `stat` is a valid value of this plain C struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes into `st`; a closed descriptor gives an error.
        let failed = unsafe { libc::fstat(fd, &mut st) } != 0;
        if failed || st.st_mode & libc::S_IFMT != libc::S_IFIFO || st.st_ino != inode {
            return;
        }
        let count = oomscope_format::feed::OomCount {
            pid: std::process::id(),
            ooms: self.ooms.load(Ordering::Relaxed),
            dumps: self.dumps_written.load(Ordering::Relaxed),
            said,
        };
        let line = count.line();
        // One write of a short line to a pipe: whole, never interleaved with another's.
        // SAFETY: writes `line`'s bytes to a descriptor; a closed one gives an error, ignored.
        let _ = unsafe { libc::write(fd, line.as_ptr().cast(), line.len()) };
    }

    /// An OOM past the dump budget: no verdict, no dump, no report; a line now and then.
    fn count_oom(&self, slot: &Slot, oom: &Oom, n: u64) -> String {
        self.undumped.fetch_add(1, Ordering::Relaxed);
        self.tell_run(false);
        let now = Instant::now();
        let due = {
            let mut last = lock(&self.undumped_line);
            let due = last.is_none_or(|t| now.duration_since(t) >= UNDUMPED_LINE_EVERY);
            if due {
                *last = Some(now);
            }
            due
        };
        if due {
            let since = self.undumped.swap(0, Ordering::Relaxed).max(1);
            let _ = writeln!(
                std::io::stderr().lock(),
                "oomscope: {since} more OOM(s) on GPU {} ({n} in all), not dumped (OOMSCOPE_MAX_DUMPS={})",
                slot.device,
                self.config.max_dumps
            );
        }
        self.caller_message(
            slot,
            oom,
            &format!(" (OOM #{n}, not dumped: OOMSCOPE_MAX_DUMPS={})", self.config.max_dumps),
        )
    }

    /// The allocation's failure in PyTorch's words (the caching allocator's), else TF's
    /// figures, then `tail`.
    fn caller_message(&self, slot: &Slot, oom: &Oom, tail: &str) -> String {
        caller_text(slot, &oom.dump, oom.requested(), tail)
    }

    /// Writes a dump (at an OOM, a step, exit) unless the dump directory already holds its
    /// limit of them.
    fn write_dump(&self, path: &std::path::Path, d: &dump::Dump) -> Result<(), oomscope_base::Problem> {
        let dir = &self.config.dump_dir;
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let held = dumps_size(dir);
        if held >= self.config.dump_dir_limit {
            return Err(oomscope_base::problem!(
                "{} already holds {} of oomscope dumps (OOMSCOPE_DUMP_DIR_LIMIT={}); remove some, or raise the limit",
                dir.display(),
                human(held),
                human(self.config.dump_dir_limit)
            ));
        }
        dump::write_atomic(path, d).map_err(|e| oomscope_base::Problem(e.to_string()))
    }
}

/// Bytes taken by oomscope's dumps (`oomscope-*.dump.json`) in `dir`.
fn dumps_size(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(DumpName::matches))
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

fn with_device_suffix(p: &std::path::Path, device: i32) -> PathBuf {
    let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let (stem, ext) = match name.strip_suffix(".dump.json") {
        Some(stem) => (stem, ".dump.json"),
        None => match name.rsplit_once('.') {
            Some((stem, _)) if !stem.is_empty() => (stem, &name[stem.len()..]),
            _ => (name.as_str(), ""),
        },
    };
    p.with_file_name(format!("{stem}-gpu{device}{ext}"))
}

impl Slot {
    fn note_stream(&self, rt: &Runtime, stream: usize) {
        let first = match self.first_stream.compare_exchange(NO_STREAM, stream, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(first) => first,
        };
        if first != stream && !self.multi_stream.swap(true, Ordering::AcqRel) {
            rt.warn(
                "streams",
                &format!(
                    "GPU {}: allocations on more than one CUDA stream; oomscope reuses a freed chunk on any \
                     stream at once, which is safe only when streams are ordered (docs/torch.md)",
                    self.device
                ),
            );
        }
    }

    /// Frees what other streams no longer use; with `wait`, waits for them first.
    fn release_deferred(&self, wait: bool) -> usize {
        if self.held.load(Ordering::Acquire) == 0 {
            return 0;
        }
        let ready: Vec<u64> = {
            let mut st = lock(&self.streams);
            if st.deferred.is_empty() {
                return 0;
            }
            let mut ready = Vec::new();
            st.deferred.retain(|(ptr, pending)| {
                let done = wait || pending.iter().all(Pending::done);
                if done {
                    if wait {
                        for p in pending {
                            if let Pending::Cuda(e) = p {
                                e.wait();
                            }
                        }
                    }
                    ready.push(*ptr);
                }
                !done
            });
            self.held.fetch_sub(ready.len(), Ordering::AcqRel);
            ready
        };
        let t_ns = self.allocator.elapsed_ns();
        self.allocator.with_engine(|e| {
            for &ptr in &ready {
                e.complete_deferred_free(ptr, t_ns);
            }
        });
        ready.len()
    }
}

/// The allocation's failure in PyTorch's words (the caching allocator's), else TF's
/// figures, then `tail`.
fn caller_text(slot: &Slot, d: &dump::Dump, requested: u64, tail: &str) -> String {
    let stats = &d.stats;
    match render::torch::oom_message(d) {
        Some(torch) if slot.caching => format!("{torch}\noomscope:{tail}"),
        _ => format!(
            "CUDA out of memory. Tried to allocate {} ({} bytes) on GPU {}. oomscope's allocator has a limit of {}, \
             {} in use, {} in its pool, and {} in its largest free block.{tail}",
            human(requested),
            requested,
            slot.device,
            human(d.allocator.limit),
            human(stats.bytes_in_use),
            human(stats.pool_bytes),
            human(stats.largest_free_block),
        ),
    }
}

/// An OOM in a convolution whose report waits ([`Runtime::hold_oom`]).
struct HeldOom {
    thread: std::thread::ThreadId,
    device: i32,
    n: u64,
    path: PathBuf,
    dump: Box<dump::Dump>,
    report: String,
}

/// PyTorch's kernels run on the CPU, their tensors counted as the simulated GPU's: no cuDNN
/// to go on past an OOM.
fn emulating() -> bool {
    std::env::var(oomscope_core::env::TORCH_EMULATE).is_ok_and(|v| v == "1")
}

/// Whether PyTorch's code can catch this OOM as its own (`c10::OutOfMemoryError`).
fn c10() -> bool {
    crate::oomscope_c10_oom_available() == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_suffixes() {
        let p = |s: &str| with_device_suffix(std::path::Path::new(s), 1).display().to_string();
        assert_eq!(p("out/x.dump.json"), "out/x-gpu1.dump.json");
        assert_eq!(p("x.json"), "x-gpu1.json");
        assert_eq!(p("x"), "x-gpu1");
        assert_eq!(p("x.bin"), "x-gpu1.bin");
    }
}
