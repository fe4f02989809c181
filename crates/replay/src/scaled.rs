//! A program's step as a function of its batch, learned from the tapes of a few probe runs
//! at small batches ([`scale`]), and replayed at any batch through the allocator
//! ([`Scaled::replay`]): what `oomscope fit` answers with.
//!
//! The probes must have made the same requests in the same order (same op, stream, step
//! marks, frees of the same allocations): only the sizes may differ. A size is *affine* when
//! it is `fixed + per_sample × batch` exactly at every probe (weights: `per_sample` 0;
//! activations and inputs: `fixed` 0 or a rounding constant). A size that is not (a
//! workspace chosen by heuristics, a padded length) is *irregular*: at a probe's batch it is
//! what that probe made, between probes it is interpolated, below the smallest it is the
//! smallest probe's, and beyond the largest it grows along the line through the two largest
//! probes, rounded up, or stays at the largest probe's when that line falls (a workspace
//! that shrank from batch 4 to 6 is not taken to vanish, let alone go negative, at 14).

use crate::replay::Settings;
use oomscope_core::View;
use oomscope_core::record::{Kind, Meta, Names};
use oomscope_core::trace::Trace;

/// One request of a probe's tape. `op` indexes the tape's own names (0: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TapeEntry {
    Alloc { bytes: u64, stream: u32, op: u32, kind: Kind, step: i64 },
    Free { alloc: u32 },
    Step { step: i64 },
    EmptyCache,
}

/// A probe's tape: its batch, its requests, and the names they use (`ops[0]` is none).
#[derive(Clone, Debug, Default)]
pub struct Probed {
    pub batch: u64,
    pub entries: Vec<TapeEntry>,
    pub ops: Vec<String>,
}

/// How one allocation's size follows the batch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Size {
    /// `fixed + per_sample × batch`, exactly, at every probe.
    Affine { fixed: i64, per_sample: i64 },
    /// Not affine: `bytes` at the largest probe's batch `at`, then `per_sample` (fractional,
    /// never negative) per sample more; at and below `at`, the sizes the probes made
    /// (`Scaled::curves[curve]`, ascending by batch; empty for a request made at the largest
    /// probe only, which is then taken to be proportional to the batch).
    Irregular { at: u64, bytes: u64, per_sample: f64, curve: u32 },
}

impl Size {
    /// The size at `batch`, the probes' sizes being `curves`; None when it would be negative
    /// or past any device.
    pub fn at(self, batch: u64, curves: &[Vec<(u64, u64)>]) -> Option<u64> {
        match self {
            Size::Affine { fixed, per_sample } => {
                let b = fixed as i128 + per_sample as i128 * batch as i128;
                u64::try_from(b).ok().filter(|&b| b < (1 << 56))
            }
            Size::Irregular { at, bytes, per_sample, curve } => {
                let points = curves.get(curve as usize).map_or(&[][..], Vec::as_slice);
                let b = if batch >= at || points.is_empty() {
                    bytes as f64 + per_sample * (batch as f64 - at as f64)
                } else {
                    match points.iter().position(|&(b, _)| b >= batch) {
                        Some(0) | None => points[0].1 as f64,
                        Some(i) => {
                            let ((b0, s0), (b1, s1)) = (points[i - 1], points[i]);
                            s0 as f64 + (s1 as f64 - s0 as f64) * (batch - b0) as f64 / (b1 - b0) as f64
                        }
                    }
                };
                (b >= 0.0 && b < (1u64 << 56) as f64).then(|| b.ceil() as u64)
            }
        }
    }

    pub fn per_sample(self) -> f64 {
        match self {
            Size::Affine { per_sample, .. } => per_sample as f64,
            Size::Irregular { per_sample, .. } => per_sample,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Entry {
    Alloc { size: Size, stream: u32, meta: Meta },
    Free { alloc: u32 },
    Step { step: i64 },
    EmptyCache,
}

/// The step as a function of the batch.
#[derive(Clone, Debug)]
pub struct Scaled {
    pub entries: Vec<Entry>,
    pub names: Names,
    pub allocs: u32,
    /// The probes' batches, ascending.
    pub probes: Vec<u64>,
    /// Each irregular size's `(batch, bytes)` at the probes that made it, ascending.
    pub curves: Vec<Vec<(u64, u64)>>,
}

// A convolution's OOM (`oomscope_core::scope::convolution`) is replayed as an OOM, not skipped
// as cuDNN's fallback: the algorithm cuDNN falls back to needs a workspace of its own, of a
// size the probes never saw. Replayed as skipped, ResNet-50 in bf16 on an H200 was answered
// 3324 where PyTorch's own allocator ran out of memory at 3324 (3310 trained); replayed as an
// OOM, 3246, with 3247 training too (said as such).
pub use oomscope_core::scope::convolution;

/// Where the probes' tapes part: the first request that differs, said for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The index of the request on the tapes.
    pub index: usize,
    pub what: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "request {}: {}", self.index + 1, self.what)
    }
}

