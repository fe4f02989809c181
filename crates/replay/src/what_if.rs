//! What-ifs for PyTorch's caching allocator: the same requests replayed under the settings
//! in force and under a changed one, on the memory the run had. A fragmentation verdict
//! quotes the answer instead of guessing that a setting would help.
//!
//! The requests come from a trace (`oomscope replay TRACE`), or from a dump's own history
//! when it holds every event from the first allocation (a run's dump with fewer events
//! than the history keeps). The replay under the settings in force must fail where the run
//! failed; if it does not (the history misses what the run did: streams, `empty_cache`),
//! there is no answer rather than a wrong one.

use crate::replay::{self, Settings as ReplaySettings};
use oomscope_core::bfc::Options;
use oomscope_core::caching::Settings;
use oomscope_core::trace::{Builder, Trace};
use oomscope_format::{Dump, EventKind, Kind, Replayed, SettingChange, WhatIf};
use std::collections::HashMap;

/// Replays `trace` on `capacity` bytes under `settings`, then with `set` on top.
/// `None` when `set` is not a valid change of `settings`.
pub fn replay_trace(trace: &Trace, settings: &Settings, set: SettingChange, capacity: u64) -> Option<WhatIf> {
    both(trace, settings, set, capacity).map(|w| w.0)
}

/// [`replay_trace`], with the requests that failed in the replay as run.
fn both(trace: &Trace, settings: &Settings, set: SettingChange, capacity: u64) -> Option<(WhatIf, u64)> {
    let changed = settings.with(&set.to_string()).ok()?;
    let (as_run, failed) = once(trace, settings, capacity);
    let w = WhatIf {
        set: set.to_string(),
        settings: settings.text.clone(),
        capacity,
        requests: u64::from(trace.allocs),
        as_run,
        changed: once(trace, &changed, capacity).0,
    };
    Some((w, failed))
}

/// One replay through every request (a failed one allocates nothing and the replay goes
/// on, as a program that catches the error does): how it went, and the requests that
/// failed.
fn once(trace: &Trace, settings: &Settings, capacity: u64) -> (Replayed, u64) {
    let mut o = Options::new(capacity);
    o.history = 0;
    let mut r = ReplaySettings::new(o);
    r.allocator = replay::Allocator::Caching(Box::new(settings.clone()));
    r.keep_going = true;
    let out = replay::replay(trace, &r, None, |_| {});
    let replayed = Replayed {
        out_of_memory: out.failures > 0,
        peak_reserved: out.dump.stats.peak_pool_bytes,
        peak_allocated: out.dump.stats.peak_bytes_in_use,
    };
    (replayed, out.failures)
}

/// The what-if of `set` for a dump of PyTorch's caching allocator that failed and whose
/// history is whole; `None` otherwise, or when the history does not reproduce the failure.
pub fn from_history(d: &Dump, set: SettingChange) -> Option<WhatIf> {
    let o = d.oom.as_ref()?;
    let settings = Settings::parse(d.allocator.settings.as_deref()?).ok()?;
    let whole = !d.events.is_empty() && d.events_total == d.events.len() as u64 && d.events[0].seq == 0;
    if !whole {
        return None;
    }
    let (trace, ooms) = requests(d)?;
    let mut capacity = o.pool_bytes.saturating_add(o.device_free);
    if let Some(allowed) = d.allocator.caching.as_ref().and_then(|c| c.allowed) {
        capacity = capacity.min(allowed);
    }
    // The replay as run must fail where the run did: at this dump's request and at every
    // one the program caught before it.
    let (w, failed) = both(&trace, &settings, set, capacity)?;
    (failed == ooms).then_some(w)
}

