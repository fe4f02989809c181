//! What fits: the largest batch (or evaluation chunk) a device holds, found by replaying the
//! workload through the real allocator — rounding, whole-chunk waste and fragmentation
//! included — and the straight-line model (`fixed + per_sample × batch`)
//! fitted to those replays. For a recorded trace, whose batch cannot change, the smallest
//! limit it replays under.

use super::expand::{ExpandError, try_expand};
use super::{Workload, model::Mode};
use oomscope_core::bfc::Options;
use oomscope_core::trace::{Event, Trace};
use oomscope_diagnose::{Diagnosis, Fix};
use oomscope_format::InputError;
use oomscope_format::VerdictKind;
pub use oomscope_format::fit::{BatchFit, LimitFit, Probe};
use oomscope_replay::replay::{Settings, replay};

/// Steps simulated per probe: the second step shows what the first left behind.
const PROBE_STEPS: u32 = 2;
/// A limit no simulated workload reaches: replays under it measure the ideal peak.
const UNLIMITED: u64 = 1 << 50;

fn capacity(s: &Settings) -> u64 {
    s.options.limit.min(s.device_total.saturating_sub(s.device_others))
}

fn unlimited(s: &Settings) -> Settings {
    let mut o = s.options.clone();
    o.limit = UNLIMITED;
    o.allow_growth = false;
    o.history = 0;
    Settings {
        options: o,
        device_total: UNLIMITED,
        device_others: 0,
        device_model: s.device_model.clone(),
        keep_going: true,
        allocator: s.allocator.clone(),
    }
}

fn quiet(s: &Settings) -> Settings {
    let mut s = s.clone();
    s.options.history = 0;
    s.keep_going = false;
    s
}

/// Replays `w` at `batch` on the device of `s` and with unlimited memory.
pub fn probe(w: &Workload, s: &Settings, batch: u64) -> Result<Probe, InputError> {
    probe_at(w, s, batch)?
}

/// [`probe`]; the inner error says the batch is too large for its sizes to be counted,
/// which a search treats as not fitting (a smaller batch may do).
fn probe_at(w: &Workload, s: &Settings, batch: u64) -> Result<Result<Probe, InputError>, InputError> {
    let t = match try_expand(&w.model, batch, PROBE_STEPS, &w.path) {
        Ok(t) => t,
        Err(ExpandError::TooLarge(e)) => return Ok(Err(e)),
        Err(ExpandError::Refused(e)) => return Err(e),
    };
    let real = replay(&t, &quiet(s), None, |_| {});
    let ideal = replay(&t, &unlimited(s), None, |_| {});
    Ok(Ok(Probe {
        batch,
        fits: real.failures == 0,
        peak_in_use: real.dump.stats.peak_bytes_in_use,
        needed: ideal.dump.stats.peak_bytes_in_use,
    }))
}

