//! A job's failure, read from its ranks' dumps: which rank ran out of memory first, every
//! rank side by side at that moment, what sets the failing rank apart (the ops and kinds
//! whose bytes differ most from the other ranks' median, shapes that differ, growth over
//! the steps it recorded), and a verdict for the job: one rank's data or work (imbalance),
//! one rank that keeps memory across steps (a leak), every rank alike (the model and batch
//! themselves), or memory outside the framework on one GPU. Typed data; the words are the
//! report's.

use crate::{Diagnosis, analyze};
use oomscope_format::job::{JobRank, JobVerdictKind, StepBytes};
use oomscope_format::{Dump, Kind, SettingChange, VerdictKind, WhatIf};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Why the job failed, across its ranks.
#[derive(Clone, Debug, PartialEq)]
pub enum JobCause {
    /// Only one rank's dump: nothing to compare it with.
    Alone { rank: u32 },
    /// Memory outside the framework on the failing rank's GPU (other processes, or the
    /// device refused what the allocator could have had).
    Outside { rank: u32, others: u64 },
    /// The failing rank's live memory rose step after step while the others' did not.
    Leak { rank: u32, per_step: u64, others_per_step: u64 },
    /// The failing rank held much more than the others: its data or its share of the work.
    Imbalance {
        rank: u32,
        bytes: u64,
        /// The other ranks' median.
        median: u64,
        /// The request that failed, when it, more than what the rank held, sets it apart:
        /// its size and the median of the other ranks' largest live tensors.
        request: Option<(u64, u64)>,
        /// What of it scales with the batch, on the failing rank and the others' median.
        batch_bytes: u64,
        batch_median: u64,
    },
    /// Every rank held about the same: the model and its batch need more than a GPU has.
    /// `failed`: the ranks that ran out of memory; `spread`: the largest rank's bytes over
    /// the smallest's, minus one.
    Alike { failed: Vec<u32>, median: u64, spread: f64, fixed: u64 },
}

impl JobCause {
    /// The kind a job report's `verdict.kind` gives it.
    pub fn kind(&self) -> JobVerdictKind {
        match self {
            JobCause::Alone { .. } => JobVerdictKind::Alone,
            JobCause::Outside { .. } => JobVerdictKind::Outside,
            JobCause::Leak { .. } => JobVerdictKind::Leak,
            JobCause::Imbalance { .. } => JobVerdictKind::Imbalance,
            JobCause::Alike { .. } => JobVerdictKind::Alike,
        }
    }
}

/// What sets the failing rank apart from the others.
#[derive(Clone, Debug, PartialEq)]
pub enum Difference {
    /// Live bytes of one kind.
    Kind { kind: Kind, bytes: u64, median: u64 },
    /// Live bytes of one op.
    Node { op: String, bytes: u64, median: u64 },
    /// The shape of an op's tensors: the failing rank's, and the one most other ranks have.
    Shape { op: String, shape: Vec<i64>, usual: Vec<i64>, bytes: u64 },
    /// The request that failed, far larger than any tensor the other ranks hold (one long
    /// sequence, one large image): its op and shape where the dump has them, and the median
    /// of the other ranks' largest live tensors.
    Request { op: Option<String>, shape: Option<Vec<i64>>, bytes: u64, others_largest: u64 },
}

/// A job's failure.
#[derive(Clone, Debug, PartialEq)]
pub struct JobDiagnosis {
    pub job: Option<String>,
    /// Every rank, by rank.
    pub ranks: Vec<JobRank>,
    /// The rank that ran out of memory first (an index into `ranks`), when one did.
    pub first: Option<usize>,
    /// That rank's own diagnosis.
    pub first_diagnosis: Option<Diagnosis>,
    pub cause: Option<JobCause>,
    /// Largest first.
    pub differences: Vec<Difference>,
}

/// The failing rank is set apart when it holds this much more than the others' median.
const IMBALANCE: f64 = 1.25;
/// A difference below this share of the failing rank's bytes in use is not listed.
const NOTABLE: f64 = 0.02;
/// Differences listed at most.
const DIFFERENCES: usize = 8;

fn median(mut v: Vec<u64>) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { v[n / 2 - 1] / 2 + v[n / 2] / 2 + (v[n / 2 - 1] % 2 + v[n / 2] % 2) / 2 }
}

