//! What fits a device, as `oomscope fit` finds it by replay (`oomscope_sim::workload::fit`):
//! plain data, printed as JSON by `--format json` and in words by `oomscope_report::fit`.

use serde::{Deserialize, Serialize};

/// One replay at one batch.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Probe {
    pub batch: u64,
    pub fits: bool,
    /// Peak bytes in use on the device given (up to the failure when it did not fit).
    pub peak_in_use: u64,
    /// Peak bytes in use with unlimited memory: what the batch needs.
    pub needed: u64,
}

/// The answer for a workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BatchFit {
    /// Every batch replayed, in increasing order.
    pub probes: Vec<Probe>,
    /// The largest batch that fits, when one does.
    pub largest: Option<Probe>,
    /// True when the search stopped at `max_batch` with it still fitting.
    pub capped: bool,
    pub max_batch: u64,
    /// Memory the process can have: the limit, or the device's free memory if less.
    pub capacity: u64,
    /// `needed ≈ fixed + per_sample × batch`, least squares over the probes.
    pub fixed: f64,
    pub per_sample: f64,
    /// The largest batch the straight line allows.
    pub line_prediction: u64,
    /// The smallest batch tried at which a tensor would pass 2^64 bytes: it and every larger
    /// batch cannot exist, let alone fit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub too_large_from: Option<u64>,
}

/// The answer for a fixed trace.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LimitFit {
    /// Peak bytes in use with unlimited memory (rounded sizes, no fragmentation).
    pub needed: u64,
    /// The smallest limit (to 1 MiB) the trace replays under with these allocator options.
    pub min_limit: u64,
    /// Whether it replays on the device given, and the peak there.
    pub fits: bool,
    pub capacity: u64,
    /// Set when no limit up to the most tried (`oomscope_sim::workload::fit::LIMIT_BOUND`) replays the trace: its largest request, which
    /// no device serves (`min_limit` is then that bound, not an answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub never_fits: Option<u64>,
}

/// What a process run by `oomscope fit` says of itself at the end of its probe (or at
/// exit): written by the C ABI as `result-PID.json` beside its tapes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    pub pid: u32,
    /// It reached the step it was to stop at (and was ended there).
    pub stopped: bool,
    /// The last step marked (-1: none).
    pub step: i64,
    /// Allocations that failed.
    pub ooms: u64,
    /// The first of them (up to [`FAILED_KEPT`]): their op and size. A run that went on past
    /// an OOM (cuDNN trying another algorithm when its workspace does not fit) is told apart
    /// by these.
    #[serde(default)]
    pub failed: Vec<FailedRequest>,
    pub devices: Vec<ProbeDevice>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeDevice {
    pub device: i32,
    /// The tape's file name, in the same directory.
    pub tape: String,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
    /// The device's memory, and what was free when the process first used it.
    pub total: u64,
    pub free: u64,
    /// At the end: the device's used memory that is not this allocator's (the CUDA context,
    /// libraries loaded since the first use: cuDNN, cuBLAS; other processes).
    #[serde(default)]
    pub outside_at_end: u64,
}

/// `oomscope fit -- CMD ... {batch} ...`: the answer, and every figure behind it, as
/// `--format json` prints it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CommandFit {
    /// The largest batch whose step replays without an OOM on the device (None: not even 1).
    pub largest_batch: Option<u64>,
    /// Bytes to spare at that batch's peak: the capacity less its peak reserved.
    pub headroom: Option<u64>,
    /// By batch, ascending: replayed, and measured where a run checked it.
    pub batches: Vec<FitRow>,
    pub device: FitDevice,
    /// Training steps each run made before it was ended.
    pub steps: u32,
    pub probes: Vec<ProbeRow>,
    /// The step's requests; how many grow with the batch; how many do not follow it
    /// exactly (extrapolated), with their bytes at the largest probe.
    pub requests: u64,
    pub growing: u64,
    pub irregular: u64,
    pub irregular_bytes: u64,
    /// The batch the user trains at (`--batch`), and what it needs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    /// Requested bytes live at the peak of the user's batch (else the largest that fits),
    /// by kind, largest first, and that batch's peaks: replayed with memory to spare, so
    /// what it needs whether it fits or not.
    pub by_kind: Vec<KindBytes>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_kind_batch: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs: Option<Needs>,
    /// The largest batch under other allocator settings (replayed).
    pub settings: Vec<SettingsRow>,
    /// Micro-batch and accumulation steps that keep the user's batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accumulation: Option<Accumulation>,
    /// Why the answer was not checked by a run, when it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unchecked: Option<String>,
    /// The batch the replay answered when a run there ran out of memory: then
    /// `largest_batch` is null, the replay not being this program's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contradicted: Option<u64>,
    /// The last lines of that run's output (each `  | ` and a line).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contradicted_output: Option<String>,
    /// A run at the batch after the answer trained too: the answer is low (the replayed
    /// step lacks requests that only larger batches make), and this batch is known to
    /// train.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_least: Option<u64>,
}

/// `oomscope fit -- CMD` without `{batch}`: the command as given.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CommandPrediction {
    pub fits: bool,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
    pub headroom: Option<u64>,
    pub device: FitDevice,
    pub steps: u32,
    pub by_kind: Vec<KindBytes>,
    /// The request that failed in the replay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<FailedRequest>,
    /// The probe's own figures, on an unlimited device.
    pub probe: ProbeRow,
    pub settings: Vec<SettingsFits>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FitRow {
    pub batch: u64,
    pub fits: bool,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
    /// "replayed" or "measured".
    pub how: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<FailedRequest>,
}

/// How many failed requests a probe's result lists.
pub const FAILED_KEPT: usize = 64;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FailedRequest {
    pub op: String,
    pub bytes: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FitDevice {
    /// The card or the size, as given (`h100`, `16GiB`), or the GPU the probes ran on.
    pub name: String,
    pub total: u64,
    /// Held outside the allocator (other processes, `--others`).
    pub others: u64,
    /// What the allocator may use: the device less the others, or the limit.
    pub capacity: u64,
    /// The caching allocator's settings (`PYTORCH_CUDA_ALLOC_CONF`), empty for the defaults.
    pub settings: String,
    /// Where the probes ran: "gpu" or "cpu" (emulated).
    pub probes_on: &'static str,
}

/// A probe run: its batch, how long it took, its peaks (measured, on an unlimited device)
/// and the replay of its own tape at its batch (the same figures, or the model is wrong).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ProbeRow {
    pub batch: u64,
    pub seconds: f64,
    pub requests: u64,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct KindBytes {
    pub kind: crate::Kind,
    pub bytes: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SettingsRow {
    pub settings: String,
    pub largest_batch: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SettingsFits {
    pub settings: String,
    pub fits: bool,
    pub peak_reserved: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Accumulation {
    pub micro_batch: u64,
    pub steps: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Needs {
    pub peak_allocated: u64,
    pub peak_reserved: u64,
}