/// The history's requests up to and including the failed one the dump was written for (the
/// history's last failure), as a trace, and the failures in it. A request that failed
/// earlier (the program caught the error and went on) never gave the program its memory:
/// under settings where it succeeds, it is given back at once.
fn requests(d: &Dump) -> Option<(Trace, u64)> {
    let last = d.events.iter().rposition(|e| e.kind == EventKind::Oom)?;
    let mut b = Builder::new();
    let mut live: HashMap<u64, u32> = HashMap::new();
    let mut ooms = 0;
    for (i, e) in d.events[..=last].iter().enumerate() {
        let op = e.op.as_deref().unwrap_or("unknown");
        match e.kind {
            EventKind::Step => b.step(e.step),
            EventKind::Alloc => {
                let id = b.alloc(e.requested, op, None, None, Kind::Unknown, false);
                live.insert(e.address, id);
            }
            EventKind::Free => {
                // A free of a block allocated before the history began: not whole.
                b.free(live.remove(&e.address)?);
            }
            EventKind::Oom => {
                let id = b.alloc(e.requested, op, None, None, Kind::Unknown, false);
                ooms += 1;
                if i < last {
                    b.free(id);
                }
            }
            _ => {}
        }
    }
    Some((b.finish(), ooms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_core::caching::{Caching, CachingOptions};
    use oomscope_core::device::SimDevice;
    use oomscope_core::record::Meta;
    use oomscope_format::Source;

    const MIB: u64 = 1 << 20;

    /// 7 MiB tensors kept alive: two fit in each 20 MiB segment, and 6 MiB of each segment
    /// stays reserved but unallocated, until the 1 GiB device is full of segments.
    fn seven_mib_tensors(settings: &str, history: usize) -> Dump {
        let mut opts = CachingOptions::new(0);
        opts.history = history;
        let mut c = Caching::new(Settings::parse(settings).unwrap(), opts, Box::new(SimDevice::new(1 << 30, 0)));
        c.mark_step(0, 0);
        for _ in 0..130 {
            if c.allocate(7 * MIB, 0, Meta::default()).is_err() {
                break;
            }
        }
        c.snapshot(Source::default())
    }

    #[test]
    fn seven_mib_tensors_in_twenty_mib_segments_fit_with_expandable_segments() {
        let d = seven_mib_tensors("", 10_000);
        let o = d.oom.as_ref().expect("the default settings run out");
        assert!(o.pool_bytes - o.bytes_in_use >= 250 * MIB, "{o:?}");
        let w = from_history(&d, SettingChange::ExpandableSegments).expect("a whole history");
        assert_eq!(w.settings, "");
        assert_eq!(w.capacity, o.pool_bytes + o.device_free);
        assert!(w.as_run.out_of_memory);
        assert_eq!(w.as_run.peak_reserved, o.pool_bytes);
        assert!(!w.changed.out_of_memory, "{w:?}");
        // Every request replayed: the failed one too.
        let asked = d.events.iter().filter(|e| matches!(e.kind, EventKind::Alloc | EventKind::Oom)).count();
        assert_eq!((w.requests, asked), (103, 103), "two 7 MiB tensors in each of 51 segments, then the failure");
        assert_eq!(w.changed.peak_allocated, w.requests * 7 * MIB);
        assert!(w.changed.peak_reserved < w.as_run.peak_reserved);
    }

    /// The program catches the first OOM, frees every other tensor and asks for 400 MiB,
    /// which fails too: the dump of that second failure is answered for it, not for the
    /// first. (Recorded on an H100 with PyTorch 2.11, the same pattern ran out with
    /// expandable segments too.)
    #[test]
    fn a_dump_after_a_caught_oom_is_answered_for_its_own_request() {
        let mut opts = CachingOptions::new(0);
        opts.history = 10_000;
        let mut c = Caching::new(Settings::default(), opts, Box::new(SimDevice::new(1 << 30, 0)));
        let mut held = Vec::new();
        while let Ok(a) = c.allocate(7 * MIB, 0, Meta::default()) {
            held.push(a);
        }
        for a in held.iter().step_by(2) {
            c.free(*a, 0).unwrap();
        }
        assert!(c.allocate(400 * MIB, 0, Meta::default()).is_err());
        let d = c.snapshot(Source::default());
        assert_eq!(d.ooms.len(), 2);
        let w = from_history(&d, SettingChange::ExpandableSegments).expect("a whole history");
        assert!(w.as_run.out_of_memory);
        assert!(w.changed.out_of_memory, "the 400 MiB request finds no run of free pages: {w:?}");
        // The first failed request is replayed too (and succeeds packed, then is given back).
        assert_eq!(w.requests, held.len() as u64 + 2);
        // The first failure alone is still answered as before.
        let first = seven_mib_tensors("", 10_000);
        assert!(!from_history(&first, SettingChange::ExpandableSegments).unwrap().changed.out_of_memory);
    }

    #[test]
    fn no_answer_from_a_history_that_lost_its_start() {
        let d = seven_mib_tensors("", 50);
        assert!(d.oom.is_some());
        assert!(d.events_total > d.events.len() as u64);
        assert_eq!(from_history(&d, SettingChange::ExpandableSegments), None);
    }

    #[test]
    fn no_answer_when_the_history_does_not_fail_where_the_run_did() {
        let mut d = seven_mib_tensors("", 10_000);
        // The run had less memory than the history needs: the replay fails elsewhere or not.
        d.oom.as_mut().unwrap().device_free += 512 * MIB;
        assert_eq!(from_history(&d, SettingChange::ExpandableSegments), None);
    }
}