fn state(path: &Path, d: &Dump) -> Option<JobRank> {
    let p = d.process.as_ref()?;
    let rank = p.rank?;
    let (allocated, reserved) = match &d.oom {
        Some(o) => (o.bytes_in_use, o.pool_bytes),
        None => (d.stats.bytes_in_use, d.stats.pool_bytes),
    };
    let mut steps: Vec<StepBytes> =
        d.steps.iter().filter(|s| s.step >= 0).map(|s| StepBytes { step: s.step, bytes: s.bytes_in_use }).collect();
    steps.dedup_by_key(|s| s.step);
    Some(JobRank {
        rank,
        host: p.host.clone(),
        pid: p.pid,
        gpu: d.gpu(),
        node_rank: p.node_rank,
        dump: path.display().to_string(),
        oom: d.oom.is_some(),
        allocated,
        reserved,
        peak: d.stats.peak_bytes_in_use,
        step: d.steps.last().map_or(-1, |s| s.step),
        by_kind: crate::breakdown(d),
        others: d.device.others,
        request: d.oom.as_ref().map(|o| o.requested),
        dumped_unix_ms: p.dumped_unix_ms,
        steps,
    })
}

fn kind_bytes(r: &JobRank, k: Kind) -> u64 {
    r.by_kind.iter().filter(|b| b.kind == k).map(|b| b.bytes).sum()
}

fn batch_bytes(r: &JobRank) -> u64 {
    r.by_kind.iter().filter(|b| b.kind.scales_with_batch()).map(|b| b.bytes).sum()
}

/// Bytes added per step over the steps a rank recorded (0 when it did not rise).
fn per_step(steps: &[StepBytes]) -> u64 {
    // Skip the first step: it may still be warming up (lazy weights, optimizer state).
    let tail = steps.get(1..).unwrap_or(&[]);
    let (Some(f), Some(l)) = (tail.first(), tail.last()) else { return 0 };
    let rising = tail.windows(2).all(|w| w[1].bytes >= w[0].bytes);
    if !rising || l.step <= f.step || l.bytes <= f.bytes {
        return 0;
    }
    (l.bytes - f.bytes) / (l.step - f.step) as u64
}

/// The job's failure from its ranks' dumps and their files, one a rank (the one written at
/// its OOM, or at the other rank's, or its latest). `replay` tries a settings fix for the failing rank,
/// as [`analyze`] says.
pub fn analyze_job(
    dumps: &[(&Path, &Dump)],
    replay: &mut dyn FnMut(&Dump, SettingChange) -> Option<WhatIf>,
) -> JobDiagnosis {
    let mut ranks: Vec<(JobRank, &Dump)> = dumps.iter().filter_map(|(p, d)| Some((state(p, d)?, *d))).collect();
    ranks.sort_by_key(|(r, _)| r.rank);
    let job = dumps.iter().find_map(|(_, d)| d.process.as_ref()?.job.clone());
    // The first to fail: the earliest OOM dump.
    let first = ranks
        .iter()
        .enumerate()
        .filter(|(_, (r, _))| r.oom)
        .min_by_key(|(_, (r, _))| (r.dumped_unix_ms.unwrap_or(u64::MAX), r.rank))
        .map(|(i, _)| i);
    let first_diagnosis = first.map(|i| {
        let d = ranks[i].1;
        analyze(d, &mut |set| replay(d, set))
    });
    let (cause, differences) = match first {
        Some(i) => {
            let (c, diffs) = cause(&ranks, i, first_diagnosis.as_ref());
            (Some(c), diffs)
        }
        None => (None, Vec::new()),
    };
    JobDiagnosis { job, ranks: ranks.into_iter().map(|(r, _)| r).collect(), first, first_diagnosis, cause, differences }
}

