//! `oomscope report DUMP`: re-render a saved dump.

use super::args::{FormatArg, ReportArgs};
use super::{CliError, output};
use oomscope_format as dump;
use oomscope_inputs::input::{self, Reader};
use oomscope_pipeline::job;
use oomscope_report as render;

pub fn run(a: ReportArgs) -> Result<u8, CliError> {
    if a.dump.is_dir() {
        return job(&a);
    }
    let kind = input::check(&a.dump, Reader::Report).map_err(CliError::from)?;
    let mut d = dump::read(&a.dump).map_err(|e| CliError(input::explain(e, &a.dump, kind)))?;
    // Dumps written without a verdict (older or foreign ones) get one now.
    oomscope_pipeline::diagnose(&mut d);
    emit(&a, &render::render_as(&d, a.format.into(), a.tf_style.as_ref()))
}

/// The report printed, or written where -o says.
fn emit(a: &ReportArgs, text: &str) -> Result<u8, CliError> {
    match &a.output {
        Some(path) => {
            write_page(path, text)?;
            eprintln!("oomscope: written to {}", path.display());
        }
        None => output::print(text)?,
    }
    Ok(0)
}

/// Writes a page (or any report) atomically, as dumps are written.
pub fn write_page(path: &std::path::Path, text: &str) -> Result<(), CliError> {
    dump::atomic::write_file(path, |w| w.write_all(text.as_bytes()))
        .map_err(|e| CliError(format!("{}: {e}", path.display())))
}

/// `oomscope report DIR`: the job whose ranks wrote their dumps there; a directory whose one
/// dump is no rank's (a single process's run) is that dump's report.
fn job(a: &ReportArgs) -> Result<u8, CliError> {
    let job = match job::load(&a.dump) {
        Err(e @ job::JobError::NoRanks { .. }) => {
            let mut dumps = dumps_in(&a.dump);
            return match dumps.len() {
                1 => {
                    let file = dumps.remove(0).1;
                    eprintln!("oomscope: {} holds one dump, not a job's: {}", a.dump.display(), file.display());
                    run(ReportArgs { dump: file, format: a.format, tf_style: a.tf_style, output: a.output.clone() })
                }
                0 => Err(e.into()),
                n => {
                    // The newest first.
                    dumps.sort_by_key(|x| std::cmp::Reverse(x.0));
                    Err(CliError(format!(
                        "{}: {n} dumps here, none a job's rank's: `oomscope report FILE` reads one (the newest: {})",
                        a.dump.display(),
                        dumps[0].1.display()
                    )))
                }
            };
        }
        j => j?,
    };
    output::warn_all(&job.skipped_lines());
    let report = job::report(&job);
    let text = match a.format {
        FormatArg::Json => serde_json::to_string(&report).map_err(|e| CliError(e.to_string()))? + "\n",
        FormatArg::Html => {
            // The failing rank's own dump, drawn below the ranks.
            oomscope_report::html::job_page(&report, job::failing(&job, &report).as_ref())
        }
        _ => {
            let mut t = oomscope_report::job::render(&report, job::size_of(&job));
            let dir = oomscope_base::shell::quoted(&a.dump.display().to_string());
            t.push_str(&format!(
                "\nEach rank's dump: oomscope tui {dir}; the failing rank against another: oomscope diff {dir}\n"
            ));
            t
        }
    };
    emit(a, &text)
}

/// The dumps (`*.dump.json`, regular files) in `dir`, with when each was last written.
fn dumps_in(dir: &std::path::Path) -> Vec<(std::time::SystemTime, std::path::PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".dump.json"))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect()
}
