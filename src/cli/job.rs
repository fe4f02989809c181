//! A directory of a job's dumps (`oomscope report DIR`, `tui DIR`, `diff DIR`): the dumps the
//! ranks wrote, grouped by job, and one dump per rank: the one of its OOM, else the one it
//! wrote when another rank failed, else its latest.

use super::CliError;
use oomscope_format::job::JobReport;
use oomscope_format::{self as dump, Dump, DumpName, Moment};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One job's ranks, a dump each, by rank.
#[derive(Debug)]
pub struct Job {
    pub ranks: Vec<(PathBuf, Dump)>,
    /// Other jobs whose dumps are in the directory.
    pub other_jobs: Vec<String>,
}

/// The order in which a rank's dumps stand for it: its OOM, then its state at another
/// rank's failure, then its latest.
fn preference(m: Moment) -> (u8, i64) {
    match m {
        Moment::Oom(n) => (0, n as i64),
        Moment::Job(n) => (1, n as i64),
        Moment::Exit => (2, 0),
        Moment::Step(s) => (3, -s),
        Moment::State(n) => (4, -(n as i64)),
    }
}

/// Reads the job in `dir`: the most recent failure's job when several are there.
pub fn load(dir: &Path) -> Result<Job, CliError> {
    let entries = std::fs::read_dir(dir).map_err(|e| CliError(format!("{}: {e}", dir.display())))?;
    let mut named: Vec<(DumpName, PathBuf)> = entries
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<DumpName>().ok()?, e.path())))
        .filter(|(n, _)| n.rank.is_some())
        .collect();
    if named.is_empty() {
        return Err(CliError(format!(
            "{}: no dumps of a job's ranks here (files named oomscope-rankR-PID-gpuN-*.dump.json, which `oomscope run` \
             writes around torchrun, SLURM or MPI); `oomscope report FILE` reads one dump",
            dir.display()
        )));
    }
    named.sort_by_key(|(n, _)| (n.rank, preference(n.moment)));
    // Every rank's candidates, read: the job is in the dump.
    let mut read: Vec<(DumpName, PathBuf, Dump)> = Vec::new();
    for (name, path) in named {
        let d = dump::read(&path).map_err(|e| CliError(e.to_string()))?;
        read.push((name, path, d));
    }
    let job_of = |d: &Dump| d.process.as_ref().and_then(|p| p.job.clone()).unwrap_or_default();
    let when = |d: &Dump| d.process.as_ref().and_then(|p| p.dumped_unix_ms).unwrap_or(0);
    // The job whose failure is the latest (else whose dump is).
    let latest = |oom_only: bool| {
        read.iter()
            .filter(|(n, _, _)| !oom_only || n.moment.is_oom())
            .max_by_key(|(_, _, d)| when(d))
            .map(|(_, _, d)| job_of(d))
    };
    let chosen_job = latest(true).or_else(|| latest(false)).unwrap_or_default();
    let mut others: Vec<String> = read.iter().map(|(_, _, d)| job_of(d)).filter(|j| *j != chosen_job).collect();
    others.sort();
    others.dedup();
    let mine: Vec<(DumpName, PathBuf, Dump)> = read.into_iter().filter(|(_, _, d)| job_of(d) == chosen_job).collect();
    // The first failure's time: the other ranks' dumps nearest after it stand for them.
    let failed_at = mine.iter().filter(|(n, _, _)| n.moment.is_oom()).map(|(_, _, d)| when(d)).min().unwrap_or(0);
    let mut by_rank: BTreeMap<u32, (PathBuf, Dump)> = BTreeMap::new();
    let mut best: BTreeMap<u32, (u8, u64)> = BTreeMap::new();
    for (name, path, d) in mine {
        let Some(rank) = name.rank else { continue };
        let (class, _) = preference(name.moment);
        // Among a class, the dump closest after the first failure (a job dump of a later
        // failure shows a later moment).
        let distance = when(&d).abs_diff(failed_at);
        let key = (class, distance);
        if best.get(&rank).is_none_or(|b| key < *b) {
            best.insert(rank, key);
            by_rank.insert(rank, (path, d));
        }
    }
    Ok(Job { ranks: by_rank.into_values().collect(), other_jobs: others })
}

/// The job's report, its verdict tried by replay where the failing rank's history allows.
pub fn report(job: &Job) -> JobReport {
    let dumps: Vec<(&Path, &Dump)> = job.ranks.iter().map(|(p, d)| (p.as_path(), d)).collect();
    let diag = oomscope_diagnose::job::analyze_job(&dumps, &mut oomscope_replay::what_if::from_history);
    let mut report = oomscope_report::job::report(&diag, torch(job));
    report.other_jobs = job.other_jobs.clone();
    report
}

/// The job ran under PyTorch's caching allocator.
fn torch(job: &Job) -> bool {
    job.ranks.iter().any(|(_, d)| d.allocator.caching.is_some())
}

/// Sizes as the job's framework prints them.
pub fn size_of(job: &Job) -> fn(u64) -> String {
    if torch(job) { oomscope_base::size::torch } else { oomscope_base::size::human }
}

/// The dump of the rank that failed first, with its verdict: what a job's page draws.
pub fn failing(job: &Job, report: &JobReport) -> Option<Dump> {
    let f = report.first_failure.as_ref()?;
    let (_, d) = job.ranks.iter().find(|(p, _)| p.display().to_string() == f.dump)?;
    let mut d = d.clone();
    oomscope_report::verdict::attach(&mut d, &mut oomscope_replay::what_if::from_history);
    Some(d)
}
