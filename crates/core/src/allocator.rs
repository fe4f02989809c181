//! The allocator as a training process uses it: thread-safe, recording each allocation's
//! op name (from the request or the thread's [`crate::scope`]), shape, dtype, step, time and,
//! when asked, call stack; and returning an [`Oom`] that carries the dump of that moment.
//! What the dump means (the verdict) and how it reads (the report) are the caller's: this
//! crate does neither.

use crate::bfc::{AllocFailure, Bfc, FreeError, Options};
use crate::device::Device;
use crate::record::Meta;
use crate::{scope, stack};
use oomscope_base::size::human;
use oomscope_dump::{Dump, Source, SourceKind, Stats};
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// What to record with each allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recording {
    /// Op names, shapes, dtypes, steps and times (a few nanoseconds per allocation).
    pub ops: bool,
    /// Raw call stacks (microseconds per allocation; symbolized only in reports).
    pub stacks: bool,
}

impl Default for Recording {
    fn default() -> Self {
        Recording { ops: true, stacks: false }
    }
}

/// One allocation request.
#[derive(Clone, Copy, Debug, Default)]
pub struct Request<'a> {
    pub bytes: u64,
    /// Op name, qualified by the thread's current scope.
    pub op: Option<&'a str>,
    /// An op name already interned with [`Allocator::intern_op`]; taken as is, unscoped.
    pub op_id: Option<u32>,
    pub shape: Option<&'a [i64]>,
    pub dtype: Option<&'a str>,
    /// Step; the last [`Allocator::mark_step`] when not given.
    pub step: Option<i64>,
}

impl<'a> Request<'a> {
    pub fn new(bytes: u64) -> Request<'a> {
        Request { bytes, ..Request::default() }
    }
    pub fn op(mut self, op: &'a str) -> Self {
        self.op = Some(op);
        self
    }
    pub fn op_id(mut self, id: u32) -> Self {
        self.op_id = Some(id);
        self
    }
    pub fn shape(mut self, shape: &'a [i64]) -> Self {
        self.shape = Some(shape);
        self
    }
    pub fn dtype(mut self, dtype: &'a str) -> Self {
        self.dtype = Some(dtype);
        self
    }
    pub fn step(mut self, step: i64) -> Self {
        self.step = Some(step);
        self
    }
}

/// A failed allocation, with the state of the allocator at that moment.
///
/// `dump.oom` is this request. The dump has no verdict: the caller attaches one
/// (`oomscope_analysis::verdict::attach`) and renders the report.
#[derive(Clone, Debug)]
pub struct Oom {
    /// Boxed: the error travels by value through `Result`, and a dump is large.
    pub dump: Box<Dump>,
}

impl Oom {
    /// Bytes asked for.
    pub fn requested(&self) -> u64 {
        self.dump.oom.as_ref().map_or(0, |o| o.requested)
    }
}

impl fmt::Display for Oom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = &self.dump.allocator;
        match &self.dump.oom {
            // Keep the words PyTorch users and retry helpers look for.
            Some(oom) => write!(
                f,
                "OOM when allocating {} (rounded to {}) for {} on {}: {} in use, limit {}; out of memory",
                human(oom.requested),
                oom.rounded,
                oom.op,
                a.name,
                human(oom.bytes_in_use),
                human(a.limit)
            ),
            None => write!(f, "OOM on {}", a.name),
        }
    }
}

impl std::error::Error for Oom {}

/// A thread-safe, recording BFC allocator.
pub struct Allocator {
    bfc: Mutex<Bfc>,
    origin: Instant,
    recording: Recording,
    /// What OOM dumps say they come from.
    source: Source,
}

impl fmt::Debug for Allocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Allocator").field("recording", &self.recording).finish_non_exhaustive()
    }
}

impl Allocator {
    /// An allocator recording op names (not stacks).
    pub fn new(opts: Options, device: Box<dyn Device>) -> Allocator {
        Allocator::with_recording(opts, device, Recording::default())
    }

