//! What fits a device, as `oomscope fit` finds it by replay (`oomscope_sim::workload::fit`):
//! plain data, printed as JSON by `--format json` and in words by `oomscope_report::fit`.

use serde::Serialize;

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