/// The largest batch of `w` in `1..=max_batch` that replays without an OOM on `s`.
/// Doubling, then bisection: a batch that fits is assumed to fit at every smaller size.
pub fn largest_batch(w: &Workload, s: &Settings, max_batch: u64) -> Result<BatchFit, InputError> {
    let max_batch = max_batch.max(1);
    let mut probes: Vec<Probe> = Vec::new();
    let mut too_large_from: Option<u64> = None;
    let mut run = |b: u64, probes: &mut Vec<Probe>| -> Result<bool, InputError> {
        if let Some(p) = probes.iter().find(|p| p.batch == b) {
            return Ok(p.fits);
        }
        if too_large_from.is_some_and(|t| b >= t) {
            return Ok(false);
        }
        match probe_at(w, s, b)? {
            Ok(p) => {
                let fits = p.fits;
                probes.push(p);
                Ok(fits)
            }
            // Batch 1 is tried first: when even it is too large, the model is refused.
            Err(e) if b == 1 => Err(e),
            Err(_) => {
                too_large_from = Some(too_large_from.map_or(b, |t| t.min(b)));
                Ok(false)
            }
        }
    };
    let (mut lo, mut hi) = (0u64, None::<u64>);
    let mut b = 1;
    loop {
        if run(b, &mut probes)? {
            lo = b;
            if b >= max_batch {
                break;
            }
            b = b.saturating_mul(2).min(max_batch);
        } else {
            hi = Some(b);
            break;
        }
    }
    if let Some(mut h) = hi {
        while h - lo > 1 {
            let mid = lo + (h - lo) / 2;
            if run(mid, &mut probes)? {
                lo = mid;
            } else {
                h = mid;
            }
        }
    }
    // Two points at least for the line.
    for b in [1, 2] {
        run(b, &mut probes)?;
    }
    probes.sort_by_key(|p| p.batch);
    let (fixed, per_sample) = line(&probes);
    let cap = capacity(s);
    let line_prediction =
        if per_sample > 0.0 { ((cap as f64 - fixed) / per_sample).max(0.0).floor() as u64 } else { u64::MAX };
    let largest = probes.iter().find(|p| p.batch == lo).cloned();
    Ok(BatchFit {
        capped: hi.is_none() && lo == max_batch,
        largest,
        probes,
        max_batch,
        capacity: cap,
        fixed,
        per_sample,
        line_prediction,
        too_large_from,
    })
}

/// Least squares of `needed` against `batch`.
fn line(probes: &[Probe]) -> (f64, f64) {
    let n = probes.len() as f64;
    let (sx, sy) = probes.iter().fold((0.0, 0.0), |(x, y), p| (x + p.batch as f64, y + p.needed as f64));
    let (mx, my) = (sx / n, sy / n);
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for p in probes {
        let dx = p.batch as f64 - mx;
        sxy += dx * (p.needed as f64 - my);
        sxx += dx * dx;
    }
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (my - slope * mx, slope)
}

/// The most [`min_limit`] tries: more than any device has.
pub const LIMIT_BOUND: u64 = UNLIMITED;

const MIB: u64 = 1 << 20;