fn describe(p: &Probed, e: &TapeEntry) -> String {
    match *e {
        TapeEntry::Alloc { bytes, op, .. } => {
            let name = p.ops.get(op as usize).filter(|_| op != 0).map_or("an unnamed op", String::as_str);
            format!("an allocation of {bytes} bytes by {name}")
        }
        TapeEntry::Free { alloc } => format!("the free of allocation {}", alloc + 1),
        TapeEntry::Step { step } => format!("the mark of step {step}"),
        TapeEntry::EmptyCache => "empty_cache()".to_string(),
    }
}

/// Allocations that may be made at some probes only (cuDNN picking another algorithm, and
/// its workspace, at another batch: ResNet-50 on an H200 made 81 of its 2 100 at batch 6
/// and not at batch 2): at most this share of the step's, or 8.
const UNMATCHED_SHARE: f64 = 0.10;
/// How far ahead the alignment looks for the requests to meet again.
const WINDOW: usize = 256;

/// What identifies an allocation across probes: its op, stream and step.
fn signature<'a>(p: &'a Probed, e: &TapeEntry) -> Option<(&'a str, u32, i64)> {
    match *e {
        TapeEntry::Alloc { stream, op, step, .. } => {
            Some((p.ops.get(op as usize).map_or("", String::as_str), stream, step))
        }
        _ => None,
    }
}

/// An allocation as the alignment sees it: its entry, op, stream, step and size.
type Key<'a> = (usize, &'a str, u32, i64, u64);

fn keys(p: &Probed) -> Vec<Key<'_>> {
    p.entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match *e {
            TapeEntry::Alloc { bytes, .. } => signature(p, e).map(|(o, s, t)| (i, o, s, t, bytes)),
            _ => None,
        })
        .collect()
}

/// Whether allocation `x` of `base` may be allocation `y` of `q`: the same op and stream;
/// when `sized` or without a name (the op is then no guide), sizes that are equal (made
/// whatever the batch) or in the ratio of the batches (a tensor of the batch, its own
/// bytes).
fn alike(x: &Key<'_>, y: &Key<'_>, base: u64, q: u64, sized: bool) -> bool {
    x.1 == y.1
        && x.2 == y.2
        && ((!sized && !x.1.is_empty()) || x.4 == y.4 || x.4 as u128 * q as u128 == y.4 as u128 * base as u128)
}

