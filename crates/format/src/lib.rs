//! oomscope's formats as plain data: the [`Dump`] (everything known about an allocator at one
//! moment) and the messages of the live feed ([`live`]). Every renderer, the UI and the
//! exporters read these types; allocators write them; nothing here knows how an allocator
//! works or what a verdict means.
//!
//! A dump is written as JSON (documented field by field in `docs/dump-format.md`) and read
//! back to re-render the same reports offline. It holds names, not ids, so a dump stands on
//! its own. The live feed carries the same types (`docs/live-protocol.md`), so a live view
//! and a post-mortem read one model of state.
//!
//! Compatibility: fields are only ever added (readers ignore unknown fields and default
//! missing optional ones); `version` changes only when a field changes meaning, and a
//! reader refuses versions newer than it knows.

pub mod atomic;
pub mod feed;
pub mod fit;
mod imported;
mod input_error;
mod io;
pub mod job;
mod kind;
pub mod live;
mod message;
pub mod name;
mod stats;

pub use imported::{
    BinStyle, ChunkStyle, HeaderStyle, Imported, ImportedFrom, PasteDamage, PrefixStyle, Section, StatsStyle,
    TfVariant, TotalsStyle,
};
pub use input_error::InputError;
pub use io::{DumpError, open_regular, read, read_found, read_process, read_str, write_atomic};
pub use kind::{EventKind, Kind, StepMark};
pub use message::{CallSite, Framework, Message, MessageFormat, OtherOom, ProcessMemory, XlaProgram};
pub use name::{DeviceTag, DumpName, Moment};
pub use stats::{Refusal, Stats};

use serde::{Deserialize, Serialize};
use std::fmt;

/// How a dump's JSON and TF's text spell the op of a request that names none.
pub const UNNAMED_OP: &str = "unknown";

/// An op's name as reports print it: the name, or [`UNNAMED_OP`].
pub fn op_text(op: &Option<String>) -> &str {
    op.as_deref().unwrap_or(UNNAMED_OP)
}

/// A request's op in the dump's JSON: a string, `"unknown"` when there is none (dumps of
/// pasted messages written before this type read back the same way).
mod op_name {
    use serde::{Deserialize, Deserializer, Serializer};

    const NOT_NAMED_BEFORE: &str = "(not named in the message)";

    pub fn serialize<S: Serializer>(op: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(super::op_text(op))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        let name = String::deserialize(d)?;
        Ok((name != super::UNNAMED_OP && name != NOT_NAMED_BEFORE).then_some(name))
    }
}

/// The dump format version this build writes and reads.
pub const DUMP_VERSION: u32 = 1;

/// TF's name for GPU 0, used where the device is not otherwise named.
pub const DEFAULT_DEVICE_NAME: &str = "/job:localhost/replica:0/task:0/device:GPU:0";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dump {
    pub version: u32,
    /// `oomscope <version>` that wrote it.
    pub tool: String,
    pub source: Source,
    pub device: DeviceInfo,
    pub allocator: AllocatorInfo,
    pub stats: Stats,
    /// The first failed request, or null when none failed.
    pub oom: Option<OomRecord>,
    /// Every failed request (up to 100 000; `ooms_total` counts them all).
    pub ooms: Vec<OomRecord>,
    #[serde(default)]
    pub ooms_total: u64,
    /// Live bytes by op name, largest first (ties: the op seen first comes first).
    pub usage_by_node: Vec<NodeUsage>,
    /// The moment the bytes in use peaked and what was live then; present when nothing
    /// failed (at a failure, the dump's own state is the one that matters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak: Option<PeakInfo>,
    /// The 21 bins; chunks are counted into bins by size, in use or free, as TF does.
    pub bins: Vec<BinInfo>,
    /// Regions in address order, each with its chunks in address order.
    pub regions: Vec<RegionInfo>,
    /// Call stacks referred to by chunks' `stack` index.
    #[serde(default)]
    pub stacks: Vec<StackInfo>,
    /// The most recent events, oldest first.
    #[serde(default)]
    pub events: Vec<EventInfo>,
    /// Events that happened in all (the history keeps the last ones).
    #[serde(default)]
    pub events_total: u64,
    /// Live bytes at each step boundary (the last 4096 steps).
    #[serde(default)]
    pub steps: Vec<StepMark>,
    /// Region requests the device refused (the first 64).
    #[serde(default)]
    pub refusals: Vec<Refusal>,
    /// Live memory taken from the device outside the pool (cuDNN, cuBLAS handles).
    #[serde(default)]
    pub outside: Vec<OutsideInfo>,
    /// The simulated workload, when the dump comes from one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadInfo>,
    /// Why the memory ran out and what to change (the words `oomscope_report::verdict` writes for a diagnosis of `oomscope_diagnose`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// Set by importers: the origin, and the sections the input did not have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported: Option<Imported>,
    /// How a replay of a PyTorch snapshot's trace went (`oomscope replay SNAPSHOT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayInfo>,
    /// A trace replayed under several settings of PyTorch's caching allocator (`oomscope
    /// replay TRACE --set ...`): the replays side by side; the dump's state is the last one's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what_ifs: Option<WhatIfTable>,
    /// The process that wrote it and its place in a job (a dump written under `oomscope
    /// run`, or by a program loading the library).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessInfo>,
}

