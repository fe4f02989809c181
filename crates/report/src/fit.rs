//! What fits a device, in words (`oomscope fit`): for a trace, the smallest limit it replays
//! under; for a workload, the batches tried, the largest that fits, and the straight line
//! fitted to the replays.

use oomscope_base::size::human;
use oomscope_format::fit::{BatchFit, CommandFit, CommandPrediction, FitDevice, LimitFit};
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

/// `oomscope fit -- CMD {batch}`'s answer, first, then the figures behind it. Sizes as
/// PyTorch prints them.
pub fn command(f: &CommandFit, command: &str) -> String {
    use oomscope_base::size::torch;
    let mut o = String::new();
    let on = device_line(&f.device);
    let measured = |b: u64| f.batches.iter().find(|r| r.batch == b && r.how == "measured");
    match f.largest_batch {
        Some(l) => {
            let _ = writeln!(
                o,
                "Largest batch that fits on {on}: {l}, with {} to spare at its peak (replayed).",
                torch(f.headroom.unwrap_or(0))
            );
            let said = match (measured(l), measured(l + 1)) {
                (Some(a), Some(b)) => {
                    format!("Checked by runs: batch {l} {}; batch {} {}.", trained(a), l + 1, trained(b))
                }
                (Some(a), None) => format!("Checked by a run: batch {l} {}.", trained(a)),
                _ => format!("Not checked by a run: {}.", f.unchecked.as_deref().unwrap_or("not asked")),
            };
            let _ = writeln!(o, "{said}");
            if let Some(n) = f.at_least {
                let _ = writeln!(
                    o,
                    "The run at {n} trained too, so the answer is low: larger batches make requests the probes did not \
                     (a kernel's scratch that starts past some size); batch {n} is known to train."
                );
            }
        }
        None if f.contradicted.is_some() => {
            let l = f.contradicted.unwrap_or(0);
            let _ = writeln!(
                o,
                "No answer: the replay says batch {l} fits on {on}, but a run at {l} ran out of memory, so the \
                 replayed step is not this program's{}. Try probes nearer the batch you want (--probes), or more \
                 steps (--steps).",
                if f.irregular > 0 {
                    format!(" ({} of its requests do not grow in proportion to the batch)", f.irregular)
                } else {
                    String::new()
                }
            );
            if let Some(tail) = &f.contradicted_output {
                let _ = write!(o, "The run at {l} ended:\n{tail}");
            }
        }
        None => {
            let _ = writeln!(o, "Nothing fits on {on}: even batch 1 runs out of memory (replayed).");
        }
    }
    let _ = writeln!(o, "\n  {:>7}  {:<5}  {:>15}  {:>15}  how", "batch", "fits", "peak allocated", "peak reserved");
    for r in &f.batches {
        let _ = writeln!(
            o,
            "  {:>7}  {:<5}  {:>15}  {:>15}  {}{}",
            r.batch,
            if r.fits { "yes" } else { "no" },
            if r.fits || r.how == "measured" { torch(r.peak_allocated) } else { "-".into() },
            if r.fits || r.how == "measured" { torch(r.peak_reserved) } else { "-".into() },
            r.how,
            match (&r.failed, r.fits) {
                (Some(x), false) if x.bytes != u64::MAX => format!(" (fails at {} by {})", torch(x.bytes), x.op),
                _ => String::new(),
            }
        );
    }
    if let Some(b) = f.by_kind_batch
        && !f.by_kind.is_empty()
    {
        let yours = if f.batch == Some(b) { " (yours)" } else { "" };
        let needs = f.needs.as_ref().map_or(String::new(), |n| {
            format!(
                ": it needs {} allocated and {} reserved at its peak",
                torch(n.peak_allocated),
                torch(n.peak_reserved)
            )
        });
        let _ = writeln!(o, "\nAt batch {b}{yours}{needs}; live then:");
        for k in &f.by_kind {
            let _ = writeln!(o, "  {:>12}  {}", torch(k.bytes), k.kind.plural());
        }
    }
    if let Some(a) = &f.accumulation {
        let _ = writeln!(
            o,
            "\nTo keep your batch of {}: batch {} with {} gradient accumulation steps ({} × {}).",
            f.batch.unwrap_or(0),
            a.micro_batch,
            a.steps,
            a.micro_batch,
            a.steps
        );
    }
    for s in &f.settings {
        let _ = writeln!(
            o,
            "With {}: {} (replayed).",
            s.settings,
            s.largest_batch.map_or_else(|| "nothing fits".to_string(), |b| format!("largest batch {b}"))
        );
    }
    let probes: Vec<String> = f.probes.iter().map(|p| p.batch.to_string()).collect();
    let secs: f64 = f.probes.iter().map(|p| p.seconds).sum();
    let _ = writeln!(
        o,
        "\nLearned from {} runs of `{command}` at batches {} ({} steps each, {:.1} s, {}): {} requests, {} \
         growing with the batch.",
        f.probes.len(),
        probes.join(", "),
        f.steps,
        secs,
        if f.device.probes_on == "gpu" { "on the GPU" } else { "emulated on the CPU" },
        f.requests,
        f.growing
    );
    if f.irregular > 0 {
        let _ = writeln!(
            o,
            "{} requests ({} at batch {}) do not grow in proportion to the batch: their sizes beyond the probes \
             are extrapolated.",
            f.irregular,
            torch(f.irregular_bytes),
            f.probes.last().map_or(0, |p| p.batch)
        );
    }
    o
}

