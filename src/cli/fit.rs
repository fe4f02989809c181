//! `oomscope fit WORKLOAD|TRACE --device CARD|SIZE`: what fits, by replay.

use super::args::{FitArgs, FitFormat};
use super::input::{self, Reader};
use super::input::{events, is_trace, open, workload};
use super::{CliError, output};
use oomscope_base::size::human;
use oomscope_ingest::trace;
use oomscope_sim::workload::fit;
use oomscope_sim::workload::model::Mode;
use std::fmt::Write;
use std::path::Path;

pub fn run(a: FitArgs) -> Result<u8, CliError> {
    if a.others >= a.device.total {
        return Err(CliError(format!(
            "--others {} leaves nothing of the {} device",
            human(a.others),
            human(a.device.total)
        )));
    }
    let mut s = fit::settings(a.device.total, a.others, &a.device.model, a.limit);
    s.allocator.allow_growth = a.allow_growth;
    s.allocator.garbage_collection = a.gc;
    let on = format!(
        "{} ({}{})",
        if a.device.model == "simulated GPU" { "a simulated GPU".to_string() } else { a.device.model.clone() },
        human(a.device.total),
        if a.others > 0 { format!(", {} held by others", human(a.others)) } else { String::new() }
    );
    let (kind, source) = open(&a.input, Reader::Fit)?;
    let path = Path::new(&a.input);
    if is_trace(&a.input, kind, source.head()) {
        let (input, _) =
            source.reader(path).map_err(|e| CliError(format!("{}: cannot open the trace: {e}", path.display())))?;
        let t = trace::parse(path, input, |_| {}).map_err(|e| {
            CliError(input::explain(format!("{e}\n  (the trace format is in docs/trace-format.md)"), path, kind))
        })?;
        events(&t, path, Reader::Fit)?;
        let f = fit::min_limit(&t, &s);
        let text = match a.format {
            FitFormat::Json => serde_json::to_string(&f).unwrap_or_default() + "\n",
            FitFormat::Text => {
                let mut o = String::new();
                let _ = writeln!(o, "{} ({} events) on {on}:", a.input, t.events.len());
                let _ = writeln!(o, "  needed with unlimited memory (peak in use):  {}", human(f.needed));
                if let Some(largest) = f.never_fits {
                    let why = if largest > fit::LIMIT_BOUND {
                        format!("it requests {} at once, more than any device has", human(largest))
                    } else {
                        "it needs more memory than any device has".to_string()
                    };
                    let _ = writeln!(
                        o,
                        "  smallest limit it replays under:            none up to {}: {why}",
                        human(fit::LIMIT_BOUND)
                    );
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
                    let _ = writeln!(
                        o,
                        "  on this device: fits, {} to spare",
                        human(f.capacity.saturating_sub(f.min_limit))
                    );
                } else {
                    let _ = writeln!(
                        o,
                        "  on this device: does not fit, {} short",
                        human(f.min_limit.saturating_sub(f.capacity))
                    );
                }
                let _ = writeln!(o, "  (a trace's batch cannot change; give a workload to find the largest batch)");
                o
            }
        };
        output::print(&text)?;
        // As `replay`: 1 when the answer is that it does not fit.
        return Ok(if f.fits && f.never_fits.is_none() { 0 } else { 1 });
    }
    let w = workload(&a.input, source).map_err(|e| {
        CliError(input::explain(format!("{e}\n  (the model format is in docs/workload-format.md)"), path, kind))
    })?;
    let m = &w.model;
    let eval = m.mode == Mode::Eval;
    let max = a.max_batch.unwrap_or(if eval { m.samples.unwrap_or(m.batch) } else { 65_536 });
    let f = fit::largest_batch(&w, &s, max)
        .map_err(|e| CliError(format!("{e}\n  (the model format is in docs/workload-format.md)")))?;
    let text = match a.format {
        FitFormat::Json => serde_json::to_string(&f).unwrap_or_default() + "\n",
        FitFormat::Text => {
            let mut o = String::new();
            let what = if eval { "evaluating" } else { "training" };
            let _ = writeln!(
                o,
                "{}: {what}, {}, input {} {}, on {on}, limit {}\n",
                m.name,
                m.optimizer.name(),
                oomscope_base::shape::text(&m.input),
                m.dtype.name(),
                human(s.allocator.limit)
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
                    let more =
                        if f.capped { " (the most tried; --max-batch raises it)".to_string() } else { String::new() };
                    if eval {
                        let samples = m.samples.unwrap_or(m.batch);
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
                        human(f.probes[0].needed),
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
    };
    output::print(&text)?;
    // Nothing fits: the answer is a failure, for scripts as for people.
    Ok(if f.largest.is_some() { 0 } else { 1 })
}
