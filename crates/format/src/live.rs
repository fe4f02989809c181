//! The messages of the live feed, `oomscope-live/1` (docs/live-protocol.md): JSON, one
//! object per line, from the instrumented process to each viewer. Viewers never write.
//!
//! Compatibility as for dumps: fields are only added; a viewer ignores fields and message
//! types it does not know, and refuses a hello whose protocol major version it does not.

use crate::{AllocatorInfo, BinInfo, DeviceInfo, Dump, NodeUsage, Stats};
use serde::{Deserialize, Serialize};

/// The protocol this build speaks.
pub const PROTOCOL: &str = "oomscope-live/1";

/// One line of the feed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// First message on every connection.
    Hello(Box<Hello>),
    /// The allocator's state, sent periodically; a slow viewer misses some.
    State(Box<State>),
    /// A training step began.
    Step(Step),
    /// An allocation failed: the full post-mortem. Never dropped.
    Oom(Box<OomEvent>),
    /// This viewer missed state frames (it read too slowly); `frames` counts them all.
    Dropped { frames: u64 },
    /// The publisher is going away (the process exits or stops publishing).
    Bye { reason: String },
    /// A message type from a newer publisher.
    #[serde(other)]
    Unknown,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// `oomscope-live/1`.
    pub protocol: String,
    pub pid: u32,
    /// The command line of the process.
    pub command: String,
    pub device: DeviceInfo,
    pub allocator: AllocatorInfo,
    /// Seconds since the Unix epoch when the allocator started.
    pub started_unix: u64,
    /// Milliseconds between state frames (it can grow to keep the cost low).
    pub interval_ms: u64,
    /// The process's place in a job (a rank of torchrun, SLURM, MPI), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<crate::ProcessInfo>,
}

/// A state frame.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Frame number, from 0.
    pub seq: u64,
    /// Nanoseconds since the allocator started.
    pub t_ns: u64,
    /// The current step (-1 before the first).
    pub step: i64,
    pub stats: Stats,
    /// Live allocations.
    pub live: u64,
    /// In-use and pool bytes after each event since the previous frame (thinned to at most
    /// a few hundred, keeping each stretch's highest point): `[t_ns, in_use, pool]`.
    pub samples: Vec<[u64; 3]>,
    /// Live bytes by op, largest first (the first [`NODES_SENT`]).
    pub nodes: Vec<NodeUsage>,
    /// The ops left out of `nodes`: `[count of ops, bytes]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_rest: Option<[u64; 2]>,
    /// The 21 bins.
    pub bins: Vec<BinInfo>,
    /// Every region with its chunks (merged into runs past [`SPANS_SENT`] chunks).
    pub regions: Vec<MapRegion>,
    /// Chunks were merged into runs to keep the frame small.
    #[serde(default)]
    pub merged: bool,
    /// The allocator changed while its chunks were copied (in slices, so as not to hold it
    /// up): the map mixes moments a few milliseconds apart; the figures are of the first.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approximate: bool,
    /// Names the spans refer to; index 0 is "none" in each.
    pub ops: Vec<String>,
    pub shapes: Vec<Vec<i64>>,
    /// Call stacks, frames as text, innermost first.
    pub stacks: Vec<Vec<String>>,
}

/// Nodes listed in a state frame.
pub const NODES_SENT: usize = 1000;
/// Chunks listed one by one in a state frame; more are merged into runs.
pub const SPANS_SENT: usize = 20_000;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapRegion {
    pub address: u64,
    pub size: u64,
    /// Chunks (or runs of adjacent chunks) in address order, from `address`.
    pub spans: Vec<Span>,
}

/// A chunk or a run of adjacent chunks, as an array:
/// `[size, requested, in_use_bytes, chunks, op, shape, stack, step]`.
/// A single chunk has `chunks` 1 and `in_use_bytes` equal to `size` or 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span(pub u64, pub u64, pub u64, pub u32, pub u32, pub u32, pub u32, pub i64);

impl Span {
    pub fn size(&self) -> u64 {
        self.0
    }
    pub fn requested(&self) -> u64 {
        self.1
    }
    pub fn in_use(&self) -> u64 {
        self.2
    }
    pub fn chunks(&self) -> u32 {
        self.3
    }
    pub fn op(&self) -> u32 {
        self.4
    }
    pub fn shape(&self) -> u32 {
        self.5
    }
    pub fn stack(&self) -> u32 {
        self.6
    }
    pub fn step(&self) -> i64 {
        self.7
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub step: i64,
    pub t_ns: u64,
    pub bytes_in_use: u64,
    pub pool_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OomEvent {
    /// The state at the failure, with the verdict.
    pub dump: Dump,
    /// The report as oomscope prints it (TF text, ranked nodes, verdict).
    pub report: String,
}

impl Message {
    /// One line of JSON, with its newline.
    pub fn to_line(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_else(|e| {
            // Serializing plain data cannot fail; if it ever does, say so on the feed.
            format!("{{\"type\":\"bye\",\"reason\":\"cannot encode a message: {e}\"}}")
        });
        s.push('\n');
        s
    }
}