/// Each allocation of `base` (by number) matched to one of `q`, step by step. A step with as
/// many allocations at both batches, each pair [`alike`], is matched in order. Otherwise the
/// two are walked together, skipping the fewest on either side where they part (a thread
/// beside the step's, tf.data's, allocating at other moments). Returns the matches and how
/// many of `q`'s allocations matched none.
fn align(base: &Probed, q: &Probed) -> (Vec<Option<usize>>, usize) {
    let (a, b) = (keys(base), keys(q));
    let same = |x: &Key<'_>, y: &Key<'_>| alike(x, y, base.batch, q.batch, false);
    let sized = |x: &Key<'_>, y: &Key<'_>| alike(x, y, base.batch, q.batch, true);
    let mut matched = vec![None; a.len()];
    let mut unmatched_q = 0;
    let (mut i0, mut j0) = (0, 0);
    while i0 < a.len() || j0 < b.len() {
        // The next step's allocations on each side (steps come in order).
        let step = match (a.get(i0), b.get(j0)) {
            (Some(x), Some(y)) => x.3.min(y.3),
            (Some(x), None) => x.3,
            (None, Some(y)) => y.3,
            (None, None) => break,
        };
        let i1 = i0 + a[i0..].iter().take_while(|k| k.3 == step).count();
        let j1 = j0 + b[j0..].iter().take_while(|k| k.3 == step).count();
        let (sa, sb) = (&a[i0..i1], &b[j0..j1]);
        if sa.len() == sb.len() && sa.iter().zip(sb).all(|(x, y)| same(x, y)) {
            for k in 0..sa.len() {
                matched[i0 + k] = Some(j0 + k);
            }
        } else {
            // Walked with sizes that follow the batch first: an op's allocations of other
            // roles (its output, its workspace) are not taken for each other where the
            // orders part.
            let mut taken = vec![false; sb.len()];
            walk(sa, sb, sized, |k, m| {
                matched[i0 + k] = Some(j0 + m);
                taken[m] = true;
            });
            // What the walk skipped where the two orders differ (another thread's requests
            // earlier at one batch than at the other): each to the nearest of its kind
            // left, by size first, then by op alone.
            for rule in [&sized as &dyn Fn(&Key<'_>, &Key<'_>) -> bool, &same] {
                for k in 0..sa.len() {
                    if matched[i0 + k].is_some() {
                        continue;
                    }
                    let at = k * sb.len() / sa.len();
                    let nearest = (at.saturating_sub(4 * WINDOW)..(at + 4 * WINDOW).min(sb.len()))
                        .filter(|&m| !taken[m] && rule(&sa[k], &sb[m]))
                        .min_by_key(|&m| m.abs_diff(at));
                    if let Some(m) = nearest {
                        matched[i0 + k] = Some(j0 + m);
                        taken[m] = true;
                    }
                }
            }
            unmatched_q += taken.iter().filter(|t| !**t).count();
        }
        (i0, j0) = (i1, j1);
    }
    (matched, unmatched_q)
}

/// The two sides of a step walked together; `hit(k, m)` for each match.
fn walk(a: &[Key<'_>], b: &[Key<'_>], same: impl Fn(&Key<'_>, &Key<'_>) -> bool, mut hit: impl FnMut(usize, usize)) {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if same(&a[i], &b[j]) {
            hit(i, j);
            i += 1;
            j += 1;
            continue;
        }
        let meet = (1..=WINDOW).find_map(|d| {
            (0..=d)
                .find(|&x| i + x < a.len() && j + d - x < b.len() && same(&a[i + x], &b[j + d - x]))
                .map(|x| (x, d - x))
        });
        let (x, y) = meet.unwrap_or((1, 1));
        i += x;
        j += y;
    }
}

/// Learns the step from `probes` (at least two, at distinct batches). The largest probe's
/// requests are the step (its order of frees too: a free order that differs between runs,
/// a cache cleared in hash order, changes nothing the allocator ends with); each of its
/// allocations is matched in the others, and its size fitted through the sizes it had.
pub fn scale(probes: &[Probed]) -> Result<Scaled, Mismatch> {
    let mut probes: Vec<&Probed> = probes.iter().collect();
    probes.sort_by_key(|p| p.batch);
    let base = probes[probes.len() - 1];
    let others = &probes[..probes.len() - 1];
    let alloc_entries: Vec<usize> =
        base.entries.iter().enumerate().filter(|(_, e)| matches!(e, TapeEntry::Alloc { .. })).map(|(i, _)| i).collect();
    let limit = ((alloc_entries.len() as f64 * UNMATCHED_SHARE) as usize).max(8);
    let mut matches: Vec<Vec<Option<usize>>> = Vec::new();
    for q in others {
        let (m, unmatched_q) = align(base, q);
        let unmatched = m.iter().filter(|x| x.is_none()).count();
        if unmatched + unmatched_q > limit {
            let first = m.iter().position(Option::is_none).map_or(0, |k| alloc_entries[k]);
            return Err(mismatch(q, base, first, unmatched + unmatched_q));
        }
        matches.push(m);
    }
    // The allocations of each smaller probe, by number, as entry indices.
    let q_allocs: Vec<Vec<usize>> = others
        .iter()
        .map(|q| {
            q.entries.iter().enumerate().filter(|(_, e)| matches!(e, TapeEntry::Alloc { .. })).map(|(i, _)| i).collect()
        })
        .collect();
    let mut names = Names::default();
    let mut curves = Vec::new();
    let mut entries = Vec::with_capacity(base.entries.len());
    let mut k = 0usize;
    for e in &base.entries {
        entries.push(match *e {
            TapeEntry::Alloc { bytes, stream, op, kind, step } => {
                let mut points: Vec<(u64, u64)> = Vec::new();
                for (qi, q) in others.iter().enumerate() {
                    if let Some(j) = matches[qi][k]
                        && let TapeEntry::Alloc { bytes, .. } = q.entries[q_allocs[qi][j]]
                    {
                        points.push((q.batch, bytes));
                    }
                }
                points.push((base.batch, bytes));
                k += 1;
                let size = if points.len() >= 2 {
                    fit_size(&points, &mut curves)
                } else {
                    // Made at the largest probe alone: taken to grow with the batch.
                    Size::Irregular {
                        at: base.batch,
                        bytes,
                        per_sample: bytes as f64 / base.batch as f64,
                        curve: u32::MAX,
                    }
                };
                let op = match base.ops.get(op as usize) {
                    Some(name) if op != 0 => names.ops.intern(name.as_str()),
                    _ => 0,
                };
                Entry::Alloc { size, stream, meta: Meta { op, kind, step, ..Meta::default() } }
            }
            TapeEntry::Free { alloc } => Entry::Free { alloc },
            TapeEntry::Step { step } => Entry::Step { step },
            TapeEntry::EmptyCache => Entry::EmptyCache,
        });
    }
    Ok(Scaled { entries, names, allocs: k as u32, probes: probes.iter().map(|p| p.batch).collect(), curves })
}