/// The smallest limit `t` replays under (bisection to 1 MiB), and whether `s` is enough.
pub fn min_limit(t: &Trace, s: &Settings) -> LimitFit {
    let ideal = replay(t, &unlimited(s), None, |_| {});
    let needed = ideal.dump.stats.peak_bytes_in_use;
    let fits_at = |limit: u64| {
        let mut q = quiet(s);
        q.options.limit = limit;
        q.device_total = limit;
        q.device_others = 0;
        replay(t, &q, None, |_| {}).failures == 0
    };
    let mut lo = needed.div_ceil(MIB).max(1) * MIB - MIB; // does not fit below the need
    let mut hi = lo + MIB;
    let mut never_fits = None;
    while !fits_at(hi) {
        if hi >= UNLIMITED {
            // A request beyond any device (a hostile or corrupt trace): say so rather than
            // answer with the bound.
            let largest = t
                .events
                .iter()
                .filter_map(|e| match *e {
                    Event::Alloc { bytes, outside: false, .. } => Some(bytes),
                    _ => None,
                })
                .max();
            never_fits = Some(largest.unwrap_or(0));
            lo = hi;
            break;
        }
        lo = hi;
        hi = hi.saturating_mul(2).min(UNLIMITED);
    }
    while hi - lo > MIB {
        let mid = (lo + (hi - lo) / 2) / MIB * MIB;
        if mid <= lo {
            break;
        }
        if fits_at(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let fits = replay(t, &quiet(s), None, |_| {}).failures == 0;
    LimitFit { needed, min_limit: hi, fits, capacity: capacity(s), never_fits }
}

/// Replaces an estimated fix with one checked by replay, when the workload is at hand: the
/// figures change, the renderer writes the words.
pub fn refine(v: &mut Diagnosis, w: &Workload, s: &Settings, batch: u64) -> Result<(), InputError> {
    // A message's diagnosis has no workload behind it.
    let Diagnosis::State(v) = v else { return Ok(()) };
    let eval = w.model.mode == Mode::Eval;
    match v.cause.kind() {
        VerdictKind::Peak | VerdictKind::SingleTensor if batch > 1 => {
            let f = largest_batch(w, s, batch - 1)?;
            v.fix = match &f.largest {
                Some(p) if eval => Fix::EvalInChunks {
                    chunk: p.batch,
                    samples: w.model.samples.unwrap_or(batch),
                    free_at_peak: f.capacity.saturating_sub(p.peak_in_use),
                },
                Some(p) => {
                    Fix::TrainAt { batch: p.batch, from: batch, free_at_peak: f.capacity.saturating_sub(p.peak_in_use) }
                }
                None => Fix::NothingFits { needed: f.probes.first().map_or(0, |p| p.needed), capacity: f.capacity },
            };
        }
        VerdictKind::Others if !s.options.allow_growth => {
            let mut grow = s.clone();
            grow.options.allow_growth = true;
            let t = w.trace(batch, w.model.steps)?;
            let with_growth = replay(&t, &quiet(&grow), None, |_| {});
            if with_growth.failures == 0 {
                let total = s.device_total;
                let outside = w.model.outside.iter().fold(0u64, |sum, o| sum.saturating_add(o.bytes));
                let usable = total.saturating_sub(s.device_others).saturating_sub(outside);
                let fraction = (usable as f64 / total.max(1) as f64 * 20.0).floor() / 20.0;
                let mut capped = s.clone();
                capped.options.limit = (fraction * total as f64) as u64;
                let with_cap = replay(&t, &quiet(&capped), None, |_| {});
                v.fix = Fix::GrowthReplayed {
                    peak_pool: with_growth.dump.stats.peak_pool_bytes,
                    cap: (with_cap.failures == 0).then_some((fraction, capped.options.limit)),
                };
            }
        }
        _ => {}
    }
    Ok(())
}

/// Settings for a device of `total` bytes of which `others` are held elsewhere, with the
/// allocator's limit at what is free (TF's default) unless given.
pub fn settings(total: u64, others: u64, model: &str, limit: Option<u64>) -> Settings {
    let mut o = Options::new(limit.unwrap_or(total.saturating_sub(others)));
    o.history = 10_000;
    Settings {
        options: o,
        device_total: total,
        device_others: others,
        device_model: model.to_string(),
        keep_going: false,
        allocator: oomscope_replay::Allocator::Bfc,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::model;
    use std::path::{Path, PathBuf};

    #[test]
    fn batches_too_large_to_count_do_not_fit_and_the_search_goes_on() {
        // 2^60 bytes a sample on a device of 15EiB: batch 16 is 2^64 bytes, which cannot be
        // counted; the search treats it as not fitting instead of failing or wrapping.
        let text = r#"{"input": [1152921504606846976], "dtype": "uint8", "batch": 1, "mode": "eval", "layers": [{"op": "relu"}]}"#;
        let w = Workload { model: model::parse(Path::new("m.json"), text).unwrap(), path: PathBuf::from("m.json") };
        let s = settings(15 << 60, 0, "simulated GPU", None);
        let f = largest_batch(&w, &s, u64::MAX).unwrap();
        assert_eq!(f.too_large_from, Some(16), "{:?}", f.probes);
        assert!(f.largest.as_ref().is_some_and(|p| p.batch < 16), "{:?}", f.largest);
        assert!(f.probes.iter().all(|p| p.batch < 16));

        // Too large at batch 1: nothing to search, the model is refused.
        let text = r#"{"input": [4294967296, 4294967296, 16], "batch": 1, "mode": "eval", "layers": [{"op": "relu"}]}"#;
        let w = Workload { model: model::parse(Path::new("m.json"), text).unwrap(), path: PathBuf::from("m.json") };
        let e = largest_batch(&w, &s, 64).unwrap_err().to_string();
        assert!(e.starts_with("m.json:1: the input"), "{e}");
    }
}
