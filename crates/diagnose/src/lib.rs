//! Why the memory ran out, and what to change: a [`Diagnosis`] read from a [`Dump`] alone,
//! so it works the same for replayed, simulated, imported and live dumps. A diagnosis is
//! data — the [`Cause`] with its figures and the [`Fix`] with its figures — and
//! `oomscope_report::verdict` writes the words: nothing here renders.
//!
//! The causes, checked in this order (the first that holds is the cause):
//! 1. **others** — the request was for memory outside the pool (cuDNN) and the pool, or
//!    other processes, had taken the device; or the allocator's limit allowed the request
//!    but the device did not have it;
//! 2. **single tensor** — the request is larger than everything the process could ever have
//!    free (its capacity minus weights, optimizer state and inputs);
//! 3. **growth** — live bytes at step boundaries keep rising and tensors from earlier steps
//!    are still live;
//! 4. **fragmentation** — enough bytes are free, but not in one block;
//! 5. **peak** — the working set is simply larger than the device.
//!
//! A fix is never one that is already on (garbage collection when it is enabled, growth
//! when the pool already grows). Fixes here are estimates from the dump; with a workload at
//! hand, `oomscope_sim::workload::fit::refine` replaces them with replayed answers.

use oomscope_format::Kind;
use oomscope_format::{Dump, ImportedFrom, KindBytes, Mode, OomRecord, Section, SettingChange, VerdictKind, WhatIf};

pub mod job;
mod message;
pub use message::{Budget, Contradiction, LARGEST_GPU, MessageCause, MessageDiagnosis, MessageFix};
use std::collections::BTreeMap;

/// What a diagnosis found: from an allocator's state (a dump with chunks, a log, a replay),
/// or from the figures of a pasted out-of-memory message. The two read different evidence
/// and propose different fixes, so each has its own causes and fixes, and a renderer
/// matches each exhaustively.
#[derive(Clone, Debug, PartialEq)]
pub enum Diagnosis {
    State(StateDiagnosis),
    Message(MessageDiagnosis),
}

/// The cause of an OOM (or of its absence) in an allocator's state, the change that fixes
/// it, and the live bytes by kind at the failure (at the end when nothing failed), largest
/// first.
#[derive(Clone, Debug, PartialEq)]
pub struct StateDiagnosis {
    pub cause: Cause,
    pub fix: Fix,
    pub breakdown: Vec<KindBytes>,
}

impl Diagnosis {
    pub fn kind(&self) -> VerdictKind {
        match self {
            Diagnosis::State(s) => s.cause.kind(),
            Diagnosis::Message(m) => m.cause.kind(),
        }
    }

    /// Live bytes by kind, largest first.
    pub fn breakdown(&self) -> &[KindBytes] {
        match self {
            Diagnosis::State(s) => &s.breakdown,
            Diagnosis::Message(m) => &m.breakdown,
        }
    }

    /// The fix, tried by replay.
    pub fn what_if(&self) -> Option<&WhatIf> {
        match self {
            Diagnosis::State(StateDiagnosis {
                fix: Fix::ExpandableSegments { what_if } | Fix::MaxSplitSize { what_if },
                ..
            }) => what_if.as_ref(),
            Diagnosis::State(StateDiagnosis { cause: Cause::Peak { pieces: Some(p), .. }, .. }) => Some(&p.replayed),
            _ => None,
        }
    }

    /// The diagnosis of an allocator's state, when it is one.
    pub fn state(&self) -> Option<&StateDiagnosis> {
        match self {
            Diagnosis::State(s) => Some(s),
            Diagnosis::Message(_) => None,
        }
    }
}

/// A failed request as a verdict names it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// The op that asked, when the input names one.
    pub op: Option<String>,
    pub requested: u64,
    pub rounded: u64,
    pub shape: Option<Vec<i64>>,
}

impl Request {
    fn of(o: &OomRecord) -> Request {
        Request { op: o.op.clone(), requested: o.requested, rounded: asked(o), shape: o.shape.clone() }
    }
}

/// Memory held outside this allocator, as far as the dump shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Elsewhere {
    /// Bytes other processes held when the device was opened (0: none or unknown).
    pub others: u64,
    /// The device's size.
    pub total: u64,
    /// Region sizes the device refused the pool.
    pub refused: Vec<u64>,
    /// The pool's peak: what the device gave after the refusals.
    pub pool_peak: u64,
}

/// Live bytes at a step boundary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepBytes {
    pub step: i64,
    pub bytes: u64,
}

/// Tensors of one op made in earlier steps and still live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Survivor {
    pub op: String,
    pub tensors: u64,
    pub bytes: u64,
    pub first_step: i64,
    pub last_step: i64,
}

/// What happened, with the figures that show it.
#[derive(Clone, Debug, PartialEq)]
pub enum Cause {
    /// A library asked the device for memory outside the allocator's pool (cuDNN, cuBLAS),
    /// and the pool and other processes had taken the rest.
    OutsideRequest {
        request: Request,
        device_free: u64,
        pool: u64,
        pool_free: u64,
        /// The pool took the device up front (allow_growth off).
        preallocated: bool,
        elsewhere: Elsewhere,
    },
    /// The allocator's limit allowed the request, but the device did not have it.
    DeviceRefused { request: Request, limit: u64, limit_headroom: u64, device_free: u64, elsewhere: Elsewhere },
    /// A log that shows the driver refusing TensorFlow's first regions: the pool took all the
    /// device would give, and other processes held the rest (with the card's size or a
    /// failure after it; the refusals alone say only that the pool got less).
    PoolTookDevice {
        /// The failed request's op, when the log has one; `outside` when it was for memory
        /// outside the pool (cuDNN's handle).
        op: Option<String>,
        outside: bool,
        refused: Vec<u64>,
        /// The region size after the last refusal: what the device gave.
        taken: u64,
        /// TF's limit, the whole card (0: not in the log).
        card: u64,
    },
    /// A partial log with the usage listing but neither the limit nor the free memory.
    PartialUsage {
        request: Option<Request>,
        live: u64,
        /// Nodes listed, with those the listing summed up.
        nodes: u64,
        /// The largest nodes (up to three).
        top: Vec<(String, u64)>,
        /// Bytes held by TF's layout optimizer's transposed copies, when they are a tenth of
        /// the live bytes or more.
        layout_copies: Option<u64>,
    },
    /// A partial log with only the failed request.
    PartialRequest { request: Option<Request> },
    /// A partial log whose allocator was full of live tensors at the failure (its `Stats`
    /// at the limit, or its occupancy bar all in use): a true peak, whatever was asked.
    /// (`free_tail`: the bar's free cells, all in one run at its end: the pool's one free
    /// piece, which the request did not fit.)
    PartialFull { request: Option<Request>, in_use: Option<u64>, limit: Option<u64>, free_tail: usize },
    /// A partial log whose allocator held almost nothing at the failure: what was asked was
    /// more than its whole limit.
    PartialEmpty { request: Option<Request>, in_use: u64, limit: u64 },
    /// A request more than any GPU has (or than the limit the log names), from a log without
    /// the rest of the allocator's figures.
    BeyondAnyGpu { request: Request, limit: Option<u64> },
    /// TensorFlow's first pool regions, sized from the memory the device reported, were more
    /// than any GPU has (`first`, backed off to `last`): the device's figure is wrong.
    DeviceMisreported { first: u64, last: u64 },
    /// One tensor is larger than all the memory the process could ever have free.
    SingleTensor {
        request: Request,
        /// Pool plus what the device could still give.
        capacity: u64,
        /// Weights, optimizer state and inputs: what does not shrink with the batch (`None`:
        /// the input does not say what the live tensors are).
        fixed: Option<u64>,
    },
    /// Live bytes rise from step to step until the OOM.
    Growth { first: StepBytes, last: StepBytes, per_step: u64, oom_step: i64, survivors: Vec<Survivor> },
    /// Enough bytes are free, but not in one block.
    Fragmentation {
        request: Request,
        pool_free: u64,
        /// Free chunks, and the largest (`None`: the input does not list the chunks, and TF's
        /// own `LargestFreeBlock` figure is always 0 in its report).
        pieces: Option<u64>,
        /// TensorBoard's `1 - largest free / free`, in [0, 1].
        fragmentation: f64,
        largest_free: Option<u64>,
        /// Ops of live tensors that sit between two free chunks, with how many, most first
        /// (`None`: tensors the input does not name).
        pinning: Vec<(Option<String>, u64)>,
    },
    /// The working set at the failure is larger than what can be had. `pieces`: the free
    /// memory was in pieces too small for the request, but the setting that joins pieces,
    /// replayed on the same requests, still failed: a note, not the cause.
    Peak { request: Request, in_use: u64, capacity: u64, top: Vec<(String, u64)>, pieces: Option<Pieces> },
    /// One dump, no step marks: most of the memory is tensors of one size, and the failed
    /// request is one more of them — what a loop that keeps each step's output leaves.
    ManyOfOneSize { request: Request, size: u64, count: u64, bytes: u64, in_use: u64 },
    /// Nothing failed, but live bytes grow every step.
    GrowingNoOom { first: StepBytes, last: StepBytes, per_step: u64, limit: u64, pool_peak: u64, reached_near: i64 },
    /// Nothing failed.
    Fits {
        peak: u64,
        limit: u64,
        pool_peak: u64,
        /// Region sizes the device refused (the pool got less than its limit).
        refused: Vec<u64>,
        others: u64,
        /// False when the device's size is not known (a PyTorch snapshot replayed without
        /// `--device`): `limit` is then only what the cache reached, and the headroom is
        /// unknown.
        limit_known: bool,
    },
}