/// An empty dump of this version: what code that builds a dump (a test, an importer) starts
/// from.
impl Default for Dump {
    fn default() -> Dump {
        Dump {
            version: DUMP_VERSION,
            tool: String::new(),
            source: Source::default(),
            device: DeviceInfo::default(),
            allocator: AllocatorInfo::default(),
            stats: Stats::default(),
            oom: None,
            ooms: Vec::new(),
            ooms_total: 0,
            usage_by_node: Vec::new(),
            peak: None,
            bins: Vec::new(),
            regions: Vec::new(),
            stacks: Vec::new(),
            events: Vec::new(),
            events_total: 0,
            steps: Vec::new(),
            refusals: Vec::new(),
            outside: Vec::new(),
            workload: None,
            verdict: None,
            imported: None,
            replay: None,
            what_ifs: None,
            process: None,
        }
    }
}

/// A process and its place in a job, from the launcher's environment (torchrun,
/// `torch.distributed.launch`, accelerate, DeepSpeed, SLURM, Open MPI). A field the launcher
/// does not give is null.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub pid: u32,
    /// The host's name.
    pub host: String,
    /// The process's rank in the job (`RANK`, `SLURM_PROCID`, `OMPI_COMM_WORLD_RANK`).
    pub rank: Option<u32>,
    /// Its rank on its node (`LOCAL_RANK`, `SLURM_LOCALID`, `OMPI_COMM_WORLD_LOCAL_RANK`).
    pub local_rank: Option<u32>,
    /// Processes in the job (`WORLD_SIZE`, `SLURM_NTASKS`, `OMPI_COMM_WORLD_SIZE`).
    pub world_size: Option<u32>,
    /// Processes on its node (`LOCAL_WORLD_SIZE`, `SLURM_NTASKS_PER_NODE`,
    /// `OMPI_COMM_WORLD_LOCAL_SIZE`).
    pub local_world_size: Option<u32>,
    /// Its node's rank (`GROUP_RANK`, `SLURM_NODEID`, `OMPI_COMM_WORLD_NODE_RANK`).
    pub node_rank: Option<u32>,
    /// What names the job, the same on every node: torchrun's run id, SLURM's job id, the
    /// rendezvous address (`MASTER_ADDR:MASTER_PORT`).
    pub job: Option<String>,
    /// What launched it: `torchrun`, `slurm`, `mpi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<String>,
    /// When the dump was taken, milliseconds since the Unix epoch: orders the ranks' dumps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dumped_unix_ms: Option<u64>,
    /// The `oomscope run` that started the process (`OOMSCOPE_RUN`, one per run): a run
    /// claims only its own processes' dumps in a directory that other runs share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
}

impl ProcessInfo {
    /// Whether the process has a place in a job (a rank).
    pub fn in_job(&self) -> bool {
        self.rank.is_some()
    }

    /// Its nodes are several (a rank on each node would not say which).
    pub fn multi_node(&self) -> bool {
        matches!((self.world_size, self.local_world_size), (Some(w), Some(l)) if l < w)
    }
}

impl Dump {
    /// The GPU's number: the last number of the device's name (`cuda:2`,
    /// `/job:localhost/replica:0/task:0/device:GPU:2`).
    pub fn gpu(&self) -> Option<u32> {
        self.device.name.rsplit(':').next()?.parse().ok()
    }

    /// The allocator whose state this is: PyTorch's caching allocator when the dump has its
    /// part, else TensorFlow's BFC allocator.
    pub fn allocator_kind(&self) -> AllocatorKind {
        if self.allocator.caching.is_some() { AllocatorKind::Caching } else { AllocatorKind::Bfc }
    }
}

