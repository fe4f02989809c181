//! A job's failure in words: the report `oomscope report DIR` prints (and, as data with its
//! words, `--format json`): the first rank to fail and why, the job's verdict with what sets
//! that rank apart, then every rank side by side.

use crate::describe_process;
use crate::verdict::{render as render_verdict, words};
use oomscope_base::shape;
use oomscope_diagnose::job::{Difference, JobCause, JobDiagnosis};
use oomscope_format::job::{DifferenceKind, FirstFailure, JobDifference, JobRank, JobReport, JobVerdict};
use oomscope_format::{Kind, ProcessInfo};
use std::fmt::Write;

/// The sizes of the failing rank's framework: PyTorch's `170.09 MiB`, TF's `170.09MiB`.
type Size = fn(u64) -> String;

/// The report of a diagnosed job; `torch`: sizes as PyTorch prints them.
pub fn report(d: &JobDiagnosis, torch: bool) -> JobReport {
    let size: Size = if torch { oomscope_base::size::torch } else { oomscope_base::size::human };
    let first_failure = d.first.zip(d.first_diagnosis.as_ref()).map(|(i, diag)| {
        let r = &d.ranks[i];
        FirstFailure {
            rank: r.rank,
            host: r.host.clone(),
            gpu: r.gpu,
            dump: r.dump.clone(),
            step: r.step,
            request: r.request,
            verdict: words(diag),
        }
    });
    let verdict = d.cause.as_ref().map(|c| job_verdict(c, d, first_failure.as_ref(), size));
    JobReport {
        job: d.job.clone(),
        ranks: d.ranks.clone(),
        first_failure,
        verdict,
        differences: d.differences.iter().map(difference).collect(),
        other_jobs: Vec::new(),
    }
}

fn difference(d: &Difference) -> JobDifference {
    match d {
        Difference::Kind { kind, bytes, median } => JobDifference {
            what: DifferenceKind::Kind,
            name: kind.name().into(),
            bytes: *bytes,
            median: Some(*median),
            ..JobDifference::default()
        },
        Difference::Node { op, bytes, median } => JobDifference {
            what: DifferenceKind::Node,
            name: op.clone(),
            bytes: *bytes,
            median: Some(*median),
            ..JobDifference::default()
        },
        Difference::Shape { op, shape, usual, bytes } => JobDifference {
            what: DifferenceKind::Shape,
            name: op.clone(),
            bytes: *bytes,
            median: None,
            shape: Some(shape.clone()),
            usual: Some(usual.clone()),
        },
        Difference::Request { op, shape, bytes, others_largest } => JobDifference {
            what: DifferenceKind::Request,
            name: op.clone().unwrap_or_default(),
            bytes: *bytes,
            median: Some(*others_largest),
            shape: shape.clone(),
            usual: None,
        },
    }
}

fn ratio(a: u64, b: u64) -> String {
    if b == 0 { "from nothing".into() } else { format!("{:.1}x", a as f64 / b as f64) }
}

/// The differences as evidence lines: `activations: 80.00 MiB on rank 2, 2.00 MiB on the
/// others (median)`.
fn evidence_lines(d: &JobDiagnosis, rank: u32, size: Size) -> Vec<String> {
    d.differences
        .iter()
        .take(6)
        .map(|x| match x {
            Difference::Kind { kind, bytes, median } => {
                format!("{}: {} on rank {rank}, {} on the others (median)", kind.plural(), size(*bytes), size(*median))
            }
            Difference::Node { op, bytes, median } => {
                format!("{}: {} on rank {rank}, {} on the others (median)", line(op), size(*bytes), size(*median))
            }
            Difference::Shape { op, shape: s, usual, .. } => {
                format!("{}: shape {} on rank {rank}, {} on the others", line(op), shape::text(s), shape::text(usual))
            }
            Difference::Request { op, shape: s, bytes, others_largest } => format!(
                "the request that failed on rank {rank}: {}{}{}; the largest tensor on the others is {} (median)",
                size(*bytes),
                op.as_deref().map_or(String::new(), |o| format!(" for {}", line(o))),
                s.as_deref().map_or(String::new(), |s| format!(", shape {}", shape::text(s))),
                size(*others_largest)
            ),
        })
        .collect()
}

