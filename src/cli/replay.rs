//! `oomscope replay TRACE --limit SIZE`: feed a trace through the allocator and report.

use super::args::ReplayArgs;
use super::output::{self, Progress};
use super::{CliError, EXIT_OOM};
use oomscope_analysis::render;
use oomscope_analysis::replay::{Settings, replay};
use oomscope_analysis::trace;
use oomscope_analysis::verdict;
use oomscope_base::size::human;
use oomscope_core::bfc::Options;
use oomscope_dump as dump;
use std::io::BufReader;

pub fn run(a: ReplayArgs) -> Result<u8, CliError> {
    // A pickle (protocol 2 and later starts with 0x80): a PyTorch snapshot.
    let mut head = [0u8; 1];
    let is_pickle = std::fs::File::open(&a.trace)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .is_ok_and(|n| n == 1 && head[0] == 0x80);
    if is_pickle {
        let bytes = std::fs::read(&a.trace)
            .map_err(|e| CliError(format!("{}: cannot read the snapshot: {e}", a.trace.display())))?;
        return super::replay_snapshot::run(a, &bytes);
    }
    let Some(limit) = a.limit else {
        return Err(CliError(format!(
            "{}: a trace needs --limit SIZE, the allocator's memory limit (for example --limit 8GiB)",
            a.trace.display()
        )));
    };
    let file = std::fs::File::open(&a.trace)
        .map_err(|e| CliError(format!("{}: cannot open the trace: {e}", a.trace.display())))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut progress = Progress::new("reading trace", size);
    let parsed = trace::parse(&a.trace, BufReader::with_capacity(1 << 20, file), |done| progress.update(done));
    progress.finish();
    let t = parsed.map_err(|e| CliError(format!("{e}\n  (the trace format is in docs/trace-format.md)")))?;

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

    let mut progress = Progress::new("replaying", t.events.len() as u64);
    let outcome = replay(&t, &settings, Some(&a.trace.display().to_string()), |done| progress.update(done as u64));
    progress.finish();
    let mut d = outcome.dump;
    verdict::attach(&mut d);

    if let Some(path) = &a.output {
        dump::write_atomic(path, &d)?;
    }
    output::print(&render::render_as(&d, a.format.into(), a.tf_style.as_ref()))?;

    let events = t.events.len();
    match outcome.first_failure_line {
        Some(line) if a.keep_going => eprintln!(
            "oomscope: {} of {} allocations failed (the first on line {line}); the dump is the state at the end",
            outcome.failures, t.allocs
        ),
        Some(line) => eprintln!(
            "oomscope: out of memory at {}:{line} after {} of {events} events; the dump is the state at that moment",
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
