//! `oomscope replay SNAPSHOT`: a PyTorch snapshot's trace through PyTorch's caching
//! allocator, as recorded, and again under other settings (`--set`).

use super::args::ReplayArgs;
use super::output::{self, Progress};
use super::{CliError, EXIT_OOM};
use oomscope_format as dump;
use oomscope_report as render;
use oomscope_sim::torch_replay::{self, Action, Limit, Options, Outcome, SettingsFrom, SnapshotTrace};

/// The options given that a snapshot's replay does not take, each with what to do instead:
/// an option silently ignored would change nothing while the user believes it did.
fn not_for_a_snapshot(a: &ReplayArgs) -> Vec<String> {
    let mut v = Vec::new();
    let mut no = |given: bool, option: &str, instead: &str| {
        if given {
            v.push(format!("  {option}: {instead}"));
        }
    };
    no(
        a.limit.is_some(),
        "--limit",
        "a snapshot's replay reads its memory from the recorded OOM; give the device's size with --device SIZE",
    );
    no(a.allocator.is_some(), "--allocator", "a snapshot replays through PyTorch's caching allocator, as recorded");
    no(a.conf.is_some(), "--conf", "a snapshot's settings are those it records; try others with --set SETTINGS");
    no(a.batch.is_some(), "--batch", "for a workload; a snapshot has its own sizes");
    no(a.allow_growth, "--allow-growth", "an option of TensorFlow's BFC allocator");
    no(a.gc, "--gc", "an option of TensorFlow's BFC allocator");
    no(a.fragmentation_fraction.is_some(), "--fragmentation-fraction", "an option of TensorFlow's BFC allocator");
    no(a.name.is_some(), "--name", "a snapshot's allocator is named by its device (cuda:N)");
    no(a.tf_style.is_some(), "--tf-style", "a snapshot's report is PyTorch's text, not TensorFlow's");
    no(a.others != 0, "--others", "the recorded OOM says what was free; give the device's size with --device SIZE");
    no(a.history != 10_000, "--history", "a snapshot's replay keeps its own trace");
    v
}

pub fn run(a: ReplayArgs, bytes: &[u8]) -> Result<u8, CliError> {
    let refused = not_for_a_snapshot(&a);
    if !refused.is_empty() {
        return Err(CliError(format!(
            "{} is a PyTorch memory snapshot; {} not apply to it:\n{}",
            a.trace.display(),
            if refused.len() == 1 { "this option does" } else { "these options do" },
            refused.join("\n")
        )));
    }
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
    // The memory the run had: the device given, else read from the first recorded OOM (the
    // device's free memory, or a memory fraction's cap); when the run gave segments back
    // without an OOM (empty_cache), the peak it reserved, so that what-ifs meet the same
    // wall; else none, and the peaks are the answer.
    let at_oom = torch_replay::limit_at_oom(&t);
    let recorded_limit = a.device.map(Limit::Device).or(at_oom);
    let mut progress = Progress::new("replaying", total);
    // As recorded on a device of unknown size, a memory fraction read from the OOM still
    // caps the allocator, so the OOM's figures and verdict see the limit the run had.
    let fraction = match recorded_limit {
        Some(l @ Limit::Fraction(_)) => Some(l),
        _ => a.device.map(Limit::Device),
    };
    let recorded =
        torch_replay::run(&t, &Options::on(t.settings.clone(), fraction, true).going_on(a.keep_going), |done| {
            progress.update(done as u64)
        });
    progress.finish();

    let released = t.entries.iter().any(|e| matches!(e.action, Action::SegmentFree | Action::SegmentUnmap));
    let limit = recorded_limit.or(released.then_some(Limit::PeakReserved(recorded.peak_reserved)));
    let mut runs: Vec<(String, Outcome)> = Vec::new();
    if !whatifs.is_empty() {
        let baseline =
            torch_replay::run(&t, &Options::on(t.settings.clone(), limit, false).going_on(a.keep_going), |_| {});
        runs.push((t.settings.text.clone(), baseline));
        for s in whatifs {
            let o = torch_replay::run(&t, &Options::on(s.clone(), limit, false).going_on(a.keep_going), |_| {});
            runs.push((s.text.clone(), o));
        }
    }

    let shown = runs.last().map_or(&recorded, |r| &r.1);
    let mut d = shown.dump.clone();
    d.replay = Some(replay_info(&t, &recorded, shown, limit, &runs));
    // A fix of the settings is tried on the whole trace, on the memory the run had.
    let settings = shown.settings.clone();
    let mut fix = |_: &dump::Dump, set: dump::SettingChange| torch_replay::what_if(&t, &settings, set, limit?);
    // Going on past the first OOM shows the end; the verdict is the first OOM's, on what
    // was live then.
    oomscope_inputs::snapshot_verdict(&mut d, shown.first_oom.as_ref(), &mut fix);
    if let Some(path) = &a.output {
        dump::write_atomic(path, &d)?;
    }
    output::print(&render::render(&d, a.format.into()))?;
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

/// The replay's account for machines: placements, the limit, the what-ifs.
fn replay_info(
    t: &SnapshotTrace,
    o: &Outcome,
    shown: &Outcome,
    limit: Option<Limit>,
    runs: &[(String, Outcome)],
) -> dump::ReplayInfo {
    dump::ReplayInfo {
        entries: t.entries.len() as u64,
        starts_empty: o.starts_empty,
        restored_segments: o.restored_segments,
        restored_blocks: o.restored_blocks,
        allocations: o.allocs,
        placed: o.placed,
        final_segments: o.final_segments,
        final_segments_equal: o.final_segments_equal,
        ooms: o.ooms,
        peak_reserved: o.peak_reserved,
        peak_allocated: o.peak_allocated,
        settings: t.settings.text.clone(),
        settings_recorded: t.settings_from == SettingsFrom::Recorded,
        state: if shown.at_first_oom { dump::ReplayState::FirstOom } else { dump::ReplayState::End },
        limit: limit.map(Limit::to_dump),
        what_ifs: runs
            .iter()
            .map(|(settings, r)| dump::WhatIfRow {
                settings: settings.clone(),
                ooms: r.ooms,
                peak_reserved: r.peak_reserved,
                peak_allocated: r.peak_allocated,
                device_allocs: r.dump.allocator.caching.as_ref().map_or(0, |c| c.device_allocs),
            })
            .collect(),
    }
}