/// Which allocator made a dump ([`Dump::allocator_kind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocatorKind {
    /// TensorFlow's BFC allocator (and what is read as it: TF's logs).
    Bfc,
    /// PyTorch's caching allocator.
    Caching,
}

/// A PyTorch snapshot's trace replayed: how closely the replayed allocator followed the
/// recorded one, and the what-ifs side by side.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayInfo {
    /// Trace entries replayed.
    pub entries: u64,
    /// The trace starts from an empty allocator (else the start was rebuilt from the final
    /// state: `restored_segments` with `restored_blocks` live blocks).
    pub starts_empty: bool,
    pub restored_segments: u64,
    pub restored_blocks: u64,
    /// Allocations replayed, and those placed at the address PyTorch gave them.
    pub allocations: u64,
    pub placed: u64,
    /// The snapshot's final segments, and those the replay reproduced block for block.
    pub final_segments: u64,
    pub final_segments_equal: u64,
    /// The trace's own out-of-memory errors, replayed.
    pub ooms: u64,
    pub peak_reserved: u64,
    pub peak_allocated: u64,
    /// The settings of the replay as recorded (empty: the defaults), and whether the snapshot
    /// recorded them (PyTorch 2.4 and later) or they were read from its segments.
    pub settings: String,
    pub settings_recorded: bool,
    /// The moment the dump's state is from.
    pub state: ReplayState,
    /// The memory the recorded run could have, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<ReplayLimit>,
    /// Replays of the same requests, the allocator deciding everything, on `limit`: the
    /// settings as recorded first, then each `--set`.
    #[serde(default)]
    pub what_ifs: Vec<WhatIfRow>,
}

/// The moment a replay's dump shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayState {
    /// The end of the trace.
    #[default]
    End,
    /// The first out-of-memory error (the program went on after it).
    FirstOom,
}

/// The memory a recorded run could have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayLimit {
    pub kind: LimitKind,
    pub bytes: u64,
}

/// What bounded a recorded run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// The device's memory, given with `--device`.
    Device,
    /// Read from a recorded OOM that the device refused: what PyTorch held plus what the
    /// device had free.
    DeviceAtOom,
    /// Read from a recorded OOM that the device had room for: a memory fraction capped the
    /// process, between the most it reserved and what the failed request needed.
    Fraction,
    /// The run gave segments back without an OOM: the most it reserved.
    PeakReserved,
}

/// Replays of the same requests under several settings, side by side.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhatIfTable {
    /// The memory they ran on (absent: as much as they needed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<ReplayLimit>,
    /// The settings in force first, then each change.
    pub rows: Vec<WhatIfRow>,
}

/// One row of a what-if table.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhatIfRow {
    /// The settings (empty: the defaults).
    pub settings: String,
    /// Requests that failed.
    pub ooms: u64,
    pub peak_reserved: u64,
    pub peak_allocated: u64,
    /// Segments (or pages) asked of the device.
    pub device_allocs: u64,
}

/// Where a dump came from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    pub kind: SourceKind,
    /// The input file, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The command that ran, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Seconds since the Unix epoch when the dump was taken (absent in replays, which are
    /// reproducible to the byte).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_unix: Option<u64>,
}

/// What made a dump.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    /// A trace replayed (`oomscope replay`).
    Replay,
    /// A program using the library's allocator directly.
    #[default]
    Api,
    /// A process under `oomscope run` (the C ABI).
    Run,
    /// A built-in story (`oomscope demo`).
    Demo,
    /// Imported from a TensorFlow log.
    TfLog,
    /// Imported from a PyTorch memory snapshot.
    TorchSnapshot,
    /// Imported from an out-of-memory message (pasted, or a log without an allocator dump).
    Message,
    /// A source a newer oomscope wrote.
    #[serde(other)]
    Other,
}

impl SourceKind {
    /// The name dumps use.
    pub fn name(self) -> &'static str {
        match self {
            SourceKind::Replay => "replay",
            SourceKind::Api => "api",
            SourceKind::Run => "run",
            SourceKind::Demo => "demo",
            SourceKind::TfLog => "tf-log",
            SourceKind::TorchSnapshot => "torch-snapshot",
            SourceKind::Message => "message",
            SourceKind::Other => "other",
        }
    }
}