    pub fn with_recording(opts: Options, device: Box<dyn Device>, recording: Recording) -> Allocator {
        Allocator {
            bfc: Mutex::new(Bfc::new(opts, device)),
            origin: Instant::now(),
            recording,
            source: Source { kind: SourceKind::Api, ..Source::default() },
        }
    }

    /// Names where OOM dumps come from (`run` and the command, for a wrapped process).
    pub fn with_source(mut self, source: Source) -> Allocator {
        self.source = source;
        self
    }

    /// The lock. A panic elsewhere while holding it cannot leave the allocator half-updated
    /// in a way that matters more than losing the process's memory, so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, Bfc> {
        self.bfc.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Interns an op name once, for callers that allocate with the same name often.
    pub fn intern_op(&self, name: &str) -> u32 {
        self.lock().names_mut().ops.intern(name)
    }

    /// Allocates; on failure returns the report of this OOM. Zero bytes give address 0.
    pub fn allocate(&self, req: &Request<'_>) -> Result<u64, Oom> {
        let ips = if self.recording.stacks { Some(stack::capture(1)) } else { None };
        let t_ns = if self.recording.ops { self.origin.elapsed().as_nanos() as u64 } else { 0 };
        let mut bfc = self.lock();
        let mut meta = Meta { t_ns, step: bfc.current_step(), ..Meta::default() };
        if self.recording.ops {
            let names = bfc.names_mut();
            meta.op = match req.op_id {
                Some(id) => id,
                None => scope::with_qualified(req.op, |name| name.map_or(0, |n| names.ops.intern(n))),
            };
            meta.shape = req.shape.map_or(0, |s| names.shapes.intern(s));
            meta.dtype = req.dtype.map_or(0, |d| names.dtypes.intern(d));
            if let Some(step) = req.step {
                meta.step = step;
            }
        }
        if let Some(ips) = &ips {
            meta.stack = bfc.names_mut().stacks.intern(ips.as_slice());
        }
        match bfc.allocate(req.bytes, meta) {
            Ok(addr) => Ok(addr),
            Err(failure) => {
                let dump = Self::oom_dump(&bfc, &failure, &self.source);
                drop(bfc);
                Err(self.finish_oom(dump))
            }
        }
    }

    fn oom_dump(bfc: &Bfc, failure: &AllocFailure, source: &Source) -> Dump {
        let mut dump = bfc.snapshot(source.clone());
        dump.oom = Some(crate::bfc::oom_record(failure, bfc.names()));
        dump
    }

    /// Symbolizes outside the lock: resolving can take tens of milliseconds.
    fn finish_oom(&self, mut dump: Dump) -> Oom {
        stack::symbolize(&mut dump);
        Oom { dump: Box::new(dump) }
    }

    /// Nanoseconds since the allocator was created: the clock of its records.
    pub fn elapsed_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// Frees an allocation; address 0 is ignored. Returns the chunk size.
    pub fn free(&self, addr: u64) -> Result<u64, FreeError> {
        let t_ns = if self.recording.ops { self.origin.elapsed().as_nanos() as u64 } else { 0 };
        self.lock().free(addr, t_ns)
    }

    /// Marks the start of training step `step`.
    pub fn mark_step(&self, step: i64) {
        let t_ns = self.origin.elapsed().as_nanos() as u64;
        self.lock().mark_step(step, t_ns);
    }

    pub fn stats(&self) -> Stats {
        self.lock().stats()
    }

    /// The whole state, symbolized, as a dump.
    pub fn dump(&self, source: Source) -> Dump {
        let mut dump = self.lock().snapshot(source);
        stack::symbolize(&mut dump);
        dump
    }

    /// Runs `f` on the allocator core under the lock (for checks and advanced callers).
    pub fn with_core<R>(&self, f: impl FnOnce(&mut Bfc) -> R) -> R {
        f(&mut self.lock())
    }
}