impl Cause {
    /// The class a dump's `verdict.kind` names.
    pub fn kind(&self) -> VerdictKind {
        match self {
            // Without the card's size, the refusals say only that the device had no more to
            // give: TF backing off its first region (it went on with a smaller pool), or a
            // library beside a pool that took the device (cuBLAS's workspace after its handle
            // failed, often TF's own pool's doing). What held the memory is not in the log.
            Cause::PoolTookDevice { card: 0, op: None, .. } => VerdictKind::Undetermined,
            Cause::OutsideRequest { .. } | Cause::DeviceRefused { .. } | Cause::PoolTookDevice { .. } => {
                VerdictKind::Others
            }
            Cause::PartialUsage { .. } | Cause::PartialRequest { .. } => VerdictKind::Undetermined,
            Cause::PartialFull { .. } => VerdictKind::Peak,
            Cause::SingleTensor { .. }
            | Cause::PartialEmpty { .. }
            | Cause::BeyondAnyGpu { .. }
            | Cause::DeviceMisreported { .. } => VerdictKind::SingleTensor,
            Cause::Growth { .. } | Cause::GrowingNoOom { .. } | Cause::ManyOfOneSize { .. } => VerdictKind::Growth,
            Cause::Fragmentation { .. } => VerdictKind::Fragmentation,
            Cause::Peak { .. } => VerdictKind::Peak,
            Cause::Fits { .. } => VerdictKind::Fits,
        }
    }
}

/// What to change, with the figures that size it; never something already on.
#[derive(Clone, Debug, PartialEq)]
pub enum Fix {
    /// Nothing failed and nothing is short.
    Nothing,
    /// Nothing failed, but the device refused regions: with growth on, others share the
    /// device; with it off, let the pool grow on demand.
    DeviceShort { allow_growth: bool },
    /// The pool took the device up front: let it grow on demand (`peak_in_use` was enough),
    /// or cap it at `fraction` of the device.
    AllowGrowth { peak_in_use: u64, fraction: f64, total: u64 },
    /// The pool already grows: free what other processes hold, or cap below what is free.
    FreeDevice { others: u64, fraction: f64 },
    /// From a log of refusals: grow on demand, or cap at `fraction` of the card (0: unknown).
    GrowOrCap { fraction: f64, card: u64 },
    /// From a partial usage listing: what dominates says what to cut; channels-first when
    /// the layout optimizer's copies are large.
    FromUsage { dominant: Option<Kind>, layout_copies: Option<u64> },
    /// Give oomscope the whole log; if the first dimension is the batch, split it.
    /// `state_first`: the log is of TF 1.12 or older, which printed the allocator's state
    /// before its "Ran out of memory" line (later releases print it after).
    WholeLog { split: Option<SplitFirst>, state_first: bool },
    /// One request too large: at most `at_most` of the `batch` rows fit (`known`: the
    /// workload says it is the batch; `eval`: evaluation, averaged over chunks).
    SplitBatch { batch: u64, at_most: u64, known: bool, eval: bool },
    /// Even one row of the tensor (`row` bytes) does not fit.
    RowTooLarge { row: u64 },
    /// No batch dimension to cut: make the tensor smaller than `below`.
    ShrinkTensor { below: u64 },
    /// A request no device holds: find the shape that makes it.
    FindShape { request: u64 },
    /// The device reported memory no GPU has: check the driver and runtime, or set the limit.
    CheckDeviceMemory,
    /// The live tensors filled the allocator: shrink them (by `need` when the log says the
    /// request and the limit), and give the whole log for what they were.
    ShrinkWorkingSet { need: Option<u64> },
    /// Growth: free what `culprit` keeps each step.
    KeepNumbers { culprit: Option<String> },
    /// Growth without an OOM yet.
    FreeBeforeLimit { culprit: Option<String> },
    /// PyTorch fragmentation: expandable segments (`what_if`: the requests replayed with
    /// them, when there was a whole history or trace to replay).
    ExpandableSegments { what_if: Option<WhatIf> },
    /// PyTorch fragmentation with expandable segments already on: cap splitting.
    MaxSplitSize { what_if: Option<WhatIf> },
    /// TF fragmentation with empty regions: garbage collection returns them.
    GarbageCollection { empty_regions: usize },
    /// TF fragmentation across grown regions: preallocate one.
    OneRegion { regions: usize },
    /// Fragmentation otherwise: allocation order, or the driver's allocator.
    Reorder { pinning: Option<String>, rounded: u64 },
    /// A true peak: a smaller batch than `from` (the batch-sized part to `fraction` at most,
    /// for this allocation alone); `known`: the workload says `from` is the batch (else it is
    /// the failed tensor's first dimension). No batch is named, none having been checked:
    /// `fit` is the `oomscope fit` line that finds one, when the run's command is known.
    ReduceBatch { from: u64, fraction: f64, optimizer_dominates: bool, known: bool, fit: Option<String> },
    /// Tensors of one size accumulate: free what a loop keeps, or, if they are layers'
    /// activations, shrink the batch.
    KeepLess { size: u64 },
    /// A true peak where even a batch of 1 does not fit.
    EvenBatchOne { optimizer_dominates: bool },
    /// A true peak, batch unknown: cut the batch-sized memory to `fraction`.
    CutBatchSized { fraction: f64, optimizer_dominates: bool, fit: Option<String> },
    /// Replayed: train at `batch` instead of `from` (gradient accumulation keeps the batch).
    TrainAt { batch: u64, from: u64, free_at_peak: u64 },
    /// Replayed: evaluate `samples` in chunks of at most `chunk`.
    EvalInChunks { chunk: u64, samples: u64, free_at_peak: u64 },
    /// Replayed: not even batch 1 fits (`needed` at batch 1, `capacity` to be had).
    NothingFits { needed: u64, capacity: u64 },
    /// Replayed with growth on: the pool peaks at `peak_pool`; a cap at `fraction` of the
    /// device (`bytes`) also replays without an OOM, when it does.
    GrowthReplayed { peak_pool: u64, cap: Option<(f64, u64)> },
}