/// Where a device's regions come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    /// oomscope's simulated GPU.
    #[default]
    Sim,
    /// A real GPU through the CUDA driver (also what imported logs and snapshots describe).
    Cuda,
    /// Not said, or a backend a newer oomscope knows.
    #[serde(other)]
    Other,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub kind: DeviceKind,
    /// TF-style device name printed in "Current usage from device".
    pub name: String,
    /// Hardware name.
    pub model: String,
    pub total: u64,
    /// Free device memory when the dump was taken.
    pub free: u64,
    /// Bytes held by other processes when the device was opened, when known.
    pub others: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AllocatorInfo {
    pub name: String,
    pub limit: u64,
    pub allow_growth: bool,
    pub garbage_collection: bool,
    pub fragmentation_fraction: f64,
    /// Waste above which a chunk is split even when it is less than twice the request.
    pub max_internal_fragmentation: u64,
    pub curr_region_allocation_bytes: u64,
    /// PyTorch's `expandable_segments` was on (segments grow in place).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expandable_segments: bool,
    /// PyTorch's caching allocator: its settings as a `PYTORCH_CUDA_ALLOC_CONF` string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<String>,
    /// PyTorch's caching allocator: its statistics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caching: Option<Box<CachingStats>>,
    /// The PyTorch the program ran (`2.11.0+cu130`), when known: its OOM message is that
    /// version's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_version: Option<String>,
}

/// A failed allocation request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomRecord {
    /// Position in the event sequence.
    pub seq: u64,
    pub requested: u64,
    pub rounded: u64,
    /// The op that asked, when the input names one (written `"unknown"` otherwise).
    #[serde(with = "op_name")]
    pub op: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<i64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Kind>,
    pub step: i64,
    pub t_ns: u64,
    /// The request was for memory outside the pool, straight from the device.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outside: bool,
    /// `requested` is the shape's size in float: the log printed neither the size nor the
    /// element type.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub size_assumed: bool,
    pub bytes_in_use: u64,
    pub pool_bytes: u64,
    pub largest_free_block: u64,
    /// Bytes the allocator could still have taken from the device under its limit.
    pub limit_headroom: u64,
    pub device_free: u64,
    pub device_total: u64,
    /// Region sizes the device refused while serving this request.
    #[serde(default)]
    pub device_refusals: Vec<u64>,
    /// PyTorch: the segment the allocator asked the device for (its `Tried to allocate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment_request: Option<u64>,
    /// The processes with memory on the GPU then, as NVML lists them (this one marked);
    /// empty when not known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessMemory>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeUsage {
    pub op: String,
    /// Sum of chunk sizes (what TF's report counts).
    pub bytes: u64,
    /// Sum of requested sizes.
    #[serde(default)]
    pub requested: u64,
    pub count: u64,
}

impl NodeUsage {
    /// Live chunks, as (key, size, requested), summed by key: largest first, ties in key
    /// order (for interned ids, the order the ops were first seen, as TF's report lists
    /// them). `name` gives a key's op name.
    pub fn rank<K: Copy + Ord + std::hash::Hash>(
        chunks: impl IntoIterator<Item = (K, u64, u64)>,
        mut name: impl FnMut(K) -> String,
    ) -> Vec<NodeUsage> {
        let mut by: oomscope_base::hash::FastMap<K, (u64, u64, u64)> = Default::default();
        for (key, size, requested) in chunks {
            let n = by.entry(key).or_default();
            n.0 += size;
            n.1 += requested;
            n.2 += 1;
        }
        let mut v: Vec<(K, (u64, u64, u64))> = by.into_iter().collect();
        v.sort_by(|(ka, a), (kb, b)| b.0.cmp(&a.0).then(ka.cmp(kb)));
        v.into_iter().map(|(k, (bytes, requested, count))| NodeUsage { op: name(k), bytes, requested, count }).collect()
    }
}

