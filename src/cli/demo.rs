//! `oomscope demo [WORKLOAD]`: a seed story replayed on a simulated GPU, with the verdict
//! and a fix checked by replay. Exits 0: the OOM is the demonstration.

use super::args::DemoArgs;
use super::{CliError, output};
use oomscope::device::parse_device;
use oomscope::dump::{self, Source};
use oomscope::replay::replay;
use oomscope::size::human;
use oomscope::workload::{Workload, builtin, fit};
use oomscope::{render, verdict};

pub fn run(a: DemoArgs) -> Result<u8, CliError> {
    let story = builtin::find(&a.workload);
    let w = Workload::load(&a.workload).map_err(|e| {
        let hint = if story.is_none() && !std::path::Path::new(&a.workload).exists() {
            "\n  (built-in workloads: unet, mnist-eval, preallocate; or give a model file, docs/workload-format.md)"
        } else {
            "\n  (the model format is in docs/workload-format.md)"
        };
        CliError(format!("{e}{hint}"))
    })?;
    let dev = match &a.device {
        Some(d) => d.clone(),
        None => parse_device(story.map_or("8GiB", |b| b.device)).map_err(CliError)?,
    };
    let others = a.others.unwrap_or(story.map_or(0, |b| b.others));
    if others >= dev.total {
        return Err(CliError(format!("--others {} leaves nothing of the {} device", human(others), human(dev.total))));
    }
    let limit = a.limit.or(story.filter(|b| b.limit_is_whole_card).map(|_| dev.total));
    let mut settings = fit::settings(dev.total, others, &dev.model, limit);
    settings.allocator.allow_growth = a.allow_growth;
    settings.allocator.garbage_collection = a.gc;
    let batch = a.batch.unwrap_or(w.model.batch);
    let steps = a.steps.unwrap_or(w.model.steps);

    let jsonl = w
        .jsonl(batch, steps)
        .map_err(|e| CliError(format!("{e}\n  (the model format is in docs/workload-format.md)")))?;
    if let Some(path) = &a.save_trace {
        oomscope::atomic::write_file(path, |out| out.write_all(jsonl.as_bytes()))
            .map_err(|e| CliError(format!("{}: {e}", path.display())))?;
    }
    let t = w.trace(batch, steps).map_err(|e| CliError(e.to_string()))?;
    let m = &w.model;
    eprintln!(
        "oomscope demo {}{}\n  {} at batch {batch} ({}, {}) on {} with {} (limit {}{}{}); {} events",
        m.name,
        story.map_or(String::new(), |b| format!(": {}", b.story)),
        if m.mode == oomscope::workload::model::Mode::Train { "training" } else { "evaluating" },
        m.optimizer.name(),
        m.dtype.name(),
        if dev.model == "simulated GPU" { "a simulated GPU".to_string() } else { format!("a simulated {}", dev.model) },
        human(dev.total),
        human(settings.allocator.limit),
        if others > 0 { format!(", {} held by other processes", human(others)) } else { String::new() },
        if a.allow_growth { ", allow_growth" } else { "" },
        t.events.len()
    );

    let outcome = replay(&t, &settings, Some(&w.path.display().to_string()), |_| {});
    let mut d = outcome.dump;
    d.source = Source {
        kind: "demo".into(),
        path: Some(w.path.display().to_string()),
        command: Some(std::env::args().collect::<Vec<_>>().join(" ")),
        created_unix: None,
    };
    d.workload = Some(w.info(batch));
    verdict::attach(&mut d);
    if let Some(v) = d.verdict.as_mut() {
        fit::refine(v, &w, &settings, batch).map_err(|e| CliError(e.to_string()))?;
    }
    if let Some(path) = &a.output {
        dump::write_atomic(path, &d)?;
    }
    output::print(&render::render(&d, a.format.into()))?;
    match outcome.first_failure_line {
        Some(_) => eprintln!("oomscope: out of memory after {} of {} events", outcome.events_replayed, t.events.len()),
        None => eprintln!("oomscope: every allocation succeeded"),
    }
    if let Some(path) = &a.output {
        eprintln!("oomscope: dump written to {}", path.display());
    }
    if let Some(path) = &a.save_trace {
        eprintln!(
            "oomscope: trace written to {} (replay it: oomscope replay {} --limit {})",
            path.display(),
            path.display(),
            settings.allocator.limit
        );
    }
    Ok(0)
}