/// If the first dimension (`n`) of a shape is the batch: chunks of `rows`, `part` bytes each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitFirst {
    pub n: i64,
    pub rows: u64,
    pub part: u64,
}

/// What a request needed from the allocator: its rounded size, or (a log that printed only
/// a rounded figure of the request) the request.
fn asked(o: &OomRecord) -> u64 {
    if o.rounded > 0 { o.rounded } else { o.requested }
}

/// Bytes the process could have in one piece at the failure beyond what the pool holds:
/// a new region within both the limit and what the device had free.
fn growable(o: &OomRecord) -> u64 {
    o.limit_headroom.min(o.device_free) / 256 * 256
}

/// What the pool must grow by to serve the request: the segment PyTorch's caching
/// allocator asks the device for, else the rounded request.
fn growth_needed(o: &OomRecord) -> u64 {
    o.segment_request.unwrap_or(asked(o)).max(asked(o))
}

/// All the memory the process could have had: its pool plus what it could still obtain.
fn capacity(o: &OomRecord) -> u64 {
    o.pool_bytes + growable(o)
}

/// Live bytes by kind (recorded, or inferred from op names), largest first. From the chunks
/// when they carry op names, else from the usage listing (an imported log's chunks do not).
pub fn breakdown(d: &Dump) -> Vec<KindBytes> {
    let mut by: BTreeMap<Kind, u64> = BTreeMap::new();
    if d.live_chunks().any(|c| c.op.is_some()) || d.usage_by_node.is_empty() {
        let tf_log = d.imported.as_ref().is_some_and(|i| i.from == oomscope_format::ImportedFrom::TfLog);
        for c in d.live_chunks() {
            // A TF log's chunk named after a variable its size fits (the program's hook
            // said which) is the variable's bytes and slack BFC did not split off.
            if tf_log && c.kind.is_some() && c.requested > 0 && c.requested < c.size {
                *by.entry(c.kind()).or_default() += c.requested;
                *by.entry(Kind::Unknown).or_default() += c.size - c.requested;
            } else {
                *by.entry(c.kind()).or_default() += c.size;
            }
        }
    } else {
        for n in &d.usage_by_node {
            *by.entry(Kind::infer(&n.op)).or_default() += n.bytes;
        }
        if let Some([_, rest]) = d.imported.as_ref().and_then(|i| i.usage_remaining) {
            *by.entry(Kind::Unknown).or_default() += rest;
        }
    }
    let mut v: Vec<KindBytes> = by.into_iter().map(|(kind, bytes)| KindBytes { kind, bytes }).collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.kind.cmp(&b.kind)));
    v
}

/// The diagnosis of a dump. `replay(set)` answers what the caching allocator would have done
/// with the requests that led to the dump under its settings with `set` changed (the caller
/// replays them: `oomscope_replay::what_if`); a fix of the settings quotes the answer. A
/// caller without the requests passes `&mut |_| None`.
pub fn analyze(d: &Dump, replay: &mut dyn FnMut(SettingChange) -> Option<WhatIf>) -> Diagnosis {
    let b = breakdown(d);
    match d.imported.as_ref().and_then(|i| i.message.as_ref()) {
        Some(m) => Diagnosis::Message(message::analyze(d, m, b)),
        None => Diagnosis::State(state(d, b, replay)),
    }
}

/// The diagnosis of another out-of-memory error of a pasted text (another GPU's), from its
/// own figures, as the first's is made from its; `None` when its figures were not kept.
pub fn analyze_other(other: &oomscope_format::OtherOom) -> Option<Diagnosis> {
    let message = other.message.as_deref()?.clone();
    let requested = other.requested?;
    let d = Dump {
        oom: Some(OomRecord { requested, rounded: requested, step: -1, ..OomRecord::default() }),
        imported: Some(oomscope_format::Imported {
            from: ImportedFrom::Message,
            message: Some(message),
            ..oomscope_format::Imported::default()
        }),
        ..Dump::default()
    };
    Some(analyze(&d, &mut |_| None))
}

/// The diagnosis of an allocator's state (a dump, a log, a replay).
fn state(d: &Dump, b: Vec<KindBytes>, replay: &mut dyn FnMut(SettingChange) -> Option<WhatIf>) -> StateDiagnosis {
    if let Some(v) = stats_in_pieces(d, &b) {
        return v;
    }
    if d.imported.as_ref().is_some_and(|i| i.from == ImportedFrom::TfLog) && !complete_log(d) {
        return partial_log(d, b);
    }
    // Up to the failure: after it (with --keep-going) the failed allocations flatten the curve.
    let growth = growth(d, d.oom.as_ref().map_or(i64::MAX, |o| o.step));
    let Some(o) = &d.oom else {
        return fits(d, b, growth);
    };
    if let Some(v) = others(d, o, &b) {
        return v;
    }
    // Requests of parallel ops fail at the same moment: one that no memory could ever hold
    // is the cause, whichever of them the log happened to print first.
    let mut at_once: Vec<&OomRecord> = d.ooms.iter().filter(|x| x.step == o.step && !x.outside && *x != o).collect();
    at_once.sort_by_key(|x| std::cmp::Reverse(asked(x)));
    for candidate in std::iter::once(o).chain(at_once) {
        if let Some(v) = single_tensor(d, candidate, &b) {
            return v;
        }
    }
    if let Some(g) = growth {
        return growth_verdict(d, o, b, g);
    }
    if d.steps.is_empty()
        && let Some(v) = many_of_one_size(d, o, &b)
    {
        return v;
    }
    if let Some(v) = fragmentation(d, o, &b, replay) {
        return v;
    }
    peak(d, o, b)
}

fn elsewhere(d: &Dump) -> Elsewhere {
    Elsewhere {
        others: d.device.others,
        total: d.device.total,
        refused: d.refusals.iter().filter(|r| !r.outside).map(|r| r.bytes).collect(),
        pool_peak: d.stats.peak_pool_bytes,
    }
}

/// Let the pool grow, or cap it; or, when it already grows, free the device. `need` is
/// what must stay free besides.
fn growth_or_fraction(d: &Dump, need: u64) -> Fix {
    let dev = &d.device;
    let usable = dev.total.saturating_sub(dev.others).saturating_sub(need);
    let fraction = (usable as f64 / dev.total.max(1) as f64 * 20.0).floor() / 20.0;
    if d.allocator.allow_growth {
        Fix::FreeDevice { others: dev.others, fraction }
    } else {
        Fix::AllowGrowth { peak_in_use: d.stats.peak_bytes_in_use, fraction, total: dev.total }
    }
}

fn others(d: &Dump, o: &OomRecord, b: &[KindBytes]) -> Option<StateDiagnosis> {
    let a = &d.allocator;
    if o.outside {
        return Some(StateDiagnosis {
            cause: Cause::OutsideRequest {
                request: Request::of(o),
                device_free: o.device_free,
                pool: o.pool_bytes,
                pool_free: o.pool_bytes.saturating_sub(o.bytes_in_use),
                preallocated: !a.allow_growth,
                elsewhere: elsewhere(d),
            },
            fix: growth_or_fraction(d, o.requested),
            breakdown: b.to_vec(),
        });
    }
    // The limit allowed the request; the device did not have it.
    let grow = growable(o);
    let seg = growth_needed(o);
    if grow < seg && o.limit_headroom >= seg && o.largest_free_block < asked(o) {
        return Some(StateDiagnosis {
            cause: Cause::DeviceRefused {
                request: Request::of(o),
                limit: a.limit,
                limit_headroom: o.limit_headroom,
                device_free: o.device_free,
                elsewhere: elsewhere(d),
            },
            fix: growth_or_fraction(d, 0),
            breakdown: b.to_vec(),
        });
    }
    None
}