fn trained(r: &oomscope_format::fit::FitRow) -> String {
    use oomscope_base::size::torch;
    if r.fits {
        format!("trained (peak {} allocated, {} reserved)", torch(r.peak_allocated), torch(r.peak_reserved))
    } else {
        "ran out of memory".to_string()
    }
}

fn device_line(d: &FitDevice) -> String {
    use oomscope_base::size::torch;
    let mut s = format!("{} ({})", d.name, torch(d.total));
    if d.others > 0 {
        let _ = write!(s, ", {} held outside the allocator", torch(d.others));
    }
    if d.capacity < d.total.saturating_sub(d.others) {
        let _ = write!(s, ", limit {}", torch(d.capacity));
    }
    if !d.settings.is_empty() {
        let _ = write!(s, ", {}", d.settings);
    }
    s
}

/// `oomscope fit -- CMD` without `{batch}`: the command as given.
pub fn prediction(p: &CommandPrediction, command: &str) -> String {
    use oomscope_base::size::torch;
    let mut o = String::new();
    let on = device_line(&p.device);
    if p.fits {
        let _ = writeln!(
            o,
            "`{command}` fits on {on}: peak {} allocated, {} reserved, {} to spare (replayed).",
            torch(p.peak_allocated),
            torch(p.peak_reserved),
            torch(p.headroom.unwrap_or(0))
        );
    } else {
        let at =
            p.failed.as_ref().map_or(String::new(), |f| format!(": it fails asking {} for {}", torch(f.bytes), f.op));
        let _ = writeln!(
            o,
            "`{command}` does not fit on {on}{at} (replayed). On unlimited memory it peaks at {} allocated, {} reserved.",
            torch(p.probe.peak_allocated),
            torch(p.probe.peak_reserved)
        );
    }
    for s in &p.settings {
        let _ = writeln!(
            o,
            "With {}: {} (replayed).",
            s.settings,
            if s.fits { format!("fits, peak {} reserved", torch(s.peak_reserved)) } else { "does not fit".into() }
        );
    }
    if !p.by_kind.is_empty() {
        let _ = writeln!(o, "\nLive at the peak:");
        for k in &p.by_kind {
            let _ = writeln!(o, "  {:>12}  {}", torch(k.bytes), k.kind.plural());
        }
    }
    let _ = writeln!(
        o,
        "\nLearned from one run of {} steps ({:.1} s, {}).",
        p.steps,
        p.probe.seconds,
        if p.device.probes_on == "gpu" { "on the GPU" } else { "emulated on the CPU" }
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::fit::{FailedRequest, FitRow};

    /// A check run that refuted the replay: no answer, the request that ended the run, and
    /// the run's last lines (what it printed: the user's own traceback).
    #[test]
    fn a_refuted_answer_says_how_its_run_ended() {
        let f = CommandFit {
            contradicted: Some(1711),
            contradicted_output: Some("  | torch.OutOfMemoryError: CUDA out of memory.\n".into()),
            batches: vec![FitRow {
                batch: 1711,
                fits: false,
                peak_allocated: 148_535_143_424,
                peak_reserved: 149_250_113_536,
                how: "measured",
                failed: Some(FailedRequest {
                    op: "ResNet.layer4.2.conv3/ConvolutionBackward0".into(),
                    bytes: 858_511_507,
                }),
            }],
            ..CommandFit::default()
        };
        let text = command(&f, "python train.py --batch {batch}");
        assert!(text.contains("No answer: the replay says batch 1711 fits"), "{text}");
        assert!(text.contains("The run at 1711 ended:\n  | torch.OutOfMemoryError: CUDA out of memory.\n"), "{text}");
        assert!(
            text.contains("measured (fails at 818.74 MiB by ResNet.layer4.2.conv3/ConvolutionBackward0)"),
            "{text}"
        );
    }
}