fn mismatch(q: &Probed, base: &Probed, index: usize, unmatched: usize) -> Mismatch {
    let what = base.entries.get(index).map_or_else(|| "a request".to_string(), |e| describe(base, e));
    Mismatch {
        index,
        what: format!(
            "at batch {} the program made {what}, which it did not at batch {}: {unmatched} allocations are made at \
             one batch and not the other ({} requests against {})",
            base.batch,
            q.batch,
            base.entries.len(),
            q.entries.len()
        ),
    }
}

/// The size rule through `(batch, bytes)` points, ascending by batch; an irregular one's
/// points go to `curves`.
fn fit_size(points: &[(u64, u64)], curves: &mut Vec<Vec<(u64, u64)>>) -> Size {
    let (b0, s0) = points[0];
    let (b1, s1) = points[1];
    let (db, ds) = (b1 as i128 - b0 as i128, s1 as i128 - s0 as i128);
    if ds % db == 0 {
        let per = ds / db;
        let fixed = s0 as i128 - per * b0 as i128;
        // A line that falls, or that is negative at batch 1, is no tensor of the batch (two
        // probes' workspaces are always on some line): irregular, held where it would fall.
        if per >= 0
            && fixed + per >= 0
            && points.iter().all(|&(b, s)| fixed + per * b as i128 == s as i128)
            && let (Ok(fixed), Ok(per_sample)) = (i64::try_from(fixed), i64::try_from(per))
        {
            return Size::Affine { fixed, per_sample };
        }
    }
    let (ba, sa) = points[points.len() - 2];
    let (bz, sz) = points[points.len() - 1];
    curves.push(points.to_vec());
    Size::Irregular {
        at: bz,
        bytes: sz,
        per_sample: ((sz as f64 - sa as f64) / (bz as f64 - ba as f64)).max(0.0),
        curve: curves.len() as u32 - 1,
    }
}

/// What a replay at one batch gave.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaledRun {
    pub batch: u64,
    pub fits: bool,
    /// Peaks of allocated (block) bytes and of reserved (segment) bytes, as PyTorch's
    /// `max_memory_allocated()` and `max_memory_reserved()` count them.
    pub peak_allocated: u64,
    pub peak_reserved: u64,
    /// Requested bytes live at the allocated peak, by kind (largest first).
    pub by_kind: Vec<(Kind, u64)>,
    /// The request that failed: its op and size.
    pub failed: Option<(String, u64)>,
    /// A size could not be counted at this batch (past any device).
    pub too_large: bool,
}

impl Scaled {
    /// Allocations whose size is not affine in the batch, and their bytes at the largest
    /// probe.
    pub fn irregular(&self) -> (usize, u64) {
        let mut n = 0;
        let mut bytes = 0;
        for e in &self.entries {
            if let Entry::Alloc { size: Size::Irregular { bytes: b, .. }, .. } = e {
                n += 1;
                bytes += b;
            }
        }
        (n, bytes)
    }

    /// Allocations whose size grows with the batch.
    pub fn growing(&self) -> usize {
        self.entries.iter().filter(|e| matches!(e, Entry::Alloc { size, .. } if size.per_sample() > 0.0)).count()
    }