/// A TF log with what the full analysis needs: the request, and the limit and usage.
fn complete_log(d: &Dump) -> bool {
    d.has(Section::Request)
        && d.allocator.limit > 0
        && (d.has(Section::Totals) || d.has(Section::Stats))
        && d.oom.as_ref().is_some_and(|o| !o.outside && o.requested > 0 && !o.size_assumed)
}

/// A TF log whose `Stats:` block shows more free than the failed request, without its chunks:
/// TF's BFC allocator takes its whole limit as its first region (unless it grows, and then
/// it extends its pool as far as the device gives, and a refusal is logged), so the limit less
/// what is in use was free in its pool, and the request found no piece that large: the free
/// memory was in pieces. None otherwise.
fn stats_in_pieces(d: &Dump, b: &[KindBytes]) -> Option<StateDiagnosis> {
    if !d.regions.is_empty() {
        return None;
    }
    pool_in_pieces(d, b)
}

/// [`stats_in_pieces`] whatever chunks the log lists: for a log whose chunks did not show the
/// pieces (a paste cut inside them), where the `Stats:` still say the request fitted under
/// the limit.
fn pool_in_pieces(d: &Dump, b: &[KindBytes]) -> Option<StateDiagnosis> {
    let o = d.oom.as_ref()?;
    let limit = d.allocator.limit;
    let tf = d.imported.as_ref().is_some_and(|i| i.from == ImportedFrom::TfLog);
    if !tf || !d.has(Section::Stats) || limit == 0 || !d.refusals.is_empty() {
        return None;
    }
    let in_use = d.stats.bytes_in_use;
    let free = limit.checked_sub(in_use)?;
    let asked = asked(o);
    // (`InUse` of 0 is a figure the paste lost; a request the whole limit cannot hold is
    // another verdict's.)
    if in_use == 0 || o.requested == 0 || o.outside || asked > free {
        return None;
    }
    // Without the chunks, "in pieces" rests on the totals alone: a limit the request passes by
    // less than 2% of itself (and 16 MiB) is a pool full to within its rounding and its chunks'
    // own, a peak (InUse + the request 1.79 MiB under the limit), as for PyTorch's figures.
    if free - asked < (asked / 50).max(16 << 20) {
        return None;
    }
    // TF's occupancy bar draws the pool: one without a free cell (`_`) is a pool that grew
    // only as far as what is in use, the rest of the limit never its (a device that refused
    // more, or another report's bar). Not where what is free is less than one cell (a
    // hundredth of the pool): scattered, it leaves no cell free to draw.
    let bar = d.imported.as_ref().and_then(|i| i.occupancy.as_deref()).filter(|bar| bar.len() == 100);
    if bar.is_some_and(|bar| !bar.contains('_')) && free >= limit / 100 {
        return None;
    }
    Some(StateDiagnosis {
        cause: Cause::Fragmentation {
            request: Request::of(o),
            pool_free: free,
            pieces: None,
            fragmentation: d.stats.fragmentation,
            largest_free: None,
            pinning: Vec::new(),
        },
        fix: Fix::Reorder { pinning: None, rounded: asked },
        breakdown: b.to_vec(),
    })
}

/// Sizes that fall at each step: TF backing off its first pool region by a tenth.
pub fn backed_off(refused: &[u64]) -> bool {
    refused.len() >= 2 && refused.windows(2).all(|w| w[1] < w[0])
}

/// What a partial TF log allows: the preallocation story when the device refused regions,
/// else what the usage listing or the request show, said to be partial.
fn partial_log(d: &Dump, b: Vec<KindBytes>) -> StateDiagnosis {
    let o = d.oom.as_ref();
    let refused: Vec<u64> = d.refusals.iter().filter(|r| !r.outside).map(|r| r.bytes).collect();
    let card = d.allocator.limit;
    if let (Some(&first), Some(&last)) = (refused.first(), refused.last())
        && first > message::LARGEST_GPU
    {
        return StateDiagnosis {
            cause: Cause::DeviceMisreported { first, last },
            fix: Fix::CheckDeviceMemory,
            breakdown: b,
        };
    }
    // One refusal, or refusals that grow (a pool growing on demand asks for what it needs, not
    // TF backing off from its first region by a tenth each time), and nothing else: no
    // figure shows what held the device (another process starting beside it, or TF's own
    // estimate of the free memory): the request is all that is known.
    // (The same size refused again and again is a library's retry beside a pool that took
    // the device: cuBLAS's workspace after its handle failed. That story stays.)
    let growing = refused.len() == 1 || refused.iter().any(|&r| r > refused[0]);
    // (So is one refusal of TF's whole limit, and nothing after: others held between nothing
    // and what TF then took; the device may simply have had a little less than TF counted.)
    let whole_limit = refused.len() == 1 && card > 0 && refused[0].saturating_add(1 << 20) >= card;
    if let (true, true, None, Some(&first)) = (growing, card == 0 || whole_limit, o, refused.first()) {
        let request = Some(Request { requested: first, rounded: first, ..Request::default() });
        return StateDiagnosis {
            cause: Cause::PartialRequest { request },
            fix: Fix::WholeLog { split: None, state_first: false },
            breakdown: b,
        };
    }
    // TF's occupancy bar with every cell in use (`*`, or `x`: the rounding of a chunk in use,
    // which no other request can have): live tensors filled the pool. So with 95% of it in use
    // (as `Stats:` at 95% of the limit) and its free cells in one run at its end: the pool's
    // one free piece, which the request did not fit.
    let bar = d.imported.as_ref().and_then(|i| i.occupancy.as_deref()).filter(|bar| bar.len() == 100);
    let free_tail = bar.map_or(0, |bar| bar.len() - bar.trim_end_matches('_').len());
    let one_piece = bar.is_some_and(|bar| !bar.trim_end_matches('_').contains('_')) && free_tail <= 5;
    // (Not against `Stats:` that put what is in use well below the limit: a paste of two
    // reports.)
    let limit = (card >= 256 << 20).then_some(card);
    let stats_disagree = limit.is_some() && d.has(Section::Stats);
    let request = o.filter(|o| o.requested > 0 || o.shape.is_some() || o.op.is_some()).map(Request::of);
    // Refusals without the card's size say only that the pool got less than TF asked; a bar
    // all in use after them says the pool, whatever it got, was full of live tensors.
    if card == 0 && !refused.is_empty() && o.is_some() && one_piece && d.usage_by_node.is_empty() {
        return StateDiagnosis {
            cause: Cause::PartialFull { request, in_use: None, limit: None, free_tail },
            fix: Fix::ShrinkWorkingSet { need: None },
            breakdown: b,
        };
    }
    if let Some(&last) = refused.last() {
        // TF backs off by 10% (in f32) after each refusal and logs every refusal, so the size
        // after the last logged one is the one the device gave.
        let taken = oomscope_base::bins::rounded_bytes((last as f32 * 0.9f32) as u64);
        let fraction = if card > 0 { (taken as f64 * 0.9 / card as f64 * 20.0).floor() / 20.0 } else { 0.7 };
        return StateDiagnosis {
            cause: Cause::PoolTookDevice {
                op: o.and_then(|o| o.op.clone()),
                outside: o.is_some_and(|o| o.outside),
                refused,
                taken,
                card,
            },
            fix: Fix::GrowOrCap { fraction, card },
            breakdown: b,
        };
    }
    // (A pool of less than 256 MiB, `limit` above, is not a card's memory but what TF could get
    // of it, `Created TensorFlow device ... with 1 MB memory`: the GPU was nearly full when TF
    // started; a request beyond it says nothing of the tensor.)
    if let Some(o) = o.filter(|o| o.requested > message::LARGEST_GPU || limit.is_some_and(|l| o.requested > l)) {
        return StateDiagnosis {
            cause: Cause::BeyondAnyGpu { request: Request::of(o), limit },
            fix: Fix::FindShape { request: o.requested },
            breakdown: b,
        };
    }
    // The allocator's own figures without the request: at its limit, a true peak; with
    // almost nothing in use, the request alone was beyond the limit.
    if let Some(l) = limit.filter(|_| d.has(Section::Stats)) {
        let in_use = d.stats.bytes_in_use;
        if in_use.saturating_mul(100) >= l.saturating_mul(95) {
            return StateDiagnosis {
                cause: Cause::PartialFull { request, in_use: Some(in_use), limit, free_tail: 0 },
                fix: Fix::ShrinkWorkingSet {
                    need: o.filter(|o| o.requested > 0).map(|o| (in_use + o.requested).saturating_sub(l)),
                },
                breakdown: b,
            };
        }
        // (An `InUse` of 0 is a figure the paste lost, more often than nothing in use.)
        if in_use > 0 && in_use.saturating_mul(100) <= l {
            return StateDiagnosis {
                cause: Cause::PartialEmpty { request, in_use, limit: l },
                fix: Fix::ShrinkTensor { below: l },
                breakdown: b,
            };
        }
    }
    if one_piece && d.usage_by_node.is_empty() && !stats_disagree {
        return StateDiagnosis {
            cause: Cause::PartialFull { request, in_use: None, limit: None, free_tail },
            fix: Fix::ShrinkWorkingSet { need: None },
            breakdown: b,
        };
    }
    if !d.usage_by_node.is_empty() {
        let nodes =
            d.usage_by_node.len() as u64 + d.imported.as_ref().and_then(|i| i.usage_remaining).map_or(0, |r| r[0]);
        let live = d.usage_total();
        let layout: u64 = d.usage_by_node.iter().filter(|n| n.op.contains("LayoutOptimizer")).map(|n| n.bytes).sum();
        let dominant = b.first().map(|k| k.kind);
        let layout_copies = (layout.saturating_mul(10) > live).then_some(layout);
        return StateDiagnosis {
            cause: Cause::PartialUsage {
                request,
                live,
                nodes,
                top: d.usage_by_node.iter().take(3).map(|n| (n.op.clone(), n.bytes)).collect(),
                layout_copies,
            },
            fix: Fix::FromUsage { dominant, layout_copies },
            breakdown: b,
        };
    }
    let split = o
        .and_then(|o| o.shape.as_ref())
        .and_then(|s| s.first())
        .copied()
        .filter(|&n| n >= 10)
        .map(|n| SplitFirst { n, rows: n as u64 / 10, part: o.map_or(0, |o| o.requested) / 10 });
    let state_first =
        d.imported.as_ref().and_then(|i| i.variant).is_some_and(|v| v.header == oomscope_format::HeaderStyle::Old);
    StateDiagnosis { cause: Cause::PartialRequest { request }, fix: Fix::WholeLog { split, state_first }, breakdown: b }
}

