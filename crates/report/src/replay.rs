//! What a replay says of itself, before the state it shows: how closely a PyTorch snapshot's
//! replay followed the recorded run, and the what-if table of the same requests under other
//! settings. Read from the dump (`replay`, `what_ifs`), so `oomscope report` of a replay's
//! dump prints what `oomscope replay` printed.

use oomscope_base::size::torch as size;
use oomscope_format::{Dump, LimitKind, ReplayInfo, ReplayLimit, ReplayState, WhatIfRow};
use std::fmt::Write;

/// The replay's account (empty when the dump is not a replay's), ending with a blank line
/// when there is one.
pub fn account(d: &Dump) -> String {
    if let Some(r) = &d.replay {
        return snapshot(r, &d.device.name);
    }
    let Some(w) = &d.what_ifs else { return String::new() };
    let Some(last) = w.rows.last() else { return String::new() };
    let mut s = table(&w.rows, w.limit);
    let _ = writeln!(s, "\nThe state below is the end of the replay under {}.\n", label(&last.settings));
    s
}

/// Settings as a what-if table names them.
pub fn label(conf: &str) -> String {
    if conf.is_empty() { "defaults".into() } else { conf.to_string() }
}

/// The memory a what-if table ran on, in words.
fn memory(l: ReplayLimit) -> String {
    let b = size(l.bytes);
    match l.kind {
        LimitKind::Device => format!("a device with {b} for PyTorch"),
        LimitKind::DeviceAtOom => {
            format!("a device with {b} for PyTorch (what it held and what was free at the recorded OOM)")
        }
        LimitKind::Fraction => format!("{b} allowed (the memory fraction the recorded OOM shows)"),
        LimitKind::PeakReserved => format!("a device with {b} for PyTorch (the most the run reserved)"),
    }
}

/// The what-ifs side by side.
pub fn table(rows: &[WhatIfRow], limit: Option<ReplayLimit>) -> String {
    let mut s = String::new();
    let device = limit.map_or_else(|| "a device as large as needed".to_string(), memory);
    let _ = writeln!(s, "What if (the same requests, the allocator deciding everything, on {device}):");
    let names: Vec<String> = rows.iter().map(|r| label(&r.settings)).collect();
    let w = names.iter().map(String::len).max().unwrap_or(8).max(8);
    let _ = writeln!(
        s,
        "  {:<w$}  {:>14}  {:>14}  {:>14}  {:>13}",
        "settings", "out of memory", "peak reserved", "peak allocated", "device allocs"
    );
    for (r, name) in rows.iter().zip(&names) {
        let oom = if r.ooms > 0 { format!("yes ({})", r.ooms) } else { "no".into() };
        let _ = writeln!(
            s,
            "  {name:<w$}  {oom:>14}  {:>14}  {:>14}  {:>13}",
            size(r.peak_reserved),
            size(r.peak_allocated),
            r.device_allocs
        );
    }
    s
}

/// A snapshot's replay: where its trace starts, how closely it was followed, the peaks, the
/// limit read from the recorded OOM, then the what-ifs and which state is shown.
fn snapshot(r: &ReplayInfo, device: &str) -> String {
    let mut s = String::new();
    let from = if r.settings_recorded {
        "as the snapshot records them"
    } else {
        "the snapshot records none; read from its segments"
    };
    let _ = writeln!(
        s,
        "Replayed {} trace entries of {device} through PyTorch's caching allocator (settings: {}, {from}).",
        r.entries,
        label(&r.settings)
    );
    if r.starts_empty {
        let _ = writeln!(s, "The trace starts from an empty allocator.");
    } else {
        let _ = writeln!(
            s,
            "The trace starts mid-run: {} segments with {} live blocks were rebuilt from the final snapshot.",
            r.restored_segments, r.restored_blocks
        );
    }
    let _ = writeln!(
        s,
        "{} of {} allocations placed at the address PyTorch gave them; {} of {} final segments reproduced block for block.",
        r.placed, r.allocations, r.final_segments_equal, r.final_segments
    );
    let _ = writeln!(s, "Peak reserved {}, peak allocated {}.", size(r.peak_reserved), size(r.peak_allocated));
    if let Some(ReplayLimit { kind: LimitKind::Fraction, bytes }) = r.limit {
        let _ = writeln!(
            s,
            "At its first OOM the device had room for the segment PyTorch wanted, so a memory fraction refused it: \
             about {} allowed (set_per_process_memory_fraction).",
            size(bytes)
        );
    }
    if let Some(last) = r.what_ifs.last() {
        s.push('\n');
        s.push_str(&table(&r.what_ifs, r.limit));
        let moment = match r.state {
            ReplayState::FirstOom => "its first out-of-memory error",
            ReplayState::End => "the end",
        };
        let _ = writeln!(s, "\nThe state below is the replay under {} at {moment}.", label(&last.settings));
    } else if r.state == ReplayState::FirstOom {
        let _ = writeln!(
            s,
            "The state below is at the first of its {} out-of-memory errors; the program went on after it.",
            r.ooms
        );
    } else if r.ooms > 0 {
        let _ = writeln!(
            s,
            "The state below is at the end of the trace, after its {} out-of-memory error{}.",
            r.ooms,
            if r.ooms == 1 { "" } else { "s" }
        );
    }
    s.push('\n');
    s
}