    /// Replays the step at `batch` on the device and allocator of `s` (stopping at the first
    /// failure: `keep_going` is not used).
    pub fn replay(&self, batch: u64, s: &Settings) -> ScaledRun {
        let mut s = s.clone();
        s.options.history = 0;
        let mut engine = s.engine_for(&Trace::default());
        *engine.names_mut() = self.names.clone();
        let mut run = ScaledRun {
            batch,
            fits: true,
            peak_allocated: 0,
            peak_reserved: 0,
            by_kind: Vec::new(),
            failed: None,
            too_large: false,
        };
        // Per allocation: its address and requested bytes; per kind: the requested bytes live.
        let mut live: Vec<(u64, u64, Kind)> = vec![(0, 0, Kind::Unknown); self.allocs as usize];
        let mut by_kind = [0u64; 9];
        let (mut in_use, mut peak) = (0u64, 0u64);
        let mut at_peak = by_kind;
        let mut id = 0usize;
        for e in &self.entries {
            match *e {
                Entry::Alloc { size, stream, meta } => {
                    let Some(bytes) = size.at(batch, &self.curves) else {
                        run.too_large = true;
                        run.fits = false;
                        run.failed = Some((self.names.op(meta.op).to_string(), u64::MAX));
                        break;
                    };
                    let this = id;
                    id += 1;
                    if bytes == 0 {
                        continue;
                    }
                    match engine.allocate(bytes, stream as u64, meta) {
                        Ok(addr) => {
                            let block = engine.allocated_size(addr).unwrap_or(bytes);
                            live[this] = (addr, bytes, meta.kind);
                            by_kind[meta.kind as usize] += bytes;
                            in_use += block;
                            if in_use > peak {
                                peak = in_use;
                                at_peak = by_kind;
                            }
                        }
                        Err(_) => {
                            run.fits = false;
                            run.failed = Some((self.names.op(meta.op).to_string(), bytes));
                            break;
                        }
                    }
                }
                Entry::Free { alloc } => {
                    let (addr, bytes, kind) = live[alloc as usize];
                    if addr != 0 {
                        in_use -= engine.allocated_size(addr).unwrap_or(0);
                        let _ = engine.free(addr, 0);
                        by_kind[kind as usize] -= bytes;
                        live[alloc as usize].0 = 0;
                    }
                }
                Entry::Step { step } => engine.mark_step(step, 0),
                Entry::EmptyCache => engine.empty_cache(0),
            }
        }
        let stats = engine.stats();
        run.peak_allocated = stats.peak_bytes_in_use;
        run.peak_reserved = stats.peak_pool_bytes;
        let mut kinds: Vec<(Kind, u64)> = Kind::ALL
            .iter()
            .chain(std::iter::once(&Kind::Unknown))
            .map(|&k| (k, at_peak[k as usize]))
            .filter(|&(_, b)| b > 0)
            .collect();
        kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
        run.by_kind = kinds;
        run
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each allocation's size rule, in order.
    fn sizes(s: &Scaled) -> Vec<Size> {
        s.entries
            .iter()
            .filter_map(|e| match e {
                Entry::Alloc { size, .. } => Some(*size),
                _ => None,
            })
            .collect()
    }

    fn probe(batch: u64, sizes: &[u64]) -> Probed {
        let mut entries = vec![TapeEntry::Step { step: 0 }];
        for (i, &bytes) in sizes.iter().enumerate() {
            entries.push(TapeEntry::Alloc { bytes, stream: 0, op: 1 + i as u32 % 2, kind: Kind::Activation, step: 0 });
        }
        entries.push(TapeEntry::Free { alloc: 0 });
        Probed { batch, entries, ops: vec![String::new(), "Net.fc/linear".into(), "Net.fc/weight".into()] }
    }

    #[test]
    fn sizes_that_follow_the_batch_are_affine_and_others_are_said_irregular() {
        // 4096 per sample + 512; a weight of 1 MiB; a workspace that jumps.
        let s = scale(&[
            probe(2, &[8704, 1 << 20, 1000]),
            probe(4, &[16896, 1 << 20, 3000]),
            probe(6, &[25088, 1 << 20, 4000]),
        ])
        .unwrap();
        let sizes = sizes(&s);
        assert_eq!(sizes[0], Size::Affine { fixed: 512, per_sample: 4096 });
        assert_eq!(sizes[1], Size::Affine { fixed: 1 << 20, per_sample: 0 });
        assert_eq!(sizes[2], Size::Irregular { at: 6, bytes: 4000, per_sample: 500.0, curve: 0 });
        assert_eq!(sizes[0].at(100, &s.curves), Some(410_112));
        assert_eq!(sizes[2].at(10, &s.curves), Some(6000));
        // At and between the probes, what they made; below them, the smallest's.
        let at = |b| sizes[2].at(b, &s.curves);
        assert_eq!([at(1), at(2), at(3), at(4), at(5), at(6)], [1000, 1000, 2000, 3000, 3500, 4000].map(Some));
        assert_eq!(s.irregular(), (1, 4000));
    }

    #[test]
    fn a_workspace_that_shrinks_between_the_largest_probes_stays_at_the_largest_ones() {
        // cuDNN's workspace of ResNet-50's layer1.2.conv2 backward on an H200 shrank from batch
        // 4 to 6: along that line it was negative from batch 14 on, and every batch from 14 up
        // "did not fit" (a request of 2^64 - 1 bytes), where batch 14 trained.
        let s = scale(&[
            probe(2, &[8704, 1 << 20, 30 << 20]),
            probe(4, &[16896, 1 << 20, 90 << 20]),
            probe(6, &[25088, 1 << 20, 20 << 20]),
        ])
        .unwrap();
        let w = sizes(&s)[2];
        assert_eq!(w, Size::Irregular { at: 6, bytes: 20 << 20, per_sample: 0.0, curve: 0 });
        assert_eq!(w.at(14, &s.curves), Some(20 << 20));
        assert_eq!(w.at(4096, &s.curves), Some(20 << 20));
        assert_eq!(w.at(5, &s.curves), Some(55 << 20));
        assert_eq!(w.at(1, &s.curves), Some(30 << 20));
        // Growing from the second-largest to the largest, then the line; below the probes,
        // no line that falls under zero.
        let g = scale(&[probe(4, &[16896, 1 << 20, 1000]), probe(6, &[25088, 1 << 20, 9000])]).unwrap();
        let w = sizes(&g)[2];
        assert_eq!(w.at(8, &g.curves), Some(17000));
        assert_eq!(w.at(1, &g.curves), Some(1000));
        let run = g.replay(14, &Settings::new(oomscope_core::bfc::Options::new(1 << 30)));
        assert!(run.fits && !run.too_large, "{run:?}");
    }

    #[test]
    fn a_request_made_at_some_batches_only_is_taken_from_the_largest_and_frees_in_any_order() {
        let small = probe(2, &[8704, 1 << 20]);
        let mut large = probe(4, &[16896, 1 << 20]);
        // A workspace at batch 4 only (cuDNN chose another algorithm), freed at once; and the
        // two frees at the end in the other order.
        large.ops.push("Net.conv/conv2d".into());
        large.entries.insert(2, TapeEntry::Alloc { bytes: 4000, stream: 0, op: 3, kind: Kind::Temporary, step: 0 });
        large.entries.insert(3, TapeEntry::Free { alloc: 1 });
        let mut small_frees = small.clone();
        small_frees.entries.push(TapeEntry::Free { alloc: 1 });
        large.entries.push(TapeEntry::Free { alloc: 2 });
        let s = scale(&[small_frees, large]).unwrap();
        let sizes = sizes(&s);
        assert_eq!(
            sizes,
            vec![
                Size::Affine { fixed: 512, per_sample: 4096 },
                Size::Irregular { at: 4, bytes: 4000, per_sample: 1000.0, curve: u32::MAX },
                Size::Affine { fixed: 1 << 20, per_sample: 0 },
            ]
        );
        assert_eq!(s.irregular(), (1, 4000));
    }

    #[test]
    fn requests_that_do_not_follow_the_batch_are_refused_with_the_first() {
        // One allocation per sample: 2 at batch 2, 12 at batch 12.
        let per_sample = |batch: u64| {
            let mut p = probe(batch, &[1 << 20]);
            for _ in 0..batch {
                p.entries.push(TapeEntry::Alloc { bytes: 64, stream: 0, op: 1, kind: Kind::Input, step: 0 });
            }
            p
        };
        let e = scale(&[per_sample(2), per_sample(12)]).unwrap_err();
        assert!(
            e.to_string().contains(
                "at batch 12 the program made an allocation of 64 bytes by Net.fc/linear, which it did not at batch 2: \
                 10 allocations are made at one batch and not the other"
            ),
            "{e}"
        );
    }
}