fn cause(ranks: &[(JobRank, &Dump)], i: usize, own: Option<&Diagnosis>) -> (JobCause, Vec<Difference>) {
    let failing = &ranks[i].0;
    let others: Vec<&(JobRank, &Dump)> = ranks.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, r)| r).collect();
    let differences = differences(&ranks[i], &others);
    if others.is_empty() {
        return (JobCause::Alone { rank: failing.rank }, differences);
    }
    let own_kind = own.map(Diagnosis::kind);
    let others_median_outside = median(others.iter().map(|(r, _)| r.others).collect());
    if own_kind == Some(VerdictKind::Others)
        || (failing.others > 0 && failing.others > 2 * others_median_outside && failing.others * 10 > failing.reserved)
    {
        return (JobCause::Outside { rank: failing.rank, others: failing.others }, differences);
    }
    let grows = per_step(&failing.steps);
    let others_grow = median(others.iter().map(|(r, _)| per_step(&r.steps)).collect());
    if (own_kind == Some(VerdictKind::Growth) || grows > 0)
        && grows > 4 * others_grow.max(1)
        && failing.steps.len() >= 4
    {
        return (JobCause::Leak { rank: failing.rank, per_step: grows, others_per_step: others_grow }, differences);
    }
    let med = median(others.iter().map(|(r, _)| r.allocated).collect());
    let batch_med = median(others.iter().map(|(r, _)| batch_bytes(r)).collect());
    let failed: Vec<u32> = ranks.iter().filter(|(r, _)| r.oom).map(|(r, _)| r.rank).collect();
    let all_failed = failed.len() == ranks.len();
    // The ranks' in-use bytes, the failing one counted with its failed request (what it
    // would have held).
    let wanted = failing.allocated + failing.request.unwrap_or(0);
    // Or its data alone: the inputs a rank holds are the same through its step, whatever
    // point of it each rank's state was taken at (the others' totals, taken mid-backward or
    // between steps, are not).
    let input = kind_bytes(failing, Kind::Input);
    let input_med = median(others.iter().map(|(r, _)| kind_bytes(r, Kind::Input)).collect());
    let more_data = input_med > 0 && input as f64 > IMBALANCE * input_med as f64 && input - input_med >= 1 << 20;
    if !all_failed
        && (more_data
            || wanted as f64 > IMBALANCE * (med + failing.request.unwrap_or(0).min(med)) as f64 && wanted > med)
    {
        // What the rank held does not set it apart: the request it made does.
        let request = differences.iter().find_map(|d| match d {
            Difference::Request { bytes, others_largest, .. } => Some((*bytes, *others_largest)),
            _ => None,
        });
        return (
            JobCause::Imbalance {
                rank: failing.rank,
                bytes: failing.allocated,
                median: med,
                request,
                batch_bytes: batch_bytes(failing),
                batch_median: batch_med,
            },
            differences,
        );
    }
    let all: Vec<u64> = ranks.iter().map(|(r, _)| r.allocated).collect();
    let (lo, hi) = (all.iter().copied().min().unwrap_or(0), all.iter().copied().max().unwrap_or(0));
    let spread = if lo == 0 { 0.0 } else { hi as f64 / lo as f64 - 1.0 };
    let fixed = failing.by_kind.iter().filter(|b| !b.kind.scales_with_batch()).map(|b| b.bytes).sum();
    (JobCause::Alike { failed, median: median(all), spread, fixed }, differences)
}