/// The data came from a PyTorch snapshot: fixes are PyTorch's.
/// The dump is of PyTorch's caching allocator: imported from a snapshot, or recorded or
/// replayed through oomscope's.
fn torch(d: &Dump) -> bool {
    d.imported.as_ref().is_some_and(|i| i.from == ImportedFrom::TorchSnapshot)
        || d.allocator_kind() == oomscope_format::AllocatorKind::Caching
}

/// Live bytes that do not shrink with the batch: weights, their gradients, optimizer
/// state, collective buffers ([`Kind::scales_with_batch`]).
fn fixed_bytes(b: &[KindBytes]) -> u64 {
    b.iter().filter(|k| !k.kind.scales_with_batch()).map(|k| k.bytes).sum()
}

fn single_tensor(d: &Dump, o: &OomRecord, b: &[KindBytes]) -> Option<StateDiagnosis> {
    let cap = capacity(o);
    // What stays whatever this one tensor does: what does not scale with the batch, and
    // the inputs already on the device.
    let fixed = fixed_bytes(b) + b.iter().filter(|k| k.kind == Kind::Input).map(|k| k.bytes).sum::<u64>();
    let room = cap.saturating_sub(fixed);
    if asked(o) <= room {
        return None;
    }
    let eval = d.workload.as_ref().is_some_and(|w| w.mode == Mode::Eval);
    let batch = o.shape.as_ref().and_then(|s| s.first()).copied().filter(|&n| n > 1).map(|n| n as u64);
    let fix = match batch {
        Some(n) => {
            let at_most = (n as u128 * room as u128 / asked(o) as u128) as u64;
            if at_most == 0 {
                Fix::RowTooLarge { row: asked(o) / n }
            } else {
                let known = d.workload.as_ref().is_some_and(|w| w.batch == n);
                Fix::SplitBatch { batch: n, at_most, known, eval }
            }
        }
        None => Fix::ShrinkTensor { below: room },
    };
    let known = b.iter().any(|k| k.kind != Kind::Unknown && k.bytes > 0);
    Some(StateDiagnosis {
        cause: Cause::SingleTensor { request: Request::of(o), capacity: cap, fixed: known.then_some(fixed) },
        fix,
        breakdown: b.to_vec(),
    })
}

/// Live bytes rising across step boundaries.
struct Growth {
    first: StepBytes,
    last: StepBytes,
    per_step: f64,
}

fn growth(d: &Dump, until: i64) -> Option<Growth> {
    let marks: Vec<_> = d.steps.iter().filter(|s| s.step >= 0 && s.step <= until).collect();
    if marks.len() < 4 {
        return None;
    }
    // Skip the first step: it may still be warming up (lazy weights, caches).
    let tail = &marks[1..];
    let rising = tail.windows(2).all(|w| w[1].bytes_in_use >= w[0].bytes_in_use);
    let increases = tail.windows(2).filter(|w| w[1].bytes_in_use > w[0].bytes_in_use).count();
    let (f, l) = (tail.first()?, tail.last()?);
    if !rising || increases < 2 || l.bytes_in_use <= f.bytes_in_use || l.step <= f.step {
        return None;
    }
    let per_step = (l.bytes_in_use - f.bytes_in_use) as f64 / (l.step - f.step) as f64;
    Some(Growth {
        first: StepBytes { step: f.step, bytes: f.bytes_in_use },
        last: StepBytes { step: l.step, bytes: l.bytes_in_use },
        per_step,
    })
}

/// Ops whose tensors survive their step, most bytes first.
fn survivors(d: &Dump, current: i64) -> Vec<Survivor> {
    let mut by: BTreeMap<&str, (u64, u64, i64, i64)> = BTreeMap::new();
    for c in d.live_chunks() {
        let step = c.step.unwrap_or(-1);
        if step < 0 || step >= current || matches!(c.kind(), Kind::Weight | Kind::Optimizer) {
            continue;
        }
        let e = by.entry(c.op.as_deref().unwrap_or("unknown")).or_insert((0, 0, i64::MAX, i64::MIN));
        e.0 += 1;
        e.1 += c.size;
        e.2 = e.2.min(step);
        e.3 = e.3.max(step);
    }
    let mut v: Vec<Survivor> = by
        .into_iter()
        .map(|(op, (tensors, bytes, first_step, last_step))| Survivor {
            op: op.to_string(),
            tensors,
            bytes,
            first_step,
            last_step,
        })
        .collect();
    v.sort_by_key(|s| std::cmp::Reverse(s.bytes));
    v
}

