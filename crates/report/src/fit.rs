//! What fits a device, in words (`oomscope fit`): for a trace, the smallest limit it replays
//! under; for a workload, the batches tried, the largest that fits, and the straight line
//! fitted to the replays.

use oomscope_base::size::human;
use oomscope_format::fit::{BatchFit, LimitFit};
use oomscope_format::{Mode, WorkloadInfo};
use std::fmt::Write;

/// The device in words: `GeForce GTX 1080 (8.00GiB, 512.00MiB held by others)`.
pub fn device(model: &str, total: u64, others: u64) -> String {
    format!(
        "{} ({}{})",
        if model == "simulated GPU" { "a simulated GPU".to_string() } else { model.to_string() },
        human(total),
        if others > 0 { format!(", {} held by others", human(others)) } else { String::new() }
    )
}

/// A trace's answer: `input` with `events` events on `on`; `bound`: the most tried.
pub fn limit(input: &str, events: usize, on: &str, f: &LimitFit, bound: u64) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{input} ({events} events) on {on}:");
    let _ = writeln!(o, "  needed with unlimited memory (peak in use):  {}", human(f.needed));
    if let Some(largest) = f.never_fits {
        let why = if largest > bound {
            format!("it requests {} at once, more than any device has", human(largest))
        } else {
            "it needs more memory than any device has".to_string()
        };
        let _ = writeln!(o, "  smallest limit it replays under:            none up to {}: {why}", human(bound));
    } else {
        let _ = writeln!(
            o,
            "  smallest limit it replays under:            {} (the allocator's rounding, whole-chunk waste and fragmentation add {})",
            human(f.min_limit),
            human(f.min_limit.saturating_sub(f.needed))
        );
    }
    if f.never_fits.is_some() {
        let _ = writeln!(o, "  on this device: does not fit");
    } else if f.fits {
        let _ = writeln!(o, "  on this device: fits, {} to spare", human(f.capacity.saturating_sub(f.min_limit)));
    } else {
        let _ = writeln!(o, "  on this device: does not fit, {} short", human(f.min_limit.saturating_sub(f.capacity)));
    }
    let _ = writeln!(o, "  (a trace's batch cannot change; give a workload to find the largest batch)");
    o
}

/// A workload's answer: `w` (its `batch` is the evaluation's samples when evaluating) on
/// `on` under `limit`.
pub fn batch(w: &WorkloadInfo, samples: u64, on: &str, limit: u64, f: &BatchFit) -> String {
    let mut o = String::new();
    let eval = w.mode == Mode::Eval;
    let what = if eval { "evaluating" } else { "training" };
    let input: Vec<i64> = w.input.iter().map(|&d| d as i64).collect();
    let _ = writeln!(
        o,
        "{}: {what}, {}, input {} {}, on {on}, limit {}\n",
        w.name,
        w.optimizer.name(),
        oomscope_base::shape::text(&input),
        w.dtype,
        human(limit)
    );
    let unit = if eval { "chunk" } else { "batch" };
    let _ = writeln!(o, "  {unit:>7}   needed       on this device");
    // The doubling steps and the final bracket; the bisection in between is in --format json.
    let smallest_oom = f.probes.iter().find(|p| !p.fits).map(|p| p.batch);
    let shown = f.probes.iter().filter(|p| {
        p.batch.is_power_of_two()
            || Some(p.batch) == smallest_oom
            || f.largest.as_ref().is_some_and(|l| l.batch == p.batch)
    });
    for p in shown {
        let verdict = if p.fits {
            format!("fits, {} free at its peak", human(f.capacity.saturating_sub(p.peak_in_use)))
        } else {
            "OOM".to_string()
        };
        let _ = writeln!(o, "  {:>7}   {:<11}  {verdict}", p.batch, human(p.needed));
    }
    o.push('\n');
    match &f.largest {
        Some(p) => {
            let more = if f.capped { " (the most tried; --max-batch raises it)".to_string() } else { String::new() };
            if eval {
                let k = samples.div_ceil(p.batch);
                let _ = writeln!(
                    o,
                    "Largest evaluation chunk that fits (replayed through the allocator, fragmentation included): {}{more},\n  with {} free at its peak. Split the {samples} samples into {k} chunks of {} and average the results.",
                    p.batch,
                    human(f.capacity.saturating_sub(p.peak_in_use)),
                    samples.div_ceil(k)
                );
            } else {
                let _ = writeln!(
                    o,
                    "Largest batch that fits (replayed through the allocator, fragmentation included): {}{more}, with {} free at its peak.",
                    p.batch,
                    human(f.capacity.saturating_sub(p.peak_in_use))
                );
            }
        }
        None => {
            let _ = writeln!(
                o,
                "Nothing fits: even a {unit} of 1 needs {} and {} can be had.",
                human(f.probes.first().map_or(0, |p| p.needed)),
                human(f.capacity)
            );
        }
    }
    if let Some(b) = f.too_large_from {
        let _ = writeln!(
            o,
            "From {unit} {b} up, a tensor would take more than {} (2^64 bytes): no such {unit} can exist, let alone fit.",
            human(u64::MAX)
        );
    }
    let _ = writeln!(
        o,
        "Straight line (fixed + per sample x {unit}), fitted to the replays: {} + {} x {unit}, which predicts {}.",
        human(f.fixed.max(0.0) as u64),
        human(f.per_sample.max(0.0) as u64),
        f.line_prediction
    );
    o
}
