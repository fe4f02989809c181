//! A trace replayed through an allocator, with the what-ifs asked for: the same requests
//! under each changed setting of PyTorch's caching allocator, on the same memory, in a table;
//! the state shown is the last replay's, with its verdict.

use oomscope_core::caching::Settings as TorchSettings;
use oomscope_core::trace::Trace;
use oomscope_format as dump;
use oomscope_replay::replay::{Allocator, Outcome, Settings, replay};
use oomscope_replay::what_if;

/// Replays `t` under `settings`, then under each of `whatifs` (caching allocator only); the
/// outcome shown is the last one's, its dump carrying the what-if table and the verdict (a
/// fix of the settings tried on the whole trace, on the same memory). `progress` hears the
/// first replay's events done.
pub fn trace(
    t: &Trace,
    settings: &Settings,
    whatifs: &[TorchSettings],
    source: &str,
    progress: impl FnMut(usize),
) -> Outcome {
    let mut outcome = replay(t, settings, Some(source), progress);
    let capacity = settings.options.limit.min(settings.device_total.saturating_sub(settings.device_others));
    let mut rows = Vec::new();
    if let (Some(torch), false) = (settings.torch(), whatifs.is_empty()) {
        rows.push(row(&torch.text, &outcome));
        for w in whatifs {
            let mut s = settings.clone();
            s.allocator = Allocator::Caching(Box::new(w.clone()));
            let o = replay(t, &s, Some(source), |_| {});
            rows.push(row(&w.text, &o));
            outcome = o;
        }
    }
    // The state shown is the last replay's: the last change, else the settings in force.
    let shown = whatifs.last().or(settings.torch());
    if !rows.is_empty() {
        let limit = dump::ReplayLimit { kind: dump::LimitKind::Device, bytes: capacity };
        outcome.dump.what_ifs = Some(dump::WhatIfTable { limit: Some(limit), rows });
    }
    match shown {
        Some(torch) => {
            crate::diagnose_with(&mut outcome.dump, &mut |_, set| what_if::replay_trace(t, torch, set, capacity))
        }
        None => crate::diagnose(&mut outcome.dump),
    }
    outcome
}

/// One line of a what-if table: how the replay under `settings` went.
fn row(settings: &str, o: &Outcome) -> dump::WhatIfRow {
    let s = &o.dump.stats;
    dump::WhatIfRow {
        settings: settings.to_string(),
        ooms: o.failures,
        peak_reserved: s.peak_pool_bytes,
        peak_allocated: s.peak_bytes_in_use,
        device_allocs: o.dump.allocator.caching.as_ref().map_or(0, |c| c.device_allocs),
    }
}