fn growth_verdict(d: &Dump, o: &OomRecord, b: Vec<KindBytes>, g: Growth) -> StateDiagnosis {
    let current = o.step.max(d.steps.last().map_or(0, |s| s.step));
    let survivors = survivors(d, current);
    let culprit = survivors.first().map(|s| s.op.clone());
    StateDiagnosis {
        cause: Cause::Growth {
            first: g.first,
            last: g.last,
            per_step: g.per_step as u64,
            oom_step: o.step,
            survivors: survivors.into_iter().take(5).collect(),
        },
        fix: Fix::KeepNumbers { culprit },
        breakdown: b,
    }
}

fn fragmentation(
    d: &Dump,
    o: &OomRecord,
    b: &[KindBytes],
    replay: &mut dyn FnMut(SettingChange) -> Option<WhatIf>,
) -> Option<StateDiagnosis> {
    let pool_free = o.pool_bytes.saturating_sub(o.bytes_in_use);
    let grow = growable(o);
    // Growing takes a whole segment under PyTorch's caching allocator (20 MiB for a 6 MiB
    // request): room for the request alone is not room to grow.
    if pool_free + grow < asked(o) || o.largest_free_block >= asked(o) || grow >= growth_needed(o) {
        return None;
    }
    let a = &d.allocator;
    let chunks_known = !d.regions.is_empty() && d.has(Section::Regions);

    let pieces = d.regions.iter().flat_map(|r| &r.chunks).filter(|c| !c.in_use).count() as u64;
    let empty_regions: Vec<u64> =
        d.regions.iter().filter(|r| r.chunks.iter().all(|c| !c.in_use)).map(|r| r.size).collect();
    // Live tensors that sit between two free chunks: they are what splits the free space.
    let mut pinning: BTreeMap<Option<&str>, u64> = BTreeMap::new();
    for r in &d.regions {
        for w in r.chunks.windows(3) {
            if !w[0].in_use && w[1].in_use && !w[2].in_use {
                *pinning.entry(w[1].op.as_deref()).or_default() += 1;
            }
        }
    }
    let mut pins: Vec<(Option<String>, u64)> = pinning.into_iter().map(|(op, n)| (op.map(str::to_string), n)).collect();
    pins.sort_by_key(|p| std::cmp::Reverse(p.1));
    let fix = if torch(d) {
        let (set, what_if) =
            if a.expandable_segments { (MAX_SPLIT, replay(MAX_SPLIT)) } else { (EXPANDABLE, replay(EXPANDABLE)) };
        // The headline never contradicts its own replay: when the setting that joins the
        // pieces, replayed on the same requests, still runs out of memory, the pieces are
        // not the cause. A true peak, with them as a note.
        let fix = match set {
            MAX_SPLIT => Fix::MaxSplitSize { what_if: what_if.clone() },
            _ => Fix::ExpandableSegments { what_if: what_if.clone() },
        };
        if let Some(w) = what_if.filter(|w| w.changed.out_of_memory) {
            // Its fix stays the replayed one: reduce what is live (the batch `oomscope fit`
            // finds), then the setting.
            let mut v = peak(d, o, b.to_vec());
            if let Cause::Peak { pieces, .. } = &mut v.cause {
                *pieces = Some(Pieces {
                    pool_free,
                    largest_free: o.largest_free_block,
                    room: grow,
                    segment: growth_needed(o),
                    replayed: w,
                    fit: fit_line(d, first_dim(o)),
                });
            }
            v.fix = fix;
            return Some(v);
        }
        fix
    } else if !a.garbage_collection && !empty_regions.is_empty() && empty_regions.iter().sum::<u64>() + grow >= asked(o)
    {
        Fix::GarbageCollection { empty_regions: empty_regions.len() }
    } else if a.allow_growth && d.regions.len() > 1 {
        Fix::OneRegion { regions: d.regions.len() }
    } else {
        Fix::Reorder { pinning: pins.iter().find_map(|p| p.0.clone()), rounded: asked(o) }
    };
    Some(StateDiagnosis {
        cause: Cause::Fragmentation {
            request: Request::of(o),
            pool_free,
            pieces: chunks_known.then_some(pieces),
            fragmentation: d.stats.fragmentation,
            largest_free: chunks_known.then_some(o.largest_free_block),
            pinning: pins.into_iter().take(4).collect(),
        },
        fix,
        breakdown: b.to_vec(),
    })
}

/// The `oomscope fit` line for the program a run's dump `d` was taken from: its command,
/// with `{batch}` in place of its batch when exactly one argument is it (or ends `=it`),
/// else as it ran; on a simulated device, that device. None for anything but a run. The
/// batch: `n` (the failed tensor's first dimension), else a live input's first dimension.
pub fn fit_line(d: &Dump, n: Option<u64>) -> Option<String> {
    let command = d.source.command.as_deref().filter(|c| !c.trim().is_empty())?;
    if d.source.kind != oomscope_format::SourceKind::Run {
        return None;
    }
    let mut args: Vec<String> = command.split(' ').map(str::to_string).collect();
    // The batch: the failed tensor's first dimension, else the inputs' (largest first).
    let mut inputs: Vec<(u64, u64)> = d
        .live_chunks()
        .filter(|c| c.kind == Some(Kind::Input))
        .filter_map(|c| Some((c.size, *c.shape.as_ref()?.first()? as u64)))
        .collect();
    inputs.sort_by(|a, b| b.cmp(a));
    for n in n.into_iter().chain(inputs.into_iter().map(|(_, n)| n)).filter(|&n| n > 1) {
        let n = n.to_string();
        let at: Vec<usize> = (0..args.len())
            .filter(|&i| args[i] == n || args[i].rsplit_once('=').is_some_and(|(_, v)| v == n))
            .collect();
        if let [i] = at[..] {
            args[i] = match args[i].rsplit_once('=') {
                Some((k, _)) => format!("{k}={{batch}}"),
                None => "{batch}".to_string(),
            };
            break;
        }
    }
    let device = match d.device.kind {
        oomscope_format::DeviceKind::Sim => format!("--device {} ", oomscope_base::size::exact(d.device.total)),
        _ => String::new(),
    };
    Some(format!("oomscope fit {device}-- {}", args.join(" ")))
}

/// Free memory in pieces that a true peak had too: what was free, the largest piece, and the
/// replay of the setting that would have joined them, which still ran out of memory.
#[derive(Clone, Debug, PartialEq)]
pub struct Pieces {
    pub pool_free: u64,
    pub largest_free: u64,
    /// What the device had left to grow the cache, and the segment the request needed.
    pub room: u64,
    pub segment: u64,
    pub replayed: WhatIf,
    /// The `oomscope fit` line that finds the batch ([`fit_line`]).
    pub fit: Option<String>,
}

/// The caching allocator's settings its fragmentation fixes try.
pub const EXPANDABLE: SettingChange = SettingChange::ExpandableSegments;
pub const MAX_SPLIT: SettingChange = SettingChange::MaxSplitSizeMb(128);

/// The failed tensor's first dimension, when it may be a batch.
fn first_dim(o: &OomRecord) -> Option<u64> {
    o.shape.as_ref().and_then(|s| s.first()).copied().filter(|&n| n > 1).map(|n| n as u64)
}