/// The moment the bytes in use were highest: the first time they reached the peak.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeakInfo {
    /// Bytes in use at the peak (`stats.peak_bytes_in_use`).
    pub bytes_in_use: u64,
    /// Live allocations at the peak.
    pub allocations: u64,
    /// Position in the event sequence of the allocation that reached the peak; absent when
    /// no event did: the state a replay started from (a PyTorch snapshot's) was the peak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The op of that allocation (`(allocated before recording began)` for a replay's
    /// starting state).
    pub op: String,
    /// Its step (`-1` before the first step mark, and for a replay's starting state).
    pub step: i64,
    pub t_ns: u64,
    /// Live bytes by op name at the peak, ranked as the dump's `usage_by_node`.
    pub usage_by_node: Vec<NodeUsage>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BinInfo {
    pub index: u32,
    /// Smallest chunk size of the bin (`256 << index`).
    pub size: u64,
    pub total_chunks: u64,
    pub chunks_in_use: u64,
    pub bytes: u64,
    pub bytes_in_use: u64,
    pub requested_in_use: u64,
    /// Bytes requested for all the bin's chunks, in use or not: only TF before 1.3 printed
    /// it ("client-requested for chunks"), so only imports of such logs have it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested: Option<u64>,
}

/// A region: TF's BFC region, or a segment of PyTorch's caching allocator (then with its
/// stream, pool and whether it is a mapped range of an expandable segment).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionInfo {
    pub address: u64,
    pub size: u64,
    pub chunks: Vec<ChunkInfo>,
    /// The CUDA stream the segment belongs to (PyTorch; 0 is the default stream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<u64>,
    /// PyTorch's pool: segments of 2 MiB for requests up to 1 MiB, or large ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<SegmentPool>,
    /// A contiguous mapped range of an expandable segment (`expandable_segments:True`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expandable: bool,
}

/// PyTorch's two pools (`segment_type` in its snapshots).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentPool {
    Small,
    Large,
}

/// What PyTorch's caching allocator counts (`torch.cuda.memory_stats()`), for its summary:
/// current and peak of each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachingStats {
    /// The limit `set_per_process_memory_fraction` set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed: Option<u64>,
    pub allocated: Counter,
    pub reserved: Counter,
    pub active: Counter,
    pub requested: Counter,
    /// Free blocks inside split segments (`inactive_split_bytes`).
    pub inactive_split: Counter,
    pub segments: Counter,
    pub allocations: Counter,
    pub alloc_retries: u64,
    pub ooms: u64,
    pub device_allocs: u64,
    pub device_frees: u64,
}

/// A current value and its peak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    pub current: u64,
    pub peak: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkInfo {
    pub address: u64,
    pub size: u64,
    /// The client's request; on free chunks a stale value, as in TF's dump.
    pub requested: u64,
    pub in_use: bool,
    /// Freed by the program, still in use on another stream (PyTorch's
    /// `active_pending_free`); `in_use` is false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending_free: bool,
    /// Handle of the next chunk in the region (TF prints it as `next N`); null for the last.
    #[serde(default)]
    pub next: Option<u64>,
    /// Op name (in-use chunks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<i64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Kind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_ns: Option<u64>,
    /// Index into the dump's `stacks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<u32>,
}

impl ChunkInfo {
    /// The recorded kind, or the one inferred from the op name; unknown without either (a
    /// TF log's chunk lines name no op).
    pub fn kind(&self) -> Kind {
        match (&self.kind, &self.op) {
            (Some(k), _) if *k != Kind::Unknown => *k,
            (_, Some(op)) => Kind::infer(op),
            _ => Kind::Unknown,
        }
    }
}

/// Live memory taken from the device outside the pool.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutsideInfo {
    pub address: u64,
    pub size: u64,
    pub op: String,
    pub step: i64,
}

/// A simulated workload: enough to say "batch 1 fits" in its own terms.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadInfo {
    pub name: String,
    pub mode: Mode,
    pub batch: u64,
    pub optimizer: Optimizer,
    /// One sample's input shape.
    pub input: Vec<u64>,
    pub dtype: String,
}

/// Training (forward, backward, optimizer step) or evaluation (forward only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    #[default]
    Train,
    Eval,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Train => "train",
            Mode::Eval => "eval",
        }
    }
}

/// The optimizer whose state a simulated workload keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Optimizer {
    #[default]
    None,
    Sgd,
    Momentum,
    Adam,
}

impl Optimizer {
    pub fn name(self) -> &'static str {
        match self {
            Optimizer::None => "none",
            Optimizer::Sgd => "sgd",
            Optimizer::Momentum => "momentum",
            Optimizer::Adam => "adam",
        }
    }
}

/// The cause of an OOM and the change that fixes it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub kind: VerdictKind,
    /// One sentence: what happened.
    pub headline: String,
    /// The figures that support it.
    pub evidence: Vec<String>,
    /// What to change, with numbers; never something already on.
    pub fix: String,
    /// Live bytes by kind at the failure (or at the end when nothing failed), largest first.
    #[serde(default)]
    pub breakdown: Vec<KindBytes>,
    /// The fix tried: the same requests replayed under the changed settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what_if: Option<WhatIf>,
}

