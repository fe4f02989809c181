//! `oomscope replay SNAPSHOT`: a PyTorch snapshot's trace through PyTorch's caching
//! allocator, as recorded, and again under other settings (`--set`).

use super::args::ReplayArgs;
use super::output::{self, Progress};
use super::replay::{Row, label, table};
use super::{CliError, EXIT_OOM};
use oomscope_analysis::render;
use oomscope_analysis::torch_replay::{self, Action, Options, Outcome, SettingsFrom, SnapshotTrace};
use oomscope_analysis::verdict;
use oomscope_base::size::torch as size;
use oomscope_dump as dump;
use std::fmt::Write;

pub fn run(a: ReplayArgs, bytes: &[u8]) -> Result<u8, CliError> {
    let t = SnapshotTrace::read(&a.trace, bytes, a.gpu).map_err(|e| CliError(e.to_string()))?;
    if t.entries.is_empty() {
        return Err(CliError(format!(
            "{}: device {} has no trace to replay; record one with torch.cuda.memory._record_memory_history() before the snapshot (oomscope import reads the snapshot as it is)",
            a.trace.display(),
            t.device
        )));
    }
    let mut whatifs = Vec::new();
    for text in &a.set {
        let s = t.settings.with(text).map_err(|e| CliError(format!("--set {text:?}: {e}")))?;
        whatifs.push(s);
    }
    let total = t.entries.len() as u64;
    let mut progress = Progress::new("replaying", total);
    let recorded =
        torch_replay::run(&t, &Options { settings: t.settings.clone(), device: a.device, as_recorded: true }, |done| {
            progress.update(done as u64)
        });
    progress.finish();

    // The what-ifs: the allocator decides everything, on a device of the size the run had.
    // Not told: at a recorded OOM, what PyTorch held plus what was free; when the run gave
    // segments back (an out-of-memory retry or empty_cache), the peak it reserved, so that
    // the what-ifs meet the same wall; else no limit, and the peaks are the answer.
    let released = t.entries.iter().any(|e| matches!(e.action, Action::SegmentFree | Action::SegmentUnmap));
    let capacity =
        a.device.or_else(|| torch_replay::capacity_at_oom(&t)).or(released.then_some(recorded.peak_reserved));
    let mut runs: Vec<(String, Outcome)> = Vec::new();
    if !whatifs.is_empty() {
        let baseline = torch_replay::run(
            &t,
            &Options { settings: t.settings.clone(), device: capacity, as_recorded: false },
            |_| {},
        );
        runs.push((label(&t.settings.text), baseline));
        for s in whatifs {
            let o =
                torch_replay::run(&t, &Options { settings: s.clone(), device: capacity, as_recorded: false }, |_| {});
            runs.push((label(&s.text), o));
        }
    }

    let shown = runs.last().map_or(&recorded, |r| &r.1);
    let mut d = shown.dump.clone();
    // A fix of the settings is tried on the whole trace, on the memory the run had.
    let settings = shown.settings.clone();
    verdict::attach_with(&mut d, &mut |set| torch_replay::what_if(&t, &settings, set, capacity?));
    if let Some(path) = &a.output {
        dump::write_atomic(path, &d)?;
    }
    let format: render::Format = a.format.into();
    if format == render::Format::Json {
        output::print(&render::render(&d, format))?;
    } else {
        let mut text = header(&t, &recorded);
        if let Some((name, _)) = runs.last() {
            let rows: Vec<Row> = runs
                .iter()
                .map(|(name, o)| Row {
                    name: name.clone(),
                    ooms: o.ooms,
                    peak_reserved: o.peak_reserved,
                    peak_allocated: o.peak_allocated,
                    device_allocs: o.dump.allocator.caching.as_ref().map_or(0, |c| c.device_allocs),
                })
                .collect();
            text.push('\n');
            text.push_str(&table(&rows, capacity));
            let _ = writeln!(text, "\nThe state below is the end of the replay under {name}.");
        }
        text.push('\n');
        text.push_str(&render::render(&d, format));
        output::print(&text)?;
    }
    eprintln!("{}", one_line(&t, &recorded));
    if let Some(path) = &a.output {
        eprintln!("oomscope: dump written to {}", path.display());
    }
    Ok(if shown.ooms > 0 { EXIT_OOM } else { 0 })
}

fn one_line(t: &SnapshotTrace, o: &Outcome) -> String {
    format!(
        "oomscope: replayed {} trace entries of cuda:{}; {} of {} allocations at PyTorch's address; {} of {} final segments identical",
        t.entries.len(),
        t.device,
        o.placed,
        o.allocs,
        o.final_segments_equal,
        o.final_segments
    )
}

fn header(t: &SnapshotTrace, o: &Outcome) -> String {
    let mut s = String::new();
    let from = match t.settings_from {
        SettingsFrom::Recorded => "as the snapshot records them",
        SettingsFrom::Inferred => "the snapshot records none; read from its segments",
    };
    let _ = writeln!(
        s,
        "Replayed {} trace entries of cuda:{} through PyTorch's caching allocator (settings: {}, {from}).",
        t.entries.len(),
        t.device,
        label(&t.settings.text)
    );
    if o.starts_empty {
        let _ = writeln!(s, "The trace starts from an empty allocator.");
    } else {
        let _ = writeln!(
            s,
            "The trace starts mid-run: {} segments with {} live blocks were rebuilt from the final snapshot.",
            o.restored_segments, o.restored_blocks
        );
    }
    let _ = writeln!(
        s,
        "{} of {} allocations placed at the address PyTorch gave them; {} of {} final segments reproduced block for block.",
        o.placed, o.allocs, o.final_segments_equal, o.final_segments
    );
    let _ = writeln!(s, "Peak reserved {}, peak allocated {}.", size(o.peak_reserved), size(o.peak_allocated));
    s
}