fn peak(d: &Dump, o: &OomRecord, b: Vec<KindBytes>) -> StateDiagnosis {
    let cap = capacity(o);
    let need = o.bytes_in_use + asked(o);
    // What is needed fits what can be had: no peak, whatever else the log lacks. A TF log's
    // `Stats:` then say the pool's free memory was in pieces.
    if need <= cap
        && let Some(v) = pool_in_pieces(d, &b)
    {
        return v;
    }
    let fixed = fixed_bytes(&b);
    let optimizer_dominates = b.first().is_some_and(|k| k.kind == Kind::Optimizer);
    // Activations, inputs, the backward pass's tensors and temporaries scale with the
    // batch; weights, their gradients, optimizer state and collective buffers do not.
    // (A pool full to within its rounding, what is needed just under what can be had: below
    // it by the margin that would leave the request a piece of its own.)
    let room = if need <= cap { cap.saturating_sub((asked(o) / 50).max(16 << 20)) } else { cap };
    let fraction = if need > fixed { room.saturating_sub(fixed) as f64 / (need - fixed) as f64 } else { 1.0 };
    // The batch: the workload's, else (a log, a recording) the failed tensor's first
    // dimension, said to be a guess.
    let batch = d.workload.as_ref().map(|w| (w.batch, true)).or(first_dim(o).map(|n| (n, false)));
    let reduce =
        |n: u64, known| Fix::ReduceBatch { from: n, fraction, optimizer_dominates, known, fit: fit_line(d, Some(n)) };
    let fix = match batch {
        Some((n, true)) if (n as f64 * fraction).floor() >= 1.0 => reduce(n, true),
        Some((_, true)) => Fix::EvenBatchOne { optimizer_dominates },
        Some((n, false)) if fraction < 1.0 && (n as f64 * fraction).floor() >= 1.0 => reduce(n, false),
        _ => Fix::CutBatchSized { fraction: fraction.min(1.0), optimizer_dominates, fit: fit_line(d, None) },
    };
    StateDiagnosis {
        cause: Cause::Peak {
            request: Request::of(o),
            in_use: o.bytes_in_use,
            capacity: cap,
            top: d.usage_by_node.iter().take(3).map(|n| (n.op.clone(), n.bytes)).collect(),
            pieces: None,
        },
        fix,
        breakdown: b,
    }
}

/// Chunks that make [`Cause::ManyOfOneSize`]: this many of one size at least, holding this
/// share of what is in use at least. A network's activations come in several sizes; a
/// loop's kept outputs in one.
const MANY_CHUNKS: u64 = 50;
const MANY_SHARE: f64 = 0.75;

fn many_of_one_size(d: &Dump, o: &OomRecord, b: &[KindBytes]) -> Option<StateDiagnosis> {
    let mut by_size: BTreeMap<u64, u64> = BTreeMap::new();
    for c in d.live_chunks() {
        *by_size.entry(c.size).or_default() += 1;
    }
    let (&size, &count) = by_size.iter().max_by_key(|(size, count)| size.saturating_mul(**count))?;
    let bytes = size.saturating_mul(count);
    let one_more = asked(o) == size || rounded_chunk(asked(o)) == size;
    let in_use = o.bytes_in_use.max(1);
    if count < MANY_CHUNKS || (bytes as f64) < MANY_SHARE * in_use as f64 || !one_more {
        return None;
    }
    Some(StateDiagnosis {
        cause: Cause::ManyOfOneSize { request: Request::of(o), size, count, bytes, in_use: o.bytes_in_use },
        fix: Fix::KeepLess { size },
        breakdown: b.to_vec(),
    })
}

/// A request's chunk: TF rounds to 256 bytes.
fn rounded_chunk(n: u64) -> u64 {
    n.div_ceil(256).saturating_mul(256)
}