/// The input whose shape differs, when one does: `randn`, `[5120,1024]`, `[128,1024]`.
fn input_shape(d: &JobDiagnosis, failing: &JobRank) -> Option<(String, Vec<i64>, Vec<i64>)> {
    let is_input = |op: &str| failing.by_kind.iter().any(|k| k.kind == Kind::Input) && !op.contains('/');
    d.differences.iter().find_map(|x| match x {
        Difference::Shape { op, shape, usual, .. } if is_input(op) => Some((op.clone(), shape.clone(), usual.clone())),
        _ => None,
    })
}

fn job_verdict(c: &JobCause, d: &JobDiagnosis, first: Option<&FirstFailure>, size: Size) -> JobVerdict {
    let own_fix = first.map_or(String::new(), |f| f.verdict.fix.clone());
    let failing = d.first.map(|i| &d.ranks[i]);
    let world = d.ranks.len();
    let (headline, mut evidence, fix) = match c {
        JobCause::Alone { rank } => {
            (format!("only rank {rank}'s dump is here: its own verdict is the job's"), Vec::new(), own_fix)
        }
        JobCause::Outside { rank, others } => (
            format!(
                "memory outside the framework on rank {rank}'s GPU: {} of it was held by other processes when it ran out",
                size(*others)
            ),
            Vec::new(),
            format!(
                "free rank {rank}'s GPU (nvidia-smi shows what holds it: another job, a leftover process) or move the job off it; \
                 the other ranks are not short"
            ),
        ),
        JobCause::Leak { rank, per_step, others_per_step } => (
            format!(
                "one rank keeps memory across steps: rank {rank}'s live memory grew by {} per step, the other ranks' by {}",
                size(*per_step),
                size(*others_per_step)
            ),
            Vec::new(),
            format!("on rank {rank}: {own_fix}"),
        ),
        JobCause::Imbalance { rank, bytes, median, request, batch_bytes, batch_median } => {
            let mut fix = match failing.and_then(|f| input_shape(d, f)) {
                Some((op, s, usual)) => format!(
                    "give every rank the same amount of data per step: rank {rank}'s batch ({op}) is {} where the others' is {} \
                     (an uneven sampler or split; sequences of varied length: bucket them by length or cap the tokens per batch)",
                    shape::text(&s),
                    shape::text(&usual)
                ),
                None => format!(
                    "give every rank the same work: rank {rank} holds {} of what scales with the batch where the others hold {} \
                     (its data, its sequence lengths, or a part of the model only it runs)",
                    size(*batch_bytes),
                    size(*batch_median)
                ),
            };
            let _ = write!(fix, "; a GPU must hold the largest rank's step, whatever the others need");
            let headline = match request {
                // It held what the others hold: what it asked for sets it apart.
                Some((asked, largest)) => format!(
                    "one rank's data or work: rank {rank} asked for {} where the other ranks' largest tensor is {} ({}), \
                     holding {} as they do (median {})",
                    size(*asked),
                    size(*largest),
                    ratio(*asked, *largest),
                    size(*bytes),
                    size(*median)
                ),
                None => format!(
                    "one rank's data or work: rank {rank} held {} where the other ranks' median is {} ({})",
                    size(*bytes),
                    size(*median),
                    ratio(*bytes, *median)
                ),
            };
            if let Some((asked, _)) = request
                && failing.is_none_or(|f| input_shape(d, f).is_none())
            {
                fix = format!(
                    "give every rank the same work: rank {rank} asked for {} in one tensor, far beyond any the others hold \
                     (one long sequence or large sample: bucket by length or cap the tokens per batch); \
                     a GPU must hold the largest rank's step, whatever the others need",
                    size(*asked)
                );
            }
            (headline, Vec::new(), fix)
        }
        JobCause::Alike { failed, median, spread, fixed } => {
            let who = if failed.len() == world {
                format!("every rank ran out of memory ({} of {world})", failed.len())
            } else {
                format!("the ranks hold about the same (within {:.0}% of each other)", spread * 100.0)
            };
            let mut fix = format!("on every rank: {own_fix}");
            if let Some(f) = failing
                && *fixed * 10 > 3 * f.allocated
                && world > 1
            {
                let _ = write!(
                    fix,
                    "; weights, their gradients and optimizer state take {} of each GPU: sharding them across the {world} ranks \
                     (FSDP, DeepSpeed ZeRO) would leave about {} of it on each",
                    size(*fixed),
                    size(*fixed / world as u64)
                );
            }
            (format!("the model and its batch themselves: {who}, about {} each", size(*median)), Vec::new(), fix)
        }
    };
    if let Some(f) = failing {
        evidence.extend(evidence_lines(d, f.rank, size));
    }
    JobVerdict { kind: c.kind(), headline, evidence, fix }
}

