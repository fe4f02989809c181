//! `oomscope diff A B`: what grew and what shrank.

use super::args::{DiffArgs, DiffFormat};
use super::{CliError, output};
use oomscope_format as dump;
use oomscope_inputs::input::{self, Reader};
use oomscope_report::diff;

pub fn run(a: DiffArgs) -> Result<u8, CliError> {
    let read = |path: &std::path::Path| -> Result<dump::Dump, CliError> {
        let kind = input::check(path, Reader::Diff).map_err(CliError::from)?;
        dump::read(path).map_err(|e| CliError(input::explain(e, path, kind)))
    };
    let (before, after, names) = if a.before.is_dir() {
        ranks(&a)?
    } else {
        let Some(after_path) = &a.after else {
            return Err(CliError(format!(
                "{}: diff needs two dumps (or a directory of a job's dumps)",
                a.before.display()
            )));
        };
        if a.ranks.is_some() {
            return Err(CliError("--ranks picks two ranks of a job's directory: give the directory".into()));
        }
        (read(&a.before)?, read(after_path)?, (a.before.display().to_string(), after_path.display().to_string()))
    };
    let d = diff::diff(&before, &after, &names.0, &names.1);
    let text = match a.format {
        DiffFormat::Text => diff::render(&d, a.top),
        DiffFormat::Json => serde_json::to_string(&d).map_err(|e| CliError(e.to_string()))? + "\n",
    };
    output::print(&text)?;
    Ok(0)
}

/// Two ranks of the job in `a.before`, a directory: `--ranks A,B`, else the rank nearest
/// the others' median and the first to fail.
fn ranks(a: &DiffArgs) -> Result<(dump::Dump, dump::Dump, (String, String)), CliError> {
    if a.after.is_some() {
        return Err(CliError(format!("{}: with a directory, pick its ranks with --ranks A,B", a.before.display())));
    }
    let job = oomscope_pipeline::job::load(&a.before)?;
    super::output::warn_all(&job.skipped_lines());
    let report = oomscope_pipeline::job::report(&job);
    let rank_of = |d: &dump::Dump| d.process.as_ref().and_then(|p| p.rank);
    let (x, y) = match &a.ranks {
        Some(text) => {
            let parsed: Vec<u32> = text
                .split(',')
                .map(|r| r.trim().parse::<u32>())
                .collect::<Result<_, _>>()
                .map_err(|_| CliError(format!("--ranks {text:?}: expected two ranks, as 0,2")))?;
            let [x, y] = parsed[..] else {
                return Err(CliError(format!("--ranks {text:?}: expected two ranks, as 0,2")));
            };
            (x, y)
        }
        None => {
            let Some(first) = report.first_failure.as_ref().map(|f| f.rank) else {
                return Err(CliError(format!(
                    "{}: no rank ran out of memory here; pick two with --ranks A,B",
                    a.before.display()
                )));
            };
            let mut others: Vec<(u64, u32)> =
                report.ranks.iter().filter(|r| r.rank != first).map(|r| (r.allocated, r.rank)).collect();
            others.sort();
            let Some(&(_, typical)) = others.get(others.len().saturating_sub(1) / 2) else {
                return Err(CliError(format!("{}: only rank {first}'s dump is here", a.before.display())));
            };
            (typical, first)
        }
    };
    let pick = |r: u32| {
        job.ranks.iter().find(|(_, d)| rank_of(d) == Some(r)).cloned().ok_or_else(|| {
            let have: Vec<String> = job.ranks.iter().filter_map(|(_, d)| rank_of(d)).map(|r| r.to_string()).collect();
            CliError(format!("{}: no dump of rank {r} (ranks here: {})", a.before.display(), have.join(", ")))
        })
    };
    let (pa, da) = pick(x)?;
    let (pb, db) = pick(y)?;
    Ok((da, db, (format!("rank {x} ({})", pa.display()), format!("rank {y} ({})", pb.display()))))
}
