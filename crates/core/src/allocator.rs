//! The allocator as a training process uses it: thread-safe, recording each allocation's
//! op name (from the request or the thread's [`crate::scope`]), shape, dtype, step, time and,
//! when asked, call stack; and returning an [`Oom`] that carries the dump of that moment.
//! Behind it is an [`Engine`]: TensorFlow's BFC allocator or PyTorch's caching allocator.
//! What the dump means (the verdict) and how it reads (the report) are the caller's: this
//! crate does neither.

use crate::bfc::{AllocFailure, Bfc, FreeError, Options};
use crate::caching::Caching;
use crate::clock::Clock;
use crate::device::Device;
use crate::record::{History, Kind, Meta, Names, Retag};
use crate::tape::Tape;
use crate::{scope, stack};
use oomscope_base::size::human;
use oomscope_format::{AllocatorInfo, DeviceInfo, Dump, ProcessInfo, Source, SourceKind, Stats};
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The allocator a process runs: the one whose choices oomscope makes.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per device, behind a lock: never moved on a hot path
pub enum Engine {
    /// TensorFlow's BFC allocator.
    Bfc(Bfc),
    /// PyTorch's CUDA caching allocator.
    Caching(Caching),
}

/// One step of walking an allocator's state: a region (segment), then its chunks (blocks).
#[derive(Clone, Copy, Debug)]
pub enum Visit<'a> {
    Region { addr: u64, size: u64 },
    Chunk { size: u64, requested: u64, in_use: bool, meta: &'a Meta },
}

/// A chunk (block) as found in the allocator's table of chunk slots: [`View::visit_slots`].
#[derive(Clone, Copy, Debug)]
pub struct SlotChunk<'a> {
    pub addr: u64,
    pub size: u64,
    pub requested: u64,
    pub in_use: bool,
    /// The first chunk of its region (segment).
    pub head: bool,
    pub meta: &'a Meta,
}