/// The report as people read it.
pub fn render(j: &JobReport, size: Size) -> String {
    let mut s = String::new();
    let job = j.job.as_deref().map_or(String::new(), |n| format!("job {}: ", line(n)));
    let first = j.first_failure.as_ref();
    match first {
        Some(f) => {
            let rank = j.ranks.iter().find(|r| r.rank == f.rank);
            let p = ProcessInfo {
                rank: Some(f.rank),
                world_size: Some(j.ranks.len() as u32).filter(|_| rank.is_some()),
                host: f.host.clone(),
                ..ProcessInfo::default()
            };
            let _ = write!(s, "{job}{} ran out of memory first", describe_process(&p, f.gpu));
            if f.step >= 0 {
                let _ = write!(s, ", at step {}", f.step);
            }
            if let Some(q) = f.request {
                let _ = write!(s, " ({} requested)", size(q));
            }
            s.push('\n');
        }
        None => {
            let _ = writeln!(s, "{job}no rank ran out of memory in these dumps ({} ranks)", j.ranks.len());
        }
    }
    if let Some(v) = &j.verdict {
        let _ = writeln!(s, "\nVerdict for the job: {}", v.headline);
        for e in &v.evidence {
            let _ = writeln!(s, "  - {e}");
        }
        let _ = writeln!(s, "Fix: {}", v.fix);
    }
    if let Some(f) = first {
        let _ = writeln!(s, "\nRank {}'s own verdict:", f.rank);
        for line in render_verdict(&f.verdict).lines() {
            let _ = writeln!(s, "  {line}");
        }
    }
    let _ = writeln!(s, "\nRanks at the failure:");
    let kinds: Vec<Kind> = {
        let mut k: Vec<Kind> = Kind::ALL.into_iter().filter(|k| j.ranks.iter().any(|r| has(r, *k))).collect();
        if j.ranks.iter().any(|r| has(r, Kind::Unknown)) {
            k.push(Kind::Unknown);
        }
        k
    };
    let mut header = format!(
        "  {:<6} {:<12} {:>4} {:<6} {:>11} {:>11} {:>11} {:>5}",
        "rank", "host", "GPU", "dump", "allocated", "reserved", "peak", "step"
    );
    for k in &kinds {
        let _ = write!(header, " {:>11}", short(*k));
    }
    let _ = writeln!(s, "{}", header.trim_end());
    for r in &j.ranks {
        let mark = if first.is_some_and(|f| f.rank == r.rank) { "*" } else { "" };
        let what = if r.oom { "OOM" } else { "state" };
        let mut line = format!(
            "  {:<6} {:<12} {:>4} {:<6} {:>11} {:>11} {:>11} {:>5}",
            format!("{}{mark}", r.rank),
            truncate(&line(&r.host), 12),
            r.gpu.map_or("?".into(), |g| g.to_string()),
            what,
            size(r.allocated),
            size(r.reserved),
            size(r.peak),
            if r.step >= 0 { r.step.to_string() } else { "-".into() }
        );
        for k in &kinds {
            let b: u64 = r.by_kind.iter().filter(|x| x.kind == *k).map(|x| x.bytes).sum();
            let _ = write!(line, " {:>11}", size(b));
        }
        let _ = writeln!(s, "{}", line.trim_end());
    }
    if first.is_some() {
        let _ = writeln!(s, "  (* ran out of memory first; state: the rank's memory when it did)");
    }
    if !j.other_jobs.is_empty() {
        let others: Vec<String> = j.other_jobs.iter().map(|o| line(o).into_owned()).collect();
        let _ = writeln!(s, "\nOther jobs in this directory, not shown: {}", others.join(", "));
    }
    s
}

/// A name from a dump (a host, a job, an op) on one line of the report.
fn line(name: &str) -> std::borrow::Cow<'_, str> {
    oomscope_base::text::safe_line(name)
}

fn has(r: &JobRank, k: Kind) -> bool {
    r.by_kind.iter().any(|x| x.kind == k && x.bytes > 0)
}

/// A kind as a column's head.
fn short(k: Kind) -> &'static str {
    match k {
        Kind::Unknown => "unknown",
        Kind::Weight => "weights",
        Kind::Gradient => "gradients",
        Kind::Optimizer => "optimizer",
        Kind::Input => "inputs",
        Kind::Activation => "activations",
        Kind::Temporary => "temporary",
        Kind::Backward => "backward",
        Kind::Collective => "collective",
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { s.chars().take(n - 1).chain(['~']).collect() }
}