fn fits(d: &Dump, b: Vec<KindBytes>, growth: Option<Growth>) -> StateDiagnosis {
    let s = &d.stats;
    let limit = d.allocator.limit;
    match growth {
        Some(g) => {
            let steps_left =
                if g.per_step > 0.0 { (limit.saturating_sub(g.last.bytes) as f64 / g.per_step) as i64 } else { 0 };
            let culprit = survivors(d, g.last.step + 1).first().map(|s| s.op.clone());
            StateDiagnosis {
                cause: Cause::GrowingNoOom {
                    first: g.first,
                    last: g.last,
                    per_step: g.per_step as u64,
                    limit,
                    pool_peak: s.peak_pool_bytes,
                    reached_near: g.last.step + steps_left,
                },
                fix: Fix::FreeBeforeLimit { culprit },
                breakdown: b,
            }
        }
        None => {
            let refused: Vec<u64> = d.refusals.iter().filter(|r| !r.outside).map(|r| r.bytes).collect();
            let fix = if refused.is_empty() {
                Fix::Nothing
            } else {
                Fix::DeviceShort { allow_growth: d.allocator.allow_growth }
            };
            StateDiagnosis {
                cause: Cause::Fits {
                    peak: s.peak_bytes_in_use,
                    limit,
                    pool_peak: s.peak_pool_bytes,
                    refused,
                    others: d.device.others,
                    limit_known: d.device.total > 0,
                },
                fix,
                breakdown: b,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The diagnosis of an allocator's state, without a replay.
    fn state(d: &Dump) -> StateDiagnosis {
        match analyze(d, &mut |_| None) {
            Diagnosis::State(s) => s,
            m => panic!("{m:?}"),
        }
    }
    use oomscope_format::{AllocatorInfo, ChunkInfo, DeviceInfo, RegionInfo, StepMark};

    const MIB: u64 = 1 << 20;

    /// A dump of one region of `limit` bytes holding `chunks` (size, in use, op, kind) in
    /// address order, and a failed request of `request` bytes.
    fn dump(limit: u64, chunks: &[(u64, bool, &str, Kind)], request: u64) -> Dump {
        let mut addr = 0x7f00_0000_0000;
        let chunks: Vec<ChunkInfo> = chunks
            .iter()
            .map(|&(size, in_use, op, kind)| {
                let c = ChunkInfo {
                    address: addr,
                    size,
                    requested: size,
                    in_use,
                    op: in_use.then(|| op.to_string()),
                    kind: in_use.then_some(kind),
                    step: in_use.then_some(0),
                    ..ChunkInfo::default()
                };
                addr += size;
                c
            })
            .collect();
        let in_use: u64 = chunks.iter().filter(|c| c.in_use).map(|c| c.size).sum();
        let largest_free = chunks.iter().filter(|c| !c.in_use).map(|c| c.size).max().unwrap_or(0);
        let pool: u64 = chunks.iter().map(|c| c.size).sum();
        let mut d = Dump {
            version: oomscope_format::DUMP_VERSION,
            tool: String::new(),
            source: Default::default(),
            device: DeviceInfo { total: limit, free: limit - pool, ..DeviceInfo::default() },
            allocator: AllocatorInfo { name: "GPU_0_bfc".into(), limit, ..AllocatorInfo::default() },
            stats: oomscope_format::Stats {
                bytes_limit: limit,
                bytes_in_use: in_use,
                peak_bytes_in_use: in_use,
                pool_bytes: pool,
                peak_pool_bytes: pool,
                largest_free_block: largest_free,
                free_bytes: pool - in_use,
                fragmentation: if pool == in_use { 0.0 } else { 1.0 - largest_free as f64 / (pool - in_use) as f64 },
                ..Default::default()
            },
            regions: vec![RegionInfo { address: 0x7f00_0000_0000, size: pool, chunks, ..RegionInfo::default() }],
            ..Dump::default()
        };
        d.usage_by_node = oomscope_format::NodeUsage::rank(
            d.live_chunks().map(|c| (c.op.as_deref().unwrap_or(""), c.size, c.requested)),
            str::to_string,
        );
        if request > 0 {
            d.oom = Some(OomRecord {
                op: Some("model/next".into()),
                requested: request,
                rounded: request,
                bytes_in_use: in_use,
                pool_bytes: pool,
                largest_free_block: largest_free,
                limit_headroom: limit - pool,
                device_free: limit - pool,
                device_total: limit,
                ..OomRecord::default()
            });
        }
        d
    }

    #[test]
    fn a_full_device_is_a_true_peak_with_the_batch_sized_share() {
        let d = dump(
            100 * MIB,
            &[(10 * MIB, true, "model/kernel", Kind::Weight), (80 * MIB, true, "model/Relu", Kind::Activation)],
            20 * MIB,
        );
        let v = state(&d);
        let Cause::Peak { in_use, capacity, ref request, .. } = v.cause else { panic!("{v:?}") };
        assert_eq!((in_use, capacity, request.rounded), (90 * MIB, 100 * MIB, 20 * MIB));
        // 100 - 10 fixed = 90 MiB for the 80 + 20 MiB that scale with the batch: 90%.
        let Fix::CutBatchSized { fraction, optimizer_dominates: false, fit: None } = v.fix else { panic!("{v:?}") };
        assert!((fraction - 0.9).abs() < 1e-9, "{fraction}");
        assert_eq!(v.breakdown[0], KindBytes { kind: Kind::Activation, bytes: 80 * MIB });
        assert_eq!(v.cause.kind(), VerdictKind::Peak);
    }

    #[test]
    fn free_bytes_in_pieces_are_fragmentation_with_what_pins_them() {
        let d = dump(
            64 * MIB,
            &[
                (16 * MIB, false, "", Kind::Unknown),
                (8 * MIB, true, "model/keep", Kind::Activation),
                (16 * MIB, false, "", Kind::Unknown),
                (8 * MIB, true, "model/keep", Kind::Activation),
                (16 * MIB, false, "", Kind::Unknown),
            ],
            24 * MIB,
        );
        let v = state(&d);
        let Cause::Fragmentation { pool_free, pieces, largest_free, ref pinning, .. } = v.cause else {
            panic!("{v:?}")
        };
        assert_eq!((pool_free, pieces, largest_free), (48 * MIB, Some(3), Some(16 * MIB)));
        assert_eq!(pinning, &[(Some("model/keep".to_string()), 2)]);
        assert_eq!(v.fix, Fix::Reorder { pinning: Some("model/keep".into()), rounded: 24 * MIB });
    }

    #[test]
    fn a_request_larger_than_all_free_memory_is_a_single_tensor() {
        let mut d = dump(100 * MIB, &[(30 * MIB, true, "model/kernel", Kind::Weight)], 200 * MIB);
        d.oom.as_mut().unwrap().shape = Some(vec![1000, 200]);
        let v = state(&d);
        assert_eq!(
            v.cause,
            Cause::SingleTensor {
                request: Request {
                    op: Some("model/next".into()),
                    requested: 200 * MIB,
                    rounded: 200 * MIB,
                    shape: Some(vec![1000, 200])
                },
                capacity: 100 * MIB,
                fixed: Some(30 * MIB),
            }
        );
        // 70 MiB of room for a 200 MiB tensor of 1000 rows: 350 rows.
        assert_eq!(v.fix, Fix::SplitBatch { batch: 1000, at_most: 350, known: false, eval: false });
    }

    #[test]
    fn rising_step_marks_are_growth_with_the_survivors() {
        let mut d = dump(
            100 * MIB,
            &[(30 * MIB, true, "loss_history", Kind::Activation), (60 * MIB, true, "model/Relu", Kind::Activation)],
            20 * MIB,
        );
        for c in &mut d.regions[0].chunks {
            // The history survives from step 1; the activations are this step's.
            c.step = Some(if c.op.as_deref() == Some("loss_history") { 1 } else { 5 });
        }
        d.oom.as_mut().unwrap().step = 5;
        d.steps = (0..5)
            .map(|s| StepMark { step: s, t_ns: 0, bytes_in_use: s as u64 * 10 * MIB, pool_bytes: 0, live: 0 })
            .collect();
        let v = state(&d);
        let Cause::Growth { first, last, per_step, oom_step, ref survivors } = v.cause else { panic!("{v:?}") };
        assert_eq!((first.step, last.step, per_step, oom_step), (1, 4, 10 * MIB, 5));
        assert_eq!(survivors[0].op, "loss_history");
        assert_eq!(v.fix, Fix::KeepNumbers { culprit: Some("loss_history".into()) });
    }

    /// A snapshot's 64 MiB whose free 32 MiB is in two pieces around one 8 MiB tensor, and a
    /// 24 MiB request.
    fn pieces_of_a_snapshot() -> Dump {
        let mut d = dump(
            64 * MIB,
            &[
                (16 * MIB, false, "", Kind::Unknown),
                (8 * MIB, true, "x", Kind::Activation),
                (16 * MIB, false, "", Kind::Unknown),
            ],
            24 * MIB,
        );
        d.imported = Some(oomscope_format::Imported { from: ImportedFrom::TorchSnapshot, ..Default::default() });
        d
    }

    #[test]
    fn fixes_are_never_already_on() {
        let mut d = pieces_of_a_snapshot();
        // The headroom to grow is gone: the pool is the device.
        d.oom.as_mut().unwrap().limit_headroom = 0;
        assert_eq!(state(&d).fix, Fix::ExpandableSegments { what_if: None });
        d.allocator.expandable_segments = true;
        assert_eq!(state(&d).fix, Fix::MaxSplitSize { what_if: None }, "expandable segments are on already");
    }

    /// The headline never contradicts its own replay: free memory in pieces is fragmentation
    /// only when the setting the fix names makes the same requests fit; when its replay
    /// still runs out, it is a true peak with the pieces as a note, and the fix says the
    /// setting is not enough.
    #[test]
    fn fragmentation_only_when_the_named_setting_makes_the_requests_fit() {
        let mut d = pieces_of_a_snapshot();
        d.oom.as_mut().unwrap().limit_headroom = 0;
        let replayed = |oom: bool| WhatIf {
            set: EXPANDABLE.to_string(),
            capacity: 64 * MIB,
            requests: 3,
            changed: oomscope_format::Replayed { out_of_memory: oom, ..Default::default() },
            ..Default::default()
        };
        let with = |oom: bool| match analyze(&d, &mut |set| (set == EXPANDABLE).then(|| replayed(oom))) {
            Diagnosis::State(s) => s,
            m => panic!("{m:?}"),
        };
        let fits = with(false);
        assert!(matches!(fits.cause, Cause::Fragmentation { .. }), "{fits:?}");
        let still = with(true);
        let Cause::Peak { pieces: Some(p), .. } = &still.cause else { panic!("{still:?}") };
        assert_eq!((p.pool_free, p.largest_free, p.replayed.changed.out_of_memory), (32 * MIB, 16 * MIB, true));
        assert_eq!(still.fix, Fix::ExpandableSegments { what_if: Some(replayed(true)) });
        assert_eq!(still.cause.kind(), VerdictKind::Peak);
    }

    #[test]
    fn of_requests_that_fail_together_the_one_nothing_could_hold_is_the_cause() {
        // A small request failed first (the pool is full), while a parallel op asked for more
        // than the limit.
        let mut d = dump(
            100 * MIB,
            &[(90 * MIB, true, "model/Relu", Kind::Activation), (10 * MIB, false, "", Kind::Unknown)],
            20 * MIB,
        );
        let small = d.oom.clone().unwrap();
        let mut big = small.clone();
        big.requested = 200 * MIB;
        big.rounded = 200 * MIB;
        big.op = Some("model/conv/Relu".into());
        d.ooms = vec![small, big];
        let v = state(&d);
        let Cause::SingleTensor { ref request, .. } = v.cause else { panic!("{v:?}") };
        assert_eq!((request.op.as_deref().unwrap_or(""), request.requested), ("model/conv/Relu", 200 * MIB));
    }

    #[test]
    fn nothing_failed_fits() {
        let d = dump(64 * MIB, &[(16 * MIB, true, "x", Kind::Activation)], 0);
        let v = state(&d);
        assert_eq!(v.cause.kind(), VerdictKind::Fits);
        assert_eq!(v.fix, Fix::Nothing);
    }
}
