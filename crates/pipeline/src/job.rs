//! A directory of a job's dumps (`oomscope report DIR`, `tui DIR`, `diff DIR`, the end of
//! `oomscope run`): the dumps the ranks wrote, grouped by job, and one dump per rank: the one
//! of its OOM, else the one it wrote when another rank failed, else its latest.

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
    /// Files named as a rank's dump that were not read, and why (one unreadable dump must
    /// not hide the other ranks).
    pub skipped: Vec<(PathBuf, String)>,
}

impl Job {
    /// The lines that say which files were passed over and why (`skipped PATH: why`).
    pub fn skipped_lines(&self) -> Vec<String> {
        self.skipped.iter().map(|(path, why)| format!("skipped {}: {why}", path.display())).collect()
    }
}

/// Why a directory gave no job.
#[derive(Debug)]
pub enum JobError {
    /// The directory could not be listed.
    Dir { dir: PathBuf, source: std::io::Error },
    /// No file there is named as a rank's dump; the first passed over, and why.
    NoRanks { dir: PathBuf, skipped: Option<(PathBuf, String)> },
    /// Files are named as ranks' dumps, but none could be read; the first, and why.
    NoneReadable { dir: PathBuf, skipped: Option<(PathBuf, String)> },
}

impl std::fmt::Display for JobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobError::Dir { dir, source } => write!(f, "{}: {source}", dir.display()),
            JobError::NoRanks { dir, skipped } => write!(
                f,
                "{}: no dumps of a job's ranks here{} (files named oomscope-rankR-PID-gpuN-*.dump.json, which `oomscope \
                 run` writes around torchrun, SLURM or MPI); `oomscope report FILE` reads one dump",
                dir.display(),
                skipped.as_ref().map_or(String::new(), |(p, w)| format!(" ({} skipped: {w})", p.display()))
            ),
            JobError::NoneReadable { dir, skipped } => write!(
                f,
                "{}: no rank's dump here could be read{}",
                dir.display(),
                skipped.as_ref().map_or(String::new(), |(p, w)| format!(": {} {w}", p.display()))
            ),
        }
    }
}

impl std::error::Error for JobError {}

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
pub fn load(dir: &Path) -> Result<Job, JobError> {
    load_where(dir, |_| true)
}

/// Reads the job in `dir` among the dumps `keep` takes (a run's own): the most recent
/// failure's job when several are there. Only regular files are read (a FIFO or a device
/// named like a dump would block, a symlink would read elsewhere); a file that cannot be
/// read, or whose name and contents disagree, is passed over and listed in `skipped`.
pub fn load_where(dir: &Path, keep: impl Fn(&Dump) -> bool) -> Result<Job, JobError> {
    let entries = std::fs::read_dir(dir).map_err(|source| JobError::Dir { dir: dir.to_path_buf(), source })?;
    let mut skipped: Vec<(PathBuf, String)> = Vec::new();
    let mut named: Vec<(DumpName, PathBuf)> = Vec::new();
    for e in entries.flatten() {
        let Some(file) = e.file_name().to_str().map(str::to_string) else { continue };
        if !(file.starts_with(dump::name::PREFIX) && file.ends_with(dump::name::SUFFIX)) {
            continue;
        }
        let path = e.path();
        let name = match file.parse::<DumpName>() {
            Ok(n) if n.rank.is_some() => n,
            Ok(_) => continue,
            // Named like a rank's dump, but not one of the names oomscope writes (a rank or
            // pid past 32 bits): said, not dropped silently.
            Err(_) if file.starts_with(&format!("{}rank", dump::name::PREFIX)) => {
                skipped.push((path, "not a name oomscope writes (a number in it is out of range)".into()));
                continue;
            }
            Err(_) => continue,
        };
        if !e.file_type().is_ok_and(|t| t.is_file()) {
            skipped.push((path, "not a regular file (a symlink, FIFO or device is not read)".into()));
            continue;
        }
        named.push((name, path));
    }
    if named.is_empty() {
        return Err(JobError::NoRanks { dir: dir.to_path_buf(), skipped: skipped.into_iter().next() });
    }
    named.sort_by_key(|(n, _)| (n.rank, preference(n.moment)));
    // Every rank's candidates, read: the job is in the dump.
    let mut read: Vec<(DumpName, PathBuf, Dump)> = Vec::new();
    for (name, path) in named {
        match dump::read_found(&path) {
            Ok(d) => {
                let own = d.process.as_ref().and_then(|p| p.rank);
                if own != name.rank {
                    let said = own.map_or("no rank".to_string(), |r| format!("rank {r}"));
                    let named = name.rank.map_or(String::new(), |r| r.to_string());
                    skipped.push((path, format!("its name says rank {named}, its contents {said}: renamed or forged")));
                } else if keep(&d) {
                    read.push((name, path, d));
                }
            }
            Err(e) => {
                let why = e.to_string();
                let why = why.strip_prefix(&format!("{}: ", path.display())).unwrap_or(&why).to_string();
                skipped.push((path, why));
            }
        }
    }
    if read.is_empty() {
        return Err(JobError::NoneReadable { dir: dir.to_path_buf(), skipped: skipped.into_iter().next() });
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
    Ok(Job { ranks: by_rank.into_values().collect(), other_jobs: others, skipped })
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
    job.ranks.iter().any(|(_, d)| d.allocator_kind() == oomscope_format::AllocatorKind::Caching)
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
    crate::diagnose(&mut d);
    Some(d)
}
