//! `oomscope replay TRACE --limit SIZE`: feed a trace through the allocator and report.

use super::args::{ReplayArgs, RunAllocator};
use super::output::{self, Progress};
use super::{CliError, EXIT_OOM};
use oomscope_base::size::human;
use oomscope_core::bfc::Options;
use oomscope_core::caching::Settings as TorchSettings;
use oomscope_format as dump;
use oomscope_ingest::input_kind::Kind;
use oomscope_ingest::trace;
use oomscope_inputs::input::{self, Reader};
use oomscope_replay::replay::Settings;
use oomscope_report as render;

pub fn run(a: ReplayArgs) -> Result<u8, CliError> {
    let trace_path = a.trace.display().to_string();
    // What the file is, by its content: a dump, a log or a message is refused with the
    // command that reads it, before the questions (--limit) that only a replay asks.
    // A pipe is read once: what was read to recognise it goes on to the parser.
    let (kind, source) = oomscope_inputs::input::open(&trace_path, Reader::Replay)?;
    if kind == Some(Kind::TorchSnapshot) {
        let bytes = source
            .bytes(&a.trace)
            .map_err(|e| CliError(format!("{}: cannot read the snapshot: {e}", a.trace.display())))?;
        return super::replay_snapshot::run(a, &bytes);
    }
    let is_workload = !oomscope_inputs::input::is_trace(&trace_path, kind, source.head());
    let what = if is_workload { "a workload" } else { "a trace" };
    if a.gpu.is_some() {
        return Err(CliError(format!(
            "{}: --gpu picks a PyTorch snapshot's device; {what} is replayed on one device",
            a.trace.display()
        )));
    }
    let no_limit = || {
        CliError(format!(
            "{}: {what} needs --limit SIZE, the allocator's memory limit (for example --limit 8GiB)",
            a.trace.display()
        ))
    };
    // A file that is none of the kinds is not asked for a limit: its parser says what it is not.
    if a.limit.is_none() && kind != Some(Kind::Other) {
        return Err(no_limit());
    }
    let t = if is_workload {
        let w = oomscope_inputs::input::workload(&trace_path, source)
            .map_err(|e| CliError(input::explain(e, &a.trace, kind)))?;
        let batch = a.batch.unwrap_or(w.model.batch);
        w.trace(batch, w.model.steps).map_err(|e| CliError(e.to_string()))?
    } else {
        if a.batch.is_some() {
            return Err(CliError(format!(
                "{}: --batch is for a workload; a trace has its own sizes",
                a.trace.display()
            )));
        }
        let (input, size) = source
            .reader(&a.trace)
            .map_err(|e| CliError(format!("{}: cannot open the trace: {e}", a.trace.display())))?;
        let mut progress = Progress::new("reading trace", size);
        let parsed = trace::parse(&a.trace, input, |done| progress.update(done));
        progress.finish();
        let t = parsed.map_err(|e| {
            CliError(input::explain(format!("{e}\n  (the trace format is in docs/trace-format.md)"), &a.trace, kind))
        })?;
        oomscope_inputs::input::events(&t, &a.trace, Reader::Replay)?;
        t
    };

    let limit = a.limit.ok_or_else(no_limit)?;
    let mut opts = Options::new(limit);
    opts.allow_growth = a.allow_growth;
    opts.garbage_collection = a.gc;
    opts.fragmentation_fraction = a.fragmentation_fraction.unwrap_or(0.0);
    opts.history = a.history;
    if let Some(name) = &a.name {
        opts.name.clone_from(name);
    }
    let mut settings = Settings::new(opts);
    settings.device_total = a.device.unwrap_or(limit);
    settings.device_others = a.others;
    settings.keep_going = a.keep_going;
    if settings.device_others > settings.device_total {
        return Err(CliError(format!(
            "--others {} is more than the device's {}; give --device the card's full size",
            human(settings.device_others),
            human(settings.device_total)
        )));
    }
    let caching = match a.allocator {
        Some(RunAllocator::Caching) => true,
        Some(RunAllocator::Bfc) => {
            if !a.set.is_empty() || a.conf.is_some() {
                return Err(CliError(
                    "--set and --conf are settings of PyTorch's caching allocator: drop --allocator bfc".into(),
                ));
            }
            false
        }
        None => !a.set.is_empty() || a.conf.is_some(),
    };
    if caching {
        let bfc_only = [
            (a.allow_growth, "--allow-growth"),
            (a.gc, "--gc"),
            (a.fragmentation_fraction.is_some(), "--fragmentation-fraction"),
            (a.tf_style.is_some(), "--tf-style"),
        ];
        if let Some((_, option)) = bfc_only.iter().find(|(given, _)| *given) {
            return Err(CliError(format!(
                "{option} is for TensorFlow's BFC allocator, and this replay goes through PyTorch's caching allocator \
                 (--allocator caching, --set or --conf): drop one or the other"
            )));
        }
    }
    let mut whatifs = Vec::new();
    if caching {
        let conf = a.conf.as_deref().unwrap_or("");
        let torch = TorchSettings::parse(conf).map_err(|e| CliError(format!("--conf {conf:?}: {e}")))?;
        for text in &a.set {
            whatifs.push(torch.with(text).map_err(|e| CliError(format!("--set {text:?}: {e}")))?);
        }
        settings.allocator = oomscope_replay::Allocator::Caching(Box::new(torch));
    }
    let mut progress = Progress::new("replaying", t.events.len() as u64);
    let outcome =
        oomscope_pipeline::replay::trace(&t, &settings, &whatifs, &trace_path, |done| progress.update(done as u64));
    progress.finish();
    let d = &outcome.dump;

    if let Some(path) = &a.output {
        dump::write_atomic(path, d)?;
    }
    output::print(&render::render_as(d, a.format.into(), a.tf_style.as_ref()))?;

    let events = t.events.len();
    // Without -o no dump exists: what shows that state is the report above.
    let shown = if a.output.is_some() { "the dump is" } else { "the report shows" };
    match outcome.first_failure_line {
        Some(line) if a.keep_going => eprintln!(
            "oomscope: {} of {} allocations failed (the first on line {line}); {shown} the state at the end",
            outcome.failures, t.allocs
        ),
        Some(line) => eprintln!(
            "oomscope: out of memory at {}:{line} after {} of {events} events; {shown} the state at that moment",
            a.trace.display(),
            outcome.events_replayed
        ),
        None => eprintln!("oomscope: replayed {events} events with no failed allocation"),
    }
    if let Some(path) = &a.output {
        eprintln!("oomscope: dump written to {}", path.display());
    }
    Ok(if outcome.failures > 0 { EXIT_OOM } else { 0 })
}