/// The same requests replayed through the same allocator twice, on the memory the run
/// had: under the settings in force, and with `set` changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhatIf {
    /// The change, in the allocator's own terms (`expandable_segments:True`).
    pub set: String,
    /// The settings in force (empty: the defaults).
    pub settings: String,
    /// Bytes the allocator could have (what it held plus what was free, under any limit).
    pub capacity: u64,
    /// Allocation requests replayed.
    pub requests: u64,
    pub as_run: Replayed,
    pub changed: Replayed,
}

/// A change of PyTorch's caching allocator's settings that a fix tries by replay: typed
/// where it crosses crates (the diagnosis asks for it, the replay applies it, the renderer
/// names it), written in PyTorch's own terms only in a `WhatIf` and in words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SettingChange {
    /// `expandable_segments:True`.
    ExpandableSegments,
    /// `max_split_size_mb:N`.
    MaxSplitSizeMb(u64),
}

impl fmt::Display for SettingChange {
    /// In `PYTORCH_CUDA_ALLOC_CONF`'s terms.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingChange::ExpandableSegments => f.write_str("expandable_segments:True"),
            SettingChange::MaxSplitSizeMb(mb) => write!(f, "max_split_size_mb:{mb}"),
        }
    }
}

/// How one replay of a what-if went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replayed {
    /// A request failed.
    pub out_of_memory: bool,
    pub peak_reserved: u64,
    pub peak_allocated: u64,
}

/// The classes of OOM oomscope tells apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    /// One tensor is larger than all the memory the process could ever have free.
    SingleTensor,
    /// Memory is held by other processes, or reserved by the allocator, and the device refused.
    Others,
    /// Live memory rises from step to step: something survives its step.
    Growth,
    /// Enough bytes are free, but not in one block.
    Fragmentation,
    /// The working set at the failure is simply larger than the device.
    Peak,
    /// Nothing failed.
    Fits,
    /// The input (a partial log) does not show enough to tell the causes apart.
    #[default]
    Undetermined,
}

impl VerdictKind {
    pub fn name(self) -> &'static str {
        match self {
            VerdictKind::SingleTensor => "one tensor too large",
            VerdictKind::Others => "memory held elsewhere",
            VerdictKind::Growth => "growth across steps",
            VerdictKind::Fragmentation => "fragmentation",
            VerdictKind::Peak => "true peak",
            VerdictKind::Fits => "fits",
            VerdictKind::Undetermined => "not enough information",
        }
    }
}

/// Bytes of one kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindBytes {
    pub kind: Kind,
    pub bytes: u64,
}

/// A call stack: raw instruction pointers and, once symbolized, frames.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackInfo {
    pub ips: Vec<u64>,
    #[serde(default)]
    pub frames: Vec<Frame>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    pub ip: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

impl Frame {
    /// `function (file:line)`, or the address when the frame has no symbol.
    pub fn text(&self) -> String {
        let mut out = self.function.clone().unwrap_or_else(|| format!("{:#x}", self.ip));
        if let Some(file) = &self.file {
            out.push_str(&format!(" ({file}"));
            if let Some(line) = self.line {
                out.push_str(&format!(":{line}"));
            }
            out.push(')');
        }
        out
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventInfo {
    pub seq: u64,
    pub t_ns: u64,
    pub kind: EventKind,
    pub address: u64,
    pub size: u64,
    pub requested: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    pub step: i64,
}

impl Dump {
    /// In-use chunks, in address order.
    pub fn live_chunks(&self) -> impl Iterator<Item = &ChunkInfo> {
        self.regions.iter().flat_map(|r| r.chunks.iter()).filter(|c| c.in_use)
    }

    /// Bytes listed in `usage_by_node` (with an imported "Remaining N nodes with X").
    pub fn usage_total(&self) -> u64 {
        let rest = self.imported.as_ref().and_then(|i| i.usage_remaining).map_or(0, |r| r[1]);
        self.usage_by_node.iter().map(|n| n.bytes).sum::<u64>() + rest
    }

    /// False when an importer found no such section in its input.
    pub fn has(&self, section: Section) -> bool {
        !self.imported.as_ref().is_some_and(|i| i.lacks(section))
    }
}