/// What readers of an allocator's state (the live feed) need, whichever allocator it is.
pub trait View {
    fn names(&self) -> &Names;
    fn current_step(&self) -> i64;
    fn stats(&self) -> Stats;
    fn live_allocations(&self) -> usize;
    fn history(&self) -> &History;
    fn device_info(&self) -> DeviceInfo;
    fn allocator_info(&self) -> AllocatorInfo;
    /// Each region in address order, each followed by its chunks in address order.
    fn visit(&self, f: &mut dyn FnMut(Visit<'_>));
    /// Slots in the table of chunks (live or not): the bound for [`View::visit_slots`].
    fn slots(&self) -> usize;
    /// The live chunks in slots `from..from + count`, in slot order (not address order):
    /// work bounded by `count` whatever the state's size, so that a reader copies a huge
    /// state in slices and lets the allocator run between them.
    fn visit_slots(&self, from: usize, count: usize, f: &mut dyn FnMut(SlotChunk<'_>));
}

impl View for Bfc {
    fn names(&self) -> &Names {
        Bfc::names(self)
    }
    fn current_step(&self) -> i64 {
        Bfc::current_step(self)
    }
    fn stats(&self) -> Stats {
        Bfc::stats(self)
    }
    fn live_allocations(&self) -> usize {
        Bfc::live_allocations(self)
    }
    fn history(&self) -> &History {
        Bfc::history(self)
    }
    fn device_info(&self) -> DeviceInfo {
        Bfc::device_info(self)
    }
    fn allocator_info(&self) -> AllocatorInfo {
        Bfc::allocator_info(self)
    }
    fn visit(&self, f: &mut dyn FnMut(Visit<'_>)) {
        for (i, (addr, size)) in self.regions().enumerate() {
            f(Visit::Region { addr, size });
            for c in self.region_chunks(i) {
                f(Visit::Chunk { size: c.size, requested: c.requested, in_use: c.in_use, meta: c.meta });
            }
        }
    }
    fn slots(&self) -> usize {
        Bfc::slots(self)
    }
    fn visit_slots(&self, from: usize, count: usize, f: &mut dyn FnMut(SlotChunk<'_>)) {
        Bfc::visit_slots(self, from, count, f)
    }
}

impl View for Caching {
    fn names(&self) -> &Names {
        Caching::names(self)
    }
    fn current_step(&self) -> i64 {
        Caching::current_step(self)
    }
    fn stats(&self) -> Stats {
        Caching::stats(self)
    }
    fn live_allocations(&self) -> usize {
        Caching::live_allocations(self)
    }
    fn history(&self) -> &History {
        Caching::history(self)
    }
    fn device_info(&self) -> DeviceInfo {
        Caching::device_info(self)
    }
    fn allocator_info(&self) -> AllocatorInfo {
        Caching::allocator_info(self)
    }
    fn visit(&self, f: &mut dyn FnMut(Visit<'_>)) {
        for seg in self.segments() {
            f(Visit::Region { addr: seg.addr, size: seg.size });
            for b in self.segment_blocks(&seg) {
                // A pending free is not reusable yet: it counts as in use.
                let in_use = b.allocated || b.pending_free;
                f(Visit::Chunk { size: b.size, requested: b.requested, in_use, meta: b.meta });
            }
        }
    }
    fn slots(&self) -> usize {
        Caching::slots(self)
    }
    fn visit_slots(&self, from: usize, count: usize, f: &mut dyn FnMut(SlotChunk<'_>)) {
        Caching::visit_slots(self, from, count, f)
    }
}

macro_rules! each {
    ($e:expr, $x:ident => $body:expr) => {
        match $e {
            Engine::Bfc($x) => $body,
            Engine::Caching($x) => $body,
        }
    };
}

impl View for Engine {
    fn names(&self) -> &Names {
        each!(self, e => View::names(e))
    }
    fn current_step(&self) -> i64 {
        each!(self, e => View::current_step(e))
    }
    fn stats(&self) -> Stats {
        each!(self, e => View::stats(e))
    }
    fn live_allocations(&self) -> usize {
        each!(self, e => View::live_allocations(e))
    }
    fn history(&self) -> &History {
        each!(self, e => View::history(e))
    }
    fn device_info(&self) -> DeviceInfo {
        each!(self, e => View::device_info(e))
    }
    fn allocator_info(&self) -> AllocatorInfo {
        each!(self, e => View::allocator_info(e))
    }
    fn visit(&self, f: &mut dyn FnMut(Visit<'_>)) {
        each!(self, e => View::visit(e, f))
    }
    fn slots(&self) -> usize {
        each!(self, e => View::slots(e))
    }
    fn visit_slots(&self, from: usize, count: usize, f: &mut dyn FnMut(SlotChunk<'_>)) {
        each!(self, e => View::visit_slots(e, from, count, f))
    }
}

impl Engine {
    pub fn names_mut(&mut self) -> &mut Names {
        each!(self, e => e.names_mut())
    }

    /// Allocates `bytes` for `stream` (BFC has no streams: the stream is ignored).
    pub fn allocate(&mut self, bytes: u64, stream: u64, meta: Meta) -> Result<u64, Box<AllocFailure>> {
        match self {
            Engine::Bfc(b) => b.allocate(bytes, meta),
            Engine::Caching(c) => c.allocate(bytes, stream, meta),
        }
    }

    pub fn free(&mut self, addr: u64, t_ns: u64) -> Result<u64, FreeError> {
        each!(self, e => e.free(addr, t_ns))
    }

    pub fn mark_step(&mut self, step: i64, t_ns: u64) {
        each!(self, e => e.mark_step(step, t_ns))
    }

    /// A free of a block other streams may still use: true when it must wait for them. The
    /// BFC allocator reuses a free chunk at once, so the free waits outside it (and is done
    /// by [`Engine::complete_deferred_free`]); the caching allocator frees now and keeps the
    /// block pending until told.
    pub fn hold_free(&mut self, addr: u64, t_ns: u64) -> bool {
        match self {
            Engine::Bfc(b) => b.allocated_size(addr).is_some(),
            Engine::Caching(c) => c.free(addr, t_ns).is_ok(),
        }
    }

    /// The other streams are done with a held free ([`Engine::hold_free`]): the BFC
    /// allocator frees the chunk, the caching allocator completes the pending free (nothing
    /// when it synchronized on its own since, as its retry chain does).
    pub fn complete_deferred_free(&mut self, addr: u64, t_ns: u64) {
        match self {
            Engine::Bfc(b) => {
                let _ = b.free(addr, t_ns);
            }
            Engine::Caching(c) => {
                c.complete_pending(addr, t_ns);
            }
        }
    }

    /// PyTorch's `record_stream`: true when `addr` is a live allocation (the caching
    /// allocator records the stream on its block; BFC has no streams).
    pub fn record_stream(&mut self, addr: u64, stream: u64) -> bool {
        match self {
            Engine::Bfc(b) => b.allocated_size(addr).is_some(),
            Engine::Caching(c) => c.allocated_size(addr).is_some() && c.record_stream(addr, stream),
        }
    }

    /// `torch.cuda.empty_cache()`: whole cached segments back to the device (BFC keeps its
    /// regions, as TF does).
    pub fn empty_cache(&mut self, t_ns: u64) {
        if let Engine::Caching(c) = self {
            c.empty_cache(t_ns);
        }
    }

    /// `set_per_process_memory_fraction`: true when applied (the caching allocator's; BFC's
    /// limit is its own).
    pub fn set_memory_fraction(&mut self, fraction: f64) -> bool {
        match self {
            Engine::Caching(c) => {
                c.set_memory_fraction(fraction);
                true
            }
            Engine::Bfc(_) => false,
        }
    }

    /// The block size of the live allocation at `addr`.
    pub fn allocated_size(&self, addr: u64) -> Option<u64> {
        each!(self, e => e.allocated_size(addr))
    }

    /// Changes what is recorded of the live allocation at `addr`; false when there is none.
    pub fn retag(&mut self, addr: u64, r: Retag) -> bool {
        each!(self, e => e.retag(addr, r))
    }

    pub fn snapshot(&self, source: Source) -> Dump {
        each!(self, e => e.snapshot(source))
    }

    /// The dump of a failure that just happened.
    fn oom_dump(&self, failure: &AllocFailure, source: &Source) -> Dump {
        match self {
            Engine::Bfc(bfc) => {
                let mut dump = bfc.snapshot(source.clone());
                dump.oom = Some(crate::bfc::oom_record(failure, bfc.names()));
                dump
            }
            // The caching allocator keeps its failures, with PyTorch's figures.
            Engine::Caching(c) => c.oom_dump(source.clone()),
        }
    }

    /// The allocator's invariants; `Err` names the first broken one.
    pub fn check(&self) -> Result<(), oomscope_base::Problem> {
        match self {
            Engine::Bfc(b) => b.check_invariants(),
            Engine::Caching(c) => c.check(),
        }
    }

    pub fn as_bfc(&self) -> Option<&Bfc> {
        match self {
            Engine::Bfc(b) => Some(b),
            Engine::Caching(_) => None,
        }
    }

    pub fn as_caching_mut(&mut self) -> Option<&mut Caching> {
        match self {
            Engine::Caching(c) => Some(c),
            Engine::Bfc(_) => None,
        }
    }
}

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
    /// The CUDA stream it is for (the caching allocator keeps each stream's blocks apart).
    pub stream: u64,
    /// What it is for; the thread's kind ([`scope::set_kind`]) when not given.
    pub kind: Option<Kind>,
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
    pub fn stream(mut self, stream: u64) -> Self {
        self.stream = stream;
        self
    }
    pub fn kind(mut self, kind: Kind) -> Self {
        self.kind = Some(kind);
        self
    }
}

/// A failed allocation, with the state of the allocator at that moment.
///
/// `dump.oom` is this request. The dump has no verdict: the caller attaches one
/// (`oomscope_report::verdict::attach`) and renders the report.
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
                oomscope_format::op_text(&oom.op),
                a.name,
                human(oom.bytes_in_use),
                human(a.limit)
            ),
            None => write!(f, "OOM on {}", a.name),
        }
    }
}

impl std::error::Error for Oom {}

/// A thread-safe, recording allocator.
pub struct Allocator {
    engine: Mutex<Engine>,
    clock: Clock,
    recording: Recording,
    /// What OOM dumps say they come from.
    source: Source,
    /// The process and its place in a job, put in every dump taken.
    process: Option<ProcessInfo>,
    /// Every request, when asked for ([`Allocator::with_tape`]): taken under the engine's
    /// lock, after it, so that the tape's order is the allocator's.
    tape: Option<Mutex<Tape>>,
}

impl fmt::Debug for Allocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Allocator").field("recording", &self.recording).finish_non_exhaustive()
    }
}

impl Allocator {
    /// A BFC allocator recording op names (not stacks).
    pub fn new(opts: Options, device: Box<dyn Device>) -> Allocator {
        Allocator::with_recording(opts, device, Recording::default())
    }

    /// A BFC allocator.
    pub fn with_recording(opts: Options, device: Box<dyn Device>, recording: Recording) -> Allocator {
        Allocator::from_engine(Engine::Bfc(Bfc::new(opts, device)), recording)
    }

    /// Either allocator.
    pub fn from_engine(engine: Engine, recording: Recording) -> Allocator {
        Allocator {
            engine: Mutex::new(engine),
            clock: Clock::start(),
            recording,
            source: Source { kind: SourceKind::Api, ..Source::default() },
            process: None,
            tape: None,
        }
    }

    /// Keeps every request on a tape ([`crate::tape`]) from now on.
    pub fn with_tape(mut self) -> Allocator {
        self.tape = Some(Mutex::new(Tape::default()));
        self
    }

    /// Runs `f` on the tape, if there is one (the engine's lock is held by the caller).
    fn taped(&self, f: impl FnOnce(&mut Tape)) {
        if let Some(t) = &self.tape {
            f(&mut t.lock().unwrap_or_else(PoisonError::into_inner));
        }
    }

    /// Writes the tape with its names; false when there is none.
    pub fn write_tape(&self, w: &mut impl std::io::Write) -> std::io::Result<bool> {
        let Some(t) = &self.tape else { return Ok(false) };
        let mut engine = self.lock();
        let tape = t.lock().unwrap_or_else(PoisonError::into_inner);
        tape.write(engine.names_mut(), w)?;
        Ok(true)
    }

    /// A free made outside [`Allocator::free`] (a held free of a block used on other
    /// streams), for the tape.
    pub fn note_free(&self, addr: u64) {
        let _engine = self.lock();
        self.taped(|t| t.free(addr));
    }

    /// `torch.cuda.empty_cache()`, for the tape.
    pub fn note_empty_cache(&self) {
        let _engine = self.lock();
        self.taped(Tape::empty_cache);
    }

    /// Names the process (and its place in a job) in every dump taken.
    pub fn with_process(mut self, process: ProcessInfo) -> Allocator {
        self.process = Some(process);
        self
    }

    /// A dump of this allocator: its process named, with the time it was taken.
    fn stamped(&self, mut dump: Dump) -> Dump {
        if let Some(p) = &self.process {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            dump.process = Some(ProcessInfo { dumped_unix_ms: now.ok().map(|d| d.as_millis() as u64), ..p.clone() });
        }
        dump
    }

    /// Names where OOM dumps come from (`run` and the command, for a wrapped process).
    pub fn with_source(mut self, source: Source) -> Allocator {
        self.source = source;
        self
    }

    /// The lock. A panic elsewhere while holding it cannot leave the allocator half-updated
    /// in a way that matters more than losing the process's memory, so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Interns an op name once, for callers that allocate with the same name often.
    pub fn intern_op(&self, name: &str) -> u32 {
        self.lock().names_mut().ops.intern(name)
    }

    /// Allocates; on failure returns the report of this OOM. Zero bytes give address 0.
    pub fn allocate(&self, req: &Request<'_>) -> Result<u64, Oom> {
        let ips = if self.recording.stacks { Some(stack::capture(1)) } else { None };
        let t_ns = if self.recording.ops { self.clock.now_ns() } else { 0 };
        let mut engine = self.lock();
        let mut meta =
            Meta { t_ns, step: engine.current_step(), kind: req.kind.unwrap_or_else(scope::kind), ..Meta::default() };
        if self.recording.ops {
            let names = engine.names_mut();
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
            meta.stack = engine.names_mut().stacks.intern(ips.as_slice());
        }
        match engine.allocate(req.bytes, req.stream, meta) {
            Ok(addr) => {
                self.taped(|t| t.alloc(addr, req.bytes, req.stream, meta));
                Ok(addr)
            }
            Err(failure) => {
                let dump = self.stamped(engine.oom_dump(&failure, &self.source));
                drop(engine);
                Err(self.finish_oom(dump))
            }
        }
    }

    /// Symbolizes outside the lock: resolving can take tens of milliseconds.
    fn finish_oom(&self, mut dump: Dump) -> Oom {
        stack::symbolize(&mut dump);
        Oom { dump: Box::new(dump) }
    }

    /// Nanoseconds since the allocator was created: the clock of its records.
    pub fn elapsed_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Frees an allocation; address 0 is ignored. Returns the chunk size.
    pub fn free(&self, addr: u64) -> Result<u64, FreeError> {
        let t_ns = if self.recording.ops { self.clock.now_ns() } else { 0 };
        let mut engine = self.lock();
        let r = engine.free(addr, t_ns);
        if r.is_ok() {
            self.taped(|t| t.free(addr));
        }
        r
    }

    /// Marks the start of training step `step`.
    pub fn mark_step(&self, step: i64) {
        let t_ns = self.clock.now_ns();
        let mut engine = self.lock();
        engine.mark_step(step, t_ns);
        self.taped(|t| t.step(step));
    }

    pub fn stats(&self) -> Stats {
        self.lock().stats()
    }

    /// Says what the live allocation at `addr` is, learned after it was made (a parameter
    /// moved to the GPU, a gradient, optimizer state): its op becomes `op` when given (not
    /// scoped), its kind `kind`. False when nothing is allocated there.
    pub fn tag(&self, addr: u64, op: Option<&str>, kind: Kind) -> bool {
        let mut engine = self.lock();
        let op = op.map(|name| engine.names_mut().ops.intern(name));
        let r = Retag { op, kind: Some(kind), ..Retag::default() };
        self.taped(|t| t.retag(addr, r));
        engine.retag(addr, r)
    }

    /// Records the shape (and dtype) of the tensor that holds the live allocation at `addr`,
    /// known once the op that made it returned. False when nothing is allocated there.
    pub fn tag_shape(&self, addr: u64, shape: &[i64], dtype: Option<&str>) -> bool {
        let mut engine = self.lock();
        let names = engine.names_mut();
        let shape = Some(names.shapes.intern(shape));
        let dtype = dtype.map(|d| names.dtypes.intern(d));
        let r = Retag { shape, dtype, ..Retag::default() };
        self.taped(|t| t.retag(addr, r));
        engine.retag(addr, r)
    }

    /// The whole state, symbolized, as a dump.
    pub fn dump(&self, source: Source) -> Dump {
        let mut dump = self.stamped(self.lock().snapshot(source));
        stack::symbolize(&mut dump);
        dump
    }

    /// Runs `f` on the allocator under the lock (for checks, streams, the live feed).
    pub fn with_engine<R>(&self, f: impl FnOnce(&mut Engine) -> R) -> R {
        f(&mut self.lock())
    }
}