/// What sets `failing` apart from `others`: kinds and ops whose bytes differ most from the
/// others' median, and ops whose tensors have another shape.
fn differences(failing: &(JobRank, &Dump), others: &[&(JobRank, &Dump)]) -> Vec<Difference> {
    let (f, fd) = failing;
    let notable = ((f.allocated as f64 * NOTABLE) as u64).max(1 << 20);
    let mut out: Vec<(u64, Difference)> = Vec::new();
    if others.is_empty() {
        return Vec::new();
    }
    // The request that failed first, when what the rank held does not set it apart and no
    // tensor of the others comes near it; then kinds (what the memory is), then ops, then
    // shapes, each largest first.
    let held_median = median(others.iter().map(|(r, _)| r.allocated).collect());
    if let Some(o) = fd.oom.as_ref().filter(|_| (f.allocated as f64) < IMBALANCE * held_median as f64) {
        let largest = |d: &Dump| d.live_chunks().map(|c| c.size).max().unwrap_or(0);
        let others_largest = median(others.iter().map(|(_, d)| largest(d)).collect());
        if o.requested >= notable && o.requested as f64 > 2.0 * others_largest as f64 {
            out.push((
                o.requested,
                Difference::Request { op: o.op.clone(), shape: o.shape.clone(), bytes: o.requested, others_largest },
            ));
        }
    }
    let mut kinds: Vec<(u64, Difference)> = Vec::new();
    for kind in Kind::ALL.into_iter().chain([Kind::Unknown]) {
        let bytes = kind_bytes(f, kind);
        let med = median(others.iter().map(|(r, _)| kind_bytes(r, kind)).collect());
        let gap = bytes.abs_diff(med);
        if gap >= notable {
            kinds.push((gap, Difference::Kind { kind, bytes, median: med }));
        }
    }
    kinds.sort_by_key(|k| std::cmp::Reverse(k.0));
    out.extend(kinds);
    let nodes =
        |d: &Dump| -> BTreeMap<String, u64> { d.usage_by_node.iter().map(|n| (n.op.clone(), n.bytes)).collect() };
    let mine = nodes(fd);
    let theirs: Vec<BTreeMap<String, u64>> = others.iter().map(|(_, d)| nodes(d)).collect();
    let names: BTreeSet<&String> = mine.keys().chain(theirs.iter().flat_map(|t| t.keys())).collect();
    let mut by_node: Vec<(u64, Difference)> = names
        .into_iter()
        .filter_map(|op| {
            let bytes = mine.get(op).copied().unwrap_or(0);
            let med = median(theirs.iter().map(|t| t.get(op).copied().unwrap_or(0)).collect());
            let gap = bytes.abs_diff(med);
            (gap >= notable).then(|| (gap, Difference::Node { op: op.clone(), bytes, median: med }))
        })
        .collect();
    by_node.sort_by_key(|k| std::cmp::Reverse(k.0));
    out.extend(by_node.into_iter().take(DIFFERENCES));
    // Shapes: an op whose tensors have a shape on the failing rank that most other ranks'
    // tensors of that op do not have (its input, a longer sequence).
    let shapes = |d: &Dump| -> BTreeMap<String, (Vec<i64>, u64)> {
        let mut m: BTreeMap<String, (Vec<i64>, u64)> = BTreeMap::new();
        for c in d.live_chunks() {
            if let (Some(op), Some(shape)) = (&c.op, &c.shape) {
                let e = m.entry(op.clone()).or_insert_with(|| (shape.clone(), 0));
                if c.size > e.1 {
                    *e = (shape.clone(), c.size);
                }
            }
        }
        m
    };
    let mine = shapes(fd);
    let theirs: Vec<BTreeMap<String, (Vec<i64>, u64)>> = others.iter().map(|(_, d)| shapes(d)).collect();
    let mut by_shape = Vec::new();
    for (op, (shape, bytes)) in &mine {
        let mut counts: BTreeMap<&Vec<i64>, usize> = BTreeMap::new();
        for t in &theirs {
            if let Some((s, _)) = t.get(op) {
                *counts.entry(s).or_default() += 1;
            }
        }
        if let Some((usual, n)) = counts.into_iter().max_by_key(|(_, n)| *n)
            && usual != shape
            && n * 2 > theirs.len()
        {
            by_shape.push((
                *bytes,
                Difference::Shape { op: op.clone(), shape: shape.clone(), usual: usual.clone(), bytes: *bytes },
            ));
        }
    }
    by_shape.sort_by_key(|k| std::cmp::Reverse(k.0));
    out.extend(by_shape.into_iter().take(DIFFERENCES));
    out.into_iter().map(|(_, d)| d).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::{ChunkInfo, NodeUsage, OomRecord, ProcessInfo, RegionInfo, StepMark};

    const MIB: u64 = 1 << 20;

    /// A rank's dump: `live` (op, kind, bytes, shape) chunks; failed with `request` when given.
    fn rank(r: u32, live: &[(&str, Kind, u64, &[i64])], request: Option<u64>, steps: &[u64]) -> Dump {
        let mut d = Dump {
            process: Some(ProcessInfo {
                pid: 100 + r,
                host: "node-a".into(),
                rank: Some(r),
                world_size: Some(4),
                job: Some("j".into()),
                dumped_unix_ms: Some(1000 + u64::from(r)),
                ..ProcessInfo::default()
            }),
            ..Dump::default()
        };
        d.device.name = format!("cuda:{r}");
        let mut at = 0;
        let chunks: Vec<ChunkInfo> = live
            .iter()
            .map(|(op, kind, bytes, shape)| {
                at += bytes;
                ChunkInfo {
                    address: at,
                    size: *bytes,
                    requested: *bytes,
                    in_use: true,
                    op: Some(op.to_string()),
                    kind: Some(*kind),
                    shape: Some(shape.to_vec()),
                    ..ChunkInfo::default()
                }
            })
            .collect();
        let in_use: u64 = live.iter().map(|l| l.2).sum();
        d.regions = vec![RegionInfo { address: 0, size: 1 << 30, chunks, ..RegionInfo::default() }];
        d.usage_by_node = live
            .iter()
            .map(|(op, _, b, _)| NodeUsage { op: op.to_string(), bytes: *b, requested: *b, count: 1 })
            .collect();
        d.stats.bytes_in_use = in_use;
        d.stats.pool_bytes = in_use;
        d.steps = steps
            .iter()
            .enumerate()
            .map(|(i, b)| StepMark { step: i as i64, bytes_in_use: *b, ..StepMark::default() })
            .collect();
        d.oom = request.map(|q| OomRecord {
            requested: q,
            rounded: q,
            bytes_in_use: in_use,
            pool_bytes: in_use,
            ..OomRecord::default()
        });
        d
    }

    fn job(dumps: &[Dump]) -> JobDiagnosis {
        analyze_job(&dumps.iter().map(|d| (Path::new("rank.dump.json"), d)).collect::<Vec<_>>(), &mut |_, _| None)
    }

    fn model(input: &[i64], input_bytes: u64, act: u64) -> Vec<(&'static str, Kind, u64, Vec<i64>)> {
        vec![
            ("Net.fc/weight", Kind::Weight, 16 * MIB, vec![4096, 1024]),
            ("AdamW.state/Net.fc/weight.exp_avg", Kind::Optimizer, 16 * MIB, vec![4096, 1024]),
            ("randn", Kind::Input, input_bytes, input.to_vec()),
            ("Net.fc/linear", Kind::Activation, act, vec![input[0], 4096]),
        ]
    }

    fn live<'a>(m: &'a [(&'static str, Kind, u64, Vec<i64>)]) -> Vec<(&'static str, Kind, u64, &'a [i64])> {
        m.iter().map(|(o, k, b, s)| (*o, *k, *b, s.as_slice())).collect()
    }

    #[test]
    fn one_rank_with_forty_times_the_data_is_an_imbalance_named_by_its_input() {
        let small = model(&[128, 1024], MIB / 2, 2 * MIB);
        let big = model(&[5120, 1024], 20 * MIB, 80 * MIB);
        let dumps = [
            rank(0, &live(&small), None, &[]),
            rank(1, &live(&small), None, &[]),
            rank(2, &live(&big), Some(80 * MIB), &[]),
            rank(3, &live(&small), None, &[]),
        ];
        let j = job(&dumps);
        assert_eq!(j.first.map(|i| j.ranks[i].rank), Some(2));
        let Some(JobCause::Imbalance { rank, bytes, median, .. }) = j.cause else { panic!("{:?}", j.cause) };
        assert_eq!((rank, bytes, median), (2, 132 * MIB, 34 * MIB + MIB / 2));
        assert!(
            j.differences.iter().any(|d| matches!(d, Difference::Shape { op, shape, usual, .. }
                if op == "randn" && shape == &vec![5120, 1024] && usual == &vec![128, 1024])),
            "{:?}",
            j.differences
        );
        assert!(matches!(j.differences[0], Difference::Kind { kind: Kind::Activation, .. }), "{:?}", j.differences);
    }

    /// Four times the data, the other rank's state taken mid-backward where it holds nearly
    /// as much in all: its inputs, the same through its step, still set the failing rank apart.
    #[test]
    fn one_rank_with_more_data_is_an_imbalance_whenever_the_others_state_was_taken() {
        let mut busy = model(&[2048, 512], 4 * MIB, 16 * MIB);
        busy.push(("AddmmBackward0", Kind::Backward, 40 * MIB, vec![2048, 4096]));
        let big = model(&[8192, 512], 16 * MIB, 64 * MIB);
        let j = job(&[rank(0, &live(&busy), None, &[]), rank(1, &live(&big), Some(64 * MIB), &[])]);
        assert!(matches!(j.cause, Some(JobCause::Imbalance { rank: 1, .. })), "{:?}", j.cause);
        // The same inputs: not an imbalance by them.
        let same = model(&[2048, 512], 4 * MIB, 60 * MIB);
        let j = job(&[rank(0, &live(&busy), None, &[]), rank(1, &live(&same), Some(16 * MIB), &[])]);
        assert!(!matches!(j.cause, Some(JobCause::Imbalance { .. })), "{:?}", j.cause);
    }

    #[test]
    fn one_rank_that_asks_for_far_more_is_an_imbalance_named_by_its_request() {
        // Every rank holds the same; rank 1 asks for 64 MiB (one long sequence).
        let m = model(&[128, 1024], MIB / 2, 2 * MIB);
        let mut dumps: Vec<Dump> = (0..4).map(|r| rank(r, &live(&m), None, &[])).collect();
        dumps[1] = rank(1, &live(&m), Some(64 * MIB), &[]);
        let o = dumps[1].oom.as_mut().unwrap();
        o.op = Some("GPT.attn/softmax".into());
        o.shape = Some(vec![1, 16, 2048, 512]);
        let j = job(&dumps);
        match j.cause {
            Some(JobCause::Imbalance { rank: 1, request: Some((req, largest)), .. }) => {
                assert_eq!(req, 64 * MIB);
                assert_eq!(largest, 16 * MIB, "the others' largest tensors: the weight");
            }
            c => panic!("{c:?}"),
        }
        assert!(
            matches!(&j.differences[0], Difference::Request { op: Some(op), bytes, .. } if op == "GPT.attn/softmax" && *bytes == 64 * MIB),
            "{:?}",
            j.differences
        );
    }

    #[test]
    fn ranks_that_all_fail_alike_are_the_model_and_batch_themselves() {
        let m = model(&[512, 1024], 2 * MIB, 64 * MIB);
        let dumps: Vec<Dump> = (0..4).map(|r| rank(r, &live(&m), Some(64 * MIB), &[])).collect();
        let j = job(&dumps);
        assert_eq!(j.first.map(|i| j.ranks[i].rank), Some(0), "the earliest dump");
        let Some(JobCause::Alike { failed, fixed, .. }) = &j.cause else { panic!("{:?}", j.cause) };
        assert_eq!(failed, &vec![0, 1, 2, 3]);
        assert_eq!(*fixed, 32 * MIB);
        assert!(j.differences.is_empty(), "{:?}", j.differences);
    }

    #[test]
    fn a_rank_whose_memory_rises_each_step_leaks() {
        let m = model(&[128, 1024], MIB, 2 * MIB);
        let flat = [40 * MIB; 6];
        let rising: Vec<u64> = (0..6).map(|s| 40 * MIB + s * 8 * MIB).collect();
        let dumps = [
            rank(0, &live(&m), None, &flat),
            rank(1, &live(&m), Some(64 * MIB), &rising),
            rank(2, &live(&m), None, &flat),
        ];
        let j = job(&dumps);
        let Some(JobCause::Leak { rank, per_step, others_per_step }) = j.cause else { panic!("{:?}", j.cause) };
        assert_eq!((rank, per_step, others_per_step), (1, 8 * MIB, 0));
    }

    #[test]
    fn memory_held_outside_on_one_gpu_is_said() {
        let m = model(&[128, 1024], MIB, 2 * MIB);
        let mut dumps: Vec<Dump> = (0..3).map(|r| rank(r, &live(&m), None, &[])).collect();
        dumps[1] = rank(1, &live(&m), Some(8 * MIB), &[]);
        dumps[1].device.others = 30 * MIB;
        let j = job(&dumps);
        assert_eq!(j.cause, Some(JobCause::Outside { rank: 1, others: 30 * MIB }));
        let alone = job(&dumps[1..2]);
        assert_eq!(alone.cause, Some(JobCause::Alone { rank: 1 }));
    }

    #[test]
    fn medians() {
        assert_eq!(median(vec![]), 0);
        assert_eq!(median(vec![3, 1, 2]), 2);
        assert_eq!(median(vec![u64::MAX, u64::MAX]), u64::MAX);
        assert_eq!(median(vec![1, 2]), 1);
    }
}
