//! What the UI shows: plain data about one or more devices, filled from a dump or a live
//! feed by [`crate::source`]. The figures are the dump's own types (`oomscope_format`): one
//! model of state from the allocator to the screen. Nothing here knows how an allocator
//! works; sizes are bytes, times are seconds, names are strings.

use oomscope_format::{BinInfo, NodeUsage, OomRecord, Verdict};
use std::ops::Range;

/// One allocator on one device, as the UI shows it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Device {
    /// Short name for the device list: `GPU_0_bfc` or `pid 4242 GPU_0_bfc`.
    pub name: String,
    /// Where the data comes from: `dump fixtures/x.json`, `pid 4242: python train.py`.
    pub origin: String,
    /// The hardware: `simulated GeForce GTX 1080 (8.00GiB)`.
    pub hardware: String,
    pub status: Status,
    pub stats: Stats,
    pub timeline: Timeline,
    /// The failed request, when one failed.
    pub oom: Option<OomRecord>,
    /// The verdict, in the renderer's words.
    pub verdict: Option<Verdict>,
    /// Live bytes by op, largest first.
    pub nodes: Vec<NodeUsage>,
    /// Nodes the source left out of `nodes`: (count, bytes).
    pub nodes_rest: Option<(u64, u64)>,
    /// The allocator's bins, smallest first.
    pub bins: Vec<BinInfo>,
    /// Regions in address order; each owns a range of `spans`.
    pub regions: Vec<Region>,
    /// Chunks (or runs of adjacent chunks) of every region, in address order.
    pub spans: Vec<Span>,
    /// Names that spans refer to by index; index 0 is "none".
    pub ops: Vec<String>,
    pub shapes: Vec<String>,
    /// Call stacks, one frame per line, innermost first.
    pub stacks: Vec<Vec<String>>,
    /// The OOM report as the terminal printed it (TF text, ranked nodes, verdict).
    pub report: Option<String>,
    /// What the source lacks or simplified, said once on the overview.
    pub notes: Vec<String>,
    /// State frames the source dropped because this viewer was slow.
    pub dropped_frames: u64,
}

/// Where the device's data stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Status {
    /// A dump: the state at one moment.
    #[default]
    PostMortem,
    /// Following a running process.
    Live,
    /// A simulated run being played.
    Replaying,
    /// The run ended (the simulated run reached its end or its OOM).
    Finished,
    /// The process went away; the last state stays on screen.
    Disconnected(String),
}

impl Status {
    pub fn label(&self) -> &str {
        match self {
            Status::PostMortem => "POST-MORTEM",
            Status::Live => "LIVE",
            Status::Replaying => "REPLAYING",
            Status::Finished => "FINISHED",
            Status::Disconnected(_) => "DISCONNECTED",
        }
    }

    /// Updates can still arrive.
    pub fn is_live(&self) -> bool {
        matches!(self, Status::Live | Status::Replaying)
    }
}

/// The allocator's figures: its statistics as the dump and the live feed carry them, and
/// what the source knows besides.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    pub allocator: oomscope_format::Stats,
    /// The allocator's limit.
    pub limit: u64,
    pub live_allocations: u64,
    pub device_total: u64,
    pub device_free: u64,
    /// The current training step, when known.
    pub step: Option<i64>,
    /// False when the source did not have the statistics (a partial log).
    pub known: bool,
}

/// In-use and pool bytes over time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    /// In time order.
    pub samples: Vec<Sample>,
    /// When the failed request happened.
    pub oom_at: Option<f64>,
    /// Step boundaries: (time, step).
    pub steps: Vec<(f64, i64)>,
    /// The source had no clock (a trace without times): `t` counts events instead.
    pub by_event: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Seconds since the start of the run (or the event number, see `Timeline::by_event`).
    pub t: f64,
    pub in_use: u64,
    pub pool: u64,
}

impl Timeline {
    /// The sample with the most bytes in use (the first of equals).
    pub fn peak(&self) -> Option<Sample> {
        self.samples.iter().copied().fold(None, |best: Option<Sample>, s| match best {
            Some(b) if b.in_use >= s.in_use => Some(b),
            _ => Some(s),
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Region {
    pub address: u64,
    pub size: u64,
    pub spans: Range<usize>,
}

/// A chunk, or a run of adjacent chunks a live source merged to stay small.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Span {
    pub address: u64,
    pub size: u64,
    /// Bytes the clients asked for (in-use chunks only).
    pub requested: u64,
    /// Bytes of the span in use: `size` or 0 for a single chunk.
    pub in_use: u64,
    /// Chunks in the span (1 for a chunk).
    pub chunks: u32,
    /// Index into [`Device::ops`] (0: none).
    pub op: u32,
    /// Index into [`Device::shapes`] (0: none).
    pub shape: u32,
    /// Index into [`Device::stacks`] (0: none).
    pub stack: u32,
    pub step: Option<i64>,
}

impl Span {
    pub fn is_used(&self) -> bool {
        self.in_use > 0
    }

    /// Bytes handed out but not asked for (rounding, unsplit chunks).
    pub fn waste(&self) -> u64 {
        self.in_use.saturating_sub(self.requested)
    }
}

impl Device {
    pub fn op(&self, span: &Span) -> &str {
        self.ops.get(span.op as usize).map_or("", String::as_str)
    }

    pub fn shape(&self, span: &Span) -> &str {
        self.shapes.get(span.shape as usize).map_or("", String::as_str)
    }

    pub fn stack(&self, span: &Span) -> &[String] {
        self.stacks.get(span.stack as usize).map_or(&[], Vec::as_slice)
    }
}

/// A change for the UI, sent by the data sources.
#[derive(Clone, Debug)]
pub enum Update {
    /// Device `id` (numbered by the caller, from 0) is now this.
    Device { id: usize, device: Box<Device> },
    /// Only the status of device `id` changed.
    Status { id: usize, status: Status },
    /// A line for the status bar (a source waiting, a socket refused).
    Message(String),
}
